"""The reducer: edges' source values in ticket order, reduced per row.

Each edge's ticket (:func:`~ndpkit_hw.engines.graph.collector.ticket_layout`) arrives in
edge order.  Three stages:

1. *resolve*: the ticket's source value — its own (``hit``: from the source window or
   the cache) or lane ``lane`` of its group's response line, read from the response
   table by ``read_id`` once ``arrived`` — goes with the ticket into a two-entry queue;
   a fetched member is reported (``consume``) and its value (baseline: its whole line)
   goes into the cache (``fill``).  Whether the queue has room is a register's compare,
   so nothing downstream (the row sums' or the writer's ready) reaches the table, the
   ticket queue or the cache through this stage.
2. *add*: ``candidate = value + weight`` (saturating at 0xFFFFFFFF), registered.
3. *reduce*: min programs: the row's minimum starting from its own value (``own``, one
   a row), the row's result out on ``minimum`` at its last edge; ``changed`` goes high
   (sticky, a cycle after the row, from registers) once a row's result differs from
   its own value.  Summing programs (``sums``): every edge ``{weight, value, empty,
   last}`` out on ``entry`` for the row sums.

Each stage is a register's worth of logic: the table read and the lane select; the
33-bit add (from the queue's output register); the min's compare and select (they were
one cycle).  ``start`` empties the
stages and clears ``changed``; ``busy`` is high while an edge or a row's judgement is
in flight.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, ResetInserter, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.engines.sg import LINE
from ndpkit_hw.engines.graph.rowsums import entries_layout

__all__ = ["Reducer", "saturating_add", "INF"]

INF = 0xFFFF_FFFF


def saturating_add(value, weight):
    """``value + weight`` saturating at INF (an INF value stays INF): the min programs'
    edge candidate, the golden model's saturating addition."""
    total = value + weight
    return Mux((value == INF) | total[32], INF, total[:32])


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
            "entry": Out(stream.Signature(entries_layout(1))),
            "run": In(1), "sums": In(1), "baseline": In(1), "start": In(1),
            "changed": Out(1), "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        tickets, own_values = self.tickets, self.own
        Edge = data.StructLayout({"ticket": self.ticket_layout, "value": 32})
        # stage 1: resolve, into a queue whose room is a registered level's compare and
        # whose output is a register (so stage 2's add starts at one, not behind the
        # queue's distributed-RAM read: three deep, a buffered queue of two passing an
        # edge only every other cycle)
        resolved = fifo.SyncFIFOBuffered(width=Edge.size, depth=3)
        m.submodules.resolved = ResetInserter(self.start)(resolved)
        t = tickets.payload
        m.d.comb += self.read_id.eq(t.id)
        value = Mux(t.hit, t.value, self.line.word_select(t.lane, 32))
        has_value = t.empty | t.hit | self.arrived
        resolve = self.run & tickets.valid & has_value & resolved.w_rdy
        fetched = resolve & ~t.empty & ~t.hit
        m.d.comb += [resolved.w_en.eq(resolve), resolved.w_data.eq(Cat(t.as_value(), value)),
                     tickets.ready.eq(resolve), self.consume.eq(fetched),
                     self.fill.eq(fetched), self.fill_u.eq(t.u),
                     self.fill_line.eq(Mux(self.baseline, self.line, Cat(*[self.line.word_select(t.lane, 32)] * 16)))]

        # stage 2: add
        e = data.View(Edge, resolved.r_data)
        a_valid, a_value, a_candidate = Signal(), Signal(32), Signal(32)
        a = Signal(self.ticket_layout)
        a_take = Signal()                                    # stage 3 takes its edge
        advance = resolved.r_rdy & (~a_valid | a_take)
        m.d.comb += resolved.r_en.eq(advance)
        with m.If(advance):
            m.d.sync += [a_valid.eq(1), a.eq(e.ticket), a_value.eq(e.value),
                         a_candidate.eq(saturating_add(e.value, e.ticket.weight))]
        with m.Elif(a_take):
            m.d.sync += a_valid.eq(0)

        # stage 3: reduce
        acc, own = Signal(32), Signal(32)
        base = Mux(a.first, own_values.payload, acc)
        best = Mux(a.empty | (a_candidate >= base), base, a_candidate)
        has_own = ~a.first | own_values.valid
        can_emit = ~a.last | self.minimum.ready
        min_fire = self.run & ~self.sums & a_valid & has_own & can_emit
        entry = self.entry
        m.d.comb += [entry.valid.eq(self.run & self.sums & a_valid),
                     entry.payload.a[0].eq(a.weight), entry.payload.b[0].eq(a_value),
                     entry.payload.count.eq(~a.empty), entry.payload.last.eq(a.last),
                     a_take.eq(min_fire | (entry.valid & entry.ready)),
                     own_values.ready.eq(min_fire & a.first),
                     self.minimum.valid.eq(self.run & ~self.sums & a_valid & has_own & a.last),
                     self.minimum.payload.eq(best)]
        judge, judged_new, judged_old = Signal(), Signal(32), Signal(32)
        m.d.sync += judge.eq(0)
        with m.If(min_fire):
            m.d.sync += acc.eq(best)
            with m.If(a.first):
                m.d.sync += own.eq(own_values.payload)
            with m.If(a.last):
                m.d.sync += [judge.eq(1), judged_new.eq(best), judged_old.eq(Mux(a.first, own_values.payload, own))]
        # "the row changed" a cycle later, from registers
        with m.If(judge & (judged_new != judged_old)):
            m.d.sync += self.changed.eq(1)
        m.d.comb += self.busy.eq((resolved.level != 0) | a_valid | judge)
        with m.If(self.start):
            m.d.sync += [a_valid.eq(0), self.changed.eq(0)]
        return m
