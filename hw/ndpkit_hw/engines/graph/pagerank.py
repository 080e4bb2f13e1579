"""PageRank's vertex passes: one fixed-latency dataflow for both.

Contributions (``update`` low): (rank, out-degree) -> (degree ? rank / float(degree) :
+0, degree ? +0 : rank), the second summed into the dangling rank.  Update (``update``
high): (rank, pull sum) -> (new, |new - rank|) with ``new = fma(damping, sum + dterm,
teleport)`` (``dterm``: the dangling rank times 1/n), the second summed into the L1
change.  A vertex enters (``rank`` and ``other`` taken together) only when the output
queue has room for every vertex in flight; ``out`` carries {written: 32, summed: 32}.
``start`` empties it; ``empty``: nothing in the dataflow.
"""

from amaranth.hdl import Cat, Const, Module, ResetInserter, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_hw.arith.dataflow import Dataflow, Timed

__all__ = ["VertexPass"]


class VertexPass(wiring.Component):
    rank: In(stream.Signature(32))
    other: In(stream.Signature(32))      # out-degree (uint32) or pull sum (fp32)
    out: Out(stream.Signature(64))
    run: In(1)
    update: In(1)
    damping: In(32)
    teleport: In(32)
    dterm: In(32)
    start: In(1)
    empty: Out(1)

    def elaborate(self, platform):
        m = Module()
        df = Dataflow(m, "pagerank", platform)
        rank_in, other_in = df.input(self.rank.payload), df.input(self.other.payload)
        has_out = df.input(self.other.payload != 0)
        zero = df.static(Const(0, 32))
        contrib = df.select(has_out, df.op("div", rank_in, df.op("int32_to_fp32", other_in)), zero)
        dangling_term = df.select(has_out, zero, rank_in)
        new_rank = df.op("fma", df.static(self.damping), df.op("add", other_in, df.static(self.dterm)),
                         df.static(self.teleport))
        change = df.sub(new_rank, rank_in)
        magnitude = Timed(Cat(change.value[:31], Const(0, 1)), change.time)
        updating = df.static(self.update)
        written = df.at(df.select(updating, new_rank, contrib), df.latency)
        summed = df.at(df.select(updating, magnitude, dangling_term), df.latency)
        depth = df.latency + 4
        queue = fifo.SyncFIFOBuffered(width=64, depth=depth)
        m.submodules.queue = ResetInserter(self.start)(queue)
        flowing = Signal(df.latency)     # valid bits travelling with the dataflow
        in_flow = Signal(range(depth + 1))
        enter = self.run & self.rank.valid & self.other.valid & (in_flow + queue.level < depth)
        m.d.comb += [self.rank.ready.eq(enter), self.other.ready.eq(enter)]
        m.d.sync += [flowing.eq(Cat(enter, flowing[:-1])), in_flow.eq(in_flow + enter - flowing[-1])]
        m.d.comb += [queue.w_en.eq(flowing[-1]), queue.w_data.eq(Cat(written, summed)),
                     self.out.valid.eq(queue.r_rdy), self.out.payload.eq(queue.r_data),
                     queue.r_en.eq(self.out.valid & self.out.ready), self.empty.eq(in_flow == 0)]
        with m.If(self.start):
            m.d.sync += [flowing.eq(0), in_flow.eq(0)]
        return m
