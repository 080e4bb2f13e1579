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
its last one.  With ``partials / fmas`` at least that (the engine's 128 partials on
eight FMAs, 16 each), a long row's entries go in at ``fmas`` a cycle; with fewer (64
partials on eight FMAs), a row's entry ``k`` waits until entry ``k - partials`` went in
that long ago (a delay line of the row's count of entries taken), so a long row goes in
at ``partials / (latency + 2)`` a cycle, four.

The partials are sixteen distributed RAMs (partial ``p`` of bank ``b`` in RAM ``p mod
16``), written by their FMA and read twice: by the FMA for the row's next entry, and by
the drain.  Nothing is zeroed: a row's first entry at a partial adds to +0, and the
drain masks the partials the row did not reach.  A row holds one of ``banks`` banks
from its first entry until its sums go down the tree, which is the FMA's latency after
its last entry: with several banks the short rows of a skewed graph follow each other
without waiting for that latency.  A row's end travels down the FMAs' pipeline as a
marker beside its last entries (the pipeline has a fixed latency), so the bank is known
final when the marker comes out.  Banks drain in row order, a group of 16 partials a
cycle up to the last group the row reached (a row of at most 16 entries in one cycle); the
groups' sums are added pairwise level by level, a row's last sum at a level with +0
when it has no partner (the missing groups' sums: exactly the golden tree's nodes).
Sums leave on ``sums``, in row order, through a queue the tree never overruns (a row
is drained only when the queue has room for every row in flight).

``start`` empties it; ``idle`` is high when no entry, FMA or tree sum is in flight
(sums may still wait in the queue), a cycle late, and low while an entry is offered.
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ndpkit_hw.arith.add import FpAdd
from ndpkit_hw.arith.dataflow import delayed
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
        if not TREE_LANES <= partials <= 8 * TREE_LANES:
            raise ValueError(f"graph: row sums take {TREE_LANES} to {8 * TREE_LANES} partials, not {partials}")
        if fmas > TREE_LANES:
            raise ValueError(f"graph: row sums take at most {TREE_LANES} FMAs, not {fmas}")
        # (the input stage and the partial's read stand before the FMA: a partial's reuse distance)
        self.recurrence = self.fma.latency + 2
        self.partials, self.fmas, self.banks = partials, fmas, banks
        self.groups = partials // TREE_LANES
        self.tree = FpReduce(lanes=TREE_LANES, op="sum")
        # the tree's sums of a row's groups added pairwise, level by level (the top of the
        # golden model's tree over every partial)
        self.folds = [FpAdd() for _ in range(self.groups.bit_length() - 1)]
        # (+1: the drained partials' register before the tree)
        self.depth = self.tree.latency + sum(f.latency for f in self.folds) + 5
        super().__init__({
            "entry": In(stream.Signature(entries_layout(fmas))),
            "sums": Out(stream.Signature(32)),
            "start": In(1),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        P, F, B, Q = self.partials, self.fmas, self.banks, self.groups
        entry = self.entry
        m.submodules.fma = fma = self.fma
        m.submodules.tree = tree = self.tree
        out = fifo.SyncFIFOBuffered(width=32, depth=self.depth)
        m.submodules.out = ResetInserter(self.start)(out)     # nothing left from an aborted command
        m.d.comb += [self.sums.valid.eq(out.r_rdy), self.sums.payload.eq(out.r_data), out.r_en.eq(self.sums.ready)]

        # Partial p of a bank's row lives in RAM p mod TREE_LANES (a distributed RAM), at
        # bank * Q + p // TREE_LANES: FMA f owns the RAMs of residue f mod F, and the drain
        # reads a group of the row's partials from all the RAMs at once.  A partial is
        # never zeroed: one the row has not reached reads as +0 (its first entry's FMA adds
        # to +0; the drain masks the partials past the row's count).
        lane_bits = (TREE_LANES - 1).bit_length()
        rams = [Memory(shape=32, depth=B * Q, init=[]) for _ in range(TREE_LANES)]
        for i, ram in enumerate(rams):
            m.submodules[f"partials{i}"] = ram
        writes = [ram.write_port() for ram in rams]
        fma_reads = [ram.read_port(domain="comb") for ram in rams]
        drain_reads = [ram.read_port(domain="comb") for ram in rams]

        position = Signal(range(P))              # the next entry's partial
        lapped = Signal()                        # the row's entries have gone round the partials
        bank = Signal(range(B))                  # the current row's bank
        filled = Array(Signal(range(P + 1), name=f"filled{b}") for b in range(B))   # a bank's row's partials reached
        # (a bank's row's last group to drain: the groups past its count sum to +0; kept
        # beside its count, not derived from it at the drain: no subtract on that path)
        last_group = Array(Signal(range(Q), name=f"last_group{b}") for b in range(B))
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
        Lane = data.StructLayout({"valid": 1, "fresh": 1, "a": 32, "b": 32, "ram": range(TREE_LANES),
                                  "addr": range(B * Q)})
        issue = [Signal(Lane, name=f"issue{f}") for f in range(F)]
        issue_end, issue_bank = Signal(), Signal(range(B))
        rotate = position[:F.bit_length() - 1] if F > 1 else Const(0)
        for f in range(F):
            # the entry for FMA f: lane (f - rotate) mod F
            j = (f - rotate)[:F.bit_length() - 1] if F > 1 else Const(0)
            slot = Signal(range(2 * P), name=f"slot{f}")
            m.d.comb += slot.eq(position + j)
            m.d.sync += [issue[f].valid.eq(take & (j < entry.payload.count)),
                         # (the row's first entry at this partial: its FMA adds to +0)
                         issue[f].fresh.eq(~lapped & (slot < P)),
                         issue[f].a.eq(entry.payload.a[j]), issue[f].b.eq(entry.payload.b[j]),
                         issue[f].ram.eq(slot[:lane_bits]),
                         issue[f].addr.eq(Cat(slot[lane_bits:log2_exact(P, "partials")], bank) if B * Q > 1 else 0)]
        m.d.sync += [issue_end.eq(ends), issue_bank.eq(bank)]
        advanced = position + entry.payload.count
        with m.If(take):
            m.d.sync += [position.eq(advanced[:len(position)]), lapped.eq(lapped | (advanced >= P))]
        with m.If(ends):
            reached = Mux(lapped | (advanced >= P), P, advanced)
            m.d.sync += [bank.eq(bank + 1), position.eq(0), lapped.eq(0), filled[bank].eq(reached),
                         last_group[bank].eq(Mux(reached == 0, 0, (reached - 1) >> lane_bits))]

        # ---- read stage: each FMA's partial from its RAMs, then the FMAs ----------------
        m.d.sync += fma.i.valid.eq(Cat(*(issue[f].valid for f in range(F))) != 0)
        for f in range(F):
            owned = list(range(f, TREE_LANES, F))
            for i in owned:
                m.d.comb += fma_reads[i].addr.eq(issue[f].addr)
            held = Array(fma_reads[i].data for i in owned)[issue[f].ram[F.bit_length() - 1:]] if len(owned) > 1 \
                else fma_reads[owned[0]].data
            m.d.sync += [fma.i.payload.a[f].eq(issue[f].a), fma.i.payload.b[f].eq(issue[f].b),
                         fma.i.payload.c[f].eq(Mux(issue[f].fresh, 0, held))]
        # the tags beside the FMAs: each lane's write, and a row's end with its bank
        Tag = data.StructLayout({"write": F, "ram": data.ArrayLayout(range(TREE_LANES), F),
                                 "addr": data.ArrayLayout(range(B * Q), F), "end": 1, "bank": range(B)})
        tags = [Signal(Tag, name=f"fma_tag{i}") for i in range(fma.latency + 1)]
        m.d.sync += [tags[0].write.eq(Cat(*(issue[f].valid for f in range(F)))), tags[0].end.eq(issue_end),
                     tags[0].bank.eq(issue_bank)] + \
            [tags[0].ram[f].eq(issue[f].ram) for f in range(F)] + [tags[0].addr[f].eq(issue[f].addr) for f in range(F)]
        m.d.sync += [b.eq(a) for a, b in zip(tags, tags[1:])]
        back = tags[-1]                          # beside the FMAs' results
        for i, write in enumerate(writes):
            f = i % F
            m.d.comb += [write.en.eq(back.write[f] & (back.ram[f] == i)), write.addr.eq(back.addr[f]),
                         write.data.eq(fma.o.payload[f])]
        finishing = Mux(back.end, Const(1, B) << back.bank, 0)

        # ---- drain: the finished banks in row order, a group a cycle, to the tree -------
        # (a row's groups up to the last its entries reached: the others sum to +0, which
        # the folds add as the missing partner of a row's last sum)
        drain = Signal(range(B))                 # the bank whose row goes to the tree next
        group = Signal(range(Q))
        in_tree = Signal(range(self.depth + 1))  # rows in the tree and the folds
        room = in_tree + out.level < self.depth
        begin = (final >> drain)[0] & room & (group == 0)
        draining = begin | (group != 0)
        done = draining & (group == last_group[drain])
        drained = Signal(data.ArrayLayout(32, TREE_LANES))
        drained_valid, drained_last = Signal(), Signal()
        for i, read in enumerate(drain_reads):
            m.d.comb += read.addr.eq(Cat(group, drain) if B * Q > 1 else 0)
            # (a partial past the row's count was never written in this row: +0)
            m.d.sync += drained[i].eq(Mux(Cat(Const(i, lane_bits), group) < filled[drain], read.data, 0))
        m.d.sync += [drained_valid.eq(draining), drained_last.eq(done)]
        m.d.comb += [tree.i.valid.eq(drained_valid), tree.i.payload.a.eq(drained)]
        with m.If(draining):
            if Q > 1:
                m.d.sync += group.eq(Mux(done, 0, group + 1))
        with m.If(done):
            m.d.sync += drain.eq(drain + 1)
        m.d.sync += [final.eq((final | finishing) & ~Mux(done, Const(1, B) << drain, 0)),
                     pending.eq(pending & ~Mux(done, Const(1, B) << drain, 0) |
                                Mux(ends, Const(1, B) << bank, 0))]
        m.d.sync += in_tree.eq(in_tree + begin - out.w_en)

        # ---- the groups' sums added pairwise, level by level, into the queue -----------
        # (each sum marked if it is its row's last at its level: with no partner it adds +0)
        valid, payload = tree.o.valid, tree.o.payload
        last = delayed(m, drained_last, self.tree.latency, "tree_last", reset=True)
        holders = []
        for level, fold in enumerate(self.folds):
            m.submodules[f"fold{level}"] = fold
            low, holding = Signal(32, name=f"fold{level}_low"), Signal(name=f"fold{level}_holding")
            m.d.comb += [fold.i.valid.eq(valid & (holding | last)), fold.i.payload.a[0].eq(Mux(holding, low, payload)),
                         fold.i.payload.b[0].eq(Mux(holding, payload, 0)), fold.i.payload.sub.eq(0)]
            with m.If(valid):
                m.d.sync += [low.eq(payload), holding.eq(~holding & ~last)]
            valid, payload = fold.o.valid, fold.o.payload[0]
            last = delayed(m, last, fold.latency, f"fold{level}_last", reset=True)
            holders.append(holding)
        m.d.comb += [out.w_en.eq(valid), out.w_data.eq(payload)]
        flight = Cat(*(issue[f].valid for f in range(F)), issue_end, fma.i.valid,
                     *(t.write for t in tags), *(t.end for t in tags))
        # (registered, a cycle late: with no entry offered that cycle, none can have gone in
        # since; four FMAs' tags are a wide OR, which ended in the engine's state)
        idle = Signal(init=1)
        m.d.sync += idle.eq((pending == 0) & (flight == 0) & (in_tree == 0) & ~entry.valid)
        m.d.comb += self.idle.eq(idle)
        with m.If(self.start):
            m.d.sync += [pending.eq(0), final.eq(0), bank.eq(0), drain.eq(0), group.eq(0), position.eq(0),
                         lapped.eq(0), fma.i.valid.eq(0), issue_end.eq(0), drained_valid.eq(0)] + \
                [issue[f].valid.eq(0) for f in range(F)] + [t.eq(0) for t in tags] + [h.eq(0) for h in holders]
        return m
