"""``graph``: pull-style vertex programs over a CSR matrix, with the source values
fetched through the memory-side scatter-gather unit (after Piccolo).

Command (:data:`ndpkit_spec.engines.graph.BLOCK`): program (SpMV, PageRank, BFS, SSSP, CC), mode (0
Piccolo row gathers, 1 baseline line reads), ``n``, ``edges``, the arrays ``rowptr``,
``col``, ``val`` (SSSP weights, SpMV matrix entries), ``a`` (initial values; SpMV's
``x``) and ``b`` (SpMV's ``y``), and ``max_iterations``.  The golden model is :func:`ndpkit.engines.graph.golden.execute`.

Phases:

1. *check* (no traffic): program, mode, ``n``, ``max_iterations`` (BAD_FIELD), every
   array by the transfer rule and no two overlapping.
2. *validate*: the row pointers and columns stream through once: ``rowptr[0] == 0``,
   non-decreasing, ``rowptr[n] == edges`` (BAD_GRAPH), every column ``< n``
   (BAD_INDEX); both arrays are read whole, the row-pointer error wins.  Nothing has
   been written when a graph is rejected.  When the first edge pass runs on the edge
   lanes (every source in the window: BFS, SSSP, CC, SpMV, PageRank's pull sums unless
   the command computes contributions only), this pass judges the row pointers only,
   with the window's load beside it (PageRank computing every vertex's contributions:
   its contributions pass writes them into the window, not to memory), and the columns
   are judged as the first edge pass takes them, its results held on chip (as many as
   the window's vertices: a pass on the lanes has no more rows) until the verdict: a
   bad column ends the command with nothing written, as in the pass.  The columns are
   read once, not twice.
3. *iterate*: the row pointers, columns (and weights) and the vertices' own values
   stream in order; each edge's source value comes from the **cache** (``cache_lines``
   lines of 16 values, direct mapped by vertex id; filled per value in Piccolo mode,
   per 64-byte line in baseline mode; emptied every pass) or through the unit.  The
   **collector** (a collection-extended MSHR of ``mshr_slots`` open groups) groups
   edges whose source values share a DRAM row (Piccolo mode, up to 16 per row gather)
   or a 64-byte line (baseline mode, one line read, an ordinary MSHR) into one
   request; a group is sent when full, after ``group_timeout`` cycles without a new
   member, to free a slot for an edge that fits no open group, or at the end.  Each
   group holds a response id until its members are read; the unit's responses (in
   send order) wait in a response buffer under their id, and a ticket per edge (id,
   lane) lets the **reducer** (two stages: the source value resolved, then reduced)
   consume edges in order: ``new[v] = min(old[v], min_u value[u] + w)`` (saturating;
   BFS w = 1, CC w = 0), written in order through the burst writer (whole bus words,
   padding 0).  (:class:`~ndpkit_hw.engines.graph.gather.GatherPath` joins the cache,
   collector, response table and reducer; :mod:`~ndpkit_hw.engines.graph.routes`
   routes the readers' words and the passes' results.)  Iterations alternate a -> b
   -> a until one changes nothing or ``max_iterations``; ``cpl_aux`` = iterations.  A
   BFS, SSSP or CC pass whose sources all lie in the source window runs on the **edge
   lanes** instead
   (:mod:`~ndpkit_hw.engines.graph.lanes`: up to ``edge_lanes`` edges of a row a cycle,
   the same results).
4. *SpMV* (one pass, no ``old`` stream): the reducer sends each entry to the row sums
   (:class:`~ndpkit_hw.engines.graph.rowsums.RowSums`), ``partial[k mod 128] = fma(val,
   x[u], partial[k mod 128])`` (128 partials in distributed RAM, eight FMAs of latency
   14 owning 16 each), sixteen banks of partials so short rows follow each other, then
   the adder tree, rows in order.  When every source is in the window the edge lanes' sum
   lanes feed it eight entries a cycle however long the row (PageRank's pull pass too);
   the single path, one.

5. *PageRank* (``val`` the out-degrees, ``scratch`` 2 x n words, four fp32 constants):
   per iteration a contributions pass (ranks, degrees -> ``rank / deg`` into scratch;
   the dangling rank summed), the SpMV edge pass with unit entries over the
   contributions (-> scratch + n), and an update pass (sums, ranks -> ``fma(d, sum +
   dangling / n, (1 - d) / n)`` into the other array; ``|new - rank|`` summed).  The
   vertex passes run one fixed-latency dataflow into a queue, ``VERTEX_LANES`` vertices
   a cycle (a build with edge lanes); the sums use the SpMV FMA lanes and tree (all n
   vertices as one row).  Stops when the L1 change is below
   ``tolerance`` (``cpl_aux`` bit 31) or at ``max_iterations``.

*Row slices* (``first_row``, ``rows``): the command computes rows ``first_row ..
first_row + rows - 1`` of an ``n``-vertex graph from the slice's row pointers and
columns (sources stay vertex ids below ``n``); each pass reads the rows' own values and
writes their results at their place in the output array, the rest of which it leaves
alone.  PageRank's contributions cover every vertex unless ``contributions`` says
otherwise: 1, one pass over the slice's rows (their ranks and degrees -> their rows of
scratch) and nothing else; 2, every iteration pulls the contributions already in
scratch with the command's ``dangling_term``, and ends with the slice's contributions
of its new ranks (their dangling rank, scaled, the next iteration's term).  Instances
on several memory channels each take a slice of one graph
(:func:`ndpkit.engines.graph.api.run`): with 2, each computes only its rows'
contributions and the host exchanges them, so no instance passes over every vertex.

Completion bytes count the streamed arrays (the golden model's figures); the source
value traffic is in the unit's counters (``link`` port), which depend on timing.

The engine's sections, one method each, in the order :meth:`GraphEngine.elaborate`
builds them: the command's checks and lengths, the transfers, the readers' words, the
edge path, PageRank's vertex passes, the results (with
:class:`~ndpkit_hw.engines.graph.held.ResultWords`), the passes' ends and the control.
"""
from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.codes import ErrorCode
from ndpkit_spec.engines.graph import ACC_LANES, EDGE_LANES, MAX_VERTICES, MODE_BASELINE, WINDOW_VERTICES, Program
from ndpkit_spec.engines.sg import DEVICE_BANKS, DEVICE_ROW_BYTES, LINE
from ndpkit_spec.engines.graph import BLOCK as GRAPH
from ndpkit_hw.arith.mul import FpMul
from ndpkit_hw.bus.axi import log2_exact
from ndpkit_hw.bus.dma import Transfer, TransferGroup
from ndpkit_hw.engines.graph.edges import EdgeGenerator
from ndpkit_hw.engines.graph.exchange import exchange_word
from ndpkit_hw.engines.graph.gather import GatherPath
from ndpkit_hw.engines.graph.held import ResultWords
from ndpkit_hw.engines.graph.lanes import EdgeLanes
from ndpkit_hw.engines.graph.pagerank import VertexPass
from ndpkit_hw.engines.graph.routes import ELEMENT_ARRAYS, FP32_ONE, ResultRouter, WordRouter
from ndpkit_hw.engines.graph.words import WordPacker
from ndpkit_hw.engines.graph.rowsums import RowSums
from ndpkit_hw.engines.graph.validate import GraphValidator
from ndpkit_hw.engines.graph.window import SourceWindow
from ndpkit_hw.engines.skeleton import CommandChecks, CommandControl, CommandEngine
from ndpkit_hw.engines.sg.unit import SgUnit

