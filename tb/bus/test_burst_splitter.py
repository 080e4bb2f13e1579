"""BurstSplitter alone in Amaranth's simulator, against a Python model of AXI bursts: random
commands (anywhere in the address space, lengths from one beat to several blocks, zero
length, starts on and off a block's boundary, ranges that wrap past the top address) with
random gaps on ``cmd`` and random stalls on ``burst`` (the ``rng`` fixture prints its seed;
``SEED=`` reproduces).  Every command's bursts must tile its range in order, none crossing
a ``max_burst_bytes`` block, every one but the last ending on a block's end, ``last`` on
its last one only."""
import pytest
from tb.amaranth_sim import Offer, run_to_end

from ndpkit_hw.bus.dma import BurstSplitter


def expected_bursts(addr: int, beats: int, word: int, block_beats: int, addr_width: int):
    """(addr, AxLEN, last) of each burst of a command, as AXI's 4 KiB rule asks."""
    out, top = [], 1 << addr_width
    while beats:
        room = block_beats - (addr // word) % block_beats
        n = min(beats, room)
        beats -= n
        out.append((addr, n - 1, int(beats == 0)))
        addr = (addr + n * word) % top
    return out


@pytest.mark.parametrize("word, block_beats, addr_width", [(64, 64, 32), (16, 64, 20), (8, 256, 16), (8, 32, 32),
                                                          (64, 1, 16), (16, 1, 32)])
def test_burst_splitter_tiles_each_command_in_blocks(rng, word, block_beats, addr_width):
    dut = BurstSplitter(addr_width=addr_width, data_bytes=word, max_burst_beats=block_beats)
    block = word * block_beats
    commands = []
    for _ in range(150):
        beats = rng.choice([0, 1, 2, block_beats - 1, block_beats, block_beats + 1, rng.randrange(1, 5 * block_beats)])
        start = rng.choice([0, block - word, (1 << addr_width) - word * rng.randrange(1, 3 * block_beats),
                            rng.randrange(1 << addr_width)])
        # (the command as the intake hands it over: its beats less one, and whether it has none)
        commands.append({"addr": start - start % word, "last": (beats - 1) % (1 << 32), "empty": int(beats == 0)})
    want = [b for c in commands for b in expected_bursts(c["addr"], (c["last"] + 1) % (1 << 32) * (1 - c["empty"]),
                                                          word, block_beats, addr_width)]
    got = []

    async def bench(ctx):
        offer = Offer(dut.cmd, commands, rng)
        while len(got) < len(want) or offer.i < len(commands):
            offer.drive(ctx)
            ready = rng.random() < 0.6
            ctx.set(dut.burst.ready, ready)
            if ready and ctx.get(dut.burst.valid):
                b = ctx.get(dut.burst.payload)
                got.append((b.addr, b.len, b.last))
            offer.advance(ctx)
            await ctx.tick()
        for _ in range(20):                              # and nothing more
            ctx.set(dut.burst.ready, 1)
            assert not ctx.get(dut.burst.valid)
            await ctx.tick()

    run_to_end(dut, bench, deadline=100_000)
    assert got == want
