"""``sg``: batches of scatter-gather requests through the memory-side unit.

Command (:data:`ndpkit_spec.engines.sg.BLOCK` arguments): ``op`` (0 read requests, 1 write
requests), ``table`` (``requests`` descriptors of 128 bytes, the layout of
:func:`ndpkit.engines.sg.golden.pack_descriptor`), ``out`` (reads: 64 bytes per request).
The golden model is :func:`ndpkit.engines.sg.golden.execute`.

Checked before any traffic, in order: ``op`` (BAD_OPCODE), ``requests`` (ZERO_LENGTH),
the table and (reads) ``out`` by the transfer rule, the two not overlapping.  Then
the burst reader streams the whole table (two bus words a descriptor); each
descriptor is checked as it arrives (its op of the command's direction, then the
unit's own checks, :func:`.unit.request_error`) and forwarded to the
:class:`~.unit.SgUnit` across its link model.  The first bad descriptor stops the
batch: nothing from it on is forwarded (the rest of the table is drained), its code
is the completion's, and for reads the burst writer fills the unexecuted requests'
``out`` entries with zeros, so ``out`` is always written whole.  Responses go to
``out`` in order.  Completion: bytes read = the table + 64 per column read by the
unit, bytes written = ``out`` + 64 per column written; ``aux`` = the link bytes.

Inside, a 2:1 interconnect shares the engine's one 512-bit AXI4 master between the
table reader / ``out`` writer and the unit (which reaches memory through it: the
unit stands where the memory controller is).
"""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring

from ndpkit_spec.codes import ErrorCode
from ndpkit_spec.engines.sg import DESCRIPTOR_BYTES, DEVICE_BANKS, DEVICE_ROW_BYTES, LINE, OP_READ, OP_WRITE
from ndpkit_spec.engines.sg import BLOCK as SG
from ndpkit_hw.bus.axi import READ_MEMBERS, WRITE_MEMBERS, connect_members
from ndpkit_hw.bus.dma import BurstReader, BurstWriter, Transfer, TransferGroup
from ndpkit_hw.bus.interconnect import AxiInterconnect
from ndpkit_hw.engines.skeleton import CommandChecks, CommandControl, CommandEngine
from ndpkit_hw.engines.sg.unit import MAX_OFFSETS, SgUnit, request_error, request_layout

__all__ = ["SgEngine"]