__all__ = ["GraphEngine"]

#: the row sums' FMAs of a build with edge lanes (SpMV's and PageRank's rows, eight entries a cycle)
SUM_FMAS = 8
#: the row sums' banks of partials (distributed RAM: a bank is 128 words more), rows in
#: flight: a one-entry row holds its bank about 20 cycles, so sixteen let such rows come
#: at about one a cycle
SUM_BANKS = 16
#: PageRank's vertices a cycle in its vertex passes (a build with edge lanes): the row sums
#: take a long row (the pass's one row of all its vertices) eight entries a cycle, and the
#: pass's two vertex streams at eight elements a cycle each fill the 512-bit port
VERTEX_LANES = 8


class GraphEngine(CommandEngine):
    def __init__(self, *, addr_width: int = 32, data_width: int = 512, id_width: int = 4,
                 max_burst_bytes: int = 4096, max_outstanding: int = 8, link_bytes: int = 16,
                 row_bytes: int = DEVICE_ROW_BYTES, banks: int = DEVICE_BANKS, group_timeout: int = 8,
                 tickets: int = 256, mshr_slots: int = 4, response_ids: int = 64, cache_lines: int = 64,
                 window_vertices: int = WINDOW_VERTICES, edge_lanes: int = EDGE_LANES,
                 vertex_lanes: int | None = None, window_sets: int | None = None):
        if data_width != 8 * LINE:
            raise ValueError(f"graph: data_width must be {8 * LINE} (the unit's 64-byte columns), not {data_width}")
        self.row_bytes, self.group_timeout, self.tickets = row_bytes, group_timeout, tickets
        self.mshr_slots, self.response_ids, self.cache_lines = mshr_slots, response_ids, cache_lines
        self.gather = GatherPath(addr_width=addr_width, row_bytes=row_bytes, mshr_slots=mshr_slots,
                                 response_ids=response_ids, group_timeout=group_timeout, tickets=tickets,
                                 cache_lines=cache_lines)
        # edge lanes (above 1): the edge passes take `edge_lanes` edges a cycle when every
        # source is in the window (lanes.py), the sums' rows up to eight entries a cycle into
        # eight FMAs (rowsums.py); else the
        # single-edge path below (the bundler refuses a lane count it cannot take, the
        # window lanes without a window)
        self.edge_lanes = edge_lanes
        self.sum_fmas = 1 if edge_lanes == 1 else min(edge_lanes, SUM_FMAS)
        if edge_lanes != 1:
            self.lanes = EdgeLanes(edge_lanes, data_width, sum_fmas=self.sum_fmas)
        # PageRank's vertex lanes: a copy of the vertex dataflow each, about 4k LUT (a build
        # that runs no PageRank may take fewer), at most the row sums' FMAs (None: that many,
        # up to VERTEX_LANES)
        if vertex_lanes is None:
            vertex_lanes = min(VERTEX_LANES, self.sum_fmas)
        log2_exact(vertex_lanes, "graph: vertex_lanes")
        if vertex_lanes > self.sum_fmas:
            raise ValueError(f"graph: vertex_lanes must be at most the row sums' {self.sum_fmas} FMA"
                             f"{'s' * (self.sum_fmas != 1)} (edge_lanes={edge_lanes}), not {vertex_lanes}")
        self.vertex_lanes = vertex_lanes
        # two window sets (the card's window exchange: a round of a graph split over
        # instances takes its sources as the instances shared them, no load from memory)
        # where the edge lanes read a window; else one
        if window_sets is None:
            window_sets = 2 if window_vertices and edge_lanes != 1 else 1
        if window_sets == 2 and edge_lanes == 1:
            raise ValueError("graph: window_sets=2 serves the edge lanes: with edge_lanes=1 pass window_sets=1")
        self.window = SourceWindow(window_vertices, data_width, read_lanes=edge_lanes if edge_lanes != 1 else 0,
                                   sets=window_sets)
        #: the build constants the host reads (read-only registers)
        self.constants = {"window_capacity": window_vertices, "window_sets": window_sets}
        # The streams take full 4 KiB bursts, four in flight each: the validation pass and
        # the window loads run at the bus's rate, and on the HBM preset Piccolo mode gains
        # too (measured against 1 KiB and two: the unit's reads are not starved).
        self.unit = SgUnit(addr_width=addr_width, id_width=1, row_bytes=row_bytes, banks=banks,
                           link_bytes=link_bytes, max_inflight=32)
        super().__init__(GRAPH, addr_width=addr_width, data_width=data_width, reads=["rowptr", "col", "val", "old", "window"],
                         writes=["out"], max_burst_bytes=min(max_burst_bytes, 4096),
                         max_outstanding=min(max_outstanding, 4), extra_ports=1,
                         members={"link": Out(self.unit.signature.members["counters"].shape),
                                  "share": Out(stream.Signature(exchange_word(data_width))),
                                  "shared": In(stream.Signature(exchange_word(data_width)))})
        if id_width < self.ports.id_width:
            raise ValueError(f"graph: id_width must be at least {self.ports.id_width}")

    def elaborate(self, platform):
        m = Module()
        self.elaborate_ports(m)
        m.submodules.unit = unit = self.unit
        wiring.connect(m, unit.bus, self.ports.port(5))
        m.d.comb += [unit.window_base.eq(self.window_base), unit.window_size.eq(self.window_size),
                     self.link.eq(unit.counters)]
        ctl = CommandControl(m, self)
        g = _Wires(ctl=ctl, cmd=ctl.cmd, checks=CommandChecks(m, self))
        self._command(m, g)
        self._transfers(m, g)
        self._readers(m, g)
        self._edge_path(m, g)
        self._vertex_passes(m, g)
        self._results(m, g)
        self._control(m, g)
        return m

    def _words(self, m: Module, count):
        """Bytes of ``count`` uint32 rounded up to whole bus words."""
        word = self.data_width // 8
        nbytes = Signal(40)
        m.d.comb += nbytes.eq(((count << 2) + (word - 1)) & ~Const(word - 1, 40))
        return nbytes

    def _command(self, m: Module, g: "_Wires"):
        """The command's checks and what it fixes for every pass: the program's flags, the
        arrays' lengths in whole words, the row slice, which passes run on the edge lanes."""
        cmd, checks = g.cmd, g.checks
        program = cmd.format_program
        g.is_sssp = is_sssp = program == Program.SSSP
        g.is_spmv = is_spmv = program == Program.SPMV
        g.is_pagerank = is_pagerank = program == Program.PAGERANK
        g.uses_val = uses_val = is_sssp | is_spmv     # the edge pass's val stream: SSSP weights or matrix entries
        g.sum_rows = is_spmv | is_pagerank     # the edge pass sums rows in fp32 (FMA partials + tree)
        lane_bits = (self.data_width // 32 - 1).bit_length()
        # the row slice: rows first_row .. first_row + row_count - 1 (0 rows: through n)
        g.row_count = row_count = checks.derive(Mux(cmd.rows == 0, cmd.n - cmd.first_row, cmd.rows)[:32], "row_count")
        slice_end = checks.derive(cmd.first_row + row_count, "slice_end", after=checks.after(row_count))
        # the arrays' lengths in whole bus words, registered (the checks wait for them): the
        # passes' transfers and byte counts start at a register, not at the rounding add
        after_rows = checks.after(row_count)
        g.rowptr_len = rowptr_len = checks.derive(self._words(m, row_count + 1), "rowptr_len", after=after_rows)
        # (no add to the unpacker)
        g.rowptr_count = checks.derive(row_count + 1, "rowptr_count", after=after_rows)
        g.edge_len = edge_len = checks.derive(self._words(m, cmd.edges), "edge_len")
        g.vertex_len = vertex_len = checks.derive(self._words(m, cmd.n), "vertex_len")
        g.row_len = checks.derive(self._words(m, row_count), "row_len", after=after_rows)     # the slice's values
        g.last_iteration = checks.derive(cmd.max_iterations - 1, "last_iteration")
        # When the first edge pass runs on the edge lanes (every source in the window: CC, BFS,
        # SSSP, SpMV, PageRank's pull sums), the validation pass
        # judges the row pointers only, with the source window's load beside it, and the
        # columns are judged as the first edge pass takes them: its results are held on chip
        # until the verdict, so a bad column still writes nothing, and the columns cross the
        # port once.  (A pass on the lanes has at most the window's vertices as rows: the
        # held results never fill.)
        g.lanes_on = lanes_on = self.edge_lanes > 1     # the edge lanes are built
        g.word_shift = ((self.data_width // 8) - 1).bit_length()
        g.col_words = edge_len[g.word_shift:]
        # (PageRank's first edge pass is its pull sums': over the contributions the host wrote
        # into scratch, or, with every vertex's computed, over those the contributions pass
        # wrote straight into the window, nothing written to memory before it)
        g.given = given = cmd.contributions == 2     # PageRank's contributions given (see below)
        every_source_in = (cmd.source_window >= cmd.n) & (cmd.edges != 0) if lanes_on else Const(0)
        g.first_on_lanes = checks.derive(every_source_in & (~is_pagerank | given | (cmd.contributions == 0)),
                                         "first_on_lanes")
        # PageRank, every vertex's contributions, every source in the window: the contributions
        # pass fills the window itself (its words go there, not to scratch, which stays as
        # the host left it), and no pass loads the window from memory
        g.contrib_in_window = checks.derive(every_source_in & is_pagerank & (cmd.contributions == 0),
                                            "contrib_in_window")
        arrays = {"rowptr": (cmd.rowptr, rowptr_len, 1), "col": (cmd.col, edge_len, cmd.edges != 0),
                  "val": (cmd.val, Mux(is_pagerank, vertex_len, edge_len), (uses_val & (cmd.edges != 0)) | is_pagerank),
                  "a": (cmd.a, vertex_len, 1), "b": (cmd.b, vertex_len, 1),
                  "scratch": (cmd.scratch, vertex_len << 1, is_pagerank)}
        good_program = (program == Program.BFS) | is_sssp | (program == Program.CC) | is_spmv | is_pagerank
        tolerance_nan = (cmd.tolerance[23:31] == 0xFF) & (cmd.tolerance[:23] != 0)
        checks.require(~good_program)           # (the 1-bit mode field cannot be out of range)
        checks.require((cmd.n == 0) | (cmd.n > MAX_VERTICES) | (cmd.max_iterations == 0))
        checks.require(is_pagerank & (cmd.tolerance[31] | tolerance_nan))
        checks.require(cmd.source_window > self.window.vertices)
        checks.require((cmd.first_row[:lane_bits] != 0) | (cmd.first_row >= cmd.n))
        checks.require((slice_end > cmd.n) | (row_count[:lane_bits] != 0) & (slice_end != cmd.n))
        # PageRank's contributions: 0 every vertex's, 1 the slice's only, 2 given (then the slice's)
        whole = (cmd.first_row == 0) & (row_count == cmd.n)
        checks.require((cmd.contributions > 2) | (cmd.contributions != 0) & ~is_pagerank)
        checks.require(given & (cmd.max_iterations != 1) & ~whole)
        # the window exchange: share or take one iteration on a build with two sets; share
        # not PageRank's every-vertex contributions; take every source from the window on
        # the lanes (PageRank: given contributions), the set holding the previous round's
        # every word
        g.shares, g.takes = shares, takes = cmd.exchange_share, cmd.exchange_take
        window = self.window
        m.d.comb += [window.round.eq(cmd.exchange_round), window.need.eq(vertex_len[g.word_shift:])]
        exchanging = (shares | takes) & ((self.window.sets != 2) | (cmd.max_iterations != 1) |
                                         shares & is_pagerank & (cmd.contributions == 0))
        checks.require(exchanging | takes & ((cmd.source_window < cmd.n) | ~Const(lanes_on) |
                                             is_pagerank & ~given | ~window.complete))
        enabled = {name: e for name, (_, _, e) in arrays.items()}
        checks.ranges({name: Transfer(a, l[:32]) for name, (a, l, _) in arrays.items()}, active=enabled,
                      wide={name: l for name, (_, l, _) in arrays.items()})
        checks.disjoint(list(arrays))

    def _transfers(self, m: Module, g: "_Wires"):
        """The phases' flags (driven by :meth:`_control`) and the arrays each pass reads and
        writes: the transfers, the window's loads."""
        cmd, readers, writer = g.cmd, self.ports.readers, self.ports.writers["out"]
        g.validating = validating = Signal()
        g.iterating = iterating = Signal()           # an edge pass
        g.judging = Signal()                         # the first edge pass, its columns judged as the lanes take them
        g.judged_bad = Signal()                      # it has a bad column (or a read a bus error)
        g.holding = Signal()                         # its results wait for the columns' verdict
        g.vertex_pass = vertex_pass = Signal()       # PageRank: a pass over the vertices (contributions or update)
        g.stage = stage = Signal(2)      # PageRank's pass in an iteration: 0 contributions, 1 pull sums, 2 update
        g.update = stage == 2
        g.odd = odd = Signal()                       # this iteration reads b and writes a
        g.start = Signal()                           # one cycle before a phase: counters restart
        g.source_base = source_base = Mux(odd, cmd.b, cmd.a)
        sums_base = Signal(self.addr_width)      # PageRank: the pull sums, after the contributions
        m.d.comb += sums_base.eq(cmd.scratch + g.vertex_len[:32])
        # the slice's rows in each array (registered: fixed for the command, settled
        # during the validation pass)
        row_offset = cmd.first_row[:30] << 2
        a_rows, b_rows, sums_rows = Signal(32), Signal(32), Signal(32)
        degree_rows, contrib_rows = Signal(32), Signal(32)
        m.d.sync += [a_rows.eq(cmd.a + row_offset), b_rows.eq(cmd.b + row_offset), sums_rows.eq(sums_base + row_offset),
                     degree_rows.eq(cmd.val + row_offset), contrib_rows.eq(cmd.scratch + row_offset)]
        # PageRank's passes: contributions (ranks and degrees -> scratch: every vertex's, or
        # the slice's rows with `contributions` 1 and 2), pull sums (the edge pass over the
        # contributions -> the slice's rows of scratch + n), update (the slice's sums and
        # ranks -> the other array)
        contributing = g.is_pagerank & (stage == 0)              # the contributions pass
        every_vertex = contributing & (cmd.contributions == 0)
        # the contributions pass fills the window (registered: set in NEXT, a cycle before the pass)
        g.into_window = Signal()
        m.d.sync += g.into_window.eq(contributing & g.contrib_in_window)
        # the vertex passes' and results' length, registered: the stage changes as a pass ends,
        # a cycle (NEXT) before the next pass's transfers, counts and byte counts use them
        g.pass_count, g.pass_len = pass_count, pass_len = Signal(32), Signal(40)
        m.d.sync += [pass_count.eq(Mux(every_vertex, cmd.n, g.row_count)),
                     pass_len.eq(Mux(every_vertex, g.vertex_len, g.row_len))]
        val_base = Mux(vertex_pass & g.update, sums_rows, Mux(contributing & ~every_vertex, degree_rows, cmd.val))
        out_base = Mux(contributing, Mux(every_vertex, cmd.scratch, contrib_rows),
                       Mux(g.is_pagerank & (stage == 1), sums_rows, Mux(odd, a_rows, b_rows)))
        g.transfers = TransferGroup(
            m, {"rowptr": readers["rowptr"], "col": readers["col"], "val": readers["val"], "old": readers["old"],
                "out": writer},
            {"rowptr": Transfer(cmd.rowptr, g.rowptr_len[:32]),
             "col": Transfer(cmd.col, g.edge_len[:32]),
             "val": Transfer(val_base, Mux(vertex_pass, pass_len, g.edge_len)[:32]),
             "old": Transfer(Mux(every_vertex, source_base, Mux(odd, b_rows, a_rows)), pass_len[:32]),
             "out": Transfer(out_base, pass_len[:32])},
            validating | iterating | vertex_pass,
            enabled={"rowptr": ~vertex_pass, "col": ~vertex_pass & (cmd.edges != 0) & ~(validating & g.first_on_lanes),
                     "val": (iterating & g.uses_val & (cmd.edges != 0)) | vertex_pass,
                     "old": (iterating & ~g.sum_rows) | vertex_pass,
                     "out": (iterating & ~g.holding) | vertex_pass & ~g.into_window})
        # the source window: min(window, n) values of the pass's source array, before each
        # edge pass (PageRank's: the contributions)
        g.loading = Signal()
        g.window_count = window_count = Signal(range(MAX_VERTICES + 1))
        m.d.sync += window_count.eq(Mux(cmd.source_window < cmd.n, cmd.source_window, cmd.n))
        g.window_len = window_len = Signal(40)    # (registered: a register, not the rounding add, starts the loads)
        g.window_words = Signal(range(MAX_VERTICES + 1))
        m.d.sync += [window_len.eq(self._words(m, window_count)), g.window_words.eq(window_len >> g.word_shift)]
        g.loads = TransferGroup(m, {"window": readers["window"]},
                                {"window": Transfer(Mux(g.is_pagerank, cmd.scratch, source_base), window_len[:32])},
                                g.loading)
        # the edge lanes take the edge passes when every source is in the window (registered:
        # fixed for the command, settled during the validation pass)
        g.use_lanes = Signal()
        if g.lanes_on:
            m.d.sync += g.use_lanes.eq(window_count == cmd.n)

    def _readers(self, m: Module, g: "_Wires"):
        """The readers' words to their users (:class:`~ndpkit_hw.engines.graph.routes.WordRouter`),
        the validation's verdicts, the results into words."""
        cmd, readers, judging, start, use_lanes = g.cmd, self.ports.readers, g.judging, g.start, g.use_lanes
        # the validation pass takes the row pointers and columns a word at a time; the edge
        # passes element by element through the unpackers, or (the edge lanes) the columns
        # and weights as words; PageRank's vertex passes read their degrees and sums as elements
        m.submodules.validator = g.validator = validator = GraphValidator(self.data_width)
        m.d.comb += [validator.n.eq(cmd.n), validator.rows.eq(g.row_count), validator.edges.eq(cmd.edges),
                     validator.rowptr_on.eq(~judging), validator.start.eq(start)]
        # (the columns it takes, registered: fixed for a pass, settled by its start; the
        # reader's pops then follow a compare with a register, not the judging flag's select)
        m.d.sync += validator.col_words.eq(Mux(judging | ~g.first_on_lanes, g.col_words, 0))
        m.submodules.words = g.words_in = words_in = WordRouter(self.data_width, self.vertex_lanes)
        for name in ELEMENT_ARRAYS:
            wiring.connect(m, readers[name].data, getattr(words_in, f"{name}_words"))
        wiring.connect(m, words_in.check_rowptr, validator.rowptr)
        # the validation's columns: the column reader's words in the validation pass, or (the
        # first pass on the lanes) each word as the lanes take it, which the validator, ready
        # until it has them all, only watches
        check_col = words_in.check_col
        col_valid, col_payload = check_col.valid, check_col.payload
        if g.lanes_on:
            lane_col = words_in.lane_col
            col_valid = Mux(judging, lane_col.valid & self.lanes.col.ready, col_valid)
            col_payload = Mux(judging, lane_col.payload, col_payload)
        m.d.comb += [validator.col.valid.eq(col_valid), validator.col.payload.eq(col_payload),
                     check_col.ready.eq(validator.col.ready)]
        # (the phase a cycle late: a pass's first words come back several cycles after its
        # transfers start, and none are in flight at its end: the router's selects start at registers)
        routed_validating, routed_to_lanes = Signal(), Signal()
        m.d.sync += [routed_validating.eq(g.validating), routed_to_lanes.eq(use_lanes & g.iterating)]
        # (so are the single path's and the vertex passes' runs, which their readiness follows)
        g.single_run, g.vertex_run = Signal(), Signal()
        m.d.sync += [g.single_run.eq(g.iterating & ~use_lanes), g.vertex_run.eq(g.vertex_pass)]
        m.d.comb += [words_in.validating.eq(routed_validating), words_in.to_lanes.eq(routed_to_lanes),
                     words_in.to_vertices.eq(g.vertex_run), words_in.start.eq(start),
                     words_in.rowptr_count.eq(g.rowptr_count), words_in.col_count.eq(cmd.edges),
                     words_in.val_count.eq(cmd.edges), words_in.old_count.eq(g.pass_count),
                     words_in.vertex_count.eq(g.pass_count)]
        if g.lanes_on:
            wiring.connect(m, words_in.lane_col, self.lanes.col)
            wiring.connect(m, words_in.lane_val, self.lanes.val)
        m.submodules.packer = g.packer = packer = WordPacker(self.data_width, group=self.vertex_lanes)
        # the first pass's verdict: pending until every column word is judged; failed on a bad
        # column or a read's bus error (its results would be of words never read)
        m.d.comb += [g.judged_bad.eq(judging & (validator.bad_index | (g.transfers.error != 0))),
                     g.holding.eq(judging & (~validator.done | g.judged_bad))]
        m.d.comb += [packer.count.eq(g.pass_count), packer.start.eq(start), packer.grouped.eq(g.vertex_pass)]
        g.rp, g.col, g.val, g.old = (getattr(words_in, name) for name in ELEMENT_ARRAYS)
        # the validation pass's verdicts (GraphValidator)
        g.graph_error = Mux(validator.bad_graph, ErrorCode.BAD_GRAPH, 0)
        g.index_error = Mux(validator.bad_index, ErrorCode.BAD_INDEX, 0)

    def _edge_path(self, m: Module, g: "_Wires"):
        """The edge passes: rows from the row pointers and edges from the columns, on the
        edge lanes through the window's lane ports, or one edge a cycle through the window
        and the gathers (:class:`~ndpkit_hw.engines.graph.gather.GatherPath`)."""
        cmd, rp, col, val, old, start = g.cmd, g.rp, g.col, g.val, g.old, g.start
        m.submodules.edges = g.gen = gen = EdgeGenerator()
        m.d.comb += [gen.rowptr.valid.eq(rp.valid), gen.rowptr.payload.eq(rp.payload),
                     gen.col.valid.eq(col.valid), gen.col.payload.eq(col.payload),
                     gen.val.valid.eq(val.valid), gen.val.payload.eq(val.payload),
                     gen.run.eq(g.single_run), gen.uses_val.eq(g.uses_val), gen.start.eq(start),
                     gen.weight.eq(Mux(g.is_pagerank, FP32_ONE, Mux(cmd.format_program == Program.BFS, 1, 0)))]
        g.lanes_busy = lane_rowptr_ready = lane_own_ready = lanes_changed = Const(0)
        if g.lanes_on:
            # edge lanes: rows in lane groups through the window's lane ports to the row minima
            m.submodules.lanes = edge_lanes = self.lanes
            m.d.comb += [edge_lanes.rowptr.valid.eq(rp.valid), edge_lanes.rowptr.payload.eq(rp.payload),
                         edge_lanes.own.valid.eq(old.valid), edge_lanes.own.payload.eq(old.payload),
                         edge_lanes.run.eq(g.iterating & g.use_lanes), edge_lanes.start.eq(start),
                         edge_lanes.uses_val.eq(g.uses_val), edge_lanes.weight.eq(gen.weight),
                         edge_lanes.edges.eq(cmd.edges), edge_lanes.sums.eq(g.sum_rows)]
            g.lanes_busy, lanes_changed = edge_lanes.busy, edge_lanes.changed
            lane_rowptr_ready, lane_own_ready = edge_lanes.rowptr.ready, edge_lanes.own.ready

        # the source window, then the single-edge path's gathers
        m.submodules.window = g.window = window = self.window
        m.d.comb += [window.start.eq(start), window.count.eq(g.window_count),
                     window.shared.valid.eq(self.shared.valid), window.shared.payload.eq(self.shared.payload),
                     self.shared.ready.eq(window.shared.ready)]
        # the source array's base (PageRank pulls contributions), a register: the array changes
        # only between passes, and its select from the command's fields stays out of the
        # window stage's address add
        m.d.sync += window.base.eq(Mux(g.is_pagerank, cmd.scratch, g.source_base))
        if g.lanes_on:
            m.d.comb += [window.lane_u.eq(edge_lanes.lane_u), window.lane_en.eq(edge_lanes.lane_en),
                         edge_lanes.lane_value.eq(window.lane_value)]
        wiring.connect(m, gen.edge, window.edge)
        m.submodules.gather = g.gather = gather = self.gather
        g.streams_done = Signal()        # every edge of the iteration has left the queue (registered:
                                         # the collector's groups flush a cycle later, not through its take)
        wiring.connect(m, window.out, gather.windowed)
        wiring.connect(m, gather.req, self.unit.req)
        unit = self.unit
        m.d.comb += [gather.lookup_u.eq(gen.edge.payload.u), window.cache_hit.eq(gather.cache_hit),
                     window.cache_value.eq(gather.cache_value),
                     gather.resp.valid.eq(unit.resp.valid), gather.resp.payload.eq(unit.resp.payload.data),
                     unit.resp.ready.eq(gather.resp.ready),
                     gather.own.valid.eq(old.valid), gather.own.payload.eq(old.payload),
                     gather.run.eq(g.iterating), gather.sums.eq(g.sum_rows),
                     gather.baseline.eq(cmd.format_mode == MODE_BASELINE),
                     gather.start.eq(start), gather.flush.eq(g.streams_done)]
        g.changed = gather.changed | lanes_changed
        # the streams' readers: validation, the edge generator, the reducer (the vertex passes
        # read their own unpackers)
        m.d.comb += [rp.ready.eq(gen.rowptr.ready | lane_rowptr_ready), col.ready.eq(gen.col.ready),
                     val.ready.eq(gen.val.ready), old.ready.eq(gather.own.ready | lane_own_ready)]

    def _vertex_passes(self, m: Module, g: "_Wires"):
        """PageRank's vertex passes (ranks and degrees or sums, a group of vertices a cycle)
        and the dangling rank scaled by 1/n between the contributions and the update."""
        g.dterm = dterm = Signal(32)               # dangling x (1/n), for the update pass
        m.submodules.vertex = g.vertex = vertex = VertexPass(self.vertex_lanes)
        wiring.connect(m, g.words_in.vertex_old, vertex.rank)
        wiring.connect(m, g.words_in.vertex_val, vertex.other)
        m.d.comb += [vertex.run.eq(g.vertex_run), vertex.update.eq(g.update), vertex.damping.eq(g.cmd.damping),
                     vertex.teleport.eq(g.cmd.teleport), vertex.dterm.eq(dterm), vertex.start.eq(g.start)]
        m.submodules.scale = g.scale = scale = FpMul()
        with m.If(scale.o.valid):
            m.d.sync += dterm.eq(scale.o.payload[0])

    def _results(self, m: Module, g: "_Wires"):
        """The results: SpMV's and PageRank's fp32 row sums (ACC_LANES FMA partial sums a
        row, then the adder tree), every pass's results routed into the word packer, its
        words to the writer, held, or into the window."""
        # SpMV and PageRank's pull pass: a row's entries (from the sum lanes eight a cycle, or
        # the single path's one); PageRank's vertex passes: one row of all n vertices (the
        # dangling rank, the L1 change), its sum kept
        # (sixteen banks for the lanes' short rows; a build without lanes, two, as its single
        # path takes an entry a cycle)
        m.submodules.sums = g.sums = sums = RowSums(ACC_LANES, fmas=self.sum_fmas,
                                                    banks=SUM_BANKS if g.lanes_on else 2)
        m.submodules.results = results = ResultRouter(self.sum_fmas, self.vertex_lanes)
        wiring.connect(m, results.entry, sums.entry)
        wiring.connect(m, sums.sums, results.row_sums)
        wiring.connect(m, results.elements, g.packer.elements)
        # the first pass's results held as packed bus words (block RAM: a word a 16 window
        # vertices, as a pass on the lanes has no more rows) until its columns are judged,
        # then written at the port's rate; dropped on a bad one, and such a pass ends only
        # once the packer is done (its last rows may leave the sums after the rest is
        # idle: nothing of it may reach the next pass's writes)
        lanes = self.data_width // 32
        m.submodules.result_words = words = ResultWords(
            self.data_width, -(-self.window.vertices // lanes) if g.lanes_on else 0)
        self._share(m, g, words.results)
        wiring.connect(m, self.ports.readers["window"].data, words.loaded)
        wiring.connect(m, words.out, self.ports.writers["out"].data)
        wiring.connect(m, words.window, g.window.load)
        m.d.comb += [words.into_window.eq(g.into_window), words.holding.eq(g.holding), words.drop.eq(g.judged_bad)]
        g.results_left = words.left
        wiring.connect(m, g.vertex.out, results.vertex)
        wiring.connect(m, g.gather.entry, results.single_entry)
        wiring.connect(m, g.gather.minimum, results.single_minima)
        if g.lanes_on:
            wiring.connect(m, self.lanes.entries, results.lane_entries)
            wiring.connect(m, self.lanes.results, results.lane_minima)
        m.d.comb += [sums.start.eq(g.start), results.vertex_pass.eq(g.vertex_pass), results.use_lanes.eq(g.use_lanes),
                     results.sum_rows.eq(g.sum_rows), results.iterating.eq(g.iterating), results.start.eq(g.start),
                     results.pass_count.eq(g.pass_count)]
        g.total_sum, g.total_ready = results.total, results.total_ready       # a vertex pass's sum
        m.d.comb += [g.scale.i.payload.a[0].eq(g.total_sum), g.scale.i.payload.b[0].eq(g.cmd.inv_n)]

    def _share(self, m: Module, g: "_Wires", results):
        """The packer's words to ``results`` and, in a sharing command's pass (its edge
        pass; PageRank's contributions pass), to the window exchange too, tagged with
        their bus word of the vertex array and the command's round, through a queue (so
        the exchange's arbitration is not in the packer's path); ``g.poison`` (a sharing
        command ending with an error) sends its round's poison word."""
        cmd, packer = g.cmd, g.packer.words
        layout = exchange_word(self.data_width)
        m.submodules.share_queue = queue = fifo.SyncFIFOBuffered(width=layout.size, depth=4)
        g.share_queue = queue
        sharing = Signal()
        m.d.sync += sharing.eq(g.shares & Mux(g.is_pagerank, g.vertex_pass & (g.stage == 0), g.iterating))
        word = Signal(layout["word"].shape)            # the pass's next bus word of the vertex array
        with m.If(g.start):
            m.d.sync += word.eq(cmd.first_row[g.word_shift - 2:])
        room = ~sharing | queue.w_rdy
        m.d.comb += [results.payload.eq(packer.payload), results.valid.eq(packer.valid & room),
                     packer.ready.eq(results.ready & room)]
        g.poison = Signal()
        entry = Signal(layout)
        shared = packer.valid & packer.ready & sharing
        m.d.comb += [entry.word.eq(word), entry.round.eq(cmd.exchange_round), entry.data.eq(packer.payload.data),
                     entry.poison.eq(g.poison), queue.w_data.eq(entry), queue.w_en.eq(g.poison | shared)]
        with m.If(shared):
            m.d.sync += word.eq(word + 1)
        m.d.comb += [self.share.valid.eq(queue.r_rdy), self.share.payload.eq(queue.r_data),
                     queue.r_en.eq(self.share.ready)]

    def _pass_ends(self, m: Module, g: "_Wires"):
        """When an edge pass is over, and the bytes each pass counts."""
        # the byte counts of a pass, fixed by the command: registered (first used at the
        # validation's end), so a pass's end adds one register to the running count
        scan_bytes, val_bytes, own_bytes = Signal(32), Signal(32), Signal(32)
        g.iteration_bytes = iteration_bytes = Signal(32)
        # (the validation pass's: the row pointers, and the columns unless the first pass judges them)
        g.checked_bytes = checked_bytes = Signal(32)
        m.d.sync += [checked_bytes.eq(Mux(g.first_on_lanes, g.rowptr_len[:32], scan_bytes)),
                     scan_bytes.eq(g.rowptr_len[:32] + Mux(g.cmd.edges != 0, g.edge_len[:32], 0)),
                     val_bytes.eq(Mux(g.uses_val & (g.cmd.edges != 0), g.edge_len[:32], 0)),
                     own_bytes.eq(Mux(g.sum_rows, 0, g.row_len[:32])),
                     iteration_bytes.eq(scan_bytes + val_bytes + own_bytes)]
        m.d.sync += g.streams_done.eq(g.iterating & g.transfers.done["rowptr"] &
                                      (g.transfers.done["col"] | (g.cmd.edges == 0)) & g.gen.idle &
                                      ~g.gen.edge.valid & ~g.window.out.valid & g.gather.drained)
        # the edge pass is over: every stream, unit and result done (registered, a cycle
        # late, and high for one cycle: the state leaves ITERATE on it; the conditions
        # only ever rise within the pass)
        g.pass_over = pass_over = Signal()
        judged = ~g.judging | (g.validator.done | g.judged_bad) & g.packer.done
        m.d.sync += pass_over.eq(g.iterating & ~pass_over & g.transfers.finished & ~g.gather.busy &
                                 (~g.sum_rows | g.sums.idle) & ~g.lanes_busy & judged & ~g.results_left)

    def _control(self, m: Module, g: "_Wires"):
        """The phases: validate, then per iteration (load the window,) the edge pass, and
        PageRank's vertex passes; the byte counts, the iterations and the completion."""
        self._pass_ends(m, g)
        cmd, ctl, transfers, loads = g.cmd, g.ctl, g.transfers, g.loads
        judging, judged_bad, start, stage, odd = g.judging, g.judged_bad, g.start, g.stage, g.odd
        given, is_pagerank, window, vertex, scale = g.given, g.is_pagerank, g.window, g.vertex, g.scale
        checked_bytes, iteration_bytes, pass_over = g.checked_bytes, g.iteration_bytes, g.pass_over
        row_len, pass_len = g.row_len, g.pass_len
        iterations = Signal(32)
        # "this pass ends the last allowed iteration", a cycle behind the count (which
        # changes only at a pass's end, long before the next one ends): the compare
        # from registers, not from the count's increment into the completion's enable
        final_iteration = Signal()
        m.d.sync += final_iteration.eq(iterations == g.last_iteration)
        converged = Signal()             # PageRank stopped by its tolerance (cpl_aux bit 31)
        changed_last = Signal()          # the last iteration changed a value (a sharing command's cpl_aux bit 30)
        stopping = Signal()              # contributions 2: the iteration's last pass ends the command
        bus_error = Signal(4)            # the first AXI error of any phase
        bytes_read, bytes_written = Signal(32), Signal(32)
        scale_issued = Signal()

        def verdict(bus):               # the command's error: a bus error, else the validation's
            return Mux(bus != 0, bus, Mux(g.graph_error != 0, g.graph_error, g.index_error))

        # the window exchange: the set the command reads (taking or loading it), words into
        # it dropped while it runs; a load from memory empties the set's record of a round
        takes, reading, poison_pending = g.takes, Signal(), Signal()
        check = g.checks.code()
        loads_window = (cmd.source_window != 0) & ~takes & ~(is_pagerank & (cmd.contributions == 1))
        # (a bit a set: the one it loads, the one a fresh round fills)
        invalidate = Signal(2)
        for k in range(2):
            m.d.comb += invalidate[k].eq(loads_window & (cmd.exchange_round[0] == k) |
                                         cmd.exchange_fresh & (cmd.exchange_round[0] != k))
        m.d.comb += [window.set.eq(cmd.exchange_round[0]), window.reading.eq(reading),
                     g.poison.eq(poison_pending)]

        def finish(error):
            # every end clears the judging flag, not the next command's start: that command's
            # validation starts in the cycle it is latched, from the flag
            m.d.sync += [judging.eq(0), reading.eq(0)]
            ctl.finish(error)
            # a sharing command completes once its words have left (its round poisoned when
            # it failed: the others' sets must not pass for complete)
            with m.If(g.shares):
                m.d.sync += poison_pending.eq(error != 0)
                m.next = "SHARED"

        window_len = g.window_len[:32]
        # a vertex pass's sum, settled a cycle after it is ready, and whether it is below the
        # tolerance (PageRank's L1 change), a register: not a 32-bit compare into the state
        total_settled, below = Signal(), Signal()
        total_sum = g.total_sum
        total_nan = (total_sum[23:31] == 0xFF) & (total_sum[:23] != 0)
        m.d.sync += [total_settled.eq(g.total_ready & ~start), below.eq(~total_nan & (total_sum < cmd.tolerance))]
        # an edge pass's bytes read (the first pass's window, loaded beside the validation,
        # counted with it), a register: settled long before the pass ends, so the count's
        # add starts from registers
        pass_read = Signal(32)
        m.d.sync += pass_read.eq(iteration_bytes + Mux(judging & ~g.contrib_in_window & ~takes, window_len, 0))
        with ctl.states(g.checks, first="VALIDATE",
                        start=[start.eq(1), window.invalidate.eq(Mux(check == 0, invalidate, 0))],
                        clear=transfers.clear() + loads.clear() + [odd.eq(0), reading.eq(check == 0),
                                                   iterations.eq(0), bytes_read.eq(0), bytes_written.eq(0),
                                                   bus_error.eq(0), stage.eq(Mux(given, 1, 0)), converged.eq(0),
                                                   changed_last.eq(0), stopping.eq(0), scale_issued.eq(0),
                                                   g.dterm.eq(cmd.dangling_term)]):
            with m.State("VALIDATE"):
                # (the row pointers only, with the window's load beside them, when the first
                # edge pass judges the columns)
                preloading = g.first_on_lanes & ~g.contrib_in_window & ~takes
                m.d.comb += [g.validating.eq(1), g.loading.eq(preloading)]
                # a reader reports before its last word is taken: wait for the verdicts too
                drained = g.validator.done
                loaded = ~preloading | loads.finished & ((window.loaded == g.window_words) | (loads.error != 0))
                with m.If(transfers.finished & (drained | (transfers.error != 0)) & loaded):
                    m.d.sync += [bytes_read.eq(checked_bytes),
                                 bus_error.eq(Mux(transfers.error != 0, transfers.error, loads.error)),
                                 judging.eq(g.first_on_lanes)]
                    m.next = "NEXT"
            with m.State("NEXT"):
                # start an iteration (or report the validation's verdict)
                m.d.comb += start.eq(1)
                m.d.sync += transfers.clear() + loads.clear()          # (start clears the reducer's changed)
                with m.If((bus_error != 0) | (g.graph_error != 0) | (g.index_error != 0)):
                    finish(verdict(bus_error))
                with m.Elif(is_pagerank & (stage != 1)):
                    m.next = "VERTEX"
                with m.Elif(judging | g.contrib_in_window | takes):   # the window loaded beside the
                    m.next = "ITERATE"          # validation, filled by the contributions pass, or taken
                with m.Elif(g.window_count != 0):
                    m.next = "LOAD"
                with m.Else():
                    m.next = "ITERATE"
            with m.State("LOAD"):
                # the source window, before the edge pass (the memory takes a word a cycle)
                m.d.comb += g.loading.eq(1)
                with m.If(loads.finished & ((window.loaded == g.window_words) | (loads.error != 0))):
                    m.d.sync += [bytes_read.eq(bytes_read + window_len), bus_error.eq(loads.error)]
                    with m.If(loads.error != 0):
                        finish(verdict(loads.error))
                    with m.Else():
                        m.next = "ITERATE"
            with m.State("ITERATE"):
                m.d.comb += g.iterating.eq(1)
                with m.If(pass_over):
                    m.d.sync += [bytes_read.eq(bytes_read + pass_read),
                                 bytes_written.eq(bytes_written + row_len[:32]), bus_error.eq(transfers.error),
                                 judging.eq(0)]
                    with m.If(judged_bad):                 # a bad column: nothing was written
                        m.d.sync += [bytes_read.eq(checked_bytes), bytes_written.eq(0)]
                        finish(verdict(transfers.error))
                    with m.Elif(is_pagerank):          # the pull sums are in: the update pass next
                        m.d.sync += stage.eq(2)
                        m.next = "NEXT"              # (NEXT ends the command on a bus error)
                    with m.Else():
                        m.d.sync += [iterations.eq(iterations + 1), odd.eq(~odd), changed_last.eq(g.changed)]
                        with m.If((transfers.error == 0) & g.changed & ~g.is_spmv &
                                  ~final_iteration):
                            m.next = "NEXT"
                        with m.Else():
                            finish(verdict(transfers.error))
            with m.State("VERTEX"):
                m.d.comb += g.vertex_pass.eq(1)
                # (the contributions into the window: its last word in too; the pass's sum a
                # cycle in its register, so the tolerance's compare is a register too)
                drained = total_settled & vertex.empty & ~vertex.out.valid & (~g.into_window | g.packer.done)
                with m.If(transfers.finished & (drained | (transfers.error != 0))):
                    m.d.sync += [bytes_read.eq(bytes_read + (pass_len[:32] << 1)),
                                 bytes_written.eq(bytes_written + Mux(g.into_window, 0, pass_len[:32])),
                                 bus_error.eq(transfers.error)]
                    with m.If(transfers.error != 0):
                        finish(verdict(transfers.error))
                    with m.Elif(~g.update & ((cmd.contributions == 1) | given & stopping)):
                        finish(0)                # the slice's contributions were the command's last pass
                    with m.Elif(~g.update):            # the dangling rank is in: scale it by 1/n
                        m.next = "SCALE"
                    with m.Else():                   # the L1 change is in
                        m.d.sync += [iterations.eq(iterations + 1), odd.eq(~odd), stage.eq(0), converged.eq(below),
                                     stopping.eq(below | final_iteration)]
                        # (given contributions: the slice's contributions of the new ranks end the iteration)
                        with m.If((below | final_iteration) & ~given):
                            finish(verdict(transfers.error))
                        with m.Else():
                            m.next = "NEXT"
            with m.State("SHARED"):
                # (the completion's error already set): the poison in, the queue drained
                with m.If(poison_pending & g.share_queue.w_rdy):
                    m.d.sync += poison_pending.eq(0)
                with m.If(~poison_pending & (g.share_queue.level == 0)):
                    m.next = "COMPLETE"
            with m.State("SCALE"):
                m.d.comb += scale.i.valid.eq(~scale_issued)
                m.d.sync += scale_issued.eq(1)
                with m.If(scale.o.valid):
                    m.d.sync += [scale_issued.eq(0), stage.eq(1)]
                    m.next = "NEXT"
        ctl.complete(bytes_read=bytes_read, bytes_written=bytes_written,
                     aux=Cat(iterations[:30], g.shares & changed_last & ~g.sum_rows, converged))


class _Wires(SimpleNamespace):
    """The signals and parts the engine's sections share: each section
    (:meth:`GraphEngine._command`, ``_streams``, ``_edge_path``, ``_vertex_passes``,
    ``_results``, ``_control``) reads what the ones before it named and adds its own."""
