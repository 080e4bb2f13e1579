"""CommandChecks' derived values (ndpkit_hw.engines.skeleton) in Amaranth's simulator: a
staged product equals the product, each derived value is ready when :attr:`settled`
says so, and a value derived after the verdict is refused."""
import random

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ndpkit_hw.engines.skeleton import CommandChecks
from tb.amaranth_sim import run_to_end


class _Engine:
    word_bytes = 16


class _Derived(wiring.Component):
    a: In(32)
    b: In(7)
    restart: In(1)
    product: Out(39)
    shifted: Out(48)
    settled: Out(1)
    cycles: int

    def elaborate(self, platform):
        m = Module()
        checks = CommandChecks(m, _Engine(), name="probe")
        product = checks.derive_product(self.a, self.b, "product")
        shifted = checks.derive(product << 8, "shifted", after=checks.after(product))
        checks.require(shifted == 0)
        checks.code()
        with pytest.raises(RuntimeError, match="after code"):
            checks.derive(self.a, "late")
        self.cycles = checks.cycles
        m.d.comb += [self.product.eq(product), self.shifted.eq(shifted), self.settled.eq(checks.settled)]
        with m.If(self.restart):
            m.d.sync += checks.restart()
        return m


def test_derive_product_is_the_product_when_the_checks_settle():
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    dut = _Derived()
    cases = [(0, 0), (0xFFFF_FFFF, 127), (1, 64), (12345, 1)] + \
        [(rng.randrange(1 << 32), rng.randrange(128)) for _ in range(40)]

    async def bench(ctx):
        for a, b in cases:
            ctx.set(dut.a, a)
            ctx.set(dut.b, b)
            ctx.set(dut.restart, 1)
            await ctx.tick()
            ctx.set(dut.restart, 0)
            waited = 0
            while not ctx.get(dut.settled):
                await ctx.tick()
                waited += 1
            assert ctx.get(dut.product) == a * b, (a, b)
            assert ctx.get(dut.shifted) == (a * b) << 8
            assert waited == dut.cycles - 1
    run_to_end(dut, bench, deadline=5_000)
    # 7 terms: three adder stages, the shift one more, then the checks' own four
    assert dut.cycles == CommandChecks.CYCLES + 4
