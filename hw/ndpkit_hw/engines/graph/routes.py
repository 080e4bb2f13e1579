"""Where the graph engine's streams go in each phase: the readers' bus words to the
validation pass, the edge lanes or the unpackers (:class:`WordRouter`), and a pass's
results to the row sums and the word packer (:class:`ResultRouter`)."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_hw.engines.graph.pagerank import vertex_layout
from ndpkit_hw.engines.graph.rowsums import entries_layout
from ndpkit_hw.engines.graph.words import WordUnpacker, group_layout

__all__ = ["FP32_ONE", "ResultRouter", "WordRouter"]

FP32_ONE = 0x3F80_0000

#: the arrays the engine reads as elements (the source window's loads go to the window)
ELEMENT_ARRAYS = ("rowptr", "col", "val", "old")
#: the arrays PageRank's vertex passes read (ranks; degrees or pull sums), in groups
VERTEX_ARRAYS = ("old", "val")


class WordRouter(wiring.Component):
    """The readers' bus words (``<array>_words``) to their users: while ``validating``
    the row pointers and columns to the validation pass (``check_rowptr``,
    ``check_col``); with ``to_lanes`` the columns and weights to the edge lanes as words
    (``lane_col``, ``lane_val``); with ``to_vertices`` (PageRank's vertex passes) the
    ranks and degrees or sums to unpackers of ``vertex_lanes`` elements a cycle
    (``vertex_old``, ``vertex_val``, ``vertex_count`` of each a pass); else every array
    through an unpacker of its own into 32-bit elements (``<array>``, ``<array>_count``
    of them a pass; ``start`` restarts them).  A word goes to one user and waits for
    that user's ``ready`` alone."""

    def __init__(self, data_width: int, vertex_lanes: int = 1):
        words = stream.Signature(data.StructLayout({"data": data_width, "last": 1}))
        self.unpackers = {name: WordUnpacker(data_width) for name in ELEMENT_ARRAYS}
        self.vertex_unpackers = {name: WordUnpacker(data_width, group=vertex_lanes) for name in VERTEX_ARRAYS}
        members = {"validating": In(1), "to_lanes": In(1), "to_vertices": In(1), "start": In(1),
                   "check_rowptr": Out(words), "check_col": Out(words), "lane_col": Out(words), "lane_val": Out(words),
                   "vertex_count": In(32)}
        for name in ELEMENT_ARRAYS:
            members.update({f"{name}_words": In(words), name: Out(stream.Signature(32)), f"{name}_count": In(32)})
        for name in VERTEX_ARRAYS:
            members[f"vertex_{name}"] = Out(stream.Signature(group_layout(vertex_lanes)))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        for name, unpacker in self.vertex_unpackers.items():
            m.submodules[f"vertex_{name}"] = unpacker
            wiring.connect(m, unpacker.elements, wiring.flipped(getattr(self, f"vertex_{name}")))
            m.d.comb += [unpacker.start.eq(self.start), unpacker.count.eq(self.vertex_count)]
        for name, unpacker in self.unpackers.items():
            m.submodules[f"unpack_{name}"] = unpacker
            words = getattr(self, f"{name}_words")
            wiring.connect(m, unpacker.elements, wiring.flipped(getattr(self, name)))
            m.d.comb += [unpacker.start.eq(self.start), unpacker.count.eq(getattr(self, f"{name}_count"))]
            checked = name in ("rowptr", "col")       # the validation pass reads these
            laned = name in ("col", "val")            # the edge lanes take these as words
            to_lanes = self.to_lanes if laned else 0
            validating = self.validating if checked else 0
            to_vertices = self.to_vertices if name in VERTEX_ARRAYS else 0
            ready = unpacker.words.ready
            if laned:
                lane = getattr(self, f"lane_{name}")
                m.d.comb += [lane.payload.eq(words.payload), lane.valid.eq(words.valid & ~validating & to_lanes)]
                ready = Mux(to_lanes, lane.ready, ready)
            if checked:
                check = getattr(self, f"check_{name}")
                m.d.comb += [check.payload.eq(words.payload), check.valid.eq(words.valid & validating)]
                ready = Mux(validating, check.ready, ready)
            if name in VERTEX_ARRAYS:
                vertex = self.vertex_unpackers[name].words
                m.d.comb += [vertex.payload.eq(words.payload), vertex.valid.eq(words.valid & to_vertices)]
                ready = Mux(to_vertices, vertex.ready, ready)
            m.d.comb += [unpacker.words.payload.eq(words.payload),
                         unpacker.words.valid.eq(words.valid & ~validating & ~to_lanes & ~to_vertices),
                         words.ready.eq(ready)]
        return m


class ResultRouter(wiring.Component):
    """A pass's results to the row sums' ``entry`` and the word packer's ``elements``.

    - ``vertex_pass`` (PageRank's contributions and update passes): a group of up to
      ``vertex_lanes`` vertices a cycle, their values to the packer (as a group) and their
      terms into the sums as entries ``1.0 x term``, together; the pass (``pass_count``
      vertices, taken the cycle after ``start``) is one row, its last group marked from a
      down-count; its sum (``row_sums``) is kept as ``total`` (``total_ready``) for the
      engine's control;
    - ``sum_rows`` (SpMV, PageRank's pull pass): the rows' entries from the sum lanes
      (``use_lanes``) or the single path into the sums, the row sums to the packer while
      ``iterating``;
    - else (BFS, SSSP, CC): the row minima from the edge lanes (``use_lanes``) or the
      single path's reducer to the packer, one a cycle (``elements.data[0]``)."""

    def __init__(self, fmas: int, vertex_lanes: int = 1):
        if vertex_lanes > fmas:
            raise ValueError(f"graph: {vertex_lanes} vertex lanes need as many row-sum FMAs, not {fmas}")
        self.fmas, self.vertex_lanes = fmas, vertex_lanes
        super().__init__({
            "vertex": In(stream.Signature(vertex_layout(vertex_lanes))),
            "lane_entries": In(stream.Signature(entries_layout(fmas))),
            "single_entry": In(stream.Signature(entries_layout(1))),
            "lane_minima": In(stream.Signature(32)), "single_minima": In(stream.Signature(32)),
            "row_sums": In(stream.Signature(32)),
            "entry": Out(stream.Signature(entries_layout(fmas))),
            "elements": Out(stream.Signature(group_layout(vertex_lanes))),
            "vertex_pass": In(1), "use_lanes": In(1), "sum_rows": In(1), "iterating": In(1), "start": In(1),
            "pass_count": In(32), "total": Out(32), "total_ready": Out(1)})

    def elaborate(self, platform):
        m = Module()
        entry, elements, vertex, sums = self.entry, self.elements, self.vertex, self.row_sums
        vertex_fire = Signal()
        vertices_left = Signal(32)       # the pass's vertices not yet taken, counted down
        # "the next group is the pass's last", registered (from the down-count's compares with
        # constants; the count is loaded the cycle after start): the sums' entry starts at a flop
        w = self.vertex_lanes
        vertex_last = Signal()
        m.d.sync += vertex_last.eq(Mux(vertex_fire, vertices_left <= 2 * w, vertices_left <= w))
        with m.If(self.vertex_pass):
            # the vertices' values to the packer and their terms into the sums, together
            m.d.comb += [entry.valid.eq(vertex.valid & elements.ready),
                         entry.payload.count.eq(vertex.payload.count), entry.payload.last.eq(vertex_last),
                         vertex.ready.eq(entry.ready & elements.ready),
                         vertex_fire.eq(vertex.valid & vertex.ready)]
            for k in range(w):
                m.d.comb += [entry.payload.a[k].eq(FP32_ONE), entry.payload.b[k].eq(vertex.payload.summed[k])]
        with m.Elif(self.use_lanes):
            m.d.comb += [entry.valid.eq(self.lane_entries.valid), entry.payload.eq(self.lane_entries.payload),
                         self.lane_entries.ready.eq(entry.ready)]
        with m.Else():
            single = self.single_entry.payload
            m.d.comb += [entry.valid.eq(self.single_entry.valid), entry.payload.a[0].eq(single.a[0]),
                         entry.payload.b[0].eq(single.b[0]), entry.payload.count.eq(single.count),
                         entry.payload.last.eq(single.last), self.single_entry.ready.eq(entry.ready)]
        with m.If(vertex_fire):
            m.d.sync += vertices_left.eq(vertices_left - w)
        with m.If(sums.valid & self.vertex_pass):
            m.d.sync += [self.total.eq(sums.payload), self.total_ready.eq(1)]
        with m.If(self.vertex_pass):
            m.d.comb += [elements.valid.eq(vertex.valid & entry.ready), elements.payload.count.eq(vertex.payload.count),
                         sums.ready.eq(1)]
            for k in range(w):
                m.d.comb += elements.payload.data[k].eq(vertex.payload.written[k])
        with m.Elif(self.sum_rows):
            m.d.comb += [elements.valid.eq(self.iterating & sums.valid), elements.payload.data[0].eq(sums.payload),
                         sums.ready.eq(self.iterating & elements.ready)]
        with m.Else():
            with m.If(self.use_lanes):
                m.d.comb += [elements.valid.eq(self.lane_minima.valid),
                             elements.payload.data[0].eq(self.lane_minima.payload),
                             self.lane_minima.ready.eq(elements.ready)]
            with m.Else():
                m.d.comb += [elements.valid.eq(self.single_minima.valid),
                             elements.payload.data[0].eq(self.single_minima.payload),
                             self.single_minima.ready.eq(elements.ready)]
        # (the count is loaded the cycle after start: the engine's registered pass count has
        # settled then, and the vertex pipeline gives nothing in a pass's first cycle)
        counting = Signal()
        m.d.sync += counting.eq(self.start)
        with m.If(self.start):
            m.d.sync += self.total_ready.eq(0)
        with m.If(counting):
            m.d.sync += [vertices_left.eq(self.pass_count), vertex_last.eq(self.pass_count <= w)]
        return m
