"""A card whose host link is a UART: the UART-AXI bridge, the device and block-RAM
card memory.  The ECP5 board build (:mod:`ndpkit_tools.impl.ecp5_build`) wraps it with the
clock and pins; the bench (``tb/shell/test_uart_card.py``) runs it in Verilator with
cocotbext-uart on the serial lines and the ndpkit driver on top.

Ports: ``rx`` (host -> card), ``tx`` (card -> host), ``irq`` (the device's
interrupt lines, e.g. for LEDs).
"""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.shell import IRQ_LINES
from ndpkit_hw.bus.axi import READ_MEMBERS, WRITE_MEMBERS, connect_members
from ndpkit_hw.mem.axi_ram import AxiRam
from ndpkit_hw.shell.uart_bridge import UartBridge
from ndpkit_hw.device import Device

__all__ = ["UartCard"]


class UartCard(wiring.Component):
    rx: In(1, init=1)
    tx: Out(1, init=1)
    irq: Out(IRQ_LINES)

    def __init__(self, *, divisor: int, mem_size: int = 64 << 10, **device_params):
        self.device = Device(mem_size=mem_size, **device_params)
        d = self.device
        self.bridge = UartBridge(divisor=divisor, data_width=d.data_width, addr_width=d.addr_width,
                                 id_width=len(d.s_axi.awid), reg_addr_width=len(d.s_axil.awaddr))
        self.memory = AxiRam(size=mem_size, base=d.mem_base, addr_width=d.addr_width, data_width=d.data_width,
                             id_width=d.mem_id_width)
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.submodules.device = device = self.device
        m.submodules.bridge = bridge = self.bridge
        m.submodules.memory = memory = self.memory
        m.d.comb += [bridge.rx.eq(self.rx), self.tx.eq(bridge.tx), self.irq.eq(device.usr_irq_req)]
        wiring.connect(m, bridge.regs, device.s_axil)
        wiring.connect(m, bridge.mem, device.s_axi)
        connect_members(m, device.m_axi_mem, memory.bus, READ_MEMBERS + WRITE_MEMBERS)
        return m
