"""The exp unit's first product with its hidden bit beside the multipliers, and the
unit over every input exponent, in Amaranth's simulator on both multiplier shapes
(the DSP48E2's 26x17 and ECP5's 17x17).

``_significand_product`` multiplies only the fraction in the DSPs and adds
``hidden * (LOG2E_Q39 << 23)`` where the partial products are summed: checked against
``Cat(frac, hidden) * LOG2E_Q39`` on both hidden values with structured fractions (zero,
all ones, every single bit and low mask, each multiplier slice full) and random ones.
The whole unit is checked bit for bit against its golden model for every exponent
(0: zero and subnormals, 255: inf and NaN, the saturation edge), both signs, fractions
at the edges and random.
"""
import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module, Signal
from amaranth.sim import Simulator

from ndpkit_hw.arith.exp import FpExp, _significand_product
from ndpkit_hw.arith.fp_common import DSP48E2_SHAPE, MULT18_SHAPE, Pipeline
from ndpkit_spec.exp import LOG2E_Q39
from ndpkit_tools.impl.flow import ECP5_DEVICE
from tb.arith.fp_units import UNITS, run_one_lane

SHAPES = {"dsp48e2": (DSP48E2_SHAPE, None), "ecp5": (MULT18_SHAPE, ECP5_DEVICE)}


class _Product(Elaboratable):
    """The product alone, then the unit's register after it (three stages)."""

    def __init__(self, shape):
        self.shape = shape
        self.frac, self.hidden, self.product = Signal(23), Signal(), Signal(64)
        self.stages = None

    def elaborate(self, platform):
        m = Module()
        pipe = Pipeline(m, Signal(), "p", self.shape)
        product, _ = _significand_product(m, pipe, self.frac, self.hidden)
        m.d.sync += self.product.eq(product)
        self.stages = pipe.depth + 1
        return m


def _fractions(rng, n):
    edges = {0, (1 << 23) - 1}
    edges |= {1 << k for k in range(23)} | {(1 << k) - 1 for k in range(24)}
    for piece in (17, 26):                                 # one multiplier slice full, the other empty
        edges |= {((1 << piece) - 1) & ((1 << 23) - 1), ((1 << 23) - 1) & ~((1 << piece) - 1)}
    return np.concatenate([np.array(sorted(edges), dtype=np.uint64),
                           rng.integers(0, 1 << 23, n, dtype=np.uint64)])


@pytest.mark.parametrize("shape", SHAPES)
def test_significand_product_with_the_hidden_bit_beside(shape):
    rng = np.random.default_rng(11)
    fracs = _fractions(rng, 1500)
    vectors = [(int(f), h) for h in (0, 1) for f in fracs]
    dut = _Product(SHAPES[shape][0])
    got = []

    async def bench(ctx):
        latency = dut.stages
        for i in range(len(vectors) + latency):
            if i < len(vectors):
                ctx.set(dut.frac, vectors[i][0])
                ctx.set(dut.hidden, vectors[i][1])
            await ctx.tick()
            if i >= latency - 1 and len(got) < len(vectors):
                got.append(ctx.get(dut.product))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    want = [((h << 23) | f) * LOG2E_Q39 for f, h in vectors]
    bad = [(hex(f), h, hex(g), hex(w)) for (f, h), g, w in zip(vectors, got, want) if g != w]
    assert len(got) == len(vectors) and not bad, f"{len(bad)} differ, first {bad[:3]}"


def _every_exponent(rng):
    """Every exponent, both signs, fractions 0, 1, half, all ones and two random."""
    e = np.repeat(np.arange(256, dtype=np.uint64), 6)
    frac = np.tile(np.array([0, 1, 1 << 22, (1 << 23) - 1, 0, 0], dtype=np.uint64), 256)
    frac[4::6] = rng.integers(0, 1 << 23, 256, dtype=np.uint64)
    frac[5::6] = rng.integers(0, 1 << 23, 256, dtype=np.uint64)
    positive = (e << np.uint64(23)) | frac
    return np.concatenate([positive, positive | np.uint64(1 << 31)]).astype(np.uint32)


@pytest.mark.parametrize("shape", SHAPES)
def test_exp_every_exponent_bit_exact(shape):
    operands = _every_exponent(np.random.default_rng(5))
    want = UNITS["exp"].golden({"a": operands}, {}) & np.uint64(0xFFFFFFFF)
    got = run_one_lane(FpExp(lanes=1), {"a": operands}, SHAPES[shape][1])
    assert len(got) == len(want)
    bad = [(hex(int(a)), hex(g), hex(int(w))) for a, g, w in zip(operands, got, want) if g != int(w)]
    assert not bad, f"{len(bad)} differ, first {bad[:3]}"


def test_latency_unchanged():
    assert FpExp.latency == 20
