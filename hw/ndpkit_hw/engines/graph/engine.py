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
   been written when a graph is rejected.
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
   lane) lets the **reducer** consume edges in order: ``new[v] = min(old[v], min_u value[u] + w)`` (saturating;
   BFS w = 1, CC w = 0), written in order through the burst writer (whole bus words,
   padding 0).  Iterations alternate a -> b -> a until one changes nothing or
   ``max_iterations``; ``cpl_aux`` = iterations.
4. *SpMV* (one pass, no ``old`` stream): the reducer sends each entry to an FMA,
   ``partial[k mod 8] = fma(val, x[u], partial[k mod 8])`` (a lane waits while its
   previous FMA is in flight: latency 13, so rows longer than 8 entries run at 8
   entries per 13 cycles); rows alternate between two banks of partials, so the next
   row starts at once while the finished row's FMAs complete; then its eight partials
   go down the adder tree (((p0+p1)+(p2+p3))+((p4+p5)+(p6+p7)), rows in order.  The tree's results queue for the
   writer; a row enters the tree only when the queue has room for everything in it.

5. *PageRank* (``val`` the out-degrees, ``scratch`` 2 x n words, four fp32 constants):
   per iteration a contributions pass (ranks, degrees -> ``rank / deg`` into scratch;
   the dangling rank summed), the SpMV edge pass with unit entries over the
   contributions (-> scratch + n), and an update pass (sums, ranks -> ``fma(d, sum +
   dangling / n, (1 - d) / n)`` into the other array; ``|new - rank|`` summed).  The
   vertex passes run one fixed-latency dataflow into a queue; the sums use the SpMV
   FMA lanes and tree (all n vertices as one row).  Stops when the L1 change is below
   ``tolerance`` (``cpl_aux`` bit 31) or at ``max_iterations``.

Completion bytes count the streamed arrays (the golden model's figures); the source
value traffic is in the unit's counters (``link`` port), which depend on timing.
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ndpkit_spec.codes import ErrorCode
from ndpkit_spec.engines.graph import MAX_VERTICES, MODE_BASELINE, Program
from ndpkit_spec.engines.sg import DEVICE_BANKS, DEVICE_ROW_BYTES, LINE, Op
from ndpkit_spec.engines.graph import BLOCK as GRAPH
from ndpkit_hw.arith.dataflow import Dataflow, Timed
from ndpkit_hw.arith.fma import FpFma
from ndpkit_hw.arith.mul import FpMul
from ndpkit_hw.arith.reduce import FpReduce
from ndpkit_hw.bus.axi import log2_exact
from ndpkit_hw.bus.dma import Transfer, TransferGroup
from ndpkit_hw.engines.skeleton import CommandChecks, CommandControl, CommandEngine
from ndpkit_hw.engines.sg.unit import MAX_OFFSETS, SgUnit

__all__ = ["GraphEngine"]

INF = 0xFFFF_FFFF
FP32_ONE = 0x3F80_0000


class WordUnpacker(wiring.Component):
    """A reader's bus words -> ``count`` 32-bit elements, in order (the last word's
    unused elements dropped).  ``start`` restarts the count."""

    def __init__(self, data_width: int):
        self.lanes = data_width // 32
        super().__init__({
            "words": In(stream.Signature(data.StructLayout({"data": data_width, "last": 1}))),
            "elements": Out(stream.Signature(32)),
            "count": In(32),
            "start": In(1),
            "done": Out(1),              # all ``count`` elements taken (their words too)
        })

    def elaborate(self, platform):
        m = Module()
        lane = Signal(range(self.lanes))
        emitted = Signal(32)
        m.d.comb += self.done.eq(emitted == self.count)
        m.d.comb += [self.elements.valid.eq(self.words.valid & (emitted != self.count)),
                     self.elements.payload.eq(self.words.payload.data.word_select(lane, 32))]
        with m.If(self.elements.valid & self.elements.ready):
            m.d.sync += [emitted.eq(emitted + 1), lane.eq(lane + 1)]
            with m.If((lane == self.lanes - 1) | (emitted + 1 == self.count)):
                m.d.comb += self.words.ready.eq(1)
                m.d.sync += lane.eq(0)
        with m.If(self.start):
            m.d.sync += [emitted.eq(0), lane.eq(0)]
        return m


class WordPacker(wiring.Component):
    """``count`` 32-bit elements -> whole bus words for a writer (the last one padded
    with zeros)."""

    def __init__(self, data_width: int):
        self.lanes = data_width // 32
        super().__init__({
            "elements": In(stream.Signature(32)),
            "words": Out(stream.Signature(data.StructLayout({"data": data_width, "strb": data_width // 8}))),
            "count": In(32),
            "start": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        lane = Signal(range(self.lanes))
        taken = Signal(32)
        word = Signal(len(self.words.payload.data))
        full = Signal()
        last = taken + 1 == self.count
        m.d.comb += [self.words.valid.eq(full), self.words.payload.data.eq(word), self.words.payload.strb.eq(-1),
                     self.elements.ready.eq(~full)]
        with m.If(self.words.valid & self.words.ready):
            m.d.sync += [full.eq(0), word.eq(0)]
        with m.If(self.elements.valid & self.elements.ready):
            m.d.sync += [word.word_select(lane, 32).eq(self.elements.payload), taken.eq(taken + 1),
                         lane.eq(lane + 1)]
            with m.If((lane == self.lanes - 1) | last):
                m.d.sync += [full.eq(1), lane.eq(0)]
        with m.If(self.start):
            m.d.sync += [taken.eq(0), lane.eq(0), word.eq(0), full.eq(0)]
        return m


class GraphEngine(CommandEngine):
    def __init__(self, *, addr_width: int = 32, data_width: int = 512, id_width: int = 4,
                 max_burst_bytes: int = 4096, max_outstanding: int = 8, link_bytes: int = 16,
                 row_bytes: int = DEVICE_ROW_BYTES, banks: int = DEVICE_BANKS, group_timeout: int = 8,
                 tickets: int = 256, mshr_slots: int = 4, response_ids: int = 64, cache_lines: int = 64):
        if data_width != 8 * LINE:
            raise ValueError(f"graph: data_width must be {8 * LINE} (the unit's 64-byte columns), not {data_width}")
        self.row_bytes, self.group_timeout, self.tickets = row_bytes, group_timeout, tickets
        if mshr_slots < 1 or response_ids < 2 or response_ids & (response_ids - 1):
            raise ValueError(f"graph: mshr_slots must be >= 1 and response_ids a power of two >= 2, not "
                             f"{mshr_slots} and {response_ids}")
        self.mshr_slots, self.response_ids = mshr_slots, response_ids
        if cache_lines < 0 or cache_lines & (cache_lines - 1) or 16 * cache_lines > MAX_VERTICES:
            raise ValueError(f"graph: cache_lines must be 0 or a power of two up to {MAX_VERTICES // 16}, "
                             f"not {cache_lines}")
        self.cache_lines = cache_lines
        # a ticket per edge: row start/end, the response id and lane holding its source value,
        # or (a cache hit) the value itself; the source vertex for the cache fill
        self.ticket_layout = data.StructLayout({"empty": 1, "first": 1, "last": 1, "id": range(response_ids),
                                                "lane": 4, "weight": 32, "hit": 1, "value": 32, "u": 24})
        # The streams need a few bytes per edge; short bursts, two in flight each, leave the
        # memory's request queue to the unit's single-column reads (long prefetching bursts
        # would hold the queue and starve them).
        self.unit = SgUnit(addr_width=addr_width, id_width=1, row_bytes=row_bytes, banks=banks,
                           link_bytes=link_bytes, max_inflight=32)
        super().__init__(GRAPH, addr_width=addr_width, data_width=data_width, reads=["rowptr", "col", "val", "old"],
                         writes=["out"], max_burst_bytes=min(max_burst_bytes, 1024),
                         max_outstanding=min(max_outstanding, 2), extra_ports=1,
                         members={"link": Out(self.unit.signature.members["counters"].shape)})
        if id_width < self.ports.id_width:
            raise ValueError(f"graph: id_width must be at least {self.ports.id_width}")

    def elaborate(self, platform):
        m = Module()
        self.elaborate_ports(m)
        m.submodules.unit = unit = self.unit
        wiring.connect(m, unit.bus, self.ports.port(4))
        m.d.comb += [unit.window_base.eq(self.window_base), unit.window_size.eq(self.window_size),
                     self.link.eq(unit.counters)]
        readers, writer = self.ports.readers, self.ports.writers["out"]
        word = self.data_width // 8

        ctl = CommandControl(m, self)
        cmd = ctl.cmd
        program = cmd.format_program
        is_sssp = program == Program.SSSP
        is_spmv = program == Program.SPMV
        is_pagerank = program == Program.PAGERANK
        uses_val = is_sssp | is_spmv     # the edge pass's val stream: SSSP weights or matrix entries
        sum_rows = is_spmv | is_pagerank     # the edge pass sums rows in fp32 (FMA partials + tree)

        def words(count):             # bytes of `count` uint32 rounded up to whole bus words
            nbytes = Signal(40)
            m.d.comb += nbytes.eq(((count << 2) + (word - 1)) & ~Const(word - 1, 40))
            return nbytes

        rowptr_len, edge_len, vertex_len = words(cmd.n + 1), words(cmd.edges), words(cmd.n)
        arrays = {"rowptr": (cmd.rowptr, rowptr_len, 1), "col": (cmd.col, edge_len, cmd.edges != 0),
                  "val": (cmd.val, Mux(is_pagerank, vertex_len, edge_len), (uses_val & (cmd.edges != 0)) | is_pagerank),
                  "a": (cmd.a, vertex_len, 1), "b": (cmd.b, vertex_len, 1),
                  "scratch": (cmd.scratch, vertex_len << 1, is_pagerank)}
        good_program = (program == Program.BFS) | is_sssp | (program == Program.CC) | is_spmv | is_pagerank
        tolerance_nan = (cmd.tolerance[23:31] == 0xFF) & (cmd.tolerance[:23] != 0)
        checks = CommandChecks(m, self)
        checks.require(~good_program)           # (the 1-bit mode field cannot be out of range)
        checks.require((cmd.n == 0) | (cmd.n > MAX_VERTICES) | (cmd.max_iterations == 0))
        checks.require(is_pagerank & (cmd.tolerance[31] | tolerance_nan))
        enabled = {name: e for name, (_, _, e) in arrays.items()}
        checks.ranges({name: Transfer(a, l[:32]) for name, (a, l, _) in arrays.items()}, active=enabled,
                      wide={name: l for name, (_, l, _) in arrays.items()})
        checks.disjoint({name: Transfer(a, l) for name, (a, l, _) in arrays.items()}, active=enabled)

        # ---- streams ----------------------------------------------------------------
        validating = Signal()
        iterating = Signal()           # an edge pass
        vertex_pass = Signal()         # PageRank: a pass over the vertices (contributions or update)
        stage = Signal(2)              # PageRank's pass in an iteration: 0 contributions, 1 pull sums, 2 update
        update = stage == 2
        odd = Signal()                 # this iteration reads b and writes a
        source_base = Mux(odd, cmd.b, cmd.a)
        target_base = Mux(odd, cmd.a, cmd.b)
        sums_base = Signal(self.addr_width)      # PageRank: the pull sums, after the contributions
        m.d.comb += sums_base.eq(cmd.scratch + vertex_len[:32])
        # PageRank's passes: contributions (ranks, degrees -> scratch), pull sums (the edge
        # pass over the contributions -> scratch + n), update (sums, ranks -> the other array)
        val_base = Mux(vertex_pass & update, sums_base, cmd.val)
        out_base = Mux(is_pagerank & (stage == 0), cmd.scratch, Mux(is_pagerank & (stage == 1), sums_base, target_base))
        transfers = TransferGroup(
            m, {"rowptr": readers["rowptr"], "col": readers["col"], "val": readers["val"], "old": readers["old"],
                "out": writer},
            {"rowptr": Transfer(cmd.rowptr, rowptr_len[:32]), "col": Transfer(cmd.col, edge_len[:32]),
             "val": Transfer(val_base, Mux(vertex_pass, vertex_len, edge_len)[:32]),
             "old": Transfer(source_base, vertex_len[:32]), "out": Transfer(out_base, vertex_len[:32])},
            validating | iterating | vertex_pass,
            enabled={"rowptr": ~vertex_pass, "col": ~vertex_pass & (cmd.edges != 0),
                     "val": (iterating & uses_val & (cmd.edges != 0)) | vertex_pass,
                     "old": (iterating & ~sum_rows) | vertex_pass, "out": iterating | vertex_pass})
        start = Signal()                # one cycle before a phase: counters restart
        unpack = {}
        for name in ("rowptr", "col", "val", "old"):
            u = unpack[name] = WordUnpacker(self.data_width)
            m.submodules[f"unpack_{name}"] = u
            wiring.connect(m, readers[name].data, u.words)
            m.d.comb += u.start.eq(start)
        m.d.comb += [unpack["rowptr"].count.eq(cmd.n + 1), unpack["col"].count.eq(cmd.edges),
                     unpack["val"].count.eq(Mux(vertex_pass, cmd.n, cmd.edges)), unpack["old"].count.eq(cmd.n)]
        m.submodules.packer = packer = WordPacker(self.data_width)
        wiring.connect(m, packer.words, writer.data)
        m.d.comb += [packer.count.eq(cmd.n), packer.start.eq(start)]
        rp, col, val, old = (unpack[k].elements for k in ("rowptr", "col", "val", "old"))

        # ---- validation pass --------------------------------------------------------
        graph_error, index_error = Signal(4), Signal(4)
        seen = Signal(32)
        previous = Signal(32)
        with m.If(validating):
            m.d.comb += [rp.ready.eq(1), col.ready.eq(1)]
            with m.If(rp.valid):
                m.d.sync += [seen.eq(seen + 1), previous.eq(rp.payload)]
                bad = Mux(seen == 0, rp.payload != 0, rp.payload < previous) | \
                    ((seen == cmd.n) & (rp.payload != cmd.edges))
                with m.If(bad & (graph_error == 0)):
                    m.d.sync += graph_error.eq(ErrorCode.BAD_GRAPH)
            with m.If(col.valid & (col.payload >= cmd.n) & (index_error == 0)):
                m.d.sync += index_error.eq(ErrorCode.BAD_INDEX)

        # ---- edge generator: rows from the row pointers, edges from the columns ----
        edge = Signal(data.StructLayout({"u": 32, "weight": 32, "empty": 1, "first": 1, "last": 1}))
        edge_valid, edge_ready = Signal(), Signal()
        row_left = Signal(32)
        row_open = Signal()              # a row with edges left is being emitted
        have_start = Signal()            # rowptr[0] consumed
        weight = Mux(is_pagerank, FP32_ONE, Mux(uses_val, val.payload, Mux(program == Program.BFS, 1, 0)))
        with m.If(iterating):
            with m.If(~have_start):
                m.d.comb += rp.ready.eq(1)
                with m.If(rp.valid):
                    m.d.sync += [have_start.eq(1), previous.eq(rp.payload)]
            with m.Elif(~row_open):
                with m.If(rp.valid):
                    length = rp.payload - previous
                    with m.If(length == 0):
                        m.d.comb += [edge_valid.eq(1), edge.empty.eq(1), edge.last.eq(1)]
                        with m.If(edge_ready):
                            m.d.comb += rp.ready.eq(1)
                            m.d.sync += previous.eq(rp.payload)
                    with m.Else():
                        m.d.comb += rp.ready.eq(1)
                        m.d.sync += [previous.eq(rp.payload), row_left.eq(length), row_open.eq(1)]
            with m.Else():
                both = col.valid & (val.valid | ~uses_val)
                m.d.comb += [edge_valid.eq(both), edge.u.eq(col.payload), edge.weight.eq(weight),
                             edge.last.eq(row_left == 1)]
                with m.If(edge_valid & edge_ready):
                    m.d.comb += [col.ready.eq(1), val.ready.eq(uses_val)]
                    m.d.sync += row_left.eq(row_left - 1)
                    with m.If(row_left == 1):
                        m.d.sync += row_open.eq(0)
        row_first = Signal(init=1)       # the next edge of an open row is its first
        with m.If(edge_valid & edge_ready & ~edge.empty):
            m.d.sync += row_first.eq(edge.last)
        with m.If(start):
            m.d.sync += [row_first.eq(1), have_start.eq(0), row_open.eq(0)]
        m.d.comb += edge.first.eq(Mux(edge.empty, 1, row_first))

        # ---- collector: a collection-extended MSHR --------------------------------
        # `mshr_slots` groups are open at once, each collecting the edges whose source
        # values share one DRAM row (Piccolo mode: up to 16 offsets, one row gather) or
        # one 64-byte line (baseline mode: an ordinary MSHR merging misses to a line).
        # An edge joins the open group with its key or opens one in a free slot; with
        # no slot free, the round-robin victim is sent to make room.  A group also
        # leaves when full, after `group_timeout` cycles without a new member, or when
        # the iteration's edges are all taken.  Each group holds a response id from
        # opening until the reducer has read all its members: responses come back in
        # send order, not edge order, and wait in the response buffer under their id.
        m.submodules.tickets = tickets = fifo.SyncFIFOBuffered(width=self.ticket_layout.size, depth=self.tickets)
        ticket = Signal(self.ticket_layout)
        m.d.comb += [tickets.w_data.eq(ticket), ticket.empty.eq(edge.empty), ticket.first.eq(edge.first),
                     ticket.last.eq(edge.last), ticket.weight.eq(edge.weight), ticket.u.eq(edge.u)]

        # ---- source-value cache -------------------------------------------------------
        # `cache_lines` lines of 16 values (4 KiB by default), direct mapped by vertex id:
        # entry u mod 16L, tag u / 16L, per-entry valid bits.  Piccolo mode fills it at fine
        # grain (each value the reducer takes from a response: only useful bytes cached);
        # baseline mode fills whole lines (the line read's 16 values: a conventional 64-byte
        # line cache).  A hit's value travels in its ticket and skips the collector.  Every
        # pass starts empty: the source array changes between passes.
        cache_hit, cached_value = Signal(), Signal(32)
        fill_en, fill_u, fill_line = Signal(), Signal(24), Signal(8 * LINE)
        if self.cache_lines:
            lines = self.cache_lines
            index_bits = log2_exact(16 * lines, "cache entries")
            tag_bits = 24 - index_bits
            cache_data = Memory(shape=8 * LINE, depth=lines, init=[])
            cache_tags = Memory(shape=16 * tag_bits, depth=lines, init=[])
            m.submodules.cache_data, m.submodules.cache_tags = cache_data, cache_tags
            data_read, tags_read = cache_data.read_port(domain="comb"), cache_tags.read_port(domain="comb")
            data_write, tags_write = cache_data.write_port(granularity=32), cache_tags.write_port(granularity=tag_bits)
            cache_valid = Signal(16 * lines)
            m.d.comb += [data_read.addr.eq(edge.u[4:index_bits]), tags_read.addr.eq(edge.u[4:index_bits]),
                         cached_value.eq(data_read.data.word_select(edge.u[:4], 32)),
                         cache_hit.eq((cache_valid >> edge.u[:index_bits])[0] &
                                      (tags_read.data.word_select(edge.u[:4], tag_bits) == edge.u[index_bits:]))]
            whole = cmd.format_mode == MODE_BASELINE
            m.d.comb += [data_write.addr.eq(fill_u[4:index_bits]), tags_write.addr.eq(fill_u[4:index_bits]),
                         data_write.data.eq(fill_line), tags_write.data.eq(Cat(*[fill_u[index_bits:]] * 16)),
                         data_write.en.eq(Mux(fill_en, Mux(whole, 0xFFFF, Const(1, 16) << fill_u[:4]), 0)),
                         tags_write.en.eq(Mux(fill_en, Mux(whole, 0xFFFF, Const(1, 16) << fill_u[:4]), 0))]
            with m.If(fill_en):
                with m.If(whole):
                    m.d.sync += cache_valid.word_select(fill_u[4:index_bits], 16).eq(0xFFFF)
                with m.Else():
                    m.d.sync += cache_valid.bit_select(fill_u[:index_bits], 1).eq(1)
            with m.If(start):
                m.d.sync += cache_valid.eq(0)
        baseline = cmd.format_mode == MODE_BASELINE
        row_shift = log2_exact(self.row_bytes, "row_bytes")
        address = Signal(self.addr_width)
        m.d.comb += address.eq(Mux(is_pagerank, cmd.scratch, source_base) + (edge.u << 2))   # PageRank pulls contributions
        key = Signal(self.addr_width)
        m.d.comb += key.eq(Mux(baseline, address >> 6, address >> row_shift))
        slots, ids = self.mshr_slots, self.response_ids
        slot_open = Signal(slots)
        slot_key = Array(Signal(self.addr_width, name=f"slot{i}_key") for i in range(slots))
        slot_count = Array(Signal(5, name=f"slot{i}_count") for i in range(slots))
        slot_id = Array(Signal(range(ids), name=f"slot{i}_id") for i in range(slots))
        slot_idle = Array(Signal(range(self.group_timeout + 1), name=f"slot{i}_idle") for i in range(slots))
        slot_offsets = Array(Signal(16 * MAX_OFFSETS, name=f"slot{i}_offsets") for i in range(slots))
        streams_done = Signal()          # every edge of the iteration has been taken
        lookup = edge_valid & ~edge.empty & ~cache_hit & tickets.w_rdy
        hits = Signal(slots)
        m.d.comb += hits.eq(Cat(slot_open[i] & (slot_key[i] == key) & (slot_count[i] < MAX_OFFSETS)
                                for i in range(slots)))
        victim = Signal(range(slots))
        evict = lookup & (hits == 0) & slot_open.all()
        want = Signal(slots)
        m.d.comb += want.eq(Cat(slot_open[i] & ((slot_count[i] == MAX_OFFSETS) | (slot_idle[i] == self.group_timeout) |
                                                streams_done | (evict & (victim == i)))
                                for i in range(slots)))
        send_slot = Signal(range(slots))
        for i in reversed(range(slots)):         # the lowest slot that wants to go
            with m.If(want[i]):
                m.d.comb += send_slot.eq(i)
        m.submodules.sent_ids = sent_ids = fifo.SyncFIFO(width=len(slot_id[0]), depth=ids)
        request = unit.req.payload
        m.d.comb += [unit.req.valid.eq(want.any()),
                     request.op.eq(Mux(baseline, Op.LINE_READ, Op.ROW_GATHER)), request.size.eq(4),
                     request.count.eq(slot_count[send_slot]),
                     request.address.eq(Mux(baseline, slot_key[send_slot] << 6, slot_key[send_slot] << row_shift)),
                     request.offsets.eq(slot_offsets[send_slot]), request.data.eq(0)]
        sent = unit.req.valid & unit.req.ready
        sending = Signal(slots)
        m.d.comb += sending.eq(Mux(sent, Const(1, slots) << send_slot, 0))
        members = Array(Signal(5, name=f"id{i}_members") for i in range(ids))
        m.d.comb += [sent_ids.w_en.eq(sent), sent_ids.w_data.eq(slot_id[send_slot])]
        with m.If(sent):
            m.d.sync += members[slot_id[send_slot]].eq(slot_count[send_slot])
            with m.If(evict):
                m.d.sync += victim.eq(Mux(victim == slots - 1, 0, victim + 1))
        id_busy = Signal(ids)            # a group holds the id from opening until its members are read
        next_id = Signal(range(ids))
        joinable = hits & ~sending       # a group being sent takes no more members
        join_slot, free_slot = Signal(range(slots)), Signal(range(slots))
        for i in reversed(range(slots)):
            with m.If(joinable[i]):
                m.d.comb += join_slot.eq(i)
            with m.If(~slot_open[i]):
                m.d.comb += free_slot.eq(i)
        can_open = (hits == 0) & ~slot_open.all() & ~(id_busy >> next_id)[0]
        take = Signal()
        joined = Signal(slots)
        with m.If(edge_valid & tickets.w_rdy):
            with m.If(edge.empty):
                m.d.comb += take.eq(1)
            with m.Elif(cache_hit):
                m.d.comb += [take.eq(1), ticket.hit.eq(1), ticket.value.eq(cached_value)]
            with m.Elif(joinable.any()):
                count = slot_count[join_slot]
                m.d.comb += [take.eq(1), ticket.id.eq(slot_id[join_slot]),
                             ticket.lane.eq(Mux(baseline, address[2:6], count[:4])),
                             joined.eq(Const(1, slots) << join_slot)]
                m.d.sync += [slot_offsets[join_slot].word_select(count[:4], 16).eq(address[2:row_shift]),
                             count.eq(count + 1)]
            with m.Elif(can_open):
                m.d.comb += [take.eq(1), ticket.id.eq(next_id), ticket.lane.eq(Mux(baseline, address[2:6], 0)),
                             joined.eq(Const(1, slots) << free_slot)]
                m.d.sync += [slot_key[free_slot].eq(key), slot_count[free_slot].eq(1), slot_id[free_slot].eq(next_id),
                             slot_offsets[free_slot].word_select(0, 16).eq(address[2:row_shift]),
                             next_id.eq(next_id + 1), id_busy.bit_select(next_id, 1).eq(1)]
        m.d.sync += slot_open.eq((slot_open | joined) & ~sending)
        for i in range(slots):
            with m.If(joined[i]):
                m.d.sync += slot_idle[i].eq(0)
            with m.Elif(slot_open[i] & (slot_idle[i] != self.group_timeout)):
                m.d.sync += slot_idle[i].eq(slot_idle[i] + 1)
        m.d.comb += [edge_ready.eq(take), tickets.w_en.eq(take)]

        # ---- response buffer: every response under its group's id ---------------------
        m.submodules.responses = responses = Memory(shape=8 * LINE, depth=ids, init=[])
        response_write = responses.write_port()
        response_read = responses.read_port(domain="comb")
        arrived = Signal(ids)
        resp = unit.resp
        m.d.comb += [resp.ready.eq(1), sent_ids.r_en.eq(resp.valid),
                     response_write.addr.eq(sent_ids.r_data), response_write.data.eq(resp.payload.data),
                     response_write.en.eq(resp.valid)]
        with m.If(resp.valid):
            m.d.sync += arrived.bit_select(sent_ids.r_data, 1).eq(1)

        # ---- reducer ----------------------------------------------------------------
        acc, own = Signal(32), Signal(32)
        changed = Signal()
        t = self.ticket_layout(tickets.r_data)
        m.d.comb += response_read.addr.eq(t.id)
        value = Mux(t.hit, t.value, response_read.data.word_select(t.lane, 32))
        total = value + t.weight
        candidate = Mux((value == INF) | total[32], INF, total[:32])
        base = Mux(t.first, old.payload, acc)
        best = Mux(t.empty | (candidate >= base), base, candidate)
        has_value = t.empty | t.hit | (arrived >> t.id)[0]
        has_own = ~t.first | old.valid
        can_emit = ~t.last | packer.elements.ready
        min_fire = iterating & ~sum_rows & tickets.r_rdy & has_value & has_own & can_emit
        spmv_fire = Signal()
        fire = min_fire | spmv_fire
        m.d.comb += [tickets.r_en.eq(fire), old.ready.eq(min_fire & t.first)]
        used = Array(Signal(5, name=f"id{i}_used") for i in range(ids))
        fetched = fire & ~t.empty & ~t.hit
        m.d.comb += [fill_en.eq(fetched), fill_u.eq(t.u),   # a fetched value (its line, baseline) into the cache
                     fill_line.eq(Mux(baseline, response_read.data, Cat(*[response_read.data.word_select(t.lane, 32)] * 16)))]
        with m.If(fetched):              # the group's last member read: its id is free again
            with m.If(used[t.id] + 1 == members[t.id]):
                m.d.sync += [used[t.id].eq(0), arrived.bit_select(t.id, 1).eq(0), id_busy.bit_select(t.id, 1).eq(0)]
            with m.Else():
                m.d.sync += used[t.id].eq(used[t.id] + 1)
        with m.If(min_fire):
            m.d.sync += acc.eq(best)
            with m.If(t.first):
                m.d.sync += own.eq(old.payload)
            with m.If(t.last & (best != Mux(t.first, old.payload, own))):
                m.d.sync += changed.eq(1)

        # ---- PageRank's vertex passes: one fixed-latency dataflow for both -------------
        # contributions: (rank, degree) -> (degree ? rank / degree : 0, degree ? +0 : rank),
        # the second summed into the dangling rank; update: (rank, sum) -> (new, |new - rank|)
        # with new = fma(d, sum + dangling / n, (1 - d) / n), the second summed into the
        # L1 change.  A vertex enters only when the output queue has room for every vertex
        # in flight; the queue's pairs go to the writer and the accumulating FMA together.
        dterm = Signal(32)               # dangling x (1/n), for the update pass
        df = Dataflow(m, "pagerank")
        rank_in, other_in = df.input(old.payload), df.input(val.payload)
        has_out = df.input(val.payload != 0)
        zero = df.static(Const(0, 32))
        contrib = df.select(has_out, df.op("div", rank_in, df.op("int32_to_fp32", other_in)), zero)
        dangling_term = df.select(has_out, zero, rank_in)
        new_rank = df.op("fma", df.static(cmd.damping), df.op("add", other_in, df.static(dterm)),
                         df.static(cmd.teleport))
        change = df.sub(new_rank, rank_in)
        magnitude = Timed(Cat(change.value[:31], Const(0, 1)), change.time)
        updating = df.static(update)
        written = df.at(df.select(updating, new_rank, contrib), df.latency)
        summed = df.at(df.select(updating, magnitude, dangling_term), df.latency)
        vertex_depth = df.latency + 4
        vertex_out = fifo.SyncFIFOBuffered(width=64, depth=vertex_depth)
        m.submodules.vertex_out = ResetInserter(start)(vertex_out)
        flowing = Signal(df.latency)     # valid bits travelling with the dataflow
        in_flow = Signal(range(vertex_depth + 1))
        vertex_in = vertex_pass & old.valid & val.valid & (in_flow + vertex_out.level < vertex_depth)
        with m.If(vertex_pass):
            m.d.comb += [old.ready.eq(vertex_in), val.ready.eq(vertex_in)]
        m.d.sync += [flowing.eq(Cat(vertex_in, flowing[:-1])), in_flow.eq(in_flow + vertex_in - flowing[-1])]
        m.d.comb += [vertex_out.w_en.eq(flowing[-1]), vertex_out.w_data.eq(Cat(written, summed))]
        vertex_fire = Signal()
        vertices_taken = Signal(32)
        vertex_last = vertices_taken + 1 == cmd.n

        # ---- fp32 sums: eight FMA partial sums per row, then the adder tree -----------
        # SpMV and PageRank's pull pass: a row's entries; PageRank's vertex passes: one
        # row of all n vertices (the dangling rank, the L1 change)
        m.submodules.fma = fma = FpFma()
        m.submodules.tree = tree = FpReduce(lanes=8, op="sum")
        out_depth = tree.latency + 4
        spmv_out = fifo.SyncFIFOBuffered(width=32, depth=out_depth)
        m.submodules.spmv_out = ResetInserter(start)(spmv_out)   # nothing left from an aborted command
        # two banks of eight partial sums: a row accumulates in one while the previous
        # row's FMAs finish in the other and its sums wait for the tree (rows leave in order)
        flat = [Signal(32, name=f"partial{b}_{i}") for b in range(2) for i in range(8)]
        partial = Array(flat)
        busy = Signal(16)                # bank x lane with an FMA in flight
        position = Signal(3)             # the next entry's lane
        bank = Signal()                  # the bank the current row accumulates in
        pending = Signal(2)              # per bank: a finished row whose sums have not gone to the tree
        drain_bank = Signal()            # the bank whose row goes to the tree next
        in_tree = Signal(range(out_depth + 1))
        slot = Cat(position, bank)
        lane_free = ~(busy >> slot)[0]
        bank_ready = ~(pending >> bank)[0]
        m.d.comb += spmv_fire.eq(iterating & sum_rows & tickets.r_rdy & has_value & bank_ready & (t.empty | lane_free))
        m.d.comb += vertex_fire.eq(vertex_pass & vertex_out.r_rdy & packer.elements.ready & bank_ready & lane_free)
        m.d.comb += [fma.i.valid.eq((spmv_fire & ~t.empty) | vertex_fire),
                     fma.i.payload.a[0].eq(Mux(vertex_pass, FP32_ONE, t.weight)),
                     fma.i.payload.b[0].eq(Mux(vertex_pass, vertex_out.r_data[32:], value)),
                     fma.i.payload.c[0].eq(partial[slot]), vertex_out.r_en.eq(vertex_fire)]
        slot_tags = [Signal(4, name=f"fma_slot{i}") for i in range(fma.latency)]   # travels with the FMA
        m.d.sync += [slot_tags[0].eq(slot)] + [b.eq(a) for a, b in zip(slot_tags, slot_tags[1:])]
        issued = Mux(fma.i.valid, Const(1, 16) << slot, 0)
        returned = Mux(fma.o.valid, Const(1, 16) << slot_tags[-1], 0)
        m.d.sync += busy.eq((busy | issued) & ~returned)
        with m.If(fma.o.valid):
            m.d.sync += partial[slot_tags[-1]].eq(fma.o.payload[0])
        with m.If(fma.i.valid):
            m.d.sync += position.eq(position + 1)
        with m.If(vertex_fire):
            m.d.sync += vertices_taken.eq(vertices_taken + 1)
        with m.If((spmv_fire & t.last) | (vertex_fire & vertex_last)):
            m.d.sync += [pending.bit_select(bank, 1).eq(1), bank.eq(~bank), position.eq(0)]
        room = in_tree + spmv_out.level < out_depth
        to_tree = (pending >> drain_bank)[0] & (busy.word_select(drain_bank, 8) == 0) & room
        m.d.comb += [tree.i.valid.eq(to_tree)] + [tree.i.payload.a[i].eq(Mux(drain_bank, flat[8 + i], flat[i]))
                                                  for i in range(8)]
        with m.If(to_tree):
            m.d.sync += [pending.bit_select(drain_bank, 1).eq(0), drain_bank.eq(~drain_bank)]
            for i in range(8):
                with m.If(drain_bank):
                    m.d.sync += flat[8 + i].eq(0)
                with m.Else():
                    m.d.sync += flat[i].eq(0)
        m.d.sync += in_tree.eq(in_tree + to_tree - tree.o.valid)
        total_sum, total_ready = Signal(32), Signal()       # a vertex pass's sum
        m.d.comb += [spmv_out.w_en.eq(tree.o.valid & ~vertex_pass), spmv_out.w_data.eq(tree.o.payload)]
        with m.If(tree.o.valid & vertex_pass):
            m.d.sync += [total_sum.eq(tree.o.payload), total_ready.eq(1)]
        with m.If(vertex_pass):
            m.d.comb += [packer.elements.valid.eq(vertex_out.r_rdy & bank_ready & lane_free),
                         packer.elements.payload.eq(vertex_out.r_data[:32])]
        with m.Elif(sum_rows):
            m.d.comb += [packer.elements.valid.eq(iterating & spmv_out.r_rdy),
                         packer.elements.payload.eq(spmv_out.r_data),
                         spmv_out.r_en.eq(iterating & packer.elements.ready)]
        with m.Else():
            m.d.comb += [packer.elements.valid.eq(iterating & tickets.r_rdy & has_value & has_own & t.last),
                         packer.elements.payload.eq(best)]
        with m.If(start):
            m.d.sync += [pending.eq(0), bank.eq(0), drain_bank.eq(0), position.eq(0), vertices_taken.eq(0),
                         total_ready.eq(0), flowing.eq(0), in_flow.eq(0)] + [p.eq(0) for p in flat]
        spmv_idle = ~sum_rows | ((pending == 0) & (busy == 0) & (in_tree == 0))

        # dangling x (1/n), once per iteration between the contributions and the update
        m.submodules.scale = scale = FpMul()
        scale_issued = Signal()
        m.d.comb += [scale.i.payload.a[0].eq(total_sum), scale.i.payload.b[0].eq(cmd.inv_n)]
        with m.If(scale.o.valid):
            m.d.sync += dterm.eq(scale.o.payload[0])

        # ---- control ------------------------------------------------------------------
        iterations = Signal(32)
        converged = Signal()             # PageRank stopped by its tolerance (cpl_aux bit 31)
        bus_error = Signal(4)            # the first AXI error of any phase
        bytes_read, bytes_written = Signal(32), Signal(32)

        def verdict(bus):               # the command's error: a bus error, else the validation's
            return Mux(bus != 0, bus, Mux(graph_error != 0, graph_error, index_error))

        scan_bytes = rowptr_len[:32] + Mux(cmd.edges != 0, edge_len[:32], 0)
        iteration_bytes = (scan_bytes + Mux(uses_val & (cmd.edges != 0), edge_len[:32], 0) +
                           Mux(sum_rows, 0, vertex_len[:32]))
        m.d.comb += streams_done.eq(iterating & transfers.done["rowptr"] & (transfers.done["col"] | (cmd.edges == 0))
                                    & ~row_open & have_start & ~edge_valid)
        with ctl.states(checks.code(), first="VALIDATE", start=[start.eq(1)],
                        clear=transfers.clear() + [graph_error.eq(0), index_error.eq(0), seen.eq(0), odd.eq(0),
                                                   iterations.eq(0), bytes_read.eq(0), bytes_written.eq(0),
                                                   bus_error.eq(0), stage.eq(0), converged.eq(0),
                                                   scale_issued.eq(0)]):
            with m.State("VALIDATE"):
                m.d.comb += validating.eq(1)
                # a reader reports before its last word is taken: wait for the streams too
                drained = unpack["rowptr"].done & unpack["col"].done
                with m.If(transfers.finished & (drained | (transfers.error != 0))):
                    m.d.sync += [bytes_read.eq(scan_bytes), bus_error.eq(transfers.error)]
                    m.next = "NEXT"
            with m.State("NEXT"):
                # start an iteration (or report the validation's verdict)
                m.d.comb += start.eq(1)
                m.d.sync += transfers.clear() + [changed.eq(0)]
                with m.If((bus_error != 0) | (graph_error != 0) | (index_error != 0)):
                    ctl.finish(verdict(bus_error))
                with m.Elif(is_pagerank & (stage != 1)):
                    m.next = "VERTEX"
                with m.Else():
                    m.next = "ITERATE"
            with m.State("ITERATE"):
                m.d.comb += iterating.eq(1)
                with m.If(transfers.finished & (slot_open == 0) & ~tickets.r_rdy & spmv_idle):
                    m.d.sync += [bytes_read.eq(bytes_read + iteration_bytes),
                                 bytes_written.eq(bytes_written + vertex_len[:32]), bus_error.eq(transfers.error)]
                    with m.If(is_pagerank):          # the pull sums are in: the update pass next
                        m.d.sync += stage.eq(2)
                        m.next = "NEXT"              # (NEXT ends the command on a bus error)
                    with m.Else():
                        m.d.sync += [iterations.eq(iterations + 1), odd.eq(~odd)]
                        with m.If((transfers.error == 0) & changed & ~is_spmv &
                                  (iterations + 1 != cmd.max_iterations)):
                            m.next = "NEXT"
                        with m.Else():
                            ctl.finish(verdict(transfers.error))
            with m.State("VERTEX"):
                m.d.comb += vertex_pass.eq(1)
                drained = total_ready & (in_flow == 0) & ~vertex_out.r_rdy
                with m.If(transfers.finished & (drained | (transfers.error != 0))):
                    m.d.sync += [bytes_read.eq(bytes_read + (vertex_len[:32] << 1)),
                                 bytes_written.eq(bytes_written + vertex_len[:32]), bus_error.eq(transfers.error)]
                    with m.If(transfers.error != 0):
                        ctl.finish(verdict(transfers.error))
                    with m.Elif(~update):            # the dangling rank is in: scale it by 1/n
                        m.next = "SCALE"
                    with m.Else():                   # the L1 change is in: the iteration is complete
                        total_nan = (total_sum[23:31] == 0xFF) & (total_sum[:23] != 0)
                        below = ~total_nan & (total_sum < cmd.tolerance)
                        m.d.sync += [iterations.eq(iterations + 1), odd.eq(~odd), stage.eq(0), converged.eq(below)]
                        with m.If(below | (iterations + 1 == cmd.max_iterations)):
                            ctl.finish(verdict(transfers.error))
                        with m.Else():
                            m.next = "NEXT"
            with m.State("SCALE"):
                m.d.comb += scale.i.valid.eq(~scale_issued)
                m.d.sync += scale_issued.eq(1)
                with m.If(scale.o.valid):
                    m.d.sync += [scale_issued.eq(0), stage.eq(1)]
                    m.next = "NEXT"
        ctl.complete(bytes_read=bytes_read, bytes_written=bytes_written, aux=Cat(iterations[:31], converged))
        return m
