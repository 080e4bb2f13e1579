"""The foundation's demo device: a memory-to-memory copy through every bus block.

``s_axil`` (AXI4-Lite, BAR0-style) -> generated CSR block (``COPY_DEMO``) -> a small
controller that validates the command and starts a ``BurstReader`` and a
``BurstWriter``; the reader's words stream into the writer; both engines share the
card memory (``AxiMemoryModel``) through an ``AxiInterconnect``.  ``irq`` is high
while ``irq.done`` is set.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal, Mux
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ndpkit.regs.blocks import COPY_DEMO, NDPKIT_MAGIC
from .bus.axi import AXI4LiteSignature, READ_MEMBERS, WRITE_MEMBERS, connect_members
from .bus.dma import BurstReader, BurstWriter, transfer_error
from .bus.interconnect import AxiInterconnect
from .mem.memory_model import AxiMemoryModel
from .shell.csr import CSRBlock

__all__ = ["CopyDemo"]


class CopyDemo(wiring.Component):
    def __init__(self, *, data_width: int = 512, mem_size: int = 1 << 20, read_latency: int = 64,
                 write_latency: int = 32, max_burst_bytes: int = 4096, max_outstanding: int = 8):
        self.data_width, self.mem_size = data_width, mem_size
        dma = dict(addr_width=32, data_width=data_width, id_width=2, max_burst_bytes=max_burst_bytes,
                   max_outstanding=max_outstanding)
        self.reader = BurstReader(axi_id=0, **dma)
        self.writer = BurstWriter(axi_id=1, **dma)
        self.interconnect = AxiInterconnect(num_masters=2, addr_width=32, data_width=data_width, id_width=2)
        self.memory = AxiMemoryModel(size=mem_size, addr_width=32, data_width=data_width, id_width=3,
                                     read_latency=read_latency, write_latency=write_latency)
        self.csr = CSRBlock(COPY_DEMO)
        super().__init__({
            "s_axil": In(AXI4LiteSignature(addr_width=COPY_DEMO.addr_width)),
            "irq": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.reader = reader = self.reader
        m.submodules.writer = writer = self.writer
        m.submodules.interconnect = interconnect = self.interconnect
        m.submodules.memory = memory = self.memory
        m.submodules.csr = csr = self.csr

        wiring.connect(m, wiring.flipped(self.s_axil), csr.bus)
        connect_members(m, reader.bus, interconnect.s0, READ_MEMBERS)
        connect_members(m, writer.bus, interconnect.s1, WRITE_MEMBERS)
        # unused channels of the shared ports stay idle
        m.d.comb += [interconnect.s0.awvalid.eq(0), interconnect.s0.wvalid.eq(0),
                     interconnect.s0.bready.eq(1), interconnect.s1.arvalid.eq(0),
                     interconnect.s1.rready.eq(1)]
        wiring.connect(m, interconnect.m, memory.bus)
        m.d.comb += [memory.error_base.eq(0), memory.error_size.eq(0)]

        # the reader's words go straight into the writer
        m.d.comb += [
            writer.data.valid.eq(reader.data.valid),
            writer.data.payload.data.eq(reader.data.payload.data),
            writer.data.payload.strb.eq(-1),
            reader.data.ready.eq(writer.data.ready),
        ]
        for engine in (reader, writer):
            m.d.comb += [engine.window_base.eq(0), engine.window_size.eq(self.mem_size)]

        # ---- controller -------------------------------------------------------------
        busy = Signal()
        error = Signal(4)
        cycles = Signal(32)
        clear = Signal()
        m.d.comb += [reader.clear_counters.eq(clear), writer.clear_counters.eq(clear)]
        src_error = transfer_error(m, self.data_width // 8, 32,
                                   _Transfer(csr.src_value, csr.length_value), 0, self.mem_size)
        dst_error = transfer_error(m, self.data_width // 8, 32,
                                   _Transfer(csr.dst_value, csr.length_value), 0, self.mem_size)
        read_sent, write_sent = Signal(), Signal()
        read_done, write_done = Signal(), Signal()
        read_status, write_status = Signal(4), Signal(4)
        finish = Signal()
        finish_error = Signal(4)
        with m.FSM():
            with m.State("IDLE"):
                with m.If(csr.ctrl_start):
                    m.d.comb += clear.eq(1)
                    m.d.sync += [busy.eq(1), cycles.eq(0), read_sent.eq(0), write_sent.eq(0),
                                 read_done.eq(0), write_done.eq(0)]
                    with m.If(src_error != 0):
                        m.d.comb += [finish.eq(1), finish_error.eq(src_error)]
                    with m.Elif(dst_error != 0):
                        m.d.comb += [finish.eq(1), finish_error.eq(dst_error)]
                    with m.Else():
                        m.next = "RUN"
            with m.State("RUN"):
                m.d.sync += cycles.eq(cycles + 1)
                m.d.comb += [
                    reader.cmd.valid.eq(~read_sent),
                    reader.cmd.payload.addr.eq(csr.src_value),
                    reader.cmd.payload.length.eq(csr.length_value),
                    writer.cmd.valid.eq(~write_sent),
                    writer.cmd.payload.addr.eq(csr.dst_value),
                    writer.cmd.payload.length.eq(csr.length_value),
                    reader.status.ready.eq(~read_done),
                    writer.status.ready.eq(~write_done),
                ]
                with m.If(reader.cmd.valid & reader.cmd.ready):
                    m.d.sync += read_sent.eq(1)
                with m.If(writer.cmd.valid & writer.cmd.ready):
                    m.d.sync += write_sent.eq(1)
                with m.If(reader.status.valid & reader.status.ready):
                    m.d.sync += [read_done.eq(1), read_status.eq(reader.status.payload.error)]
                with m.If(writer.status.valid & writer.status.ready):
                    m.d.sync += [write_done.eq(1), write_status.eq(writer.status.payload.error)]
                with m.If(read_done & write_done):
                    m.d.comb += [finish.eq(1),
                                 finish_error.eq(Mux(read_status != 0, read_status, write_status))]
                    m.next = "IDLE"
        with m.If(finish):
            m.d.sync += [busy.eq(0), error.eq(finish_error)]

        m.d.comb += [
            csr.id_value.eq(NDPKIT_MAGIC),
            csr.status_busy.eq(busy),
            csr.status_error.eq(error),
            csr.irq_done_set.eq(finish),
            csr.cycles_value.eq(cycles),
            csr.bytes_read_value.eq(reader.bytes_count),
            csr.bytes_written_value.eq(writer.bytes_count),
            self.irq.eq(csr.irq_done),
        ]
        return m


class _Transfer:
    """The two fields ``transfer_error`` reads, from plain signals."""

    def __init__(self, addr, length):
        self.addr, self.length = addr, length
