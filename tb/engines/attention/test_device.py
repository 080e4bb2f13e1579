"""The attention engine through the driver on the behavioural model
(tb/engines/attention/test_device_sim.py runs them on the RTL): a decode loop over a KV cache with prefill, appends, GQA
and slot reuse, bit-exact to the golden model; torch SDPA equivalence; per-request
and whole-command errors."""
import numpy as np
import pytest

import ndpkit
from ndpkit import DeviceError, ErrorCode
from ndpkit.engines.attention.client import RequestError
from ndpkit.arith import fp
from ndpkit.engines.attention.golden import KvFormat, decode, reference
from ndpkit.engines.attention.kvcache import KVCache, to_bits16

URI = "model?engines=attention&mem_size=32M"


@pytest.fixture(scope="module")
def dev():
    with ndpkit.open(URI) as d:
        yield d


def _golden(cache, layer, slot, q, scale, window=0, out_format=KvFormat.FP32):
    k, v = cache.read(layer, slot)
    if window:
        k, v = k[:, -window:], v[:, -window:]
    return fp.floats(decode(q, k, v, scale=scale, q_format=KvFormat.FP32, kv_format=cache.format,
                            out_format=out_format)) if out_format == KvFormat.FP32 else None


@pytest.mark.parametrize("fmt, group, d", [("fp16", 4, 64), ("bf16", 1, 128), ("fp16", 8, 128)])
def test_decode_loop_bit_exact(dev, fmt, group, d, steps=4, layers=2):
    rng = np.random.default_rng(group * d)
    hkv = 2
    cache = KVCache(dev, layers=layers, slots=4, kv_heads=hkv, head_dim=d, capacity=200, fmt=fmt)
    slots = [cache.new_request() for _ in range(3)]
    for layer in range(layers):
        for s, length in zip(slots, (1, 77, 130)):
            cache.prefill(layer, s, rng.normal(0, 1, (hkv, length, d)), rng.normal(0, 1, (hkv, length, d)))
    scale = 1 / np.sqrt(d)
    for step in range(steps):
        for layer in range(layers):
            q = rng.normal(0, 1, (3, group * hkv, d)).astype(np.float32)
            kn = rng.normal(0, 1, (3, hkv, d)).astype(np.float32)
            vn = rng.normal(0, 1, (3, hkv, d)).astype(np.float32)
            before = [int(cache.lengths[layer, s]) for s in slots]
            out = dev.attention.decode(q, kn, vn, cache, layer, slots)
            for i, s in enumerate(slots):
                assert cache.lengths[layer, s] == before[i] + 1
                k, v = cache.read(layer, s)
                assert np.array_equal(k[:, -1], to_bits16(kn[i], cache.format))
                want = _golden(cache, layer, s, q[i], scale)
                assert np.array_equal(fp.bits(out[i]), fp.bits(want)), f"step {step} layer {layer} slot {s}"
                # (q as the engine takes it: rounded to the cache's format, as a model in that format has it)
                q_kv = fp.floats(_widen(to_bits16(q[i], cache.format), cache.format))
                ref = reference(q_kv, fp.floats(_widen(k, cache.format)), fp.floats(_widen(v, cache.format)),
                                scale=float(np.float32(scale)))
                # the engine's weights are in the KV format: PyTorch's SDPA tolerance for it
                atol, rtol = (1e-3, 1e-3) if cache.format == KvFormat.FP16 else (1e-3, 1.6e-2)
                assert np.allclose(out[i], ref, atol=atol, rtol=rtol)
    # free a slot, reuse it for a new request
    cache.free(slots[1])
    s = cache.new_request()
    assert s == slots[1] and cache.lengths[0, s] == 0
    q = rng.normal(0, 1, (1, group * hkv, d)).astype(np.float32)
    kn = rng.normal(0, 1, (1, hkv, d)).astype(np.float32)
    out = dev.attention.decode(q, kn, kn, cache, 0, [s])
    assert np.allclose(out[0], fp.floats(_widen(to_bits16(kn[0], cache.format), cache.format))
                       .repeat(group, axis=0), atol=0)       # one token: the output is its value
    cache.close()


def _widen(x, fmt):
    from ndpkit.engines.attention.golden import widen
    return widen(x, fmt)


def test_window_and_out_format(dev):
    rng = np.random.default_rng(1)
    cache = KVCache(dev, layers=1, slots=2, kv_heads=1, head_dim=64, capacity=300)
    s = cache.new_request()
    cache.prefill(0, s, rng.normal(0, 1, (1, 250, 64)), rng.normal(0, 1, (1, 250, 64)))
    q = rng.normal(0, 1, (1, 2, 64)).astype(np.float32)
    out = dev.attention.decode(q, None, None, cache, 0, [s], window=100)
    assert np.array_equal(fp.bits(out[0]), fp.bits(_golden(cache, 0, s, q[0], 1 / 8, window=100)))
    half = dev.attention.decode(q, None, None, cache, 0, [s], out_format="bf16")
    k, v = cache.read(0, s)
    want = decode(q[0], k, v, scale=1 / 8, q_format=KvFormat.FP32, kv_format=KvFormat.FP16, out_format=KvFormat.BF16)
    assert np.array_equal(to_bits16(half[0], KvFormat.BF16), want)
    cache.close()


