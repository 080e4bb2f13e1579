"""The products shaped for ECP5's 18x18 multipliers (17x17 slices) compute what the
DSP48E2 shape (26x17) does: mul, fma and exp built for an ECP5 platform, in Amaranth's
simulator, bit-exact to their golden functions (the cocotb bench runs the DSP48E2 shape)."""
from types import SimpleNamespace

import numpy as np
import pytest

from ndpkit_hw.arith.fp_common import DSP48E2_SHAPE, MULT18_SHAPE, multiplier_shape
from ndpkit_tools.impl.flow import ECP5_DEVICE as ECP5
from tb.arith.fp_units import UNITS, run_one_lane


def test_shape_follows_the_device():
    assert multiplier_shape(ECP5) == MULT18_SHAPE == (17, 17)
    assert multiplier_shape(None) == DSP48E2_SHAPE == (26, 17)
    assert multiplier_shape(SimpleNamespace(device="xcu55c-fsvh2892-2L-e")) == DSP48E2_SHAPE


@pytest.mark.parametrize("name", ["mul", "fma", "exp"])
def test_ecp5_shaped_products_are_bit_exact(name):
    spec = UNITS[name]
    rng = np.random.default_rng(7)
    operands = {k: np.asarray(v)[:300] for k, v in spec.generate(rng, 300).items()}
    want = spec.golden(operands, {}) & np.uint64(0xFFFFFFFF)
    got = run_one_lane(spec.build(1), operands, ECP5)
    assert len(got) == len(want)
    bad = [(i, hex(g), hex(int(w))) for i, (g, w) in enumerate(zip(got, want)) if g != int(w)]
    assert not bad, f"{len(bad)} differ, first {bad[:3]}"
