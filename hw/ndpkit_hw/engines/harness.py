"""An engine alone with card memory: its ``cmd``/``cpl`` streams as ports and the RTL
memory model (with run-time latency ports) on its AXI4 master, window = the memory.
Engine benches drive commands straight into it, without the shell.

``memory`` names a DRAM preset (:data:`ndpkit_spec.dram.PRESETS`) for the memory
model, the engine at ``engine_mhz`` behind the card's clock crossing; the latency ports
then do nothing (the preset times every access)."""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from ndpkit_hw.mem.dram import CROSSING_CYCLES
from ndpkit_hw.mem.memory_model import AxiMemoryModel
from ndpkit_spec.dram import IDEAL, preset

__all__ = ["EngineHarness"]


class EngineHarness(wiring.Component):
    def __init__(self, engine, *, mem_size: int = 1 << 20, stall_per_256: int = 0, seed: int = 1,
                 max_outstanding: int | None = None, memory: str | None = None, engine_mhz: float = 200.0):
        self.engine = engine
        timing = None if memory in (None, IDEAL) else preset(memory)
        if timing is not None:
            # a power-of-two memory, as a DRAM's rows and banks cut it
            mem_size = 1 << (mem_size - 1).bit_length()
        self.memory = AxiMemoryModel(size=mem_size, addr_width=len(engine.bus.araddr),
                                     data_width=len(engine.bus.rdata), id_width=len(engine.bus.arid),
                                     stall_per_256=stall_per_256, seed=seed, latency_ports=True,
                                     max_outstanding=max_outstanding, dram=timing, engine_mhz=engine_mhz,
                                     crossing=CROSSING_CYCLES)
        # the engine's own extra ports come out too (the graph engine's link counters and its
        # window exchange's streams, unused by a bench of one engine)
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
        for name in self.extra:              # (ports and interfaces, either direction)
            member, inner, outer = engine.signature.members[name], getattr(engine, name), getattr(self, name)
            if member.is_signature:
                if member.flow == wiring.Out:
                    wiring.connect(m, inner, wiring.flipped(outer))
                else:
                    wiring.connect(m, wiring.flipped(outer), inner)
            else:
                m.d.comb += outer.eq(inner) if member.flow == wiring.Out else inner.eq(outer)
        m.d.comb += [engine.window_base.eq(0), engine.window_size.eq(memory.size),
                     memory.error_base.eq(0), memory.error_size.eq(0),
                     memory.read_latency.eq(self.read_latency), memory.write_latency.eq(self.write_latency)]
        return m
