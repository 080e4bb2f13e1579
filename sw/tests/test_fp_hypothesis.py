# amaranth: UnusedElaboratable=no
"""Hypothesis-generated operands through the RTL (Amaranth's simulator), against the
golden functions: add/sub, mul and fma, where case analysis is richest."""
import numpy as np
from amaranth.sim import Simulator
from hypothesis import HealthCheck, given, settings, strategies as st

from ndpkit.arith import fp
from ndpkit_hw.arith.add import FpAdd
from ndpkit_hw.arith.fma import FpFma
from ndpkit_hw.arith.mul import FpMul

word = st.one_of(st.integers(0, 2 ** 32 - 1),
                 st.integers(0, 0x00FFFFFF).map(lambda v: v | (0x80000000 if v & 1 else 0)),   # subnormal-ish
                 st.sampled_from([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F7FFFFF, 1, 0x00800000]))


def run_unit(unit, vectors, controls=None):
    """Push one vector per cycle, collect results in order."""
    names = list(unit.operands)
    results = []

    async def bench(ctx):
        for i, vector in enumerate(vectors):
            for name, value in zip(names, vector):
                ctx.set(getattr(unit.i.payload, name)[0], value)
            for name, value in (controls[i] if controls else {}).items():
                ctx.set(getattr(unit.i.payload, name), value)
            ctx.set(unit.i.valid, 1)
            await ctx.tick()
            if ctx.get(unit.o.valid):
                results.append(ctx.get(unit.o.payload[0]))
        ctx.set(unit.i.valid, 0)
        while len(results) < len(vectors):
            await ctx.tick()
            if ctx.get(unit.o.valid):
                results.append(ctx.get(unit.o.payload[0]))

    sim = Simulator(unit)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return np.array(results, dtype=np.uint32)


SETTINGS = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.lists(st.tuples(word, word, st.booleans()), min_size=1, max_size=24))
def test_add_sub(vectors):
    a = np.array([v[0] for v in vectors], dtype=np.uint32)
    b = np.array([v[1] for v in vectors], dtype=np.uint32)
    sub = np.array([v[2] for v in vectors])
    got = run_unit(FpAdd(), [(x, y) for x, y, _ in vectors], [{"sub": int(s)} for s in sub])
    want = np.where(sub, fp.sub(a, b), fp.add(a, b))
    assert np.array_equal(got, want), [(hex(x), hex(y), s) for x, y, s, g, w in zip(a, b, sub, got, want) if g != w]


@SETTINGS
@given(st.lists(st.tuples(word, word), min_size=1, max_size=24))
def test_mul(vectors):
    a, b = (np.array(col, dtype=np.uint32) for col in zip(*vectors))
    assert np.array_equal(run_unit(FpMul(), vectors), fp.mul(a, b))


@SETTINGS
@given(st.lists(st.tuples(word, word, word), min_size=1, max_size=24))
def test_fma(vectors):
    a, b, c = (np.array(col, dtype=np.uint32) for col in zip(*vectors))
    assert np.array_equal(run_unit(FpFma(), vectors), fp.fma(a, b, c))
