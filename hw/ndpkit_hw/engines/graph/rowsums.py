"""fp32 row sums in the golden model's order: ``lanes`` FMA partial sums per row, then
the adder tree.

Each entry ``{a, b, empty, last}`` of a row updates partial ``k mod lanes`` (``k`` its
place in the row) by one FMA, ``partial = fma(a, b, partial)``; an ``empty`` entry is
a row without entries (it only ends the row).  One FMA unit is shared by all lanes: a
lane whose previous FMA is still in flight holds its next entry back, so with
``lanes`` above the FMA's latency (an input register stage, then the FMA) a row's
entries go in one a cycle.  Rows alternate
between two banks of partials, so the next row starts at once while the finished row's
FMAs complete; then its partials go down the pipelined tree
((p0 + p1) + (p2 + p3)) + ..., rows in order, and each row's sum leaves on ``sums`` (a
queue the tree never overruns: a row enters the tree only when the queue has room for
everything in flight).  This is :func:`ndpkit.engines.graph.golden.row_sums` with
``ACC_LANES = lanes``.

``start`` empties it; ``idle`` is high when no entry, FMA or tree sum is in flight
(sums may still wait in the queue).
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_hw.arith.fma import FpFma
from ndpkit_hw.arith.reduce import FpReduce
from ndpkit_hw.bus.axi import log2_exact

__all__ = ["RowSums", "EntryLayout"]

EntryLayout = data.StructLayout({"a": 32, "b": 32, "empty": 1, "last": 1})


class RowSums(wiring.Component):
    def __init__(self, lanes: int):
        log2_exact(lanes, "row-sum lanes")
        self.lanes = lanes
        self.fma = FpFma()
        self.tree = FpReduce(lanes=lanes, op="sum")
        self.depth = self.tree.latency + 4
        super().__init__({
            "entry": In(stream.Signature(EntryLayout)),
            "sums": Out(stream.Signature(32)),
            "start": In(1),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        lanes, entry = self.lanes, self.entry
        m.submodules.fma = fma = self.fma
        m.submodules.tree = tree = self.tree
        out = fifo.SyncFIFOBuffered(width=32, depth=self.depth)
        m.submodules.out = ResetInserter(self.start)(out)     # nothing left from an aborted command
        m.d.comb += [self.sums.valid.eq(out.r_rdy), self.sums.payload.eq(out.r_data), out.r_en.eq(self.sums.ready)]

        flat = [Signal(32, name=f"partial{b}_{i}") for b in range(2) for i in range(lanes)]
        partial = Array(flat)
        busy = Signal(2 * lanes)                # bank x lane with an FMA in flight
        position = Signal(range(lanes))         # the next entry's lane
        bank = Signal()                         # the bank the current row accumulates in
        pending = Signal(2)                     # per bank: a finished row whose sums have not gone to the tree
        drain_bank = Signal()                   # the bank whose row goes to the tree next
        in_tree = Signal(range(self.depth + 1))
        slot = Cat(position, bank) if lanes > 1 else bank
        lane_free = ~(busy >> slot)[0]
        bank_ready = ~(pending >> bank)[0]
        m.d.comb += entry.ready.eq(bank_ready & (entry.payload.empty | lane_free))
        take = entry.valid & entry.ready
        issue = take & ~entry.payload.empty
        # the entry and its lane's partial are registered before the FMA (the lane select
        # and the FMA's first stage never share a cycle); a lane's partial is final when
        # it is read, as its busy bit clears with the write of its last result
        m.d.sync += [fma.i.valid.eq(issue), fma.i.payload.a[0].eq(entry.payload.a),
                     fma.i.payload.b[0].eq(entry.payload.b), fma.i.payload.c[0].eq(partial[slot])]
        # lane tags travel with the entry: the register stage, then the FMA
        slot_tags = [Signal(len(slot), name=f"fma_slot{i}") for i in range(fma.latency + 1)]
        m.d.sync += [slot_tags[0].eq(slot)] + [b.eq(a) for a, b in zip(slot_tags, slot_tags[1:])]
        issued = Mux(issue, Const(1, 2 * lanes) << slot, 0)
        returned = Mux(fma.o.valid, Const(1, 2 * lanes) << slot_tags[-1], 0)
        m.d.sync += busy.eq((busy | issued) & ~returned)
        with m.If(fma.o.valid):
            m.d.sync += partial[slot_tags[-1]].eq(fma.o.payload[0])
        with m.If(issue):
            m.d.sync += position.eq(position + 1)
        with m.If(take & entry.payload.last):
            m.d.sync += [pending.bit_select(bank, 1).eq(1), bank.eq(~bank), position.eq(0)]
        room = in_tree + out.level < self.depth
        to_tree = (pending >> drain_bank)[0] & (busy.word_select(drain_bank, lanes) == 0) & room
        m.d.comb += [tree.i.valid.eq(to_tree)] + [tree.i.payload.a[i].eq(Mux(drain_bank, flat[lanes + i], flat[i]))
                                                  for i in range(lanes)]
        with m.If(to_tree):
            m.d.sync += [pending.bit_select(drain_bank, 1).eq(0), drain_bank.eq(~drain_bank)]
            for i in range(lanes):
                with m.If(drain_bank):
                    m.d.sync += flat[lanes + i].eq(0)
                with m.Else():
                    m.d.sync += flat[i].eq(0)
        m.d.sync += in_tree.eq(in_tree + to_tree - tree.o.valid)
        m.d.comb += [out.w_en.eq(tree.o.valid), out.w_data.eq(tree.o.payload)]
        m.d.comb += self.idle.eq((pending == 0) & (busy == 0) & (in_tree == 0))
        with m.If(self.start):
            m.d.sync += [pending.eq(0), bank.eq(0), drain_bank.eq(0), position.eq(0), fma.i.valid.eq(0)] + \
                [p.eq(0) for p in flat]
        return m
