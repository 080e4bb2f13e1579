"""Compressor and golden decompressor: exact top-k, approximate top-k, error feedback,
stream == scatter == a plain NumPy scatter, and the round trip into the Adam update."""
import numpy as np
import pytest

from ndpkit_spec.codes import ErrorCode
from ndpkit.arith import fp
from ndpkit.engines.adam.golden import Format, adam_step, scalars_for_step
from ndpkit.engines.decomp.golden import (SENTINEL, check_stream, compress, decompress_scatter, decompress_stream,
                                  widen)


def test_exact_topk_matches_a_sort():
    rng = np.random.default_rng(1)
    g = rng.normal(0, 1, 10_000).astype(np.float32)
    c, residual = compress(g, 100)
    want = np.sort(np.argsort(-np.abs(g), kind="stable")[:100])
    assert np.array_equal(c.indices, want) and c.k == 100
    assert np.all(np.diff(c.indices.astype(np.int64)) > 0)
    # fp32 values are exact, so the residual is exactly the unsent part
    dense = fp.floats(decompress_stream(c.indices, c.values, c.fmt, c.n))
    assert np.array_equal(dense + residual, g)
    assert np.count_nonzero(residual[c.indices]) == 0


@pytest.mark.parametrize("fmt", [Format.FP16, Format.BF16])
def test_error_feedback_carries_the_rounding(fmt):
    rng = np.random.default_rng(2)
    g = rng.normal(0, 1e-2, 5000).astype(np.float32)
    c, residual = compress(g, 500, fmt=fmt)
    assert c.values.dtype == np.uint16 and c.nbytes == 500 * 6
    dense = fp.floats(decompress_stream(c.indices, c.values, fmt, c.n))
    assert np.allclose(dense + residual, g, rtol=0, atol=1e-9)
    # the residual enters the next step: an element never sent keeps accumulating
    c2, residual2 = compress(np.zeros_like(g), 500, residual=residual, fmt=fmt)
    assert np.allclose(fp.floats(decompress_stream(c2.indices, c2.values, fmt, c2.n)) + residual2, residual,
                       atol=1e-9)


def test_approximate_topk_keeps_the_large_ones():
    rng = np.random.default_rng(3)
    g = rng.normal(0, 1, 200_000).astype(np.float32)
    c, _ = compress(g, 2000, exact=False, rng=rng)
    assert 1500 < c.k < 2500                              # about k
    kept = np.abs(g[c.indices]).min()
    dropped = np.delete(np.abs(g), c.indices).max()
    assert kept >= dropped                                # a threshold: everything above it is kept


def test_stream_equals_scatter_equals_numpy():
    rng = np.random.default_rng(4)
    n = 3000
    idx = np.sort(rng.choice(n, 300, replace=False)).astype(np.uint32)
    vals = fp.fp32_to_bf16(fp.bits(rng.normal(0, 1, 300).astype(np.float32)))
    plain = np.zeros(n, np.float32)
    plain[idx] = fp.floats(widen(vals, Format.BF16))
    stream = decompress_stream(idx, vals, Format.BF16, n)
    perm = rng.permutation(300)
    pad_idx = np.concatenate([idx[perm], np.full(7, SENTINEL, np.uint32)])
    pad_val = np.concatenate([vals[perm], np.zeros(7, np.uint16)])
    scatter = decompress_scatter(pad_idx, pad_val, Format.BF16, n)
    assert np.array_equal(stream, fp.bits(plain)) and np.array_equal(scatter, stream)


def test_scatter_last_wins_and_errors():
    assert list(decompress_scatter([2, 0, 2, SENTINEL], np.array([1, 2, 3, 4], np.uint32), Format.FP32, 4)) == \
        [2, 0, 3, 0]
    with pytest.raises(ValueError, match=">= n"):
        decompress_scatter([5], np.array([1], np.uint32), Format.FP32, 4)
    assert check_stream([], 4) == (ErrorCode.ZERO_LENGTH, "k")
    assert check_stream([0, 1, 2, 3, 3], 4)[0] == ErrorCode.BAD_FIELD           # k > n
    assert check_stream([1, 1], 4) == (ErrorCode.BAD_FIELD, "indices")          # duplicate
    assert check_stream([2, 1], 4) == (ErrorCode.BAD_FIELD, "indices")          # unsorted
    assert check_stream([1, 4], 4) == (ErrorCode.OUT_OF_WINDOW, "indices")      # index >= n
    with pytest.raises(ValueError):
        compress(np.ones(4), 0)


def test_round_trip_into_the_update():
    """compress -> decompress -> update equals the update on the dense decompressed gradient."""
    rng = np.random.default_rng(5)
    n = 1024
    p, m, v = (rng.normal(0, s, n).astype(np.float32) for s in (1, 1e-2, 1e-3))
    v = np.abs(v)
    g = rng.normal(0, 1e-2, n).astype(np.float32)
    c, _ = compress(g, 64, fmt=Format.FP16)
    dense = decompress_stream(c.indices, c.values, Format.FP16, n)
    sc = scalars_for_step(3, lr=1e-3)
    a = adam_step(p, m, v, dense, sc)
    sixteen = np.zeros(n, np.uint16)
    sixteen[c.indices] = c.values
    b = adam_step(p, m, v, sixteen, sc, grad_format=Format.FP16)   # the same gradient, widened by the updater
    assert all(np.array_equal(x, y) for x, y in zip(a[:3], b[:3]))
