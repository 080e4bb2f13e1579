"""SerialReciprocal (ndpkit_hw.arith.recip) in Amaranth's simulator, bit for bit against
``ndpkit.arith.fp.div(1.0, x)``: every exponent (subnormals and the ends of the range
included) with random significands, the specials and the rounding's edges; the ``rng``
fixture prints its seed."""
import numpy as np

from ndpkit.arith import fp
from ndpkit_hw.arith.recip import SerialReciprocal
from tb.amaranth_sim import run_to_end

ONE = np.uint32(0x3F80_0000)


def _cases(rng) -> list[int]:
    xs = [0, 0x8000_0000, 0x7F80_0000, 0xFF80_0000, 0x7FC0_0000, 0xFFA0_0001, 0x3F80_0000, 0xBF80_0000,
          0x0000_0001, 0x8000_0001, 0x0040_0000, 0x007F_FFFF, 0x0080_0000, 0x7F7F_FFFF, 0x7F00_0000, 0x7E80_0000,
          0x7E7F_FFFF, 0x3FFF_FFFF, 0x3F80_0001, 0x3FC0_0000]
    for field in range(0, 255):                       # every exponent field, random significands and signs
        for _ in range(6):
            xs.append((rng.getrandbits(1) << 31) | (field << 23) | rng.getrandbits(23))
        xs.append((field << 23) | 1)
        xs.append((field << 23) | 0x7F_FFFF)
    return xs


def test_reciprocal_is_the_golden_division(rng):
    xs = _cases(rng)
    want = fp.div(np.full(len(xs), ONE, dtype=np.uint32), np.array(xs, dtype=np.uint32))
    dut = SerialReciprocal()
    got = []

    async def bench(ctx):
        for x in xs:
            for _ in range(rng.randrange(3)):
                await ctx.tick()
            assert not ctx.get(dut.busy)
            ctx.set(dut.x, x)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            ctx.set(dut.x, rng.getrandbits(32))          # (taken at the start: changing it is harmless)
            cycles = 0
            while not ctx.get(dut.done):
                await ctx.tick()
                cycles += 1
                assert cycles < 70, f"no result for {x:#010x}"
            got.append(ctx.get(dut.result))
            await ctx.tick()
    run_to_end(dut, bench, deadline=len(xs) * 80)
    bad = [(hex(x), hex(g), hex(int(w))) for x, g, w in zip(xs, got, want) if g != int(w)]
    assert not bad, f"{len(bad)} of {len(xs)} differ, e.g. {bad[:6]}"
