"""The reducer: edges' source values in ticket order, reduced per row.

Each edge's ticket (:func:`~ndpkit_hw.engines.graph.collector.ticket_layout`) arrives in
edge order.  Two stages:

1. *resolve*: the ticket's source value — its own (``hit``: from the source window or
   the cache) or lane ``lane`` of its group's response line, read from the response
   table by ``read_id`` once ``arrived`` — is registered with the ticket; a fetched
   member is reported (``consume``) and its value (baseline: its whole line) goes into
   the cache (``fill``).
2. *reduce*: min programs: ``candidate = value + weight`` (saturating at 0xFFFFFFFF),
   the row's minimum starting from its own value (``own``, one a row), the row's result
   out on ``minimum`` at its last edge; ``changed`` goes high (sticky, a cycle after the
   row, from registers) once a row's result differs from its own value.  Summing
   programs (``sums``): every edge ``{weight, value, empty, last}`` out on ``entry``
   for the row sums.

One stage did the table's read, the lane select, the weight's add and the min compare
in a cycle; now the add and the compare start from registers.  ``start`` empties the
stages and clears ``changed``; ``busy`` is high while an edge or a row's judgement is
in flight.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.engines.sg import LINE
from ndpkit_hw.engines.graph.rowsums import EntryLayout

__all__ = ["Reducer"]

INF = 0xFFFF_FFFF


class Reducer(wiring.Component):
    def __init__(self, ticket_layout, ids: int):
        self.ticket_layout = ticket_layout
        super().__init__({
            "tickets": In(stream.Signature(ticket_layout)),
            "read_id": Out(range(ids)), "line": In(8 * LINE), "arrived": In(1),
            "consume": Out(1),
            "fill": Out(1), "fill_u": Out(32), "fill_line": Out(8 * LINE),
            "own": In(stream.Signature(32)),
            "minimum": Out(stream.Signature(32)),
            "entry": Out(stream.Signature(EntryLayout)),
            "run": In(1), "sums": In(1), "baseline": In(1), "start": In(1),
            "changed": Out(1), "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        tickets, own_values = self.tickets, self.own
        # stage 1: resolve
        t = tickets.payload
        m.d.comb += self.read_id.eq(t.id)
        value = Mux(t.hit, t.value, self.line.word_select(t.lane, 32))
        has_value = t.empty | t.hit | self.arrived
        r_valid, r_value = Signal(), Signal(32)              # stage 2's edge
        r = Signal(self.ticket_layout)
        r_take = Signal()                                    # stage 2 passes its edge on
        resolve = self.run & tickets.valid & has_value & (~r_valid | r_take)
        with m.If(resolve):
            m.d.sync += [r_valid.eq(1), r_value.eq(value), r.eq(t)]
        with m.Elif(r_take):
            m.d.sync += r_valid.eq(0)
        fetched = resolve & ~t.empty & ~t.hit
        m.d.comb += [tickets.ready.eq(resolve), self.consume.eq(fetched),
                     self.fill.eq(fetched), self.fill_u.eq(t.u),
                     self.fill_line.eq(Mux(self.baseline, self.line, Cat(*[self.line.word_select(t.lane, 32)] * 16)))]

        # stage 2: reduce
        acc, own = Signal(32), Signal(32)
        total = r_value + r.weight
        candidate = Mux((r_value == INF) | total[32], INF, total[:32])
        base = Mux(r.first, own_values.payload, acc)
        best = Mux(r.empty | (candidate >= base), base, candidate)
        has_own = ~r.first | own_values.valid
        can_emit = ~r.last | self.minimum.ready
        min_fire = self.run & ~self.sums & r_valid & has_own & can_emit
        entry = self.entry
        m.d.comb += [entry.valid.eq(self.run & self.sums & r_valid),
                     entry.payload.a.eq(r.weight), entry.payload.b.eq(r_value),
                     entry.payload.empty.eq(r.empty), entry.payload.last.eq(r.last),
                     r_take.eq(min_fire | (entry.valid & entry.ready)),
                     own_values.ready.eq(min_fire & r.first),
                     self.minimum.valid.eq(self.run & ~self.sums & r_valid & has_own & r.last),
                     self.minimum.payload.eq(best)]
        judge, judged_new, judged_old = Signal(), Signal(32), Signal(32)
        m.d.sync += judge.eq(0)
        with m.If(min_fire):
            m.d.sync += acc.eq(best)
            with m.If(r.first):
                m.d.sync += own.eq(own_values.payload)
            with m.If(r.last):
                m.d.sync += [judge.eq(1), judged_new.eq(best), judged_old.eq(Mux(r.first, own_values.payload, own))]
        # "the row changed" a cycle later, from registers
        with m.If(judge & (judged_new != judged_old)):
            m.d.sync += self.changed.eq(1)
        m.d.comb += self.busy.eq(r_valid | judge)
        with m.If(self.start):
            m.d.sync += [r_valid.eq(0), self.changed.eq(0)]
        return m
