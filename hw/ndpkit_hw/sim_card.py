"""A simulated card: the :class:`~ndpkit_hw.device.Device` with the RTL memory model
standing in for the memory controller.  The sim transport's device server runs this
top level in Verilator.

With ``memory_ports=P`` > 1 there is one memory model per port (``memory0`` ..
``memory{P-1}``), each holding its region of card memory with its own request queue,
latency and bandwidth, as each HBM pseudo-channel has its own controller; with one
port the model is ``memory``.

``mem_timing`` names a DRAM preset (:data:`ndpkit_spec.dram.PRESETS`: ``hbm2_pc``,
``ddr4_2400``) for every memory model: banks, rows, refresh and one data bus, at the
engines' clock ``clock_mhz`` behind a clock crossing of :data:`CROSSING_CYCLES` (the
board designs put the engines in their own clock domain); ``None`` keeps the ideal
memory (fixed latency, each direction at full rate).

Extra ports over the device's: ``mem_read_latency`` / ``mem_write_latency`` (cycles,
set at run time) and ``mem_error_base`` / ``mem_error_size`` (a range the memory
answers with SLVERR, for fault injection).
"""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from ndpkit_hw.mem.dram import CROSSING_CYCLES
from ndpkit_hw.mem.memory_model import AxiMemoryModel
from ndpkit_hw.device import Device
from ndpkit_spec.dram import IDEAL, preset

__all__ = ["SimCard"]


class SimCard(wiring.Component):
    def __init__(self, *, mem_size: int = 16 << 20, mem_bytes_per_cycle: int | None = None,
                 mem_max_outstanding: int | None = None, mem_timing: str | None = None, **device_params):
        self.device = Device(mem_size=mem_size, **device_params)
        d = self.device
        timing = None if mem_timing in (None, IDEAL) else preset(mem_timing)
        self.mem_timing = timing
        self.memories = [AxiMemoryModel(size=d.region(p)[1], base=d.region(p)[0], addr_width=d.addr_width,
                                        data_width=d.data_width, id_width=d.mem_id_width,
                                        max_outstanding=mem_max_outstanding, bytes_per_cycle=mem_bytes_per_cycle,
                                        latency_ports=True, dram=timing, engine_mhz=d.clock_mhz,
                                        crossing=CROSSING_CYCLES)
                         for p in range(d.memory_ports)]
        #: submodule name of each memory model (the device server's backdoors find them by it)
        self.memory_names = ["memory"] if d.memory_ports == 1 else [f"memory{p}" for p in range(d.memory_ports)]
        members = {name: value for name, value in d.signature.members.items() if name not in d.memory_port_names}
        members.update({
            "mem_read_latency": In(16), "mem_write_latency": In(16),
            "mem_error_base": In(d.addr_width), "mem_error_size": In(d.addr_width + 1),
            "mem_error_decerr": In(1),
        })
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.device = device = self.device
        wiring.connect(m, wiring.flipped(self.s_axil), device.s_axil)
        wiring.connect(m, wiring.flipped(self.s_axi), device.s_axi)
        m.d.comb += [self.usr_irq_req.eq(device.usr_irq_req), device.usr_irq_ack.eq(self.usr_irq_ack)]
        for name, port_name, memory in zip(self.memory_names, device.memory_port_names, self.memories):
            m.submodules[name] = memory
            wiring.connect(m, getattr(device, port_name), memory.bus)
            m.d.comb += [
                memory.read_latency.eq(self.mem_read_latency),
                memory.write_latency.eq(self.mem_write_latency),
                memory.error_base.eq(self.mem_error_base),
                memory.error_size.eq(self.mem_error_size),
                memory.error_decerr.eq(self.mem_error_decerr),
            ]
        return m
