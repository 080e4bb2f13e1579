"""AXI4-Lite CSR block generated from a :class:`ndpkit_spec.regs.RegisterBlock`.

Ports, per field ``<reg>_<field>``: RW -> ``Out`` (the stored value); RO -> ``In``;
W1C -> ``Out`` (the sticky bits) plus ``In`` ``<reg>_<field>_set`` pulses (set wins)
and ``In`` ``<reg>_<field>_clear`` pulses (a clear from hardware); W1S ->
``Out`` one-cycle pulse.  Offsets are decoded within ``block.size``; an offset with
no register answers SLVERR (reads return 0, writes change nothing).  WSTRB is
honoured byte by byte.  One write and one read are handled at a time; a read
answers the cycle after its address is accepted.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal, Cat, Const
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.codes import AxiResp
from ndpkit_spec.regs import Access, RegisterBlock
from ndpkit_hw.bus.axi import AXI4LiteSignature

__all__ = ["CSRBlock"]


class CSRBlock(wiring.Component):
    def __init__(self, block: RegisterBlock):
        self.block = block
        members = {"bus": In(AXI4LiteSignature(addr_width=block.addr_width))}
        for reg, f, port in block.port_names():
            if f.access is Access.RO:
                members[port] = In(f.width)
            elif f.access is Access.W1C:
                members[port] = Out(f.width, init=f.reset)
                members[f"{port}_set"] = In(f.width)
                members[f"{port}_clear"] = In(f.width)
            elif f.access is Access.RW:
                members[port] = Out(f.width, init=f.reset)
            else:
                members[port] = Out(f.width)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        block = self.block

        # ---- write: take AW and W in either order, then apply and answer on B ----
        aw_have, w_have = Signal(), Signal()
        aw_addr = Signal(block.addr_width)
        w_data, w_strb = Signal(32), Signal(4)
        m.d.comb += [bus.awready.eq(~aw_have & ~bus.bvalid), bus.wready.eq(~w_have & ~bus.bvalid)]
        with m.If(bus.awvalid & bus.awready):
            m.d.sync += [aw_have.eq(1), aw_addr.eq(bus.awaddr)]
        with m.If(bus.wvalid & bus.wready):
            m.d.sync += [w_have.eq(1), w_data.eq(bus.wdata), w_strb.eq(bus.wstrb)]
        do_write = Signal()
        m.d.comb += do_write.eq(aw_have & w_have)
        byte_mask = Signal(32)
        m.d.comb += byte_mask.eq(Cat(*[w_strb[i].replicate(8) for i in range(4)]))
        written = w_data & byte_mask
        with m.If(do_write):
            m.d.sync += [aw_have.eq(0), w_have.eq(0), bus.bvalid.eq(1), bus.bresp.eq(AxiResp.SLVERR)]
        with m.If(bus.bvalid & bus.bready):
            m.d.sync += bus.bvalid.eq(0)

        write_hit = {}
        for reg in block.registers:
            hit = Signal(name=f"write_{reg.name}")
            m.d.comb += hit.eq(do_write & ((aw_addr >> 2) == reg.offset >> 2))
            write_hit[reg.name] = hit
            with m.If(hit):
                m.d.sync += bus.bresp.eq(AxiResp.OKAY)

        for reg, f, port in block.port_names():
            value = getattr(self, port)
            bits = written[f.lsb:f.lsb + f.width]
            mask = byte_mask[f.lsb:f.lsb + f.width]
            hit = write_hit[reg.name]
            if f.access is Access.RW:
                with m.If(hit):
                    m.d.sync += value.eq((value & ~mask) | bits)
            elif f.access is Access.W1C:
                setter = getattr(self, f"{port}_set")
                clear = Signal(f.width, name=f"{port}_bus_clear")
                m.d.comb += clear.eq(getattr(self, f"{port}_clear"))
                with m.If(hit):
                    m.d.comb += clear.eq(bits | getattr(self, f"{port}_clear"))
                m.d.sync += value.eq((value & ~clear) | setter)
            elif f.access is Access.W1S:
                m.d.comb += value.eq(0)
                with m.If(hit):
                    m.d.comb += value.eq(bits)

        # ---- read ---------------------------------------------------------------
        m.d.comb += bus.arready.eq(~bus.rvalid)
        with m.If(bus.arvalid & bus.arready):
            m.d.sync += [bus.rvalid.eq(1), bus.rdata.eq(0), bus.rresp.eq(AxiResp.SLVERR)]
            with m.Switch(bus.araddr >> 2):
                for reg in block.registers:
                    with m.Case(reg.offset >> 2):
                        parts = Const(0, 32)
                        for f in reg.fields:
                            if f.access is Access.W1S:
                                continue
                            parts = parts | (getattr(self, f"{reg.name}_{f.name}") << f.lsb)
                        m.d.sync += [bus.rdata.eq(parts), bus.rresp.eq(AxiResp.OKAY)]
        with m.Elif(bus.rvalid & bus.rready):
            m.d.sync += bus.rvalid.eq(0)
        return m
