"""A simulated card: the :class:`~ndpkit_hw.device.Device` with the RTL memory model
standing in for the memory controller.  The sim transport's device server runs this
top level in Verilator.

Extra ports over the device's: ``mem_read_latency`` / ``mem_write_latency`` (cycles,
set at run time) and ``mem_error_base`` / ``mem_error_size`` (a range the memory
answers with SLVERR, for fault injection).
"""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from ndpkit_hw.mem.memory_model import AxiMemoryModel
from ndpkit_hw.device import Device

__all__ = ["SimCard"]


class SimCard(wiring.Component):
    def __init__(self, *, mem_size: int = 16 << 20, mem_bytes_per_cycle: int | None = None,
                 mem_max_outstanding: int = 16, **device_params):
        self.device = Device(mem_size=mem_size, **device_params)
        d = self.device
        self.memory = AxiMemoryModel(size=mem_size, base=d.mem_base, addr_width=d.addr_width,
                                     data_width=d.data_width, id_width=d.mem_id_width,
                                     max_outstanding=mem_max_outstanding, bytes_per_cycle=mem_bytes_per_cycle,
                                     latency_ports=True)
        members = {name: value for name, value in d.signature.members.items() if name != "m_axi_mem"}
        members.update({
            "mem_read_latency": In(16), "mem_write_latency": In(16),
            "mem_error_base": In(d.addr_width), "mem_error_size": In(d.addr_width + 1),
            "mem_error_decerr": In(1),
        })
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.device = device = self.device
        m.submodules.memory = memory = self.memory
        wiring.connect(m, wiring.flipped(self.s_axil), device.s_axil)
        wiring.connect(m, wiring.flipped(self.s_axi), device.s_axi)
        wiring.connect(m, device.m_axi_mem, memory.bus)
        m.d.comb += [
            self.usr_irq_req.eq(device.usr_irq_req),
            device.usr_irq_ack.eq(self.usr_irq_ack),
            memory.read_latency.eq(self.mem_read_latency),
            memory.write_latency.eq(self.mem_write_latency),
            memory.error_base.eq(self.mem_error_base),
            memory.error_size.eq(self.mem_error_size),
            memory.error_decerr.eq(self.mem_error_decerr),
        ]
        return m
