"""Edge lanes: ``lanes`` edges a cycle for the min programs (BFS, SSSP, CC) when every
source value is in the source window.

Then no edge needs the collector, the unit or a ticket, and min is order-free, so the
edges of a row can be reduced in any grouping with the same result.  Two components,
joined by :class:`EdgeLanes`:

* :class:`RowBundler` cuts each row of the pull matrix into *bundles*: the row's edges
  in one lane-aligned group of ``lanes`` consecutive column entries (lanes outside the
  row masked off), one bundle a cycle, straight from the column (and weight) reader's
  bus words, so a row of ``d`` edges takes about ``d / lanes`` cycles.  A row-descriptor
  stage ahead of it computes each row's groups from its row pointers, so a row follows
  the previous one with no bubble; an empty row is one bundle with no lanes.  The row's
  own value (``own``) goes with its first bundle.
* :class:`LaneReducer` looks each lane's source up in the window (one read port a
  lane), adds its weight (saturating), takes the bundle's minimum through a tree of
  registered pairwise minima, and folds the bundles of a row into ``min(own, ...)``:
  one result a row, in order, into a queue for the writer.  It is a pipeline without
  stalls: it grants a bundle (its ``ready``, a register's compare) only while its result
  queue has room for every row in flight.

Pass results, byte counts and ``changed`` equal the single-edge path's, bit for bit
(the golden model's ``min(old[v], min_u value[u] + w)``).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_hw.bus.axi import log2_exact
from ndpkit_hw.engines.graph.reducer import INF, saturating_add
from ndpkit_hw.engines.graph.rowsums import entries_layout

__all__ = ["bundle_layout", "RowBundler", "LaneReducer", "SumLanes", "EdgeLanes"]


def bundle_layout(lanes: int) -> data.StructLayout:
    """A bundle: up to ``lanes`` edges of one row (``mask``: the lanes that are edges),
    whether it is the row's first and last, and the row's own value (first bundle)."""
    return data.StructLayout({"u": data.ArrayLayout(32, lanes), "weight": data.ArrayLayout(32, lanes),
                              "mask": lanes, "first": 1, "last": 1, "own": 32})


def _row_layout(group_bits: int, lane_bits: int) -> data.StructLayout:
    # a row as the bundler walks it: its first group, how many more, the lanes its first
    # and last groups start and end at, and whether its last group ends a bus word
    return data.StructLayout({"group": group_bits, "more": group_bits, "lo": lane_bits, "hi": lane_bits,
                              "empty": 1, "ends_word": 1})


class RowBundler(wiring.Component):
    """Rows (row pointers) and bus words of columns (and weights) -> bundles.

    ``edges`` is the pass's column count (the last word is taken with the last edge);
    ``start`` restarts for a pass, ``idle`` is high when every row pointer so far has
    been bundled."""

    def __init__(self, lanes: int, data_width: int = 512):
        self.lanes = lanes
        self.word_lanes = data_width // 32
        if lanes not in [1 << k for k in range(1, self.word_lanes.bit_length())]:
            raise ValueError(f"graph: edge_lanes must be 1 (no lanes) or a power of two from 2 to {self.word_lanes}, "
                             f"not {lanes}")
        self.lane_bits = log2_exact(lanes, "edge_lanes")
        word = data.StructLayout({"data": data_width, "last": 1})
        super().__init__({
            "rowptr": In(stream.Signature(32)), "own": In(stream.Signature(32)),
            "col": In(stream.Signature(word)), "val": In(stream.Signature(word)),
            "bundle": Out(stream.Signature(bundle_layout(lanes))),
            "uses_val": In(1), "uses_own": In(1), "weight": In(32), "edges": In(32),
            "run": In(1), "start": In(1), "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        lanes, lane_bits = self.lanes, self.lane_bits
        group_bits = 32 - lane_bits
        word_groups = self.word_lanes // lanes           # groups in a bus word
        Row = _row_layout(group_bits, lane_bits)

        # ---- row descriptors: from the row pointer element and the previous one --------
        rows = fifo.SyncFIFOBuffered(width=Row.size, depth=3)
        m.submodules.rows = ResetInserter(self.start)(rows)
        previous, have_start = Signal(32), Signal()
        rp = self.rowptr
        row = data.View(Row, rows.w_data)
        end = rp.payload
        last_edge = Signal(32)
        m.d.comb += [last_edge.eq(end - 1),
                     row.group.eq(previous[lane_bits:]), row.more.eq(last_edge[lane_bits:] - previous[lane_bits:]),
                     row.lo.eq(previous[:lane_bits]), row.hi.eq(last_edge[:lane_bits]),
                     row.empty.eq(end == previous),
                     # the row's last group ends its bus word (or the pass's edges): take the word then
                     row.ends_word.eq((end[:(self.word_lanes - 1).bit_length()] == 0) | (end == self.edges))]
        with m.If(self.run):
            m.d.comb += [rp.ready.eq(~have_start | rows.w_rdy), rows.w_en.eq(have_start & rp.valid)]
            with m.If(rp.valid & rp.ready):
                m.d.sync += [previous.eq(end), have_start.eq(1)]

        # ---- bundles: the current row's groups, a group a cycle ------------------------
        current = Signal(Row)
        open_, first, at_last = Signal(), Signal(), Signal()
        bundle = self.bundle
        words_valid = self.col.valid & (self.val.valid | ~self.uses_val)
        can = open_ & (current.empty | words_valid) & (~first | ~self.uses_own | self.own.valid)
        fire = Signal()
        out_free = ~bundle.valid | bundle.ready
        m.d.comb += fire.eq(can & out_free)
        ends_row = at_last
        sel_bits = (word_groups - 1).bit_length()
        sel = current.group[:sel_bits] if word_groups > 1 else Const(0)     # the group's place in its word
        word_done = Mux(ends_row, current.ends_word, sel == word_groups - 1)
        take_word = fire & ~current.empty & word_done
        m.d.comb += [self.col.ready.eq(take_word), self.val.ready.eq(take_word & self.uses_val),
                     self.own.ready.eq(fire & first & self.uses_own)]
        load = (~open_ | fire & ends_row) & rows.r_rdy
        m.d.comb += rows.r_en.eq(load)
        nxt = data.View(Row, rows.r_data)
        with m.If(load):
            m.d.sync += [current.eq(nxt), open_.eq(1), first.eq(1), at_last.eq(nxt.empty | (nxt.more == 0))]
        with m.Elif(fire & ends_row):
            m.d.sync += open_.eq(0)
        with m.Elif(fire):
            m.d.sync += [current.group.eq(current.group + 1), current.more.eq(current.more - 1),
                         first.eq(0), at_last.eq(current.more == 1)]

        # the bundle register
        mask = Signal(lanes)
        for j in range(lanes):
            # (the last lane is at or above any first lane: no compare that is always true)
            from_lo = current.lo <= j if j < lanes - 1 else Const(1)
            m.d.comb += mask[j].eq(~current.empty & (~first | from_lo) & (~at_last | (current.hi >= j)))
        with m.If(fire):
            m.d.sync += [bundle.valid.eq(1), bundle.payload.mask.eq(mask), bundle.payload.first.eq(first),
                         bundle.payload.last.eq(ends_row), bundle.payload.own.eq(self.own.payload)]
            cols = self.col.payload.data.word_select(sel, 32 * lanes)
            weights = self.val.payload.data.word_select(sel, 32 * lanes)
            for j in range(lanes):
                m.d.sync += [bundle.payload.u[j].eq(cols[32 * j:32 * (j + 1)]),
                             bundle.payload.weight[j].eq(Mux(self.uses_val, weights[32 * j:32 * (j + 1)], self.weight))]
        with m.Elif(bundle.ready):
            m.d.sync += bundle.valid.eq(0)
        with m.If(self.start):
            m.d.sync += [have_start.eq(0), open_.eq(0), bundle.valid.eq(0)]
        m.d.comb += self.idle.eq(have_start & ~open_ & (rows.level == 0) & ~bundle.valid)
        return m


class LaneReducer(wiring.Component):
    """Bundles -> each row's ``min(own, min over its edges of value[u] + weight)``.

    The window answers ``lane_u`` (asserted with ``lane_en``) with ``lane_value`` a
    cycle later.  ``results`` is the rows' values in order; ``changed`` goes high
    (sticky) once a row's result differs from its own value; ``busy`` while a bundle or
    a result is in flight."""

    def __init__(self, lanes: int, queue: int = 16):
        self.lanes, self.queue = lanes, queue
        self.levels = log2_exact(lanes, "edge_lanes")
        super().__init__({
            "bundle": In(stream.Signature(bundle_layout(lanes))),
            "lane_u": Out(data.ArrayLayout(32, lanes)), "lane_en": Out(1),
            "lane_value": In(data.ArrayLayout(32, lanes)),
            "results": Out(stream.Signature(32)),
            "start": In(1), "changed": Out(1), "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        lanes = self.lanes
        b = self.bundle.payload
        Meta = data.StructLayout({"first": 1, "last": 1, "own": 32})
        results = fifo.SyncFIFOBuffered(width=32, depth=self.queue)
        m.submodules.results = ResetInserter(self.start)(results)
        # a row's result is reserved when its last bundle is granted, freed when it leaves
        reserved = Signal(range(self.queue + 1))
        grant = self.bundle.valid & self.bundle.ready
        m.d.comb += [self.bundle.ready.eq(reserved != self.queue),
                     self.lane_en.eq(grant), self.lane_u.eq(b.u)]
        leave = results.r_rdy & self.results.ready
        m.d.comb += [self.results.valid.eq(results.r_rdy), self.results.payload.eq(results.r_data),
                     results.r_en.eq(self.results.ready)]
        with m.If((grant & b.last) & ~leave):
            m.d.sync += reserved.eq(reserved + 1)
        with m.Elif(~(grant & b.last) & leave):
            m.d.sync += reserved.eq(reserved - 1)

        in_flight = []

        def stage(valid, meta, name):
            """The next pipeline register of the valid bit and the bundle's row flags."""
            v, mt = Signal(name=f"{name}_valid"), Signal(Meta, name=f"{name}_meta")
            m.d.sync += [v.eq(valid), mt.eq(meta)]
            in_flight.append(v)
            return v, mt

        meta0 = Signal(Meta)
        m.d.comb += [meta0.first.eq(b.first), meta0.last.eq(b.last), meta0.own.eq(b.own)]
        # stage 1: the window's read (the weights and mask wait beside it)
        v1, meta1 = stage(grant, meta0, "read")
        weight1, mask1 = Signal(data.ArrayLayout(32, lanes)), Signal(lanes)
        m.d.sync += [weight1.eq(b.weight), mask1.eq(b.mask)]
        # stage 2: the values registered
        v2, meta2 = stage(v1, meta1, "value")
        value2, weight2, mask2 = Signal(data.ArrayLayout(32, lanes)), Signal(data.ArrayLayout(32, lanes)), Signal(lanes)
        m.d.sync += [value2.eq(self.lane_value), weight2.eq(weight1), mask2.eq(mask1)]
        # stage 3: value + weight, saturating; masked lanes add nothing (INF)
        v3, meta3 = stage(v2, meta2, "add")
        level = []
        for j in range(lanes):
            candidate = Signal(32, name=f"candidate{j}")
            m.d.sync += candidate.eq(Mux(mask2[j], saturating_add(value2[j], weight2[j]), INF))
            level.append(candidate)
        # the tree: pairwise minima, a register each level
        valid, meta = v3, meta3
        for depth in range(self.levels):
            valid, meta = stage(valid, meta, f"tree{depth}")
            pairs = []
            for j in range(0, len(level), 2):
                low = Signal(32, name=f"min{depth}_{j // 2}")
                m.d.sync += low.eq(Mux(level[j + 1] < level[j], level[j + 1], level[j]))
                pairs.append(low)
            level = pairs
        least = level[0]
        # the row: its own value, then every bundle's minimum
        acc = Signal(32)
        base = Mux(meta.first, meta.own, acc)
        best = Mux(least < base, least, base)
        m.d.comb += [results.w_en.eq(valid & meta.last), results.w_data.eq(best)]
        judge, judged_new, judged_old = Signal(), Signal(32), Signal(32)
        m.d.sync += judge.eq(valid & meta.last)
        own = Signal(32)
        with m.If(valid):
            m.d.sync += acc.eq(best)
            with m.If(meta.first):
                m.d.sync += own.eq(meta.own)
            m.d.sync += [judged_new.eq(best), judged_old.eq(Mux(meta.first, meta.own, own))]
        with m.If(judge & (judged_new != judged_old)):
            m.d.sync += self.changed.eq(1)
        pipeline = Cat(*in_flight, judge)
        m.d.comb += self.busy.eq(self.bundle.valid | (pipeline != 0) | (reserved != 0))
        with m.If(self.start):
            m.d.sync += [self.changed.eq(0), reserved.eq(0)]
        return m


