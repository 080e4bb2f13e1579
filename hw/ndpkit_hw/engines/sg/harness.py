"""The scatter-gather unit with card memory behind it: its link-side ``req``/``resp``
streams and counters as ports, the RTL memory model (run-time latencies, optional
stalls) on its memory side, window = the memory.  For the unit's bench.  ``memory``
names a DRAM preset (``ndpkit_spec.dram.PRESETS``) for the memory model, the unit at
``engine_mhz`` behind the card's clock crossing (the latency ports then do nothing)."""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from ndpkit_hw.mem.dram import CROSSING_CYCLES
from ndpkit_hw.mem.memory_model import AxiMemoryModel
from ndpkit_spec.dram import IDEAL, preset
from ndpkit_hw.engines.sg.unit import SgUnit

__all__ = ["SgHarness"]


class SgHarness(wiring.Component):
    def __init__(self, unit: SgUnit, *, mem_size: int = 1 << 20, stall_per_256: int = 0, seed: int = 1,
                 max_outstanding: int | None = None, memory: str | None = None, engine_mhz: float = 200.0):
        self.unit = unit
        timing = None if memory in (None, IDEAL) else preset(memory)
        self.memory = AxiMemoryModel(size=mem_size, addr_width=unit.addr_width, data_width=512,
                                     id_width=unit.id_width, stall_per_256=stall_per_256, seed=seed,
                                     latency_ports=True, max_outstanding=max_outstanding, dram=timing,
                                     engine_mhz=engine_mhz, crossing=CROSSING_CYCLES)
        members = {name: unit.signature.members[name] for name in ("req", "resp", "clear", "counters")}
        super().__init__({**members, "read_latency": In(16), "write_latency": In(16),
                          "error_base": In(unit.addr_width), "error_size": In(unit.addr_width + 1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.unit = unit = self.unit
        m.submodules.memory = memory = self.memory
        wiring.connect(m, unit.bus, memory.bus)
        wiring.connect(m, wiring.flipped(self.req), unit.req)
        wiring.connect(m, unit.resp, wiring.flipped(self.resp))
        m.d.comb += [unit.window_base.eq(0), unit.window_size.eq(memory.size), unit.clear.eq(self.clear),
                     self.counters.eq(unit.counters),
                     memory.error_base.eq(self.error_base), memory.error_size.eq(self.error_size),
                     memory.error_decerr.eq(0),
                     memory.read_latency.eq(self.read_latency), memory.write_latency.eq(self.write_latency)]
        return m
