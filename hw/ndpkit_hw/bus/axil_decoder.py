"""AXI4-Lite address decoder: one master (BAR0), N register blocks.

``regions`` is a list of ``(base, size)`` with ``size`` a power of two and ``base``
aligned to it; port ``m<i>`` receives the offset within region ``i``.  An address
in no region answers DECERR (reads return 0).  One write and one read are in
flight at a time, which is what a register interface needs and keeps every
response trivially in order.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.codes import AxiResp
from ndpkit_hw.bus.axi import AXI4LiteSignature

__all__ = ["AxiLiteDecoder"]


class AxiLiteDecoder(wiring.Component):
    def __init__(self, *, addr_width: int, regions):
        self.regions = [(int(base), int(size)) for base, size in regions]
        if not self.regions:
            raise ValueError("the decoder needs at least one region")
        spans = []
        for base, size in self.regions:
            if size < 4 or size & (size - 1) or base % size:
                raise ValueError(f"region {base:#x}+{size:#x}: size must be a power of two and base aligned to it")
            if base + size > 2 ** addr_width:
                raise ValueError(f"region {base:#x}+{size:#x} is outside {addr_width} address bits")
            spans.append((base, base + size))
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:]):
            if start < end:
                raise ValueError("decoder regions overlap")
        self.addr_width = addr_width
        members = {"bus": In(AXI4LiteSignature(addr_width=addr_width))}
        for i, (_, size) in enumerate(self.regions):
            members[f"m{i}"] = Out(AXI4LiteSignature(addr_width=max(2, (size - 1).bit_length())))
        super().__init__(members)

    def _decode(self, m: Module, addr, name: str):
        """Registered-in address -> (hit, index) combinational decode."""
        hit = Signal(name=f"{name}_hit")
        index = Signal(range(len(self.regions)), name=f"{name}_index")
        for i, (base, size) in enumerate(self.regions):
            inside = (addr < base + size) if base == 0 else ((addr >= base) & (addr < base + size))
            with m.If(inside):
                m.d.comb += [hit.eq(1), index.eq(i)]
        return hit, index

    def _outs(self):
        return [getattr(self, f"m{i}") for i in range(len(self.regions))]

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        outs = self._outs()

        # ---- writes ---------------------------------------------------------------
        aw_addr = Signal(self.addr_width)
        w_data, w_strb = Signal(32), Signal(4)
        aw_sent, w_sent = Signal(), Signal()
        w_hit, w_index = self._decode(m, aw_addr, "write")
        with m.FSM(name="write"):
            aw_have, w_have = Signal(), Signal()
            with m.State("COLLECT"):
                m.d.comb += [bus.awready.eq(~aw_have), bus.wready.eq(~w_have)]
                with m.If(bus.awvalid & ~aw_have):
                    m.d.sync += [aw_have.eq(1), aw_addr.eq(bus.awaddr)]
                with m.If(bus.wvalid & ~w_have):
                    m.d.sync += [w_have.eq(1), w_data.eq(bus.wdata), w_strb.eq(bus.wstrb)]
                with m.If(aw_have & w_have):
                    m.d.sync += [aw_have.eq(0), w_have.eq(0), aw_sent.eq(0), w_sent.eq(0)]
                    with m.If(w_hit):
                        m.next = "FORWARD"
                    with m.Else():
                        m.next = "DECERR"
            with m.State("FORWARD"):
                for i, (base, _), port in zip(range(len(outs)), self.regions, outs):
                    with m.If(w_index == i):
                        m.d.comb += [
                            port.awvalid.eq(~aw_sent), port.awaddr.eq(aw_addr - base),
                            port.wvalid.eq(~w_sent), port.wdata.eq(w_data), port.wstrb.eq(w_strb),
                        ]
                        with m.If(port.awvalid & port.awready):
                            m.d.sync += aw_sent.eq(1)
                        with m.If(port.wvalid & port.wready):
                            m.d.sync += w_sent.eq(1)
                        m.d.comb += [bus.bvalid.eq(port.bvalid), bus.bresp.eq(port.bresp),
                                     port.bready.eq(bus.bready)]
                        with m.If(port.bvalid & bus.bready):
                            m.next = "COLLECT"
            with m.State("DECERR"):
                m.d.comb += [bus.bvalid.eq(1), bus.bresp.eq(AxiResp.DECERR)]
                with m.If(bus.bready):
                    m.next = "COLLECT"

        # ---- reads ----------------------------------------------------------------
        ar_addr = Signal(self.addr_width)
        ar_sent = Signal()
        r_hit, r_index = self._decode(m, ar_addr, "read")
        with m.FSM(name="read"):
            with m.State("IDLE"):
                m.d.comb += bus.arready.eq(1)
                with m.If(bus.arvalid):
                    m.d.sync += [ar_addr.eq(bus.araddr), ar_sent.eq(0)]
                    m.next = "DECODE"
            with m.State("DECODE"):
                with m.If(r_hit):
                    m.next = "FORWARD"
                with m.Else():
                    m.next = "DECERR"
            with m.State("FORWARD"):
                for i, (base, _), port in zip(range(len(outs)), self.regions, outs):
                    with m.If(r_index == i):
                        m.d.comb += [port.arvalid.eq(~ar_sent), port.araddr.eq(ar_addr - base)]
                        with m.If(port.arvalid & port.arready):
                            m.d.sync += ar_sent.eq(1)
                        m.d.comb += [bus.rvalid.eq(port.rvalid), bus.rdata.eq(port.rdata),
                                     bus.rresp.eq(port.rresp), port.rready.eq(bus.rready)]
                        with m.If(port.rvalid & bus.rready):
                            m.next = "IDLE"
            with m.State("DECERR"):
                m.d.comb += [bus.rvalid.eq(1), bus.rdata.eq(0), bus.rresp.eq(AxiResp.DECERR)]
                with m.If(bus.rready):
                    m.next = "IDLE"
        return m
