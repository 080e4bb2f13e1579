# amaranth: UnusedElaboratable=no
"""Fast checks of the gateware that need no Verilator: parameters, port names, and the
burst splitter in Amaranth's own simulator against a Python model (hypothesis)."""
import re

import pytest
from amaranth.sim import Simulator
from hypothesis import given, settings, strategies as st

from ndpkit_hw.bus.axi import AXI4LiteSignature, AXI4Signature, READ_MEMBERS, WRITE_MEMBERS
from ndpkit_hw.bus.axil_decoder import AxiLiteDecoder
from ndpkit_hw.bus.dma import BurstReader, BurstSplitter, BurstWriter
from ndpkit_hw.bus.interconnect import AxiInterconnect
from ndpkit_hw.convert import to_verilog
from ndpkit_hw.mem.memory_model import AxiMemoryModel


def test_parameters_are_checked():
    with pytest.raises(ValueError, match="256"):
        BurstReader(data_width=32, max_burst_bytes=2048)
    with pytest.raises(ValueError, match="power of two"):
        BurstWriter(data_width=64, max_burst_bytes=3000)
    with pytest.raises(ValueError, match="whole burst"):
        BurstReader(data_width=64, max_burst_bytes=1024, buffer_beats=64)
    with pytest.raises(ValueError, match="4096"):
        BurstReader(data_width=512, max_burst_bytes=8192)
    with pytest.raises(ValueError, match="at least two"):
        AxiInterconnect(num_masters=1)
    with pytest.raises(ValueError, match="read_latency"):
        AxiMemoryModel(read_latency=1)
    with pytest.raises(ValueError, match="overlap"):
        AxiLiteDecoder(addr_width=16, regions=[(0, 0x1000), (0x800, 0x800)])
    with pytest.raises(ValueError, match="aligned"):
        AxiLiteDecoder(addr_width=16, regions=[(0x100, 0x1000)])
    with pytest.raises(ValueError, match="data width"):
        AXI4Signature(addr_width=32, data_width=48, id_width=1)


def test_axi_member_names_are_the_amba_ones():
    sig = AXI4Signature(addr_width=32, data_width=64, id_width=2)
    assert set(sig.members) == set(READ_MEMBERS) | set(WRITE_MEMBERS)
    assert {"awaddr", "wstrb", "bresp", "arlen", "rlast"} <= set(sig.members)
    assert set(AXI4Signature(addr_width=32, data_width=64, id_width=2, channels="r").members) == set(READ_MEMBERS)
    assert "awprot" not in AXI4LiteSignature(addr_width=12).members


def test_flat_top_level_port_names():
    verilog = to_verilog(BurstReader(data_width=64, max_burst_bytes=256), "burst_reader")
    header = verilog[verilog.index("module burst_reader("):]
    header = header[:header.index(");")]
    ports = set(re.findall(r"\b([a-z_][a-z0-9_]*)\b", header))
    assert {"bus_araddr", "bus_arvalid", "bus_rready", "cmd_valid", "cmd_payload", "data_ready"} <= ports
    assert not any("__" in p for p in ports)


def _split_model(addr, beats, word, max_beats):
    out = []
    while beats:
        index = (addr // word) % max_beats
        n = min(beats, max_beats - index)
        beats -= n
        out.append((addr, n - 1, int(beats == 0)))
        addr += n * word
    return out


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4095), st.integers(1, 700)), min_size=1, max_size=4),
       st.sampled_from([(8, 32), (64, 64), (16, 1)]))
def test_burst_splitter_matches_model(commands, shape):
    word, max_beats = shape
    dut = BurstSplitter(addr_width=32, data_bytes=word, max_burst_beats=max_beats)
    expected = [b for a, n in commands for b in _split_model(a * word, n, word, max_beats)]
    got = []

    async def bench(ctx):
        ctx.set(dut.burst.ready, 1)
        pending = list(commands)
        while len(got) < len(expected):
            if pending and not ctx.get(dut.cmd.valid):
                a, n = pending.pop(0)
                ctx.set(dut.cmd.payload.addr, a * word)
                ctx.set(dut.cmd.payload.beats, n)
                ctx.set(dut.cmd.valid, 1)
            _, _, cmd_ready, burst_valid, addr, length, last = await ctx.tick().sample(
                dut.cmd.ready, dut.burst.valid, dut.burst.payload.addr, dut.burst.payload.len,
                dut.burst.payload.last)
            if cmd_ready and ctx.get(dut.cmd.valid):
                ctx.set(dut.cmd.valid, 0)
            if burst_valid:
                got.append((addr, length, last))
                assert (addr // 4096) == ((addr + (length + 1) * word - 1) // 4096) or max_beats * word > 4096

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run_until(1e-3)
    assert got == expected
