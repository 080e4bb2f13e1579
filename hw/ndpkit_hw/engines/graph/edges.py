"""The edge generator: rows from the row pointers, edges from the columns.

Each row of the pull matrix becomes its edges in order ({source vertex ``u``, weight,
first, last}); an empty row becomes one ``empty`` edge (so every vertex gets a
result).  The weight is the ``val`` stream's element when ``uses_val`` (SSSP weights,
SpMV entries), else ``weight``.  ``start`` restarts it for a pass; ``idle`` is high
when no row is open and the first row pointer has been taken (the pass's edges are
all out once the streams are drained).
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["EdgeLayout", "EdgeGenerator"]

EdgeLayout = data.StructLayout({"u": 32, "weight": 32, "empty": 1, "first": 1, "last": 1})


class EdgeGenerator(wiring.Component):
    rowptr: In(stream.Signature(32))
    col: In(stream.Signature(32))
    val: In(stream.Signature(32))
    edge: Out(stream.Signature(EdgeLayout))
    run: In(1)              # an edge pass is on
    uses_val: In(1)
    weight: In(32)          # the weight when not uses_val
    start: In(1)
    idle: Out(1)            # every row taken (with the streams drained: the pass's edges are out)

    def elaborate(self, platform):
        m = Module()
        rp, col, val, edge = self.rowptr, self.col, self.val, self.edge
        previous = Signal(32)
        row_left = Signal(32)
        row_open = Signal()              # a row with edges left is being emitted
        have_start = Signal()            # rowptr[0] consumed
        # the edge's source and weight follow the streams' registers whatever the state (only
        # ``valid`` depends on it): the cache's and window's lookups start from registers
        m.d.comb += [edge.payload.u.eq(col.payload), edge.payload.weight.eq(Mux(self.uses_val, val.payload,
                                                                                self.weight))]
        with m.If(self.run):
            with m.If(~have_start):
                m.d.comb += rp.ready.eq(1)
                with m.If(rp.valid):
                    m.d.sync += [have_start.eq(1), previous.eq(rp.payload)]
            with m.Elif(~row_open):
                with m.If(rp.valid):
                    length = rp.payload - previous
                    with m.If(rp.payload == previous):      # an empty row (an equality: no carry chain)
                        m.d.comb += [edge.valid.eq(1), edge.payload.empty.eq(1), edge.payload.last.eq(1)]
                        with m.If(edge.ready):
                            m.d.comb += rp.ready.eq(1)
                            m.d.sync += previous.eq(rp.payload)
                    with m.Else():
                        m.d.comb += rp.ready.eq(1)
                        m.d.sync += [previous.eq(rp.payload), row_left.eq(length), row_open.eq(1)]
            with m.Else():
                both = col.valid & (val.valid | ~self.uses_val)
                m.d.comb += [edge.valid.eq(both), edge.payload.last.eq(row_left == 1)]
                with m.If(edge.valid & edge.ready):
                    m.d.comb += [col.ready.eq(1), val.ready.eq(self.uses_val)]
                    m.d.sync += row_left.eq(row_left - 1)
                    with m.If(row_left == 1):
                        m.d.sync += row_open.eq(0)
        row_first = Signal(init=1)       # the next edge of an open row is its first
        with m.If(edge.valid & edge.ready & ~edge.payload.empty):
            m.d.sync += row_first.eq(edge.payload.last)
        with m.If(self.start):
            m.d.sync += [row_first.eq(1), have_start.eq(0), row_open.eq(0)]
        m.d.comb += [edge.payload.first.eq(Mux(edge.payload.empty, 1, row_first)),
                     self.idle.eq(~row_open & have_start)]
        return m
