"""The torch attention functions check their tensors as
``torch.nn.functional.scaled_dot_product_attention`` does (model card): every input
SDPA refuses is refused here too (a RuntimeError, as torch raises, that is also a
ValueError), with torch's wording; what SDPA allows that decode cannot do is refused by
name; nothing reaches the card or changes the caller's tensors."""
import pytest

torch = pytest.importorskip("torch")

import ndpkit                                                           # noqa: E402
from ndpkit.engines.attention.kvcache import KVCache                    # noqa: E402
from ndpkit.engines.attention.torch import AttentionInputError          # noqa: E402
from ndpkit.torch import decode_attention, scaled_dot_product_attention  # noqa: E402

SDPA = torch.nn.functional.scaled_dot_product_attention


@pytest.fixture(scope="module")
def dev():
    with ndpkit.open("model?engines=attention&mem_size=8M") as d:
        yield d


def _qkv(b=2, h=4, hkv=2, length=5, d=64, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, 1, d, generator=g).to(dtype), torch.randn(b, hkv, length, d, generator=g).to(dtype),
            torch.randn(b, hkv, length, d, generator=g).to(dtype))


def _bad_inputs():
    q, k, v = _qkv()
    return {
        "integer q, k, v": ((q.int(), k.int(), v.int()), "floating point"),
        "fp16 q with bf16 k/v": ((q, k.bfloat16(), v.bfloat16()), "same dtype"),
        "k and v dtypes differ": ((q, k, v.float()), "same dtype"),
        "batch sizes differ": ((q, k[:1].expand(3, -1, -1, -1), v[:1].expand(3, -1, -1, -1)), "batch sizes"),
        "head dims differ": ((q, k[..., :32], v[..., :32]), "size\\(-1\\)"),
        "kv heads do not divide": ((q[:, :3], k, v), "must divide the number of heads"),
        "2-D q": ((q[0, :, 0], k[0], v[0]), "3- or 4-dimensional"),
    }


@pytest.mark.parametrize("case", list(_bad_inputs()))
def test_sdpa_refusals_match_torch(dev, case):
    (q, k, v), message = _bad_inputs()[case]
    snapshot = [t.clone() for t in (q, k, v)]
    with pytest.raises((RuntimeError, IndexError)):
        SDPA(q, k, v, enable_gqa=True)                  # torch refuses it
    free = dev.allocator.free_bytes
    with pytest.raises(AttentionInputError, match=message) as e:
        scaled_dot_product_attention(dev, q, k, v, enable_gqa=True)
    assert isinstance(e.value, RuntimeError) and isinstance(e.value, ValueError)
    assert dev.allocator.free_bytes == free
    assert all(torch.equal(a, b) for a, b in zip((q, k, v), snapshot))


def test_sdpa_broadcasts_a_batch_of_one_as_torch(dev):
    q, k, v = _qkv(b=3, dtype=torch.float16)
    got = scaled_dot_product_attention(dev, q, k[:1], v[:1], enable_gqa=True)
    want = SDPA(q.float(), k[:1].float(), v[:1].float(), enable_gqa=True)
    torch.testing.assert_close(got.float(), want.half().float(), atol=1e-3, rtol=1e-3)


def test_sdpa_gqa_needs_enable_gqa_as_torch(dev):
    q, k, v = _qkv()
    with pytest.raises(RuntimeError):
        SDPA(q, k, v)
    with pytest.raises(AttentionInputError, match="enable_gqa=True"):
        scaled_dot_product_attention(dev, q, k, v)


@pytest.mark.parametrize("kwargs, name", [({"attn_mask": torch.ones(1, 1, 1, 5, dtype=torch.bool)}, "attn_mask"),
                                          ({"dropout_p": 0.1}, "dropout_p"), ({"is_causal": True}, "is_causal")])
def test_sdpa_options_decode_cannot_honour_are_refused(dev, kwargs, name):
    q, k, v = _qkv()
    with pytest.raises(NotImplementedError, match=name):
        scaled_dot_product_attention(dev, q, k, v, enable_gqa=True, **kwargs)


def test_sdpa_several_query_tokens_refused(dev):
    q, k, v = _qkv()
    with pytest.raises(AttentionInputError, match="one query token"):
        scaled_dot_product_attention(dev, torch.cat([q, q], dim=2), k, v, enable_gqa=True)


def test_kv_format_follows_the_tensors(dev):
    """fp16 k/v stay fp16 in the cache (bf16 ones bf16), not re-rounded to another format."""
    for dtype, own, other in ((torch.float16, "fp16", "bf16"), (torch.bfloat16, "bf16", "fp16")):
        q, k, v = _qkv(dtype=dtype)
        auto = scaled_dot_product_attention(dev, q, k, v, enable_gqa=True)
        assert torch.equal(auto, scaled_dot_product_attention(dev, q, k, v, enable_gqa=True, kv_format=own))
    q, k, v = _qkv(dtype=torch.float16)
    assert not torch.equal(scaled_dot_product_attention(dev, q, k, v, enable_gqa=True),
                           scaled_dot_product_attention(dev, q, k, v, enable_gqa=True, kv_format="bf16"))


def test_sdpa_takes_unbatched_inputs_as_torch(dev):
    q, k, v = _qkv(b=1)
    got = scaled_dot_product_attention(dev, q[0], k[0], v[0], enable_gqa=True)
    assert got.shape == q[0].shape
    assert torch.equal(got, scaled_dot_product_attention(dev, q, k, v, enable_gqa=True)[0])


def test_decode_attention_checks(dev):
    cache = KVCache(dev, layers=1, slots=2, kv_heads=2, head_dim=64, capacity=8, fmt="fp16")
    slots = [cache.new_request(), cache.new_request()]
    q, k, v = _qkv(length=1)
    with pytest.raises(AttentionInputError, match="same dtype"):
        decode_attention(dev, q, k.bfloat16(), v.bfloat16(), cache, 0, slots)
    with pytest.raises(AttentionInputError, match="batch=2"):
        decode_attention(dev, q[:1], k[:1], v[:1], cache, 0, slots)
    with pytest.raises(AttentionInputError, match="floating point"):
        decode_attention(dev, q.int(), None, None, cache, 0, slots)
    with pytest.raises(ValueError, match="go together"):
        decode_attention(dev, q, k, None, cache, 0, slots)
    assert cache.lengths[0, slots[0]] == 0            # nothing appended by a refused call
    out = decode_attention(dev, q, k, v, cache, 0, slots)
    assert out.shape == q.shape and out.dtype == q.dtype
    cache.close()
