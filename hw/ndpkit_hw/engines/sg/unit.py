"""The memory-side scatter-gather unit (after Piccolo's in-memory gather/scatter).

It stands on the memory side of a modelled off-chip link and serves four requests
(``ndpkit.engines.sg.golden`` is the specification, request for request and count for count):
64 B line read and write, and the row-local **gather** (up to 64 B / element size
elements at element offsets inside one DRAM row, answered with one packed 64 B line)
and **scatter** (the same offsets with packed data, written with byte strobes).

How it works, stage by stage (FIFOs between them, so requests overlap; each stage a
component of its own, joined here):

1. *link in* (:class:`~.link.LinkGate`) — a request is accepted, then the link stays
   busy for the rest of its flits: ``ceil((8 + 2 k [+ 64 data]) / link_bytes)`` cycles.
2. *decode* (:class:`~.decode.RequestDecoder`) and *issue* (:class:`~.issue.RunIssuer`)
   — the head request is validated (error code in the golden model's order; a bad
   request issues nothing); each element's 64 B column and lane are computed,
   consecutive elements in one column form a run, and one single-beat AXI read (or
   write with the run's strobes) goes out per run.  Reads wait until no write is
   outstanding and writes until no read is, so a gather sees an earlier scatter.
   The DRAM row model (``banks`` banks with one open row each, rows of
   ``row_bytes``) and the traffic counters are updated here.
3. *complete* (:class:`~.assemble.ResponseAssembler`) — in request order: a gather's R
   beats are unpacked into the response line (every element of run ``r`` from beat
   ``r``, in parallel); a write waits for its B responses; AXI errors become the
   response's error code.
4. *link out* (a second link gate) — a response carrying data holds the link for
   ``64 / link_bytes`` cycles; write acknowledgements and errors carry no data and cost
   none.

The memory side is one 512-bit AXI4 port (a 64 B column per beat), ID 0, in order.
"""
from __future__ import annotations

from amaranth.hdl import Module, Mux
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.engines.sg import HEADER_BYTES, LINE, OFFSET_BYTES
from ndpkit_hw.bus.axi import AXI4Signature, log2_exact
from ndpkit_hw.engines.sg.assemble import ResponseAssembler
from ndpkit_hw.engines.sg.decode import RequestDecoder
from ndpkit_hw.engines.sg.issue import RunIssuer, completion_layout, counters_layout
from ndpkit_hw.engines.sg.link import LinkGate
from ndpkit_hw.engines.sg.requests import MAX_OFFSETS, ResponseLayout, request_error, request_layout

__all__ = ["SgUnit", "request_layout", "request_error", "ResponseLayout", "MAX_OFFSETS"]


