"""fp32 row sums in the golden model's order: ``partials`` FMA partial sums per row, then
the adder tree.

Each entry ``{a, b}`` of a row updates partial ``k mod partials`` (``k`` its place in
the row) by one FMA, ``partial = fma(a, b, partial)``; then the row's partials go down
the pairwise tree ((p0 + p1) + (p2 + p3)) + ... (:func:`ndpkit.engines.graph.golden.row_sums`
with ``ACC_LANES = partials``).

Up to ``fmas`` entries of a row come in a cycle (``count`` of them, in lanes 0 ..
count - 1; ``count = 0`` with ``last`` is a row without entries).  Entry ``k`` goes to
FMA ``k mod fmas``, which owns the partials of that residue, so the entries of a cycle
never share an FMA.  A partial's next entry may come no earlier than the FMA's
recurrence (an input stage, the partial's read, the FMA: ``latency + 2`` cycles) after
its last one.  With ``partials / fmas`` at least that, a long row's entries go in at
``fmas`` a cycle; with more FMAs (four: the edge lanes' short rows at four entries a
cycle) a row's entry ``k`` waits until entry ``k - partials`` went in that long ago
(a delay line of the row's count of entries taken), so a long row goes in at
``partials / (latency + 2)`` entries a cycle, two.

A row holds one of ``banks`` banks of partials from its first entry until its sums go
down the tree, which is the FMA's latency after its last entry: with several banks the
short rows of a skewed graph follow each other without waiting for that latency.  A
row's end travels down the FMAs' pipeline as a marker beside its last entries (the
pipeline has a fixed latency), so the bank is known final when the marker comes out.
Banks drain in row order: the tree takes 16 partials a cycle, a row of 32 partials in
two cycles, the two halves' sums then added (exactly the 32-leaf tree's top node).
Sums leave on ``sums``, in row order, through a queue the tree never overruns (a row
is drained only when the queue has room for every row in flight).

``start`` empties it; ``idle`` is high when no entry, FMA or tree sum is in flight
(sums may still wait in the queue), a cycle late, and low while an entry is offered.
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_hw.arith.add import FpAdd
from ndpkit_hw.arith.fma import FpFma
from ndpkit_hw.arith.reduce import FpReduce
from ndpkit_hw.bus.axi import log2_exact

__all__ = ["RowSums", "entries_layout", "TREE_LANES"]

#: partials the tree takes a cycle
TREE_LANES = 16


def entries_layout(fmas: int) -> data.StructLayout:
    """Up to ``fmas`` consecutive entries of one row: ``count`` of them (lanes 0 ..
    count - 1), ``last`` if they end the row."""
    return data.StructLayout({"a": data.ArrayLayout(32, fmas), "b": data.ArrayLayout(32, fmas),
                              "count": range(fmas + 1), "last": 1})


class RowSums(wiring.Component):
    def __init__(self, partials: int, *, fmas: int = 1, banks: int = 8):
        log2_exact(partials, "row-sum partials")
        log2_exact(fmas, "row-sum FMAs")
        log2_exact(banks, "row-sum banks")
        self.fma = FpFma(lanes=fmas)
        if partials not in (TREE_LANES, 2 * TREE_LANES):
            raise ValueError(f"graph: row sums take {TREE_LANES} or {2 * TREE_LANES} partials, not {partials}")
        # (the input stage and the partial's read stand before the FMA: a partial's reuse distance)
        self.recurrence = self.fma.latency + 2
        self.partials, self.fmas, self.banks = partials, fmas, banks
        self.halves = partials // TREE_LANES
        self.tree = FpReduce(lanes=TREE_LANES, op="sum")
        self.fold = FpAdd() if self.halves > 1 else None
        self.depth = self.tree.latency + (self.fold.latency if self.fold else 0) + 4
        super().__init__({
            "entry": In(stream.Signature(entries_layout(fmas))),
            "sums": Out(stream.Signature(32)),
            "start": In(1),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        P, F, B, H = self.partials, self.fmas, self.banks, self.halves
        per_fma = P // F                         # the partials an FMA owns in a bank
        entry = self.entry
        m.submodules.fma = fma = self.fma
        m.submodules.tree = tree = self.tree
        out = fifo.SyncFIFOBuffered(width=32, depth=self.depth)
        m.submodules.out = ResetInserter(self.start)(out)     # nothing left from an aborted command
        m.d.comb += [self.sums.valid.eq(out.r_rdy), self.sums.payload.eq(out.r_data), out.r_en.eq(self.sums.ready)]

        # partial[f][bank * per_fma + i] is partial i * F + f of the bank's row
        store = [[Signal(32, name=f"partial_f{f}_{s}") for s in range(B * per_fma)] for f in range(F)]
        bank_bits = max(B.bit_length() - 1, 0)
        index_bits = (B * per_fma - 1).bit_length()

        position = Signal(range(P))              # the next entry's partial
        bank = Signal(range(B))                  # the current row's bank
        pending = Signal(B)                      # a bank's row has all its entries
        final = Signal(B)                        # ... and all its FMAs' results
        take = entry.valid & entry.ready
        ends = take & entry.payload.last
        if P // F >= self.recurrence:
            m.d.comb += entry.ready.eq(~(pending >> bank)[0])
        else:
            # the row's entries taken (modulo 4P: the rule keeps the count within P + F of the
            # count a recurrence ago) and that count a recurrence ago, zeroed as a row starts
            # (a new row's first P entries reuse no partial); a cycle's F entries may go in when
            # the last of them is at most P past it (F, not the cycle's count, and the test
            # registered from the counts' next values: the readiness starts at a register)
            Count = range(4 * P)
            # (history[i]: the count i cycles before the last; history[0] is the count itself)
            taken = Signal(Count)
            history = [taken] + [Signal(Count, name=f"taken_ago{i}") for i in range(1, self.recurrence)]
            room = Signal(init=1)
            m.d.comb += entry.ready.eq(~(pending >> bank)[0] & room)
            restart = ends | self.start
            taken_next = Mux(restart, 0, Mux(take, taken + entry.payload.count, taken))
            oldest_next = Mux(restart, 0, history[-2])
            m.d.sync += [taken.eq(taken_next), room.eq(((taken_next + F - oldest_next) % (4 * P)) <= P)] + \
                [b.eq(Mux(restart, 0, a)) for a, b in zip(history, history[1:])]

        # ---- input stage: each entry to its FMA (entry j is partial position + j) ----------
        Lane = data.StructLayout({"valid": 1, "a": 32, "b": 32, "index": index_bits})
        issue = [Signal(Lane, name=f"issue{f}") for f in range(F)]
        issue_end, issue_bank = Signal(), Signal(range(B))
        rotate = position[:F.bit_length() - 1] if F > 1 else Const(0)
        for f in range(F):
            # the entry for FMA f: lane (f - position) mod F
            j = (f - rotate)[:F.bit_length() - 1] if F > 1 else Const(0)
            slot = Signal(range(P), name=f"slot{f}")
            m.d.comb += slot.eq(position + j)
            m.d.sync += [issue[f].valid.eq(take & (j < entry.payload.count)),
                         issue[f].a.eq(entry.payload.a[j]), issue[f].b.eq(entry.payload.b[j]),
                         issue[f].index.eq(Cat(slot[F.bit_length() - 1:], bank) if B > 1 else slot[F.bit_length() - 1:])]
        m.d.sync += [issue_end.eq(ends), issue_bank.eq(bank)]
        with m.If(take):
            m.d.sync += position.eq(position + entry.payload.count)
        with m.If(ends):
            m.d.sync += [bank.eq(bank + 1), position.eq(0)]

        # ---- read stage: each FMA's partial, then the FMAs ------------------------------
        m.d.sync += fma.i.valid.eq(Cat(*(issue[f].valid for f in range(F))) != 0)
        for f in range(F):
            m.d.sync += [fma.i.payload.a[f].eq(issue[f].a), fma.i.payload.b[f].eq(issue[f].b),
                         fma.i.payload.c[f].eq(Array(store[f])[issue[f].index])]
        # the tags beside the FMAs: each lane's write, and a row's end with its bank
        Tag = data.StructLayout({"write": F, "index": data.ArrayLayout(index_bits, F), "end": 1, "bank": range(B)})
        tags = [Signal(Tag, name=f"fma_tag{i}") for i in range(fma.latency + 1)]
        m.d.sync += [tags[0].write.eq(Cat(*(issue[f].valid for f in range(F)))), tags[0].end.eq(issue_end),
                     tags[0].bank.eq(issue_bank)] + [tags[0].index[f].eq(issue[f].index) for f in range(F)]
        m.d.sync += [b.eq(a) for a, b in zip(tags, tags[1:])]
        back = tags[-1]                          # beside the FMAs' results
        for f in range(F):
            with m.If(back.write[f]):
                m.d.sync += Array(store[f])[back.index[f]].eq(fma.o.payload[f])
        finishing = Mux(back.end, Const(1, B) << back.bank, 0)

        # ---- drain: the finished banks in row order, 16 partials a cycle, to the tree -----
        drain = Signal(range(B))                 # the bank whose row goes to the tree next
        half = Signal(range(H))
        in_tree = Signal(range(self.depth + 1))  # rows in the tree and the fold
        room = in_tree + out.level < self.depth
        begin = (final >> drain)[0] & room & (half == 0)
        draining = begin | (half != 0)
        m.d.comb += tree.i.valid.eq(draining)
        def held(b, p):                          # partial p of bank b
            return store[p % F][b * per_fma + p // F]
        for i in range(TREE_LANES):
            choices = [held(b, h * TREE_LANES + i) for b in range(B) for h in range(H)]
            select = Cat(half, drain)
            m.d.comb += tree.i.payload.a[i].eq(Array(choices)[select] if len(choices) > 1 else choices[0])
        done = draining & (half == H - 1)
        with m.If(draining):
            # the drained half is zeroed for the bank's next row
            for b in range(B):
                for p in range(P):
                    with m.If((drain == b) & (half == p // TREE_LANES)):
                        m.d.sync += held(b, p).eq(0)
            if H > 1:
                m.d.sync += half.eq(Mux(done, 0, half + 1))
        with m.If(done):
            m.d.sync += drain.eq(drain + 1)
        m.d.sync += [final.eq((final | finishing) & ~Mux(done, Const(1, B) << drain, 0)),
                     pending.eq(pending & ~Mux(done, Const(1, B) << drain, 0) |
                                Mux(ends, Const(1, B) << bank, 0))]
        m.d.sync += in_tree.eq(in_tree + begin - out.w_en)

        # ---- the halves' sums added, into the queue ---------------------------------------
        if H > 1:
            m.submodules.fold = fold = self.fold
            low, second = Signal(32), Signal()
            with m.If(tree.o.valid):
                m.d.sync += [low.eq(tree.o.payload), second.eq(~second)]
            m.d.comb += [fold.i.valid.eq(tree.o.valid & second), fold.i.payload.a[0].eq(low),
                         fold.i.payload.b[0].eq(tree.o.payload), fold.i.payload.sub.eq(0),
                         out.w_en.eq(fold.o.valid), out.w_data.eq(fold.o.payload[0])]
        else:
            m.d.comb += [out.w_en.eq(tree.o.valid), out.w_data.eq(tree.o.payload)]
        flight = Cat(*(issue[f].valid for f in range(F)), issue_end, fma.i.valid,
                     *(t.write for t in tags), *(t.end for t in tags))
        # (registered, a cycle late: with no entry offered that cycle, none can have gone in
        # since; four FMAs' tags are a wide OR, which ended in the engine's state)
        idle = Signal(init=1)
        m.d.sync += idle.eq((pending == 0) & (flight == 0) & (in_tree == 0) & ~entry.valid)
        m.d.comb += self.idle.eq(idle)
        with m.If(self.start):
            m.d.sync += [pending.eq(0), final.eq(0), bank.eq(0), drain.eq(0), half.eq(0), position.eq(0),
                         fma.i.valid.eq(0), issue_end.eq(0)] + [issue[f].valid.eq(0) for f in range(F)] + \
                [t.eq(0) for t in tags] + [p.eq(0) for row in store for p in row]
            if H > 1:
                m.d.sync += second.eq(0)
        return m