def test_torch_sdpa_equivalence(dev):
    torch = pytest.importorskip("torch")
    from ndpkit.torch import scaled_dot_product_attention
    g = torch.Generator().manual_seed(3)
    for dtype, (atol, rtol) in ((torch.float16, (1e-3, 1e-3)), (torch.bfloat16, (1e-3, 1.6e-2))):
        q = torch.randn(3, 8, 1, 128, generator=g).to(dtype)
        k = torch.randn(3, 2, 300, 128, generator=g).to(dtype)
        v = torch.randn(3, 2, 300, 128, generator=g).to(dtype)
        want = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
        got = scaled_dot_product_attention(dev, q, k, v, enable_gqa=True)     # the cache in k's own format
        assert got.shape == (3, 8, 1, 128) and got.dtype == dtype
        torch.testing.assert_close(got.float(), want.to(dtype).float(), atol=atol, rtol=rtol)


def test_bad_requests_and_commands(dev):
    rng = np.random.default_rng(4)
    cache = KVCache(dev, layers=1, slots=3, kv_heads=1, head_dim=64, capacity=8)
    slots = [cache.new_request() for _ in range(3)]
    for s, length in zip(slots, (3, 8, 5)):          # slot 1 is full: appending fails
        cache.prefill(0, s, rng.normal(0, 1, (1, length, 64)), rng.normal(0, 1, (1, length, 64)))
    before = cache.read(0, slots[1])
    q = rng.normal(0, 1, (3, 2, 64)).astype(np.float32)
    kn = rng.normal(0, 1, (3, 1, 64)).astype(np.float32)
    with pytest.raises(RequestError) as err:
        dev.attention.decode(q, kn, kn, cache, 0, slots)
    assert err.value.failures == {1: (ErrorCode.OUT_OF_WINDOW, "length")}
    assert np.isnan(err.value.outputs[1]).all() and np.isfinite(err.value.outputs[[0, 2]]).all()
    assert list(cache.lengths[0, slots]) == [4, 8, 6]               # the others appended and ran
    k1, v1 = cache.read(0, slots[1])
    assert np.array_equal(k1, before[0]) and np.array_equal(v1, before[1])
    # whole-command errors: nothing runs, the next command works
    client = dev.attention
    good = {"format_q": 0, "format_kv": 1, "format_out": 0, "table": 0, "requests": 1, "shape_head_dim": 64,
            "shape_group": 2, "shape_kv_heads": 1, "scale": int(np.float32(0.125).view(np.uint32))}
    for change, code, field in (({"shape_head_dim": 96}, ErrorCode.BAD_FIELD, "head_dim"),
                                ({"format_kv": 0}, ErrorCode.BAD_FIELD, "kv_format"),
                                ({"shape_group": 0}, ErrorCode.BAD_FIELD, "group"),
                                ({"requests": 0}, ErrorCode.ZERO_LENGTH, "requests"),
                                ({"table": dev.mem_size - dev.word_bytes // 2}, ErrorCode.UNALIGNED, "table")):
        with pytest.raises(DeviceError) as e:
            client.submit({**good, **change}).wait()
        assert (e.value.code, e.value.field) == (code, field)
    out = dev.attention.decode(q[[0]], None, None, cache, 0, [slots[0]])
    assert np.isfinite(out).all()
    with pytest.raises(ValueError, match="q must be"):
        dev.attention.decode(q[:, :, :32], None, None, cache, 0, slots)
    with pytest.raises(ValueError, match="head_dim"):
        KVCache(dev, layers=1, slots=1, kv_heads=1, head_dim=96, capacity=4)
    cache.close()


def test_sharded_cache_equals_one_card():
    """Batch-parallel over two cards: the same outputs, bit for bit, as one card."""
    rng = np.random.default_rng(7)
    with ndpkit.open(URI) as a, ndpkit.open(URI) as b:
        check_sharded(a, [a, b], rng)


def check_sharded(single_dev, devices, rng, *, d=64, hkv=2, group=2, steps=2):
    from ndpkit.engines.attention.client import decode as decode_any
    from ndpkit.engines.attention.kvcache import ShardedKVCache
    one = KVCache(single_dev, layers=1, slots=4, kv_heads=hkv, head_dim=d, capacity=40)
    many = ShardedKVCache(devices, slots_per_device=2, layers=1, kv_heads=hkv, head_dim=d, capacity=40)
    try:
        s1 = [one.new_request() for _ in range(4)]
        s2 = [many.new_request() for _ in range(4)]
        assert sorted(many.locate(s)[0].dev is devices[1] for s in s2) == [False, False, True, True]
        for i, length in enumerate((3, 9, 17, 30)):
            k, v = rng.normal(0, 1, (2, hkv, length, d))
            one.prefill(0, s1[i], k, v)
            many.prefill(0, s2[i], k, v)
        for _ in range(steps):
            q = rng.normal(0, 1, (4, group * hkv, d)).astype(np.float32)
            kn, vn = rng.normal(0, 1, (2, 4, hkv, d)).astype(np.float32)
            want = decode_any(q, kn, vn, one, 0, s1)
            got = decode_any(q, kn, vn, many, 0, s2)
            assert np.array_equal(fp.bits(got), fp.bits(want))
        assert [many.length(0, s) for s in s2] == [int(one.lengths[0, s]) for s in s1]
        for i in range(4):
            assert all(np.array_equal(x, y) for x, y in zip(many.read(0, s2[i]), one.read(0, s1[i])))
    finally:
        one.close()
        many.close()


def _closed_cache_calls(cache, slot, q, kn):
    """Every public use of a cache, by name (``slot`` was an active request before close)."""
    from ndpkit.engines.attention.client import decode as decode_any
    from ndpkit.torch import decode_attention
    import torch
    k = np.zeros((cache.kv_heads, 2, cache.head_dim))
    calls = {
        "new_request": lambda: cache.new_request(),
        "free": lambda: cache.free(slot),
        "length": lambda: cache.length(0, slot),
        "prefill": lambda: cache.prefill(0, slot, k, k),
        "read": lambda: cache.read(0, slot),
        "free_slots": lambda: cache.free_slots,
        "decode": lambda: decode_any(q, kn, kn, cache, 0, [slot]),
        "decode (no append)": lambda: decode_any(q, None, None, cache, 0, [slot]),
        "decode_attention": lambda: decode_attention(None, torch.from_numpy(q)[:, :, None], None, None, cache, 0,
                                                     [slot]),
    }
    if isinstance(cache, KVCache):
        calls.update({"k_addr": lambda: cache.k_addr(0, slot), "v_addr": lambda: cache.v_addr(0, slot),
                      "row_offset": lambda: cache.row_offset(slot, 0, 0),
                      "dev.attention.decode": lambda: cache.dev.attention.decode(q, kn, kn, cache, 0, [slot])})
    return calls


@pytest.mark.parametrize("sharded", [False, True], ids=["KVCache", "ShardedKVCache"])
def test_a_closed_cache_says_so(sharded, monkeypatch):
    """Any use of a closed cache raises CacheClosed (an NdpkitError, and a ValueError as a
    closed file's I/O does), saying the cache is closed: never an IndexError from the
    freed buffers, nothing allocated or run on the card; closing twice is harmless and
    the card keeps working."""
    from ndpkit.engines.attention.kvcache import ShardedKVCache
    rng = np.random.default_rng(11)
    d, hkv = 64, 1
    with ndpkit.open(URI) as a, ndpkit.open(URI) as b:
        if sharded:
            cache = ShardedKVCache([a, b], slots_per_device=1, layers=1, kv_heads=hkv, head_dim=d, capacity=8)
        else:
            cache = KVCache(a, layers=1, slots=2, kv_heads=hkv, head_dim=d, capacity=8)
        slot = cache.new_request()
        cache.prefill(0, slot, rng.normal(0, 1, (hkv, 3, d)), rng.normal(0, 1, (hkv, 3, d)))
        q = rng.normal(0, 1, (1, 2, d)).astype(np.float32)
        kn = rng.normal(0, 1, (1, hkv, d)).astype(np.float32)
        cache.close()
        assert cache.closed and "closed" in repr(cache)
        cache.close()                                   # again: nothing happens

        def refuse(*args, **kwargs):
            raise AssertionError("a call on a closed cache reached the card")
        for card in (a, b):
            for name in ("alloc", "upload"):
                monkeypatch.setattr(card, name, refuse)
            monkeypatch.setattr(card.attention, "submit", refuse)
        for name, call in _closed_cache_calls(cache, slot, q, kn).items():
            with pytest.raises(ndpkit.CacheClosed, match="KV cache is closed") as e:
                call()
            assert isinstance(e.value, ndpkit.NdpkitError) and isinstance(e.value, ValueError), name
        monkeypatch.undo()
        fresh = KVCache(a, layers=1, slots=1, kv_heads=hkv, head_dim=d, capacity=8)
        s = fresh.new_request()
        fresh.prefill(0, s, rng.normal(0, 1, (hkv, 3, d)), rng.normal(0, 1, (hkv, 3, d)))
        assert np.isfinite(a.attention.decode(q, kn, kn, fresh, 0, [s])).all()
        fresh.close()
