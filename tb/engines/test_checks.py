"""CommandChecks' derived values (ndpkit_hw.engines.skeleton) in Amaranth's simulator: a
staged product equals the product, each derived value is ready when :attr:`settled`
says so, and a value derived after the verdict is refused; the serial form (a checker
a range a cycle, a pair of compares a pair a cycle) gives the parallel form's verdict."""
import random

import pytest
from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.codes import ErrorCode
from ndpkit_hw.bus.dma import Transfer
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
    # the slices' products and their sum (two stages), the shift one more, then the checks' own
    assert dut.cycles == CommandChecks.CYCLES + 3


# ---- the serial form: the same verdict as the parallel one -------------------------------
RANGES = 6
GROUPS = (["r0", "r1", "r2", "r3", "r4"], ["r5", "r0"])      # two disjoint() rules, as the attention engine's


class _RangeEngine:
    word_bytes, addr_width = 16, 32

    def __init__(self, window_base, window_size):
        self.window_base, self.window_size = window_base, window_size


class _Ranges(wiring.Component):
    """Both forms of CommandChecks over the same ranges (range 0's length is derived, two
    stages deep; range 1 has a wide length; range 3 is active on an input)."""
    addr: In(32).array(RANGES)
    length: In(32).array(RANGES)
    wide_high: In(8)
    on3: In(1)
    flag: In(1)
    window_base: In(32)
    window_size: In(33)
    restart: In(1)
    codes: Out(4).array(2)
    settled: Out(1).array(2)

    def elaborate(self, platform):
        m = Module()
        self.cycles = []
        # the inputs latched as the command is taken (CommandControl's cmd register): the checks'
        # ages count from the cycle after
        cmd = {name: Signal.like(getattr(self, name), name=f"cmd_{name}") for name in ("wide_high", "on3", "flag")}
        addr = [Signal(32, name=f"cmd_addr{k}") for k in range(RANGES)]
        length = [Signal(32, name=f"cmd_length{k}") for k in range(RANGES)]
        with m.If(self.restart):
            m.d.sync += [*(cmd[n].eq(getattr(self, n)) for n in cmd), *(a.eq(self.addr[k]) for k, a in enumerate(addr)),
                         *(n.eq(self.length[k]) for k, n in enumerate(length))]
        for i, serial in enumerate((False, True)):
            checks = CommandChecks(m, _RangeEngine(self.window_base, self.window_size), name=f"form{i}",
                                   serial=serial)
            half = checks.derive(length[0] >> 1, "half")
            length0 = checks.derive(half << 1, "length0", after=checks.after(half))
            checks.require(cmd["flag"])
            transfers = {f"r{k}": Transfer(addr[k], length0 if k == 0 else length[k]) for k in range(RANGES)}
            checks.ranges(transfers, active={"r3": cmd["on3"]}, wide={"r1": Cat(length[1], cmd["wide_high"])})
            for names in GROUPS:
                checks.disjoint(names)
            code = checks.code()
            self.cycles.append(checks.cycles)
            m.d.comb += [self.codes[i].eq(code), self.settled[i].eq(checks.settled)]
            with m.If(self.restart):
                m.d.sync += checks.restart()
        return m


def _expected(addr, length, wide_high, on3, flag, base, size):
    if flag:
        return ErrorCode.BAD_FIELD
    length = [length[0] & ~1] + list(length[1:])
    on = [True, True, True, on3, True, True]
    for k in range(RANGES):
        if not on[k]:
            continue
        if k == 1 and wide_high:
            return ErrorCode.OUT_OF_WINDOW
        if length[k] == 0:
            return ErrorCode.ZERO_LENGTH
        if (addr[k] | length[k]) % 16:
            return ErrorCode.UNALIGNED
        if addr[k] < base or addr[k] + length[k] > base + size:
            return ErrorCode.OUT_OF_WINDOW
    for names in GROUPS:
        ks = [int(n[1:]) for n in names]
        for i, a in enumerate(ks):
            for b in ks[i + 1:]:
                if on[a] and on[b] and addr[a] < addr[b] + length[b] and addr[b] < addr[a] + length[a]:
                    return ErrorCode.OVERLAP
    return ErrorCode.OK


