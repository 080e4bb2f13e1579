"""The sg unit's issue stage (its stage 2's second half): a decoded request's runs out
as single-beat AXI reads, or writes with the run's strobes, a run a cycle; the DRAM row
model and the traffic counters.

Every request leaves an entry for the completion stage before its first access, so
completions never run ahead of it (a bad request issues nothing and leaves only its
entry).  Reads wait until no write is outstanding and writes until no read is, so a
gather sees an earlier scatter."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.engines.sg import HEADER_BYTES, LINE, OFFSET_BYTES
from ndpkit_hw.bus.axi import log2_exact
from ndpkit_hw.engines.sg.decode import column_bits, decoded_layout
from ndpkit_hw.engines.sg.requests import COUNTER_WIDTH, MAX_OFFSETS, or_all

__all__ = ["RunIssuer", "completion_layout", "counters_layout", "write_beat_layout"]

#: what the completion stage needs of every request, in order
completion_layout = data.StructLayout({
    "op": 2, "error": 4, "size8": 1, "count": 5, "runs": 5,
    "run": data.ArrayLayout(4, MAX_OFFSETS), "lane": data.ArrayLayout(6, MAX_OFFSETS)})

counters_layout = data.StructLayout({
    "requests": COUNTER_WIDTH, "link_bytes": COUNTER_WIDTH, "useful_bytes": COUNTER_WIDTH,
    "activations": COUNTER_WIDTH, "column_accesses": COUNTER_WIDTH})

write_beat_layout = data.StructLayout({"data": 8 * LINE, "strobe": LINE})


class RunIssuer(wiring.Component):
    """``decoded`` in (:func:`~.decode.decoded_layout`); ``entries`` out (one per request,
    :data:`completion_layout`); ``ar``/``aw``: the runs' 64 B column addresses, ``w``: a
    write's beats; ``r_done``/``b_done``: a read beat / write response taken (the
    ordering rule's counts); ``counters``: requests, link bytes, useful bytes, row
    activations and column accesses since ``clear``."""

    def __init__(self, *, addr_width: int, row_bytes: int, banks: int, max_inflight: int):
        log2_exact(row_bytes, "row_bytes")
        log2_exact(banks, "banks")
        self.addr_width, self.row_bytes, self.banks, self.max_inflight = addr_width, row_bytes, banks, max_inflight
        super().__init__({
            "decoded": In(stream.Signature(decoded_layout(addr_width, row_bytes))),
            "entries": Out(stream.Signature(completion_layout)),
            "ar": Out(stream.Signature(addr_width)), "aw": Out(stream.Signature(addr_width)),
            "w": Out(stream.Signature(write_beat_layout)),
            "r_done": In(1), "b_done": In(1), "clear": In(1),
            "counters": Out(counters_layout)})

    def elaborate(self, platform):
        m = Module()
        W = self.addr_width
        d = self.decoded.payload
        head = d.head
        is_row, is_write, size8 = head.op[1], head.op[0], head.size == 8
        entry = self.entries.payload
        m.d.comb += [entry.op.eq(head.op), entry.error.eq(d.error), entry.size8.eq(size8), entry.count.eq(head.count),
                     entry.runs.eq(d.runs)]
        for j in range(MAX_OFFSETS):
            m.d.comb += [entry.run[j].eq(d.run[j]), entry.lane[j].eq(d.lane[j])]

        # outstanding AXI traffic, for the read/write ordering rule
        ar_fire = self.ar.valid & self.ar.ready
        aw_fire = self.aw.valid & self.aw.ready
        reads_out = Signal(range(4 * MAX_OFFSETS * self.max_inflight + 1))
        writes_out = Signal.like(reads_out)
        m.d.sync += [reads_out.eq(reads_out + ar_fire - self.r_done),
                     writes_out.eq(writes_out + aw_fire - self.b_done)]

        # the DRAM row model and the counters.  Each counter adds what a register took the
        # cycle before (a request's link and useful bytes, an access, an activation): its
        # 48-bit carry chain starts at registers, not behind the decoder's head or the open
        # rows' compares.  The counts are a cycle late, long before a command's completion
        # reads them (its responses are a memory latency away).
        counters = self.counters
        added = Signal(counters_layout, name="counters_added")
        m.d.sync += added.eq(0)
        for name in counters_layout.members:
            m.d.sync += counters[name].eq(counters[name] + added[name])
        open_row = [Signal(W, init=(1 << W) - 1, name=f"open_row{b}") for b in range(self.banks)]
        row_shift = log2_exact(self.row_bytes, "row_bytes")
        bank_bits = log2_exact(self.banks, "banks")

        def touch(address):
            row = address[row_shift:]
            bank = row[:bank_bits] if bank_bits else Const(0)
            for b in range(self.banks):
                with m.If((bank == b) & (open_row[b] != row)):
                    m.d.sync += [open_row[b].eq(row), added.activations.eq(1)]
            m.d.sync += added.column_accesses.eq(1)

        # the run being issued: its element that starts it, and the one that starts the next
        issue_run = Signal(5)
        # "this run is the request's last", a register set as each run issues (not the run
        # count's compare behind the port's ready: the decoder's ready, then its two stages'
        # loads and the inbox's pop, took 9 levels)
        last_run = Signal(name="last_run")
        aw_done, w_done = Signal(), Signal()
        target = Signal(W)
        cursor, next_start = Signal(4, name="run_start"), Signal(4, name="next_run_start")
        # the runs starting after the cursor: each bit the cursor's compare with a constant
        # (a LUT a bit), not a shifted mask's subtraction (a carry chain before the priority chain)
        later = Cat(*[d.starts[j] & (cursor < j) for j in range(MAX_OFFSETS)])
        for j in reversed(range(MAX_OFFSETS)):
            with m.If(later[j]):
                m.d.comb += next_start.eq(j)
        current_column = Cat(*d.column).word_select(cursor, column_bits(self.row_bytes))
        # a row's base has its low bits clear: the column goes in by concatenation, no adder
        m.d.comb += target.eq(Mux(is_row, Cat(Const(0, 6), current_column, head.address[row_shift:]), head.address))
        m.d.comb += [self.ar.payload.eq(target), self.aw.payload.eq(target)]
        # the write beat: slot k takes the live element of this run that marks it (at most
        # one does): its 32-bit word, or for 8-byte elements its half k mod 2 (an AND-OR,
        # not a priority chain)
        beat = self.w.payload
        words = [head.data.word_select(i, 32) for i in range(MAX_OFFSETS)]
        wide_row = is_row & size8
        for k in range(MAX_OFFSETS):
            hits = [d.live[j] & (d.run[j] == issue_run[:4]) & d.slots[j][k] for j in range(MAX_OFFSETS)]
            sources = [Mux(wide_row, words[2 * j + k % 2], words[j]) if j < LINE // 8 else words[j]
                       for j in range(MAX_OFFSETS)]
            m.d.comb += [beat.data.word_select(k, 32).eq(or_all([Mux(h, w, 0) for h, w in zip(hits, sources)])),
                         beat.strobe.word_select(k, 4).eq(Mux(Cat(*hits).any(), 0xF, 0))]

        with m.FSM(name="issue"):
            with m.State("IDLE"):
                # the request's entry first; reads and writes never overlap
                clear_to_go = Mux(is_write, reads_out == 0, writes_out == 0)
                m.d.comb += self.entries.valid.eq(self.decoded.valid & ((d.error != 0) | clear_to_go))
                with m.If(self.entries.valid & self.entries.ready):
                    with m.If(d.error != 0):
                        m.d.comb += self.decoded.ready.eq(1)
                    with m.Else():
                        link = HEADER_BYTES + LINE + Mux(is_row, OFFSET_BYTES * head.count, 0)
                        useful = Mux(is_row, Mux(size8, head.count << 3, head.count << 2), 0)
                        m.d.sync += [added.requests.eq(1), added.link_bytes.eq(link), added.useful_bytes.eq(useful),
                                     issue_run.eq(0), cursor.eq(0), aw_done.eq(0), w_done.eq(0),
                                     last_run.eq(d.runs == 1)]
                        m.next = "ISSUE"
            with m.State("ISSUE"):
                next_last = issue_run + 2 == d.runs
                with m.If(~is_write):
                    m.d.comb += self.ar.valid.eq(1)
                    with m.If(self.ar.ready):
                        touch(target)
                        m.d.sync += [issue_run.eq(issue_run + 1), cursor.eq(next_start), last_run.eq(next_last)]
                        with m.If(last_run):
                            m.d.comb += self.decoded.ready.eq(1)
                            m.next = "IDLE"
                with m.Else():
                    m.d.comb += [self.aw.valid.eq(~aw_done), self.w.valid.eq(~w_done)]
                    aw_now = aw_done | self.aw.ready
                    w_now = w_done | self.w.ready
                    with m.If(aw_fire):
                        touch(target)
                    with m.If(aw_now & w_now):
                        m.d.sync += [issue_run.eq(issue_run + 1), cursor.eq(next_start), aw_done.eq(0),
                                     w_done.eq(0), last_run.eq(next_last)]
                        with m.If(last_run):
                            m.d.comb += self.decoded.ready.eq(1)
                            m.next = "IDLE"
                    with m.Else():
                        m.d.sync += [aw_done.eq(aw_now), w_done.eq(w_now)]

        with m.If(self.clear):                  # after every increment above, so it wins
            m.d.sync += [counters.eq(0), added.eq(0)]
        return m
