"""A DMA engine wired straight to the memory model: the performance harness.

Everything on the data path is gateware, so a bench only starts commands and reads
the engine's counters: no per-cycle Python, and the cycle counts are those of the
RTL.  Memory latency is a run-time input (``read_latency``/``write_latency``), so a
latency sweep reuses one build.
"""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from ndpkit_hw.bus.axi import READ_MEMBERS, WRITE_MEMBERS, connect_members
from ndpkit_hw.bus.dma import BurstReader, BurstWriter
from ndpkit_hw.mem.memory_model import AxiMemoryModel

__all__ = ["DmaPerfHarness"]


class DmaPerfHarness(wiring.Component):
    def __init__(self, *, engine: str, data_width: int = 512, max_burst_bytes: int = 4096,
                 max_outstanding: int = 8, buffer_beats: int | None = None, mem_size: int = 1 << 21,
                 bytes_per_cycle: int | None = None):
        cls = {"read": BurstReader, "write": BurstWriter}[engine]
        self.engine_kind = engine
        self.engine = cls(addr_width=32, data_width=data_width, max_burst_bytes=max_burst_bytes,
                          max_outstanding=max_outstanding, buffer_beats=buffer_beats)
        self.memory = AxiMemoryModel(size=mem_size, addr_width=32, data_width=data_width,
                                     max_outstanding=max(16, max_outstanding),
                                     bytes_per_cycle=bytes_per_cycle, latency_ports=True)
        members = {}
        sig = self.engine.signature
        for name in ("cmd", "status", "data"):
            members[name] = sig.members[name]
        for name in ("bytes_count", "busy_cycles", "idle_cycles", "busy", "clear_counters"):
            members[name] = sig.members[name]
        members["read_latency"] = In(16)
        members["write_latency"] = In(16)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = engine = self.engine
        m.submodules.memory = memory = self.memory
        names = READ_MEMBERS if self.engine_kind == "read" else WRITE_MEMBERS
        connect_members(m, engine.bus, memory.bus, names)
        wiring.connect(m, wiring.flipped(self.cmd), engine.cmd)
        wiring.connect(m, engine.status, wiring.flipped(self.status))
        if self.engine_kind == "read":
            wiring.connect(m, engine.data, wiring.flipped(self.data))
        else:
            wiring.connect(m, wiring.flipped(self.data), engine.data)
        m.d.comb += [
            engine.window_base.eq(0),
            engine.window_size.eq(memory.size),
            engine.clear_counters.eq(self.clear_counters),
            self.bytes_count.eq(engine.bytes_count),
            self.busy_cycles.eq(engine.busy_cycles),
            self.idle_cycles.eq(engine.idle_cycles),
            self.busy.eq(engine.busy),
            memory.read_latency.eq(self.read_latency),
            memory.write_latency.eq(self.write_latency),
            memory.error_base.eq(0),
            memory.error_size.eq(0),
        ]
        return m
