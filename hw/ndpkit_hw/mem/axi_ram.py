"""AXI4 slave on block RAM: card memory for a board with no DRAM controller in the
build (the ECP5 card), synthesisable (unlike the simulation memory model).

INCR bursts of full-width beats, reads and writes independent (one read port, one
write port with byte enables), one beat per cycle each way.  A burst starting
outside ``[base, base + size)`` answers DECERR on every beat and writes nothing; a
burst running past the end wraps inside the RAM (the device's windows keep engines
inside card memory; the host side checks its own ranges).
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal, Const, Mux
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In

from ndpkit_spec.codes import AxiResp
from ndpkit_hw.bus.axi import AXI4Signature, log2_exact

__all__ = ["AxiRam"]


class AxiRam(wiring.Component):
    def __init__(self, *, size: int, base: int = 0, addr_width: int = 32, data_width: int = 32, id_width: int = 4):
        log2_exact(size, "size")
        self.size, self.base, self.data_width = size, base, data_width
        self.word_bytes = data_width // 8
        self.shift = log2_exact(self.word_bytes, "data_width/8")
        if size < self.word_bytes:
            raise ValueError("size must hold at least one bus word")
        self.depth = size // self.word_bytes
        super().__init__({"bus": In(AXI4Signature(addr_width=addr_width, data_width=data_width,
                                                   id_width=id_width))})

    def _inside(self, address):
        return (address >= self.base) & (address < self.base + self.size)

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        m.submodules.storage = storage = Memory(shape=self.data_width, depth=self.depth, init=[])
        read = storage.read_port()
        write = storage.write_port(granularity=8)
        index_bits = (self.depth - 1).bit_length()

        def index(address):
            return (address - self.base)[self.shift:self.shift + index_bits] if index_bits else Const(0)

        # ---- reads: the port reads ahead one beat; R holds while stalled (en low)
        r_index, r_left, r_id, r_bad = Signal(max(1, index_bits)), Signal(9), Signal.like(bus.arid), Signal()
        r_busy = Signal()
        advance = ~bus.rvalid | bus.rready
        m.d.comb += [read.en.eq(advance), read.addr.eq(r_index), bus.rdata.eq(read.data), bus.arready.eq(~r_busy)]
        with m.If(bus.arvalid & bus.arready):
            m.d.sync += [r_busy.eq(1), r_index.eq(index(bus.araddr)), r_left.eq(bus.arlen + 1), r_id.eq(bus.arid),
                         r_bad.eq(~self._inside(bus.araddr))]
        with m.If(advance):
            with m.If(r_busy & (r_left != 0)):
                # ID and response travel with the beat (the next AR may arrive meanwhile)
                m.d.sync += [bus.rvalid.eq(1), bus.rlast.eq(r_left == 1), bus.rid.eq(r_id),
                             bus.rresp.eq(Mux(r_bad, AxiResp.DECERR, AxiResp.OKAY)), r_index.eq(r_index + 1),
                             r_left.eq(r_left - 1)]
            with m.Else():
                m.d.sync += [bus.rvalid.eq(0), bus.rlast.eq(0)]
            with m.If(r_busy & (r_left == 1)):
                m.d.sync += r_busy.eq(0)

        # ---- writes: AW, then its W beats straight into the port, then B
        w_index, w_id, w_bad, w_busy = Signal(max(1, index_bits)), Signal.like(bus.awid), Signal(), Signal()
        m.d.comb += [bus.awready.eq(~w_busy & ~bus.bvalid), bus.wready.eq(w_busy), bus.bid.eq(w_id),
                     write.addr.eq(w_index), write.data.eq(bus.wdata)]
        with m.If(bus.awvalid & bus.awready):
            m.d.sync += [w_busy.eq(1), w_index.eq(index(bus.awaddr)), w_id.eq(bus.awid),
                         w_bad.eq(~self._inside(bus.awaddr))]
        with m.If(bus.wvalid & bus.wready):
            m.d.comb += write.en.eq(Mux(w_bad, 0, bus.wstrb))
            m.d.sync += w_index.eq(w_index + 1)
            with m.If(bus.wlast):
                m.d.sync += [w_busy.eq(0), bus.bvalid.eq(1), bus.bresp.eq(w_bad * AxiResp.DECERR)]
        with m.If(bus.bvalid & bus.bready):
            m.d.sync += bus.bvalid.eq(0)
        return m