class SumLanes(wiring.Component):
    """Bundles -> row-sum entries for SpMV and PageRank's pull pass, ``fmas`` a cycle.

    Each lane's source value is looked up in the window (as :class:`LaneReducer` does),
    the bundle's edges are moved to lanes 0 .. count - 1 (their order in the row), and
    a bundle goes out as ``fmas`` entries ``{a: weight, b: value}`` a cycle into
    :class:`~ndpkit_hw.engines.graph.rowsums.RowSums`; a row without edges is one entry
    of count 0.  The row sums fix the arithmetic and its order, so the sums equal the
    single-edge path's bit for bit.  A bundle is granted only while the queue of looked-up
    bundles has room for every one in flight; ``busy`` while any is."""

    def __init__(self, lanes: int, fmas: int = 2, queue: int = 8):
        self.lanes, self.fmas, self.queue = lanes, fmas, queue
        log2_exact(lanes, "edge_lanes")
        if fmas > lanes:
            raise ValueError(f"graph: {fmas} row-sum FMAs need at least as many edge lanes, not {lanes}")
        super().__init__({
            "bundle": In(stream.Signature(bundle_layout(lanes))),
            "lane_u": Out(data.ArrayLayout(32, lanes)), "lane_en": Out(1),
            "lane_value": In(data.ArrayLayout(32, lanes)),
            "entries": Out(stream.Signature(entries_layout(fmas))),
            "start": In(1), "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        lanes, fmas = self.lanes, self.fmas
        b = self.bundle.payload
        Group = data.StructLayout({"a": data.ArrayLayout(32, lanes), "b": data.ArrayLayout(32, lanes),
                                   "count": range(lanes + 1), "last": 1})
        groups = fifo.SyncFIFOBuffered(width=Group.size, depth=self.queue)
        m.submodules.groups = ResetInserter(self.start)(groups)
        # a bundle's room in the queue is reserved when it is granted, freed when it leaves
        reserved = Signal(range(self.queue + 1))
        grant = self.bundle.valid & self.bundle.ready
        leave = groups.r_en & groups.r_rdy
        m.d.comb += [self.bundle.ready.eq(reserved != self.queue), self.lane_en.eq(grant), self.lane_u.eq(b.u)]
        m.d.sync += reserved.eq(reserved + grant - leave)
        # stage 1: the window's read (the weights, mask and row end wait beside it)
        v1, weight1, mask1, last1 = Signal(), Signal(data.ArrayLayout(32, lanes)), Signal(lanes), Signal()
        m.d.sync += [v1.eq(grant), weight1.eq(b.weight), mask1.eq(b.mask), last1.eq(b.last)]
        # stage 2: the values registered, with where the row's lanes start and how many
        v2, weight2, value2, last2 = Signal(), Signal(data.ArrayLayout(32, lanes)), Signal(data.ArrayLayout(32, lanes)), Signal()
        low2, count2 = Signal(range(lanes)), Signal(range(lanes + 1))
        low = Const(0, range(lanes))
        for j in reversed(range(lanes)):          # the mask's lowest lane (it is one run of lanes)
            low = Mux(mask1[j], j, low)
        m.d.sync += [v2.eq(v1), weight2.eq(weight1), value2.eq(self.lane_value), last2.eq(last1),
                     low2.eq(low), count2.eq(sum(mask1[j] for j in range(lanes)))]
        # into the queue: the lanes turned so the row's first edge of the bundle is lane 0
        group = data.View(Group, groups.w_data)
        m.d.comb += [groups.w_en.eq(v2), group.count.eq(count2), group.last.eq(last2)]
        for j in range(lanes):
            m.d.comb += [group.a[j].eq(weight2[(low2 + j)[:len(low2)]]), group.b[j].eq(value2[(low2 + j)[:len(low2)]])]
        # out: ``fmas`` lanes a cycle
        head = data.View(Group, groups.r_data)
        step = Signal(range(max(lanes // fmas, 2)))   # the head's next lanes: step * fmas ..
        offset = step * fmas
        final = offset + fmas >= head.count
        entries = self.entries
        m.d.comb += [entries.valid.eq(groups.r_rdy), entries.payload.last.eq(head.last & final),
                     entries.payload.count.eq(Mux(final, head.count - offset, fmas)),
                     groups.r_en.eq(entries.ready & final)]
        for j in range(fmas):
            lane = (offset + j)[:(lanes - 1).bit_length()]
            m.d.comb += [entries.payload.a[j].eq(head.a[lane]), entries.payload.b[j].eq(head.b[lane])]
        with m.If(entries.valid & entries.ready):
            m.d.sync += step.eq(Mux(final, 0, step + 1))
        m.d.comb += self.busy.eq(self.bundle.valid | v1 | v2 | (reserved != 0))
        with m.If(self.start):
            m.d.sync += [reserved.eq(0), step.eq(0), v1.eq(0), v2.eq(0)]
        return m


class EdgeLanes(wiring.Component):
    """The bundler and the lane reducers joined: row pointers, own values and column (and
    weight) words in; each row's minimum out (``results``), or with ``sums`` the row-sum
    entries (``entries``, :class:`SumLanes`); the lanes' window reads on
    ``lane_u``/``lane_en``/``lane_value`` (:class:`~ndpkit_hw.engines.graph.window.SourceWindow`'s
    lane ports).  ``busy`` while a row of the pass (``run``) is still in flight."""

    def __init__(self, lanes: int, data_width: int = 512, sum_fmas: int = 2):
        self.bundler, self.reducer = RowBundler(lanes, data_width), LaneReducer(lanes)
        self.summer = SumLanes(lanes, sum_fmas)
        bundler, reducer = self.bundler.signature.members, self.reducer.signature.members
        super().__init__({
            **{name: bundler[name] for name in ("rowptr", "own", "col", "val", "uses_val", "weight", "edges",
                                                "run", "start")},
            **{name: reducer[name] for name in ("lane_u", "lane_en", "lane_value", "results", "changed")},
            "entries": Out(stream.Signature(entries_layout(sum_fmas))),
            "sums": In(1), "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.bundler = bundler = self.bundler
        m.submodules.reducer = reducer = self.reducer
        m.submodules.summer = summer = self.summer
        for name in ("rowptr", "own", "col", "val"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(bundler, name))
        wiring.connect(m, reducer.results, wiring.flipped(self.results))
        wiring.connect(m, summer.entries, wiring.flipped(self.entries))
        bundle = bundler.bundle
        # the bundles to the min reducer or, for the sums, to the sum lanes
        m.d.comb += [reducer.bundle.payload.eq(bundle.payload), summer.bundle.payload.eq(bundle.payload),
                     reducer.bundle.valid.eq(bundle.valid & ~self.sums), summer.bundle.valid.eq(bundle.valid & self.sums),
                     bundle.ready.eq(Mux(self.sums, summer.bundle.ready, reducer.bundle.ready)),
                     self.lane_u.eq(Mux(self.sums, summer.lane_u, reducer.lane_u)),
                     self.lane_en.eq(reducer.lane_en | summer.lane_en),
                     reducer.lane_value.eq(self.lane_value), summer.lane_value.eq(self.lane_value)]
        m.d.comb += [bundler.uses_val.eq(self.uses_val), bundler.uses_own.eq(~self.sums), bundler.weight.eq(self.weight),
                     bundler.edges.eq(self.edges), bundler.run.eq(self.run), bundler.start.eq(self.start),
                     reducer.start.eq(self.start), summer.start.eq(self.start), self.changed.eq(reducer.changed),
                     self.busy.eq(reducer.busy | summer.busy | self.run & ~bundler.idle)]
        return m
