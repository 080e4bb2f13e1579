"""The graph engine's single-edge path from the source window's stage to the rows'
results: the source-value cache, the queue before the collector, the collector (a
collection-extended MSHR), the response table, the tickets and the reducer.

An edge the window does not hold and the cache does not hit joins a group of edges
whose source values share a DRAM row (Piccolo mode, one row gather) or a 64-byte line
(baseline mode, one line read); the group goes to the scatter-gather unit (``req``),
its response comes back (``resp``, in send order) under the group's id, and each edge's
ticket (the id and lane, or the hit value) lets the reducer take the edges in order:
the row minima (``minimum``, min programs) or the FMA entries (``entry``, ``sums``)."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, ResetInserter
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.data import View
from amaranth.lib.wiring import In, Out

from ndpkit_spec.engines.sg import LINE
from ndpkit_hw.engines.graph.cache import SourceCache
from ndpkit_hw.engines.graph.collector import Collector
from ndpkit_hw.engines.graph.reducer import Reducer
from ndpkit_hw.engines.graph.responses import ResponseTable
from ndpkit_hw.engines.graph.rowsums import entries_layout
from ndpkit_hw.engines.graph.window import WindowedEdge, windowed_queue
from ndpkit_hw.engines.sg.requests import request_layout

__all__ = ["GatherPath"]


class GatherPath(wiring.Component):
    """``lookup_u``: the source of the edge entering the window's stage (the cache answers
    ``cache_hit``/``cache_value`` for it that cycle; the window registers them);
    ``windowed``: the window stage's edges; ``req``/``resp``: the unit's link;
    ``own``: the rows' own values (min programs); ``minimum``/``entry``: the results;
    ``flush``: the pass's edges have all gone in (send every group); ``drained``: no
    edge waits before the collector decides it; ``busy``: a group, a ticket or a row is
    still in the path; ``changed``: a row's minimum differed from its own value since
    ``start``."""

    def __init__(self, *, addr_width: int, row_bytes: int, mshr_slots: int, response_ids: int, group_timeout: int,
                 tickets: int, cache_lines: int):
        self.addr_width, self.response_ids, self.tickets = addr_width, response_ids, tickets
        self.cache = SourceCache(cache_lines)
        self.collector = Collector(addr_width=addr_width, row_bytes=row_bytes, slots=mshr_slots, ids=response_ids,
                                   timeout=group_timeout)
        self.table = ResponseTable(response_ids)
        self.ticket_layout = self.collector.ticket_layout
        super().__init__({
            "lookup_u": In(24), "cache_hit": Out(1), "cache_value": Out(32),
            "windowed": In(stream.Signature(WindowedEdge)),
            "req": Out(stream.Signature(request_layout(addr_width))), "resp": In(stream.Signature(8 * LINE)),
            "own": In(stream.Signature(32)),
            "minimum": Out(stream.Signature(32)), "entry": Out(stream.Signature(entries_layout(1))),
            "run": In(1), "sums": In(1), "baseline": In(1), "start": In(1), "flush": In(1),
            "drained": Out(1), "busy": Out(1), "changed": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.cache = cache = self.cache
        m.submodules.collector = collector = self.collector
        m.submodules.table = table = self.table
        # the cache answers for the edge entering the window's stage, which registers it
        m.d.comb += [cache.u.eq(self.lookup_u), self.cache_hit.eq(cache.hit), self.cache_value.eq(cache.value),
                     cache.whole.eq(self.baseline), cache.clear.eq(self.start)]
        # a three-entry queue (its room a registered count) between the window's stage and the
        # collector keeps the collector's decision out of the edge generator's ready; the edge's
        # group key goes in with it, so the collector's compares start at the queue's register
        key_bits = self.addr_width - 6
        windowed_in = self.windowed
        queue = windowed_queue(len(windowed_in.payload.as_value()) + key_bits)
        m.submodules.windowed = ResetInserter(self.start)(queue)
        m.d.comb += [queue.w_en.eq(windowed_in.valid),
                     queue.w_data.eq(Cat(windowed_in.payload,
                                         collector.group_key(windowed_in.payload.address, self.baseline))),
                     windowed_in.ready.eq(queue.w_rdy)]
        windowed = View(WindowedEdge, queue.r_data[:-key_bits])
        m.submodules.tickets = tickets = fifo.SyncFIFOBuffered(width=self.ticket_layout.size, depth=self.tickets)
        m.d.comb += [collector.edge.valid.eq(queue.r_rdy), collector.edge.payload.eq(windowed.edge),
                     queue.r_en.eq(collector.edge.ready)]
        wiring.connect(m, collector.req, wiring.flipped(self.req))
        wiring.connect(m, wiring.flipped(self.resp), table.resp)
        m.d.comb += [collector.hit.eq(windowed.hit), collector.value.eq(windowed.value),
                     collector.address.eq(windowed.address), collector.key.eq(queue.r_data[-key_bits:]),
                     collector.baseline.eq(self.baseline), collector.flush.eq(self.flush),
                     collector.ticket_room.eq(tickets.w_rdy),
                     tickets.w_data.eq(collector.ticket), tickets.w_en.eq(collector.ticket_en),
                     table.open.eq(collector.open), collector.next_id.eq(table.next_id),
                     collector.next_free.eq(table.next_free),
                     table.send.eq(collector.send), table.send_id.eq(collector.send_id),
                     table.send_members.eq(collector.send_members)]
        # (an edge decided this cycle has left the queue's count; one in the collector's
        # input register waits until it is)
        m.d.comb += self.drained.eq((queue.level == 0) & ~(collector.waiting & ~collector.edge.ready))

        # the reducer: the source values resolved, then reduced per row
        m.submodules.reducer = reducer = Reducer(self.ticket_layout, self.response_ids)
        m.d.comb += [reducer.tickets.valid.eq(tickets.r_rdy), reducer.tickets.payload.eq(tickets.r_data),
                     tickets.r_en.eq(reducer.tickets.ready),
                     table.read_id.eq(reducer.read_id), reducer.line.eq(table.line),
                     reducer.arrived.eq(table.arrived), table.consume.eq(reducer.consume),
                     cache.fill.eq(reducer.fill), cache.fill_u.eq(reducer.fill_u), cache.fill_line.eq(reducer.fill_line),
                     reducer.run.eq(self.run), reducer.sums.eq(self.sums), reducer.baseline.eq(self.baseline),
                     reducer.start.eq(self.start), self.changed.eq(reducer.changed),
                     self.busy.eq(collector.busy | tickets.r_rdy | reducer.busy)]
        wiring.connect(m, wiring.flipped(self.own), reducer.own)
        wiring.connect(m, reducer.minimum, wiring.flipped(self.minimum))
        wiring.connect(m, reducer.entry, wiring.flipped(self.entry))
        return m