def test_serial_checks_give_the_parallel_verdict():
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    dut = _Ranges()
    base, size = 0x10_0000, 0x4_0000

    def case(fault=None, k=None, other=None):
        # mostly good, disjoint ranges; now and then one rule broken
        addr = [base + 0x8000 * k + 16 * rng.randrange(64) for k in range(RANGES)]
        length = [16 * rng.randrange(1, 64) for _ in range(RANGES)]
        wide_high, on3, flag = 0, rng.random() < 0.7 if fault is None else True, rng.random() < 0.05
        k = rng.randrange(RANGES) if k is None else k
        fault = fault or rng.choice(["none", "none", "zero", "unaligned", "outside", "below", "overlap", "wide"])
        if fault == "poison":                 # every range empty and on one another: stale reads show
            return [base] * RANGES, [0] * RANGES, 0, True, False
        if fault == "pair":                   # only ranges k and other overlap
            addr[k] = addr[other] + 16 * rng.randrange(0, length[other] // 16)
            return addr, length, 0, True, False
        if fault == "zero":
            length[k] = 0
        elif fault == "unaligned":
            addr[k] += rng.choice([1, 8])
        elif fault == "outside":
            addr[k] = base + size - 16 * rng.randrange(0, 4)
        elif fault == "below":
            addr[k] = base - 16 * rng.randrange(1, 8)
        elif fault == "overlap":
            other = rng.randrange(RANGES)
            addr[k] = addr[other] + 16 * rng.randrange(-2, 3)
        elif fault == "wide":
            wide_high = rng.randrange(1, 256)
        return addr, length, wide_high, on3, flag

    async def bench(ctx):
        ctx.set(dut.window_base, base)
        ctx.set(dut.window_size, size)
        seen = set()
        # every range's faults and every checked pair alone, then random cases; a poisoned
        # case before each, so a range or pair read before it settled gives a wrong verdict
        pairs = [(int(a[1:]), int(b[1:])) for names in GROUPS for i, a in enumerate(names) for b in names[i + 1:]]
        plan = [dict(fault=f, k=k) for k in range(RANGES) for f in ("zero", "unaligned", "outside")] + \
            [dict(fault="pair", k=a, other=b) for a, b in pairs] + [{} for _ in range(100)]
        for spec in [dict(fault="poison")] + [x for s in plan for x in (s, dict(fault="poison"))]:
            addr, length, wide_high, on3, flag = case(**spec)
            for k in range(RANGES):
                ctx.set(dut.addr[k], addr[k])
                ctx.set(dut.length[k], length[k])
            ctx.set(dut.wide_high, wide_high)
            ctx.set(dut.on3, on3)
            ctx.set(dut.flag, flag)
            ctx.set(dut.restart, 1)
            await ctx.tick()
            ctx.set(dut.restart, 0)
            # each form's verdict is read the cycle after it first says settled (as CHECK does)
            got, was_settled = [None, None], [False, False]
            for cycle in range(max(dut.cycles) + 2):
                settled = [ctx.get(dut.settled[i]) for i in range(2)]
                await ctx.tick()
                for i in range(2):
                    if settled[i] and not was_settled[i]:
                        got[i] = (ctx.get(dut.codes[i]), cycle)
                was_settled = settled
                if None not in got:
                    break
            assert [c for _, c in got] == [n - 1 for n in dut.cycles], (got, dut.cycles)
            want = _expected(addr, length, wide_high, on3, flag, base, size)
            assert [ErrorCode(c) for c, _ in got] == [want, want], (addr, length, on3, flag, got, want)
            seen.add(want)
        assert {ErrorCode.OK, ErrorCode.OVERLAP, ErrorCode.OUT_OF_WINDOW, ErrorCode.UNALIGNED} <= seen, seen
    run_to_end(dut, bench, deadline=100_000)
    assert dut.cycles[1] > dut.cycles[0]
