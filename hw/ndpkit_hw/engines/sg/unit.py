"""The memory-side scatter-gather unit (after Piccolo's in-memory gather/scatter).

It stands on the memory side of a modelled off-chip link and serves four requests
(``ndpkit.engines.sg.golden`` is the specification, request for request and count for count):
64 B line read and write, and the row-local **gather** (up to 64 B / element size
elements at element offsets inside one DRAM row, answered with one packed 64 B line)
and **scatter** (the same offsets with packed data, written with byte strobes).

How it works, stage by stage (FIFOs between them, so requests overlap):

1. *link in* — a request is accepted, then the link stays busy for the rest of its
   flits: ``ceil((8 + 2 k [+ 64 data]) / link_bytes)`` cycles.
2. *issue* — the head request is validated (error code in the golden model's order;
   a bad request issues nothing); each element's 64 B column and lane are computed,
   consecutive elements in one column form a run, and one single-beat AXI read (or
   write with the run's strobes) goes out per run.  Reads wait until no write is
   outstanding and writes until no read is, so a gather sees an earlier scatter.
   The DRAM row model (``banks`` banks with one open row each, rows of
   ``row_bytes``) and the traffic counters are updated here.
3. *complete* — in request order: a gather's R beats are unpacked into the response
   line (every element of run ``r`` from beat ``r``, in parallel); a write waits for
   its B responses; AXI errors become the response's error code.
4. *link out* — a response carrying data holds the link for ``64 / link_bytes``
   cycles; write acknowledgements and errors carry no data and cost none.

The memory side is one 512-bit AXI4 port (a 64 B column per beat), ID 0, in order.
"""
from __future__ import annotations

import operator

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.codes import AxiResp, ErrorCode
from ndpkit_spec.engines.sg import HEADER_BYTES, LINE, OFFSET_BYTES, Op
from ndpkit_hw.bus.axi import AXI4Signature, log2_exact

__all__ = ["SgUnit", "request_layout", "request_error", "ResponseLayout", "MAX_OFFSETS"]

MAX_OFFSETS = LINE // 4
COUNTER_WIDTH = 48


def request_layout(addr_width: int) -> data.StructLayout:
    return data.StructLayout({
        "op": 2,                                    # ndpkit.engines.sg.golden.Op
        "size": 4,                                  # element bytes: 4 or 8 (row requests)
        "count": 5,                                 # elements, 1..64/size (row requests)
        "address": addr_width,                      # line address, or the row's address
        "offsets": data.ArrayLayout(16, MAX_OFFSETS),   # element offsets within the row
        "data": 8 * LINE,                           # line write / packed scatter data
    })


ResponseLayout = data.StructLayout({"op": 2, "error": 4, "data": 8 * LINE})