class SgUnit(wiring.Component):
    """``req``/``resp``: the link side; ``bus``: the memory side; ``window_*``: the
    memory it may touch; ``counters``: requests, link bytes, useful bytes, row
    activations and column accesses since ``clear``."""

    def __init__(self, *, addr_width: int = 32, id_width: int = 4, row_bytes: int = 2048, banks: int = 16,
                 link_bytes: int = 16, max_inflight: int = 8):
        log2_exact(row_bytes, "row_bytes")
        log2_exact(banks, "banks")
        if row_bytes < 256 or row_bytes > (1 << 16):
            raise ValueError("row_bytes: 256..65536 (offsets are 16-bit element indices)")
        log2_exact(link_bytes, "link_bytes")          # bytes per cycle per direction: 1..64
        self.addr_width, self.id_width = addr_width, id_width
        self.row_bytes, self.banks, self.link_bytes, self.max_inflight = row_bytes, banks, link_bytes, max_inflight
        self.req_layout = request_layout(addr_width)
        super().__init__({
            "req": In(stream.Signature(self.req_layout)),
            "resp": Out(stream.Signature(ResponseLayout)),
            "bus": Out(AXI4Signature(addr_width=addr_width, data_width=8 * LINE, id_width=id_width)),
            "window_base": In(addr_width),
            "window_size": In(addr_width + 1),
            "clear": In(1),
            "counters": Out(counters_layout),
        })

    def _flits(self, nbytes):
        """Link cycles for ``nbytes`` (an expression): ceil(nbytes / link_bytes)."""
        shift = log2_exact(self.link_bytes, "link_bytes")
        return (nbytes + (self.link_bytes - 1)) >> shift

    def elaborate(self, platform):
        m = Module()
        bus = self.bus

        # ---- 1. link in: a request holds the link for its flits, then waits in the inbox ----
        incoming = self.req.payload
        in_bytes = (HEADER_BYTES + Mux(incoming.op[1], OFFSET_BYTES * incoming.count, 0)   # row requests' offsets
                    + Mux(incoming.op[0], LINE, 0))                                          # written data
        m.submodules.link_in = link_in = LinkGate(self.req_layout, self._flits(HEADER_BYTES + OFFSET_BYTES * 31 + LINE))
        m.submodules.inbox = inbox = fifo.SyncFIFO(width=self.req_layout.size, depth=2)
        wiring.connect(m, wiring.flipped(self.req), link_in.i)
        m.d.comb += [link_in.flits.eq(self._flits(in_bytes)), inbox.w_en.eq(link_in.o.valid),
                     inbox.w_data.eq(link_in.o.payload), link_in.o.ready.eq(inbox.w_rdy)]

        # ---- 2. decode and issue; the completion queue between issue and completion ----
        m.submodules.decode = decode = RequestDecoder(addr_width=self.addr_width, row_bytes=self.row_bytes)
        m.d.comb += [decode.requests.valid.eq(inbox.r_rdy), decode.requests.payload.eq(inbox.r_data),
                     inbox.r_en.eq(decode.requests.ready),
                     decode.window_base.eq(self.window_base), decode.window_size.eq(self.window_size)]
        m.submodules.issue = issue = RunIssuer(addr_width=self.addr_width, row_bytes=self.row_bytes, banks=self.banks,
                                               max_inflight=self.max_inflight)
        wiring.connect(m, decode.decoded, issue.decoded)
        m.submodules.pending = pending = fifo.SyncFIFOBuffered(width=completion_layout.size, depth=self.max_inflight)
        m.d.comb += [pending.w_en.eq(issue.entries.valid), pending.w_data.eq(issue.entries.payload),
                     issue.entries.ready.eq(pending.w_rdy),
                     issue.r_done.eq(bus.rvalid & bus.rready), issue.b_done.eq(bus.bvalid & bus.bready),
                     issue.clear.eq(self.clear), self.counters.eq(issue.counters)]
        # the memory side: single-beat INCR bursts of one 64 B column, ID 0
        m.d.comb += [
            bus.arid.eq(0), bus.araddr.eq(issue.ar.payload), bus.arlen.eq(0), bus.arsize.eq(6), bus.arburst.eq(1),
            bus.arvalid.eq(issue.ar.valid), issue.ar.ready.eq(bus.arready),
            bus.awid.eq(0), bus.awaddr.eq(issue.aw.payload), bus.awlen.eq(0), bus.awsize.eq(6), bus.awburst.eq(1),
            bus.awvalid.eq(issue.aw.valid), issue.aw.ready.eq(bus.awready),
            bus.wdata.eq(issue.w.payload.data), bus.wstrb.eq(issue.w.payload.strobe), bus.wlast.eq(1),
            bus.wvalid.eq(issue.w.valid), issue.w.ready.eq(bus.wready),
        ]

        # ---- 3. complete, in request order, into the outbox ---------------------------
        m.submodules.assemble = assemble = ResponseAssembler()
        m.submodules.outbox = outbox = fifo.SyncFIFO(width=ResponseLayout.size, depth=2)
        m.d.comb += [assemble.entries.valid.eq(pending.r_rdy), assemble.entries.payload.eq(pending.r_data),
                     pending.r_en.eq(assemble.entries.ready & pending.r_rdy),
                     assemble.r.valid.eq(bus.rvalid), assemble.r.payload.data.eq(bus.rdata),
                     assemble.r.payload.resp.eq(bus.rresp), bus.rready.eq(assemble.r.ready),
                     assemble.b.valid.eq(bus.bvalid), assemble.b.payload.eq(bus.bresp), bus.bready.eq(assemble.b.ready),
                     outbox.w_en.eq(assemble.responses.valid), outbox.w_data.eq(assemble.responses.payload),
                     assemble.responses.ready.eq(outbox.w_rdy)]

        # ---- 4. link out: a response carrying data holds the link for 64 / link_bytes cycles ----
        leaving = ResponseLayout(outbox.r_data)
        carries = (leaving.error == 0) & ~leaving.op[0]       # a read's data crosses the link
        m.submodules.link_out = link_out = LinkGate(ResponseLayout, self._flits(LINE))
        m.d.comb += [link_out.i.valid.eq(outbox.r_rdy), link_out.i.payload.eq(outbox.r_data),
                     outbox.r_en.eq(link_out.i.ready & outbox.r_rdy),
                     link_out.flits.eq(Mux(carries, self._flits(LINE), 1))]
        wiring.connect(m, link_out.o, wiring.flipped(self.resp))
        return m
