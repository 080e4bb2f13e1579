"""The exp golden function: special values and the 1-ulp bound against float64."""
import numpy as np
import pytest

from ndpkit.arith import exp as golden_exp
from ndpkit.arith.fp import bits, floats


def test_special_values():
    cases = {0x00000000: 0x3F800000, 0x80000000: 0x3F800000, 0x7F800000: 0x7F800000, 0xFF800000: 0,
             0x7FC00000: 0x7FC00000, 0x7F800001: 0x7FC00000, 0x43000000: 0x7F800000, 0xC3000000: 0,
             0x00000001: 0x3F800000}
    u = np.array(list(cases), dtype=np.uint32)
    assert [int(v) for v in golden_exp.exp(u)] == list(cases.values())


def test_overflow_and_underflow_edges():
    x = np.array([88.72283, 88.72284, -103.97208, -104.5], dtype=np.float32)
    r = floats(golden_exp.exp(bits(x)))
    assert np.isfinite(r[0]) and np.isinf(r[1])
    assert r[2] > 0 and r[3] == 0


def test_one_ulp_bound_sweep():
    report = golden_exp.sweep(1_000_000, seed=7)
    assert report["max_ulp"] <= 1.0, report


@pytest.mark.long
def test_one_ulp_bound_sweep_ten_million():
    report = golden_exp.sweep(10_000_000, seed=11)
    assert report["max_ulp"] <= 1.0, report


def test_subnormal_results_stay_within_one_subnormal_ulp():
    x = np.linspace(-103.9, -87.4, 200_000, dtype=np.float32)
    err = golden_exp.ulp_error(bits(x), golden_exp.exp(bits(x)))
    assert err.max() <= 1.0