def request_error(m: Module, head, window_base, window_size, row_bytes: int):
    """A request's error code (0 = good) in the golden model's order: element size,
    count, alignment, window, offsets.  The unit and the sg engine (which checks
    descriptors before it forwards them) share it.

    The window's last row and last line starts are registered from ``window_*`` (held
    while requests run), so the window test is two compares of the address, not an
    adder before a compare."""
    W = len(head.address)
    is_row = head.op[1]
    size8 = head.size == 8
    max_count = Mux(size8, LINE // 8, LINE // 4)
    offset_limit = Mux(size8, row_bytes // 8, row_bytes // 4)
    window_end = window_base + window_size
    last_start = {}
    for name, span in (("row", row_bytes), ("line", LINE)):
        start, fits = Signal(W + 1, name=f"window_last_{name}"), Signal(name=f"window_fits_{name}")
        m.d.sync += [start.eq(window_end - span), fits.eq(window_size >= span)]
        last_start[name] = (start, fits)
    (last_row, row_fits), (last_line, line_fits) = last_start["row"], last_start["line"]
    in_window = ((head.address >= window_base) & Mux(is_row, row_fits & (head.address <= last_row),
                                                    line_fits & (head.address <= last_line)))
    bad_offset = Cat(*[(j < head.count) & (head.offsets[j] >= offset_limit) for j in range(MAX_OFFSETS)]).any()
    error = Signal(4)
    with m.If(is_row & (head.size != 4) & (head.size != 8)):
        m.d.comb += error.eq(ErrorCode.BAD_FIELD)
    with m.Elif(is_row & ((head.count == 0) | (head.count > max_count))):
        m.d.comb += error.eq(ErrorCode.BAD_FIELD)
    with m.Elif(Mux(is_row, head.address[:log2_exact(row_bytes, "row_bytes")], head.address[:6]) != 0):
        m.d.comb += error.eq(ErrorCode.UNALIGNED)
    with m.Elif(~in_window):
        m.d.comb += error.eq(ErrorCode.OUT_OF_WINDOW)
    with m.Elif(is_row & bad_offset):
        m.d.comb += error.eq(ErrorCode.BAD_INDEX)
    return error


def _balanced(values, combine):
    """``values`` combined pairwise as a balanced tree (log depth, not a chain)."""
    while len(values) > 1:
        values = [combine(values[i], values[i + 1]) if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


def _popcount(bits):
    """The number of set bits of ``bits``."""
    return _balanced([bits[i] for i in range(len(bits))], operator.add)


def _or_all(values):
    return _balanced(values, operator.or_)


def _code(resp):
    """The error code of the worst AXI response seen (EXOKAY counts as OKAY)."""
    return Mux(resp == AxiResp.DECERR, ErrorCode.DECERR, Mux(resp == AxiResp.SLVERR, ErrorCode.SLVERR, 0))


class SgUnit(wiring.Component):
    """``req``/``resp``: the link side; ``bus``: the memory side; ``window_*``: the
    memory it may touch; ``counters``: requests, link bytes, useful bytes, row
    activations and column accesses since ``clear``."""

    def __init__(self, *, addr_width: int = 32, id_width: int = 4, row_bytes: int = 2048, banks: int = 16,
                 link_bytes: int = 16, max_inflight: int = 8):
        log2_exact(row_bytes, "row_bytes")
        log2_exact(banks, "banks")
        if row_bytes < 256 or row_bytes > (1 << 16):
            raise ValueError("row_bytes: 256..65536 (offsets are 16-bit element indices)")
        log2_exact(link_bytes, "link_bytes")          # bytes per cycle per direction: 1..64
        self.addr_width, self.id_width = addr_width, id_width
        self.row_bytes, self.banks, self.link_bytes, self.max_inflight = row_bytes, banks, link_bytes, max_inflight
        self.req_layout = request_layout(addr_width)
        super().__init__({
            "req": In(stream.Signature(self.req_layout)),
            "resp": Out(stream.Signature(ResponseLayout)),
            "bus": Out(AXI4Signature(addr_width=addr_width, data_width=8 * LINE, id_width=id_width)),
            "window_base": In(addr_width),
            "window_size": In(addr_width + 1),
            "clear": In(1),
            "counters": Out(data.StructLayout({
                "requests": COUNTER_WIDTH, "link_bytes": COUNTER_WIDTH, "useful_bytes": COUNTER_WIDTH,
                "activations": COUNTER_WIDTH, "column_accesses": COUNTER_WIDTH})),
        })

    def _flits(self, nbytes):
        """Link cycles for ``nbytes`` (an expression): ceil(nbytes / link_bytes)."""
        shift = log2_exact(self.link_bytes, "link_bytes")
        return (nbytes + (self.link_bytes - 1)) >> shift

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        W = self.addr_width
        columns_per_row = self.row_bytes // LINE

        # ---- 1. link in -------------------------------------------------------------
        m.submodules.inbox = inbox = fifo.SyncFIFO(width=self.req_layout.size, depth=2)
        incoming = self.req_layout(self.req.payload)
        row_op = incoming.op[1]                         # ROW_GATHER / ROW_SCATTER
        carries_data = incoming.op[0]                   # LINE_WRITE / ROW_SCATTER
        in_bytes = (HEADER_BYTES + Mux(row_op, OFFSET_BYTES * incoming.count, 0) + Mux(carries_data, LINE, 0))
        link_in_busy = Signal(range(2 + (HEADER_BYTES + OFFSET_BYTES * 31 + LINE) // max(1, self.link_bytes)))
        m.d.comb += [
            self.req.ready.eq((link_in_busy == 0) & inbox.w_rdy),
            inbox.w_en.eq(self.req.valid & self.req.ready),
            inbox.w_data.eq(self.req.payload),
        ]
        with m.If(inbox.w_en):
            m.d.sync += link_in_busy.eq(self._flits(in_bytes) - 1)
        with m.Elif(link_in_busy != 0):
            m.d.sync += link_in_busy.eq(link_in_busy - 1)

        # ---- 2. decode (two register stages) and issue ------------------------------
        # A: the request's verdict and each element's column, lane and whether it starts a
        # run; B: each element's run (how many runs start among elements 1..j: a count, not
        # a chain of adders), each run's column and the run count.  Each stage holds one
        # request, so requests still issue back to back.
        col_bits = max(1, (columns_per_row - 1).bit_length())
        raw = self.req_layout(inbox.r_data)
        taken = Signal()                                # the issue stage is done with its request
        a_valid, b_valid = Signal(name="decode_a_valid"), Signal(name="decode_b_valid")
        b_load = a_valid & (~b_valid | taken)
        a_load = inbox.r_rdy & (~a_valid | b_load)
        m.d.comb += inbox.r_en.eq(a_load)

        a_head, a_error = Signal(self.req_layout, name="a_head"), Signal(4, name="a_error")
        a_column = [Signal(col_bits, name=f"a_column{j}") for j in range(MAX_OFFSETS)]
        a_lane = [Signal(6, name=f"a_lane{j}") for j in range(MAX_OFFSETS)]
        a_starts = Signal(MAX_OFFSETS, name="a_starts")
        # a_same[j][k - j - 1]: elements j < k have one offset (a scatter's later one wins)
        a_same = [Signal(MAX_OFFSETS - 1 - j, name=f"a_same{j}") for j in range(MAX_OFFSETS)]
        raw_error = request_error(m, raw, self.window_base, self.window_size, self.row_bytes)
        with m.If(a_load):
            bytes_at = [Mux(raw.size == 8, raw.offsets[j] << 3, raw.offsets[j] << 2) for j in range(MAX_OFFSETS)]
            m.d.sync += [a_valid.eq(1), a_head.eq(raw), a_error.eq(raw_error)]
            for j in range(MAX_OFFSETS):
                m.d.sync += [a_column[j].eq(bytes_at[j][6:]), a_lane[j].eq(bytes_at[j][:6]),
                             a_starts[j].eq(1 if j == 0 else bytes_at[j][6:] != bytes_at[j - 1][6:])]
                if j < MAX_OFFSETS - 1:
                    m.d.sync += a_same[j].eq(Cat(*[raw.offsets[j] == raw.offsets[k]
                                                   for k in range(j + 1, MAX_OFFSETS)]))
        with m.Elif(b_load):
            m.d.sync += a_valid.eq(0)

        head, error = Signal(self.req_layout, name="head"), Signal(4, name="head_error")
        column = [Signal(col_bits, name=f"column{j}") for j in range(MAX_OFFSETS)]
        lane = [Signal(6, name=f"lane{j}") for j in range(MAX_OFFSETS)]
        run = [Signal(4, name=f"run{j}") for j in range(MAX_OFFSETS)]
        starts = Signal(MAX_OFFSETS, name="starts")
        runs = Signal(5)
        # the write beat, decided here so that issuing a run is an AND-OR, not a priority
        # chain: ``live`` elements write (a row element unless a later one of its run has its
        # offset; every word of a line write), each into the 32-bit slots ``slots[j]`` marks
        live = Signal(MAX_OFFSETS, name="live")
        slots = [Signal(MAX_OFFSETS, name=f"slots{j}") for j in range(MAX_OFFSETS)]
        with m.If(b_load):
            in_count = Cat(*[j < a_head.count for j in range(MAX_OFFSETS)])
            a_row, a_size8 = a_head.op[1], a_head.size == 8
            m.d.sync += [b_valid.eq(1), head.eq(a_head), error.eq(a_error), starts.eq(a_starts),
                         runs.eq(Mux(a_row, _popcount(a_starts & in_count | 1), 1))]
            for j in range(MAX_OFFSETS):
                # a later element k of the same run (no run starts in (j, k]) with the same offset
                overridden = Cat(*[a_same[j][k - j - 1] & in_count[k] & (a_starts[j + 1:k + 1] == 0)
                                   for k in range(j + 1, MAX_OFFSETS)]).any() if j < MAX_OFFSETS - 1 else 0
                m.d.sync += [column[j].eq(a_column[j]), lane[j].eq(a_lane[j]),
                             run[j].eq(Mux(a_row, _popcount(a_starts[1:j + 1]), 0) if j else 0),
                             live[j].eq(Mux(a_row, in_count[j] & ~overridden, 1)),
                             slots[j].eq(Mux(a_row, Mux(a_size8, Const(3, MAX_OFFSETS) << Cat(Const(0, 1), a_lane[j][3:]),
                                                         Const(1, MAX_OFFSETS) << a_lane[j][2:]),
                                             1 << j))]
        with m.Elif(taken):
            m.d.sync += b_valid.eq(0)
        is_row = head.op[1]
        is_write = head.op[0]
        size8 = head.size == 8

        # the completion queue: what stage 3 needs of every request, in order
        entry_layout = data.StructLayout({
            "op": 2, "error": 4, "size8": 1, "count": 5, "runs": 5,
            "run": data.ArrayLayout(4, MAX_OFFSETS), "lane": data.ArrayLayout(6, MAX_OFFSETS)})
        m.submodules.pending = pending = fifo.SyncFIFOBuffered(width=entry_layout.size, depth=self.max_inflight)
        entry = Signal(entry_layout)
        m.d.comb += [entry.op.eq(head.op), entry.error.eq(error), entry.size8.eq(size8), entry.count.eq(head.count),
                     entry.runs.eq(runs), pending.w_data.eq(entry)]
        for j in range(MAX_OFFSETS):
            m.d.comb += [entry.run[j].eq(run[j]), entry.lane[j].eq(lane[j])]

        # outstanding AXI traffic, for the read/write ordering rule
        reads_out = Signal(range(4 * MAX_OFFSETS * self.max_inflight + 1))
        writes_out = Signal.like(reads_out)
        ar_fire = bus.arvalid & bus.arready
        aw_fire = bus.awvalid & bus.awready
        r_fire = bus.rvalid & bus.rready
        b_fire = bus.bvalid & bus.bready
        m.d.sync += [reads_out.eq(reads_out + ar_fire - r_fire), writes_out.eq(writes_out + aw_fire - b_fire)]

        # DRAM row model and counters
        counters = self.counters
        open_row = [Signal(W, init=(1 << W) - 1, name=f"open_row{b}") for b in range(self.banks)]
        row_shift = log2_exact(self.row_bytes, "row_bytes")
        bank_bits = log2_exact(self.banks, "banks")

        def touch(address):
            row = address[row_shift:]
            bank = row[:bank_bits] if bank_bits else Const(0)
            for b in range(self.banks):
                with m.If((bank == b) & (open_row[b] != row)):
                    m.d.sync += open_row[b].eq(row)
                    m.d.sync += counters.activations.eq(counters.activations + 1)
            m.d.sync += counters.column_accesses.eq(counters.column_accesses + 1)

        issue_run = Signal(5)
        aw_done, w_done = Signal(), Signal()
        target = Signal(W)
        # the element that starts the current run, and the one that starts the next
        cursor, next_start = Signal(4, name="run_start"), Signal(4, name="next_run_start")
        later = starts & ~((Const(2, MAX_OFFSETS + 1) << cursor) - 1)[:MAX_OFFSETS]
        for j in reversed(range(MAX_OFFSETS)):
            with m.If(later[j]):
                m.d.comb += next_start.eq(j)
        current_column = Cat(*column).word_select(cursor, col_bits)
        # a row's base has its low bits clear: the column goes in by concatenation, no adder
        m.d.comb += target.eq(Mux(is_row, Cat(Const(0, 6), current_column, head.address[row_shift:]), head.address))
        strobe = Signal(LINE)
        wdata = Signal(8 * LINE)
        # slot k takes the live element of this run that marks it (at most one does): its
        # 32-bit word, or for 8-byte elements its half k mod 2
        words = [head.data.word_select(i, 32) for i in range(MAX_OFFSETS)]
        wide_row = is_row & size8
        for k in range(MAX_OFFSETS):
            hits = [live[j] & (run[j] == issue_run[:4]) & slots[j][k] for j in range(MAX_OFFSETS)]
            sources = [Mux(wide_row, words[2 * j + k % 2], words[j]) if j < LINE // 8 else words[j]
                       for j in range(MAX_OFFSETS)]
            m.d.comb += [wdata.word_select(k, 32).eq(_or_all([Mux(h, w, 0) for h, w in zip(hits, sources)])),
                         strobe.word_select(k, 4).eq(Mux(Cat(*hits).any(), 0xF, 0))]
        m.d.comb += [
            bus.arid.eq(0), bus.araddr.eq(target), bus.arlen.eq(0), bus.arsize.eq(6), bus.arburst.eq(1),
            bus.awid.eq(0), bus.awaddr.eq(target), bus.awlen.eq(0), bus.awsize.eq(6), bus.awburst.eq(1),
            bus.wdata.eq(wdata), bus.wstrb.eq(strobe), bus.wlast.eq(1),
        ]
        with m.FSM(name="issue"):
            with m.State("IDLE"):
                # one entry per request, queued before its first access so completions
                # never run ahead of it; reads and writes never overlap
                clear_to_go = Mux(is_write, reads_out == 0, writes_out == 0)
                with m.If(b_valid & pending.w_rdy & ((error != 0) | clear_to_go)):
                    m.d.comb += pending.w_en.eq(1)
                    with m.If(error != 0):
                        m.d.comb += taken.eq(1)
                    with m.Else():
                        link = HEADER_BYTES + LINE + Mux(is_row, OFFSET_BYTES * head.count, 0)
                        useful = Mux(is_row, Mux(size8, head.count << 3, head.count << 2), 0)
                        m.d.sync += [counters.requests.eq(counters.requests + 1),
                                     counters.link_bytes.eq(counters.link_bytes + link),
                                     counters.useful_bytes.eq(counters.useful_bytes + useful),
                                     issue_run.eq(0), cursor.eq(0), aw_done.eq(0), w_done.eq(0)]
                        m.next = "ISSUE"
            with m.State("ISSUE"):
                last_run = issue_run == runs - 1
                with m.If(~is_write):
                    m.d.comb += bus.arvalid.eq(1)
                    with m.If(bus.arready):
                        touch(target)
                        m.d.sync += [issue_run.eq(issue_run + 1), cursor.eq(next_start)]
                        with m.If(last_run):
                            m.d.comb += taken.eq(1)
                            m.next = "IDLE"
                with m.Else():
                    m.d.comb += [bus.awvalid.eq(~aw_done), bus.wvalid.eq(~w_done)]
                    aw_now = aw_done | bus.awready
                    w_now = w_done | bus.wready
                    with m.If(aw_fire):
                        touch(target)
                    with m.If(aw_now & w_now):
                        m.d.sync += [issue_run.eq(issue_run + 1), cursor.eq(next_start), aw_done.eq(0),
                                     w_done.eq(0)]
                        with m.If(last_run):
                            m.d.comb += taken.eq(1)
                            m.next = "IDLE"
                    with m.Else():
                        m.d.sync += [aw_done.eq(aw_now), w_done.eq(w_now)]

        with m.If(self.clear):                  # after every increment above, so it wins
            m.d.sync += [counters.requests.eq(0), counters.link_bytes.eq(0), counters.useful_bytes.eq(0),
                         counters.activations.eq(0), counters.column_accesses.eq(0)]

        # ---- 3. complete, in request order -----------------------------------------
        m.submodules.outbox = outbox = fifo.SyncFIFO(width=ResponseLayout.size, depth=2)
        done = entry_layout(pending.r_data)
        done_write = done.op[0]
        done_row = done.op[1]
        beat_run = Signal(5)
        error_seen = Signal(2)
        assembled = Signal(8 * LINE)
        response = Signal(ResponseLayout)
        m.d.comb += [response.op.eq(done.op), outbox.w_data.eq(response)]
        with m.If(pending.r_rdy & (done.error != 0)):
            m.d.comb += [response.error.eq(done.error), outbox.w_en.eq(outbox.w_rdy), pending.r_en.eq(outbox.w_rdy)]
        with m.Elif(pending.r_rdy & ~done_write):
            m.d.comb += bus.rready.eq(outbox.w_rdy)
            # this beat's elements into their slots (slots of earlier runs kept)
            base = Mux(beat_run == 0, 0, assembled)
            filled = Signal(8 * LINE)
            m.d.comb += filled.eq(base)
            for j in range(MAX_OFFSETS):
                sel = (j < done.count) & (done.run[j] == beat_run[:4])
                with m.If(sel):
                    with m.If(done.size8):
                        if j < LINE // 8:
                            m.d.comb += filled.word_select(j, 64).eq(bus.rdata.word_select(done.lane[j][3:], 64))
                    with m.Else():
                        m.d.comb += filled.word_select(j, 32).eq(bus.rdata.word_select(done.lane[j][2:], 32))
            worst = Mux(bus.rresp > error_seen, bus.rresp, error_seen)
            with m.If(r_fire):
                with m.If(beat_run == done.runs - 1):
                    m.d.comb += [response.data.eq(Mux(done_row, filled, bus.rdata)), response.error.eq(_code(worst)),
                                 outbox.w_en.eq(1), pending.r_en.eq(1)]
                    m.d.sync += [beat_run.eq(0), error_seen.eq(0)]
                with m.Else():
                    m.d.sync += [assembled.eq(filled), beat_run.eq(beat_run + 1), error_seen.eq(worst)]
        with m.Elif(pending.r_rdy):
            m.d.comb += bus.bready.eq(outbox.w_rdy)
            worst = Mux(bus.bresp > error_seen, bus.bresp, error_seen)
            with m.If(b_fire):
                with m.If(beat_run == done.runs - 1):
                    m.d.comb += [response.error.eq(_code(worst)), outbox.w_en.eq(1), pending.r_en.eq(1)]
                    m.d.sync += [beat_run.eq(0), error_seen.eq(0)]
                with m.Else():
                    m.d.sync += [beat_run.eq(beat_run + 1), error_seen.eq(worst)]

        # ---- 4. link out -------------------------------------------------------------
        leaving = ResponseLayout(outbox.r_data)
        link_out_busy = Signal(range(2 + LINE // max(1, self.link_bytes)))
        m.d.comb += [
            self.resp.valid.eq(outbox.r_rdy & (link_out_busy == 0)),
            self.resp.payload.eq(outbox.r_data),
            outbox.r_en.eq(self.resp.valid & self.resp.ready),
        ]
        carries = (leaving.error == 0) & ~leaving.op[0]       # a read's data crosses the link
        with m.If(outbox.r_en & carries):
            m.d.sync += link_out_busy.eq(self._flits(LINE) - 1)
        with m.Elif(link_out_busy != 0):
            m.d.sync += link_out_busy.eq(link_out_busy - 1)
        return m
