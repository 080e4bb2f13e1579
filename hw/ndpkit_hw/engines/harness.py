"""An engine alone with card memory: its ``cmd``/``cpl`` streams as ports and the RTL
memory model (with run-time latency ports) on its AXI4 master, window = the memory.
Engine benches drive commands straight into it, without the shell."""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from ndpkit_hw.mem.memory_model import AxiMemoryModel

__all__ = ["EngineHarness"]


class EngineHarness(wiring.Component):
    def __init__(self, engine, *, mem_size: int = 1 << 20, stall_per_256: int = 0, seed: int = 1,
                 max_outstanding: int = 16):
        self.engine = engine
        self.memory = AxiMemoryModel(size=mem_size, addr_width=len(engine.bus.araddr),
                                     data_width=len(engine.bus.rdata), id_width=len(engine.bus.arid),
                                     stall_per_256=stall_per_256, seed=seed, latency_ports=True,
                                     max_outstanding=max_outstanding)
        # the engine's own extra outputs (the graph engine's link counters) come out too
        self.extra = [name for name in engine.signature.members
                      if name not in ("cmd", "cpl", "bus", "window_base", "window_size")]
        super().__init__({
            "cmd": engine.signature.members["cmd"],
            "cpl": engine.signature.members["cpl"],
            "read_latency": In(16),
            "write_latency": In(16),
            **{name: engine.signature.members[name] for name in self.extra},
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = engine = self.engine
        m.submodules.memory = memory = self.memory
        wiring.connect(m, engine.bus, memory.bus)
        wiring.connect(m, wiring.flipped(self.cmd), engine.cmd)
        wiring.connect(m, engine.cpl, wiring.flipped(self.cpl))
        for name in self.extra:
            m.d.comb += getattr(self, name).eq(getattr(engine, name))
        m.d.comb += [engine.window_base.eq(0), engine.window_size.eq(memory.size),
                     memory.error_base.eq(0), memory.error_size.eq(0),
                     memory.read_latency.eq(self.read_latency), memory.write_latency.eq(self.write_latency)]
        return m
