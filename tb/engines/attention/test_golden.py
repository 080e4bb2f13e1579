"""The golden decode-attention model against outside references: float64 two-pass
softmax attention and PyTorch's scaled_dot_product_attention, within PyTorch's own
test tolerances, for contexts 1..8192, GQA groups, every format and inputs that stress
the softmax (peaked, flat, large magnitudes); plus NaN/inf propagation."""
import numpy as np
import pytest

from ndpkit.arith import fp
from ndpkit.engines.attention.golden import KvFormat, decode, reference, widen

TOL = {KvFormat.FP16: (1e-3, 1e-3), KvFormat.BF16: (1e-3, 1.6e-2), KvFormat.FP32: (1e-5, 1.3e-6)}


def _case(rng, heads, kv_heads, length, d, kind):
    q = rng.normal(0, 1, (heads, d))
    k = rng.normal(0, 1, (kv_heads, length, d))
    v = rng.normal(0, 1, (kv_heads, length, d))
    if kind == "peaked":          # one token dominates: scores far apart
        g = heads // kv_heads
        k[:, length // 2] = 3 * q[::g]            # KV head h's key matches its first query head
        q *= 4
    elif kind == "flat":          # every score equal: uniform softmax
        k[:] = k[:, :1]
    elif kind == "large":
        q *= 30
        v *= 1000
    return q, k, v


def _quantise(x, fmt):
    return fp.floats(widen(x, fmt)).astype(np.float64)


def _within(got, want, v, fmt):
    """PyTorch's SDPA tolerances for ``fmt``, the absolute part scaled by the values'
    magnitude (the tolerances are for unit-scale data; the "large" inputs are 1000x)."""
    atol, rtol = TOL[fmt]
    bound = atol * max(1.0, np.abs(v).max()) + rtol * np.abs(want)
    return (np.abs(got - want) / bound).max()


@pytest.mark.parametrize("length", [1, 2, 127, 128, 129, 1000, 8192])
@pytest.mark.parametrize("fmt", [KvFormat.FP16, KvFormat.BF16])
@pytest.mark.parametrize("kind", ["normal", "peaked", "flat", "large"])
def test_against_float64(length, fmt, kind):
    """Inputs in the KV format (as a model's cache holds them), the output in it too."""
    rng = np.random.default_rng(length * 3 + int(fmt))
    heads, kv_heads, d = (4, 2, 128) if length < 8192 else (2, 1, 128)
    q, k, v = _case(rng, heads, kv_heads, length, d, kind)
    q16, k16, v16 = (_quantise(x, fmt) for x in (q, k, v))
    scale = 1 / np.sqrt(d)
    out = decode(q16, k16, v16, scale=scale, q_format=KvFormat.FP32, kv_format=fmt, out_format=fmt)
    got = fp.floats(widen(out, fmt)).astype(np.float64)
    want = reference(q16, k16, v16, scale=float(np.float32(scale)))
    assert _within(got, want, v16, fmt) <= 1.0


@pytest.mark.parametrize("fmt", [KvFormat.FP16, KvFormat.BF16])
def test_against_torch_sdpa(fmt):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    heads, kv_heads, length, d = 8, 2, 515, 128
    q, k, v = _case(rng, heads, kv_heads, length, d, "normal")
    dtype = {KvFormat.FP16: torch.float16, KvFormat.BF16: torch.bfloat16}[fmt]
    tq, tk, tv = (torch.tensor(x, dtype=dtype) for x in (q, k, v))
    want = torch.nn.functional.scaled_dot_product_attention(
        tq.float()[None, :, None, :], tk.float()[None], tv.float()[None], enable_gqa=True)[0, :, 0].to(dtype)
    out = decode(tq.float().numpy(), tk.view(torch.int16).numpy().view(np.uint16),
                 tv.view(torch.int16).numpy().view(np.uint16), scale=1 / np.sqrt(d), q_format=KvFormat.FP32,
                 kv_format=fmt, out_format=fmt)
    got = torch.from_numpy(fp.floats(widen(out, fmt)))
    atol, rtol = TOL[fmt]
    torch.testing.assert_close(got, want.float(), atol=atol, rtol=rtol)


def test_fp32_cache_is_refused():
    with pytest.raises(ValueError, match="fp16 or bf16"):
        decode(np.zeros((1, 64)), np.zeros((1, 3, 64)), np.zeros((1, 3, 64)), scale=0.125, kv_format=KvFormat.FP32)


def test_nonfinite_propagates():
    rng = np.random.default_rng(2)
    q = rng.normal(0, 1, (2, 64))
    k = rng.normal(0, 1, (1, 300, 64))
    v = rng.normal(0, 1, (1, 300, 64))
    v[0, 17, 3] = np.nan
    out = fp.floats(decode(q, k, v, scale=0.125, q_format=KvFormat.FP32, kv_format=KvFormat.FP16))
    assert np.isnan(out[:, 3]).all() and np.isfinite(np.delete(out, 3, axis=1)).all()
    q[1, 0] = np.inf
    out = fp.floats(decode(q, k, v, scale=0.125, q_format=KvFormat.FP32, kv_format=KvFormat.FP16))
    assert np.isnan(out[1]).all()


def test_group_mapping_and_errors():
    rng = np.random.default_rng(3)
    q = rng.normal(0, 1, (4, 64))
    k = rng.normal(0, 1, (2, 10, 64))
    v = rng.normal(0, 1, (2, 10, 64))
    out = fp.floats(decode(q, k, v, scale=0.125, q_format=KvFormat.FP32, kv_format=KvFormat.BF16))
    solo = fp.floats(decode(q[2:3], k[1:2], v[1:2], scale=0.125, q_format=KvFormat.FP32, kv_format=KvFormat.BF16))
    assert np.array_equal(out[2], solo[0])           # query head 2 reads KV head 1 (G = 2)
    with pytest.raises(ValueError, match="groups"):
        decode(q[:3], k, v, scale=0.125)
