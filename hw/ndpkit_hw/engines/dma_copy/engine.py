"""``dma_copy``: memory-to-memory copy and pattern fill, the first engine on the shell.

Command (:data:`ndpkit_spec.engines.dma_copy.BLOCK` arguments): ``op`` (0 copy, 1 fill),
``src``, ``dst``, ``length``, ``pattern``.  Checked before any bus traffic, in this
order (the first failing check is the completion's error code, and nothing is read
or written): ``op`` known (BAD_OPCODE); the destination, then for a copy the
source, obey the transfer rule of :mod:`ndpkit_hw.bus.dma` inside the card-memory
window (ZERO_LENGTH, UNALIGNED, OUT_OF_WINDOW); a copy's ranges do not overlap
(OVERLAP).  An accepted command streams the burst reader's words into the burst
writer (copy) or writes ``pattern`` repeated (fill); an AXI error on any beat is
the completion's code.  The golden model is :mod:`ndpkit.engines.dma_copy.golden`.

One AXI4 master: the reader owns AR/R (ID 0), the writer AW/W/B (ID 1), so the
two directions run concurrently without arbitration.  Two commands may be in
flight (the next one's reads overlap the previous one's last writes, hiding the
memory latency between queued commands); completions stay in command order, and a
copy that reads what the command before it writes waits for that command.  The
completion's byte counts are what the accepted command moved (every burst of an
accepted command runs, even after a bus error); a rejected command reports 0.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal, Mux
from amaranth.lib import data, fifo, wiring

from ndpkit_spec.codes import ErrorCode
from ndpkit_spec.engines.dma_copy import BLOCK as DMA_COPY, ENGINE, OP_COPY, OP_FILL
from ndpkit_hw.bus.axi import READ_MEMBERS, WRITE_MEMBERS, connect_members
from ndpkit_hw.bus.dma import BurstReader, BurstWriter, Transfer
from ndpkit_hw.engines.skeleton import CommandChecks
from ndpkit_hw.shell.engine_frontend import command_layout, engine_members

__all__ = ["DmaCopy", "OP_COPY", "OP_FILL"]

MAX_IN_FLIGHT = ENGINE.max_in_flight        # commands in flight (the registry's figure)


class DmaCopy(wiring.Component):
    max_in_flight = MAX_IN_FLIGHT
    def __init__(self, *, addr_width: int = 32, data_width: int = 512, id_width: int = 1,
                 max_burst_bytes: int = 4096, max_outstanding: int = 8):
        self.addr_width, self.data_width = addr_width, data_width
        dma = dict(addr_width=addr_width, data_width=data_width, id_width=id_width,
                   max_burst_bytes=max_burst_bytes, max_outstanding=max_outstanding)
        self.reader = BurstReader(axi_id=0, **dma)
        self.writer = BurstWriter(axi_id=1 % (1 << id_width), **dma)
        super().__init__(engine_members(DMA_COPY, addr_width=addr_width, data_width=data_width,
                                        id_width=id_width))

    def elaborate(self, platform):
        m = Module()
        m.submodules.reader = reader = self.reader
        m.submodules.writer = writer = self.writer
        connect_members(m, reader.bus, self.bus, READ_MEMBERS)
        connect_members(m, writer.bus, self.bus, WRITE_MEMBERS)
        for engine in (reader, writer):
            m.d.comb += [engine.window_base.eq(self.window_base), engine.window_size.eq(self.window_size)]

        cmd = Signal(command_layout(DMA_COPY))
        data_bytes = self.data_width // 8
        word_shift = data_bytes.bit_length() - 1
        is_copy = cmd.op == OP_COPY
        checks = CommandChecks(m, self, word_bytes=data_bytes)
        checks.require(cmd.op > OP_FILL, ErrorCode.BAD_OPCODE)
        checks.ranges({"dst": Transfer(cmd.dst, cmd.length), "src": Transfer(cmd.src, cmd.length)},
                      active={"src": is_copy})
        checks.disjoint(["dst", "src"])
        check = checks.code()

        # Commands in flight, oldest first: at most two, so the next command's reads
        # start while the previous one's last writes drain.
        flight_layout = data.StructLayout({"tag": 16, "error": 4, "copy": 1, "length": 32})
        m.submodules.in_flight = in_flight = fifo.SyncFIFO(width=flight_layout.size, depth=MAX_IN_FLIGHT)
        # What the writer's data comes from, one entry per writer command.
        source_layout = data.StructLayout({"copy": 1, "pattern": 32, "last_beat": 32})
        m.submodules.sources = sources = fifo.SyncFIFO(width=source_layout.size, depth=MAX_IN_FLIGHT)
        # Read-after-write across commands: a copy whose source overlaps the destination
        # of the command still in flight waits for it (writes to one ID land in order,
        # and a writer only writes data it has already read, so no other hazard exists).
        # (registered: the flight queue only drains meanwhile, so a stale verdict only waits)
        last_dst, last_end = Signal(self.addr_width), Signal.like(checks.end("dst"))
        raw_hazard = Signal()
        m.d.sync += raw_hazard.eq((in_flight.r_level != 0) & is_copy & (cmd.src < last_end) &
                                  (last_dst < checks.end("src")))

        flight_in = Signal(flight_layout)
        source_in = Signal(source_layout)
        m.d.comb += [flight_in.tag.eq(cmd.tag), flight_in.copy.eq(is_copy), flight_in.length.eq(cmd.length),
                     in_flight.w_data.eq(flight_in),
                     source_in.copy.eq(is_copy), source_in.pattern.eq(cmd.pattern),
                     source_in.last_beat.eq((cmd.length >> word_shift) - 1),
                     sources.w_data.eq(source_in)]

        read_sent, write_sent = Signal(), Signal()
        with m.FSM(name="intake"):
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(in_flight.w_level < MAX_IN_FLIGHT)
                with m.If(self.cmd.valid & self.cmd.ready):
                    m.d.sync += [cmd.eq(self.cmd.payload), checks.restart()]
                    m.next = "SETTLE"
            with m.State("SETTLE"):             # the checks run from registers
                with m.If(checks.settled):
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.d.sync += [read_sent.eq(~is_copy), write_sent.eq(0)]
                with m.If(check != 0):
                    # rejected: completes in order with its code, moves nothing
                    m.d.comb += [flight_in.error.eq(check), flight_in.length.eq(0), in_flight.w_en.eq(1)]
                    m.next = "IDLE"
                with m.Elif(~raw_hazard):
                    m.next = "ISSUE"
            with m.State("ISSUE"):
                m.d.comb += [
                    reader.cmd.valid.eq(~read_sent),
                    reader.cmd.payload.addr.eq(cmd.src),
                    reader.cmd.payload.length.eq(cmd.length),
                    writer.cmd.valid.eq(~write_sent),
                    writer.cmd.payload.addr.eq(cmd.dst),
                    writer.cmd.payload.length.eq(cmd.length),
                    sources.w_en.eq(writer.cmd.valid & writer.cmd.ready),
                ]
                with m.If(reader.cmd.valid & reader.cmd.ready):
                    m.d.sync += read_sent.eq(1)
                with m.If(writer.cmd.valid & writer.cmd.ready):
                    m.d.sync += write_sent.eq(1)
                with m.If((read_sent | reader.cmd.ready) & (write_sent | writer.cmd.ready)):
                    m.d.comb += in_flight.w_en.eq(1)
                    m.d.sync += [last_dst.eq(cmd.dst), last_end.eq(checks.end("dst"))]
                    m.next = "IDLE"

        # the writer's data: the reader's words (copy) or the pattern (fill)
        source = data.View(source_layout, sources.r_data)
        beat = Signal(32)
        m.d.comb += [
            writer.data.valid.eq(sources.r_rdy & Mux(source.copy, reader.data.valid, 1)),
            writer.data.payload.data.eq(Mux(source.copy, reader.data.payload.data,
                                            source.pattern.replicate(self.data_width // 32))),
            writer.data.payload.strb.eq(-1),
            reader.data.ready.eq(sources.r_rdy & source.copy & writer.data.ready),
        ]
        with m.If(writer.data.valid & writer.data.ready):
            with m.If(beat == source.last_beat):     # (not beat + 1 == beats: an adder before a compare)
                m.d.comb += sources.r_en.eq(1)
                m.d.sync += beat.eq(0)
            with m.Else():
                m.d.sync += beat.eq(beat + 1)

        # retire in order: a rejected command at once, an accepted one when its read
        # (copy) and write statuses are in
        head = data.View(flight_layout, in_flight.r_data)
        read_done, write_done = Signal(), Signal()
        read_status, write_status = Signal(4), Signal(4)
        accepted = in_flight.r_rdy & (head.error == 0)
        m.d.comb += [reader.status.ready.eq(accepted & head.copy & ~read_done),
                     writer.status.ready.eq(accepted & ~write_done)]
        with m.If(reader.status.valid & reader.status.ready):
            m.d.sync += [read_done.eq(1), read_status.eq(reader.status.payload.error)]
        with m.If(writer.status.valid & writer.status.ready):
            m.d.sync += [write_done.eq(1), write_status.eq(writer.status.payload.error)]
        m.d.comb += [
            self.cpl.valid.eq(in_flight.r_rdy & ((head.error != 0) | ((read_done | ~head.copy) & write_done))),
            self.cpl.payload.tag.eq(head.tag),
            self.cpl.payload.error.eq(Mux(head.error != 0, head.error,
                                          Mux(read_status != 0, read_status, write_status))),
            self.cpl.payload.bytes_read.eq(Mux(head.copy, head.length, 0)),
            self.cpl.payload.bytes_written.eq(head.length),
            in_flight.r_en.eq(self.cpl.valid & self.cpl.ready),
        ]
        with m.If(self.cpl.valid & self.cpl.ready):
            m.d.sync += [read_done.eq(0), write_done.eq(0), read_status.eq(0), write_status.eq(0)]
        return m