class SgEngine(CommandEngine):
    def __init__(self, *, addr_width: int = 32, data_width: int = 512, id_width: int = 2,
                 max_burst_bytes: int = 4096, max_outstanding: int = 8, link_bytes: int = 16,
                 row_bytes: int = DEVICE_ROW_BYTES, banks: int = DEVICE_BANKS):
        if data_width != 8 * LINE:
            raise ValueError(f"sg: data_width must be {8 * LINE} (a 64-byte DRAM column per beat), not {data_width}")
        if id_width < 2:
            raise ValueError("sg: id_width must be at least 2 (one bit selects the unit or the table streams)")
        super().__init__(SG, addr_width=addr_width, data_width=data_width, id_width=id_width)
        inner = id_width - 1
        dma = dict(addr_width=addr_width, data_width=data_width, id_width=inner, max_burst_bytes=max_burst_bytes,
                   max_outstanding=max_outstanding)
        self.reader = BurstReader(axi_id=0, **dma)
        self.writer = BurstWriter(axi_id=0, **dma)
        self.unit = SgUnit(addr_width=addr_width, id_width=inner, row_bytes=row_bytes, banks=banks,
                           link_bytes=link_bytes)
        self.xbar = AxiInterconnect(num_masters=2, addr_width=addr_width, data_width=data_width, id_width=inner)

    def elaborate(self, platform):
        m = Module()
        m.submodules.reader = reader = self.reader
        m.submodules.writer = writer = self.writer
        m.submodules.unit = unit = self.unit
        m.submodules.xbar = xbar = self.xbar
        connect_members(m, reader.bus, xbar.s0, READ_MEMBERS)
        connect_members(m, writer.bus, xbar.s0, WRITE_MEMBERS)
        wiring.connect(m, unit.bus, xbar.s1)
        wiring.connect(m, xbar.m, wiring.flipped(self.bus))
        for block in (reader, writer, unit):
            m.d.comb += [block.window_base.eq(self.window_base), block.window_size.eq(self.window_size)]

        ctl = CommandControl(m, self)
        cmd = ctl.cmd
        is_read = cmd.op == OP_READ
        table_len, out_len = Signal(40), Signal(40)
        m.d.comb += [table_len.eq(cmd.requests * DESCRIPTOR_BYTES), out_len.eq(cmd.requests * LINE)]
        table = Transfer(cmd.table, table_len[:32])
        out = Transfer(cmd.out, out_len[:32])
        checks = CommandChecks(m, self, word_bytes=LINE)
        checks.require(cmd.op > OP_WRITE, ErrorCode.BAD_OPCODE)
        checks.require(cmd.requests == 0, ErrorCode.ZERO_LENGTH)
        checks.ranges({"table": table, "out": out}, active={"out": is_read}, wide={"table": table_len, "out": out_len})
        checks.disjoint(["table", "out"])

        running = Signal()
        transfers = TransferGroup(m, {"table": reader, "out": writer}, {"table": table, "out": out}, running,
                                  enabled={"out": is_read})

        # descriptors: word 0 the header, word 1 the data
        second = Signal()
        header = Signal(8 * LINE)
        head_words = header.word_select
        request = Signal(request_layout(self.addr_width))
        m.d.comb += [request.op.eq(head_words(0, 32)[:2]), request.size.eq(head_words(0, 32)[4:8]),
                     request.count.eq(head_words(0, 32)[8:13]), request.address.eq(head_words(1, 32)),
                     request.data.eq(reader.data.payload.data)]
        for j in range(MAX_OFFSETS):
            m.d.comb += request.offsets[j].eq(header.word_select(4 + j, 16))
        # the header's verdict, registered: the data word waits a cycle after the header for
        # it (``checked``), so the checks are not on the path into the reader's ready
        bad, checked = Signal(4), Signal()
        unit_error = request_error(m, request, self.window_base, self.window_size, self.unit.row_bytes)
        m.d.sync += [bad.eq(Mux(request.op[0] != cmd.op[0], ErrorCode.BAD_FIELD, unit_error)), checked.eq(second)]
        stopped, stop_code = Signal(), Signal(4)
        sent, received, written = Signal(32), Signal(32), Signal(32)
        m.d.comb += unit.req.payload.eq(request)
        with m.If(running & reader.data.valid & (~second | checked)):
            with m.If(~second):
                m.d.comb += reader.data.ready.eq(1)
                m.d.sync += [header.eq(reader.data.payload.data), second.eq(1)]
            with m.Elif(stopped):
                m.d.comb += reader.data.ready.eq(1)                 # drain the rest of the table
                m.d.sync += second.eq(0)
            with m.Elif(bad != 0):
                m.d.comb += reader.data.ready.eq(1)
                m.d.sync += [second.eq(0), stopped.eq(1), stop_code.eq(bad)]
            with m.Else():
                m.d.comb += [unit.req.valid.eq(1), reader.data.ready.eq(unit.req.ready)]
                with m.If(unit.req.ready):
                    m.d.sync += [second.eq(0), sent.eq(sent + 1)]

        # responses in order: reads to `out`, then zeros for what a stop left unexecuted
        bus_error = Signal(4)
        pending = received != sent
        with m.If(is_read):
            m.d.comb += [writer.data.payload.strb.eq(-1),
                         writer.data.valid.eq(running & Mux(pending, unit.resp.valid,
                                                            stopped & (written != cmd.requests))),
                         writer.data.payload.data.eq(Mux(pending, unit.resp.payload.data, 0)),
                         unit.resp.ready.eq(pending & writer.data.ready)]
        with m.Else():
            m.d.comb += unit.resp.ready.eq(1)
        with m.If(unit.resp.valid & unit.resp.ready):
            m.d.sync += received.eq(received + 1)
            with m.If(bus_error == 0):
                m.d.sync += bus_error.eq(unit.resp.payload.error)
        with m.If(writer.data.valid & writer.data.ready):
            m.d.sync += written.eq(written + 1)

        columns = unit.counters.column_accesses[:32]
        finished = transfers.finished & ~second & ~pending & (stopped | (sent == cmd.requests))
        with ctl.states(checks, first="RUN", start=[unit.clear.eq(1)],       # per-command counters
                        clear=transfers.clear() + [second.eq(0), stopped.eq(0), stop_code.eq(0), sent.eq(0),
                                                   received.eq(0), written.eq(0), bus_error.eq(0)]):
            with m.State("RUN"):
                m.d.comb += running.eq(1)
                with m.If(finished):
                    ctl.finish(Mux(bus_error != 0, bus_error, Mux(stop_code != 0, stop_code, transfers.error)))
        ctl.complete(bytes_read=table.length + Mux(is_read, columns << 6, 0),
                     bytes_written=Mux(is_read, out.length, columns << 6), aux=unit.counters.link_bytes[:32])
        return m
