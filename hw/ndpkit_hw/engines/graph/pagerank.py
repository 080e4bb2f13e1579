"""PageRank's vertex passes: one fixed-latency dataflow for both.

Contributions (``update`` low): (rank, out-degree) -> (degree ? rank / float(degree) :
+0, degree ? +0 : rank), the second summed into the dangling rank.  Update (``update``
high): (rank, pull sum) -> (new, |new - rank|) with ``new = fma(damping, sum + dterm,
teleport)`` (``dterm``: the dangling rank times 1/n), the second summed into the L1
change.  A vertex enters (``rank`` and ``other`` taken together) only when the output
queue has room for every vertex in flight; ``out`` carries {written: 32, summed: 32}.
``start`` empties it; ``empty``: nothing in the dataflow.

``lanes`` vertices a cycle: the vertices come in groups (:func:`group_layout`, the
pass's last group holding what is left; ``rank`` and ``other`` in step), through as
many copies of the dataflow, and leave as a group (:func:`vertex_layout`).
"""

from amaranth.hdl import Cat, Const, Module, ResetInserter, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_hw.arith.dataflow import Dataflow, Timed, delayed
from ndpkit_hw.engines.graph.words import group_layout

__all__ = ["VertexPass", "vertex_layout"]


def vertex_layout(lanes: int) -> data.StructLayout:
    """A group of ``count`` vertices' results: the values to write and the terms to sum."""
    return data.StructLayout({"written": data.ArrayLayout(32, lanes), "summed": data.ArrayLayout(32, lanes),
                              "count": range(lanes + 1)})


class VertexPass(wiring.Component):
    """See the module's text."""

    def __init__(self, lanes: int = 1):
        self.lanes = lanes
        super().__init__({
            "rank": In(stream.Signature(group_layout(lanes))),
            "other": In(stream.Signature(group_layout(lanes))),      # out-degrees (uint32) or pull sums (fp32)
            "out": Out(stream.Signature(vertex_layout(lanes))),
            "run": In(1), "update": In(1), "damping": In(32), "teleport": In(32), "dterm": In(32),
            "start": In(1), "empty": Out(1)})

    def vertex(self, df: Dataflow, rank: Timed, other: Timed) -> tuple[Timed, Timed]:
        """One vertex's (value to write, term to sum), both passes computed, the pass selects."""
        has_out = Timed(other.value != 0, other.time)
        zero = df.static(Const(0, 32))
        contrib = df.select(has_out, df.op("div", rank, df.op("int32_to_fp32", other)), zero)
        dangling_term = df.select(has_out, zero, rank)
        new_rank = df.op("fma", df.static(self.damping), df.op("add", other, df.static(self.dterm)),
                         df.static(self.teleport))
        change = df.sub(new_rank, rank)
        magnitude = Timed(Cat(change.value[:31], Const(0, 1)), change.time)
        updating = df.static(self.update)
        return df.select(updating, new_rank, contrib), df.select(updating, magnitude, dangling_term)

    def elaborate(self, platform):
        m = Module()
        df = Dataflow(m, "pagerank", platform)
        results = [self.vertex(df, df.input(self.rank.payload.data[k]), df.input(self.other.payload.data[k]))
                   for k in range(self.lanes)]
        group = Signal(vertex_layout(self.lanes))
        m.d.comb += group.count.eq(delayed(m, self.rank.payload.count, df.latency, "pagerank_count"))
        for k, (written, summed) in enumerate(results):
            m.d.comb += [group.written[k].eq(df.at(written, df.latency)), group.summed[k].eq(df.at(summed, df.latency))]
        depth = df.latency + 4
        queue = fifo.SyncFIFOBuffered(width=len(group.as_value()), depth=depth)
        m.submodules.queue = ResetInserter(self.start)(queue)
        flowing = Signal(df.latency)     # valid bits travelling with the dataflow
        in_flow = Signal(range(depth + 1))
        enter = self.run & self.rank.valid & self.other.valid & (in_flow + queue.level < depth)
        m.d.comb += [self.rank.ready.eq(enter), self.other.ready.eq(enter)]
        m.d.sync += [flowing.eq(Cat(enter, flowing[:-1])), in_flow.eq(in_flow + enter - flowing[-1])]
        m.d.comb += [queue.w_en.eq(flowing[-1]), queue.w_data.eq(group),
                     self.out.valid.eq(queue.r_rdy), self.out.payload.eq(queue.r_data),
                     queue.r_en.eq(self.out.valid & self.out.ready), self.empty.eq(in_flow == 0)]
        with m.If(self.start):
            m.d.sync += [flowing.eq(0), in_flow.eq(0)]
        return m
