"""AXI4 and AXI4-Lite signatures with flat, AMBA-spelled member names.

Members are named exactly as the AMBA signals (``awaddr``, ``rready``, ...), so a
component port called ``s_axi`` converts (see :mod:`ndpkit_hw.convert`) to
``s_axi_awaddr`` and friends: the names Vivado infers and cocotbext-axi binds.
Directions are given from the master's side: ``Out`` = driven by the master.
"""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.codes import AxiResp

__all__ = [
    "AxiResp", "BURST_INCR", "AXI4Signature", "AXI4LiteSignature",
    "READ_MEMBERS", "WRITE_MEMBERS", "connect_members", "log2_exact",
]

BURST_INCR = 0b01


def log2_exact(value: int, what: str) -> int:
    if value <= 0 or value & (value - 1):
        raise ValueError(f"{what} must be a power of two, not {value}")
    return value.bit_length() - 1


def _axi4_members(addr_width, data_width, id_width):
    return {
        "aw": {
            "awid": Out(id_width), "awaddr": Out(addr_width), "awlen": Out(8),
            "awsize": Out(3), "awburst": Out(2), "awvalid": Out(1), "awready": In(1),
        },
        "w": {
            "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wlast": Out(1),
            "wvalid": Out(1), "wready": In(1),
        },
        "b": {"bid": In(id_width), "bresp": In(2), "bvalid": In(1), "bready": Out(1)},
        "ar": {
            "arid": Out(id_width), "araddr": Out(addr_width), "arlen": Out(8),
            "arsize": Out(3), "arburst": Out(2), "arvalid": Out(1), "arready": In(1),
        },
        "r": {
            "rid": In(id_width), "rdata": In(data_width), "rresp": In(2), "rlast": In(1),
            "rvalid": In(1), "rready": Out(1),
        },
    }


_CHANNEL_NAMES = _axi4_members(1, 8, 1)
# Flow of every member seen from the master: Out = master drives it.
_MASTER_FLOW = {n: member.flow for ch in _CHANNEL_NAMES.values() for n, member in ch.items()}
READ_MEMBERS = tuple(n for ch in ("ar", "r") for n in _CHANNEL_NAMES[ch])
WRITE_MEMBERS = tuple(n for ch in ("aw", "w", "b") for n in _CHANNEL_NAMES[ch])


class AXI4Signature(wiring.Signature):
    """AXI4 master signature (IDs, INCR bursts up to 256 beats, WSTRB, responses).

    ``channels`` selects a subset: ``"rw"`` (all five), ``"r"`` (AR and R only) or
    ``"w"`` (AW, W and B only), so a read engine exposes just what it drives.
    """

    def __init__(self, *, addr_width: int, data_width: int, id_width: int, channels: str = "rw"):
        if data_width not in (32, 64, 128, 256, 512, 1024):
            raise ValueError(f"AXI4 data width must be 32..1024 and a power of two, not {data_width}")
        if id_width < 1:
            raise ValueError("AXI4 id_width must be at least 1")
        if channels not in ("rw", "r", "w"):
            raise ValueError(f"channels must be 'rw', 'r' or 'w', not {channels!r}")
        self.addr_width, self.data_width, self.id_width, self.channels = \
            addr_width, data_width, id_width, channels
        groups = _axi4_members(addr_width, data_width, id_width)
        wanted = {"rw": ("aw", "w", "b", "ar", "r"), "r": ("ar", "r"), "w": ("aw", "w", "b")}[channels]
        members = {}
        for group in wanted:
            members.update(groups[group])
        super().__init__(members)

    def __eq__(self, other):
        return (isinstance(other, AXI4Signature) and
                (self.addr_width, self.data_width, self.id_width, self.channels) ==
                (other.addr_width, other.data_width, other.id_width, other.channels))

    def __repr__(self):
        return (f"AXI4Signature(addr_width={self.addr_width}, data_width={self.data_width}, "
                f"id_width={self.id_width}, channels={self.channels!r})")


class AXI4LiteSignature(wiring.Signature):
    """AXI4-Lite master signature (32-bit data, the BAR0 register interface)."""

    def __init__(self, *, addr_width: int, data_width: int = 32):
        if data_width not in (32, 64):
            raise ValueError("AXI4-Lite data width must be 32 or 64")
        self.addr_width, self.data_width = addr_width, data_width
        super().__init__({
            "awaddr": Out(addr_width), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wvalid": Out(1), "wready": In(1),
            "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            "araddr": Out(addr_width), "arvalid": Out(1), "arready": In(1),
            "rdata": In(data_width), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
        })

    def __eq__(self, other):
        return (isinstance(other, AXI4LiteSignature) and
                (self.addr_width, self.data_width) == (other.addr_width, other.data_width))

    def __repr__(self):
        return f"AXI4LiteSignature(addr_width={self.addr_width}, data_width={self.data_width})"


def connect_members(m: Module, master, slave, names, *, addr_high: int = 0) -> None:
    """Connect the named members of two AXI interfaces (master side -> slave side).

    Used where a read-only or write-only port meets a full AXI4 port; widths may
    differ only for IDs (the narrower side is zero-extended / truncated) and for
    addresses, where ``addr_high`` is OR-ed into the wider slave side's address (a
    32-bit master placed in a region above 4 GiB).
    """
    for name in names:
        if _MASTER_FLOW[name] == Out:
            value = getattr(master, name)
            if addr_high and name in ("araddr", "awaddr"):
                value = value | addr_high
            m.d.comb += getattr(slave, name).eq(value)
        else:
            m.d.comb += getattr(master, name).eq(getattr(slave, name))
