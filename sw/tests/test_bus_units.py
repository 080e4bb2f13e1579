# amaranth: UnusedElaboratable=no
"""Fast checks of the gateware that need no Verilator: parameters and port names (the burst
splitter's model bench is tb/bus/test_burst_splitter.py)."""
import re

import pytest

from ndpkit_hw.bus.axi import AXI4LiteSignature, AXI4Signature, READ_MEMBERS, WRITE_MEMBERS
from ndpkit_hw.bus.axil_decoder import AxiLiteDecoder
from ndpkit_hw.bus.dma import BurstReader, BurstWriter
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
