"""The validation pass at the bus's rate: a whole word of row pointers and a whole word
of columns a cycle (16 of each at 512 bits), where an element stream would take one.

It checks what :func:`ndpkit.engines.graph.golden.validate` checks, in any order of
arrival (the verdicts are sticky flags, and the command reports the row pointers'
before the columns'): ``rowptr[0] == 0``, every row pointer at least the one before it
(within a word, and a word's first against the previous word's last),
``rowptr[rows] == edges`` (``bad_graph``); every column below ``n`` (``bad_index``);
``rows`` is ``n`` for a whole matrix, fewer for a row slice.
Elements past the array's end in its last word are ignored.

A pass takes the first ``col_words`` column words (0: none) and, with ``rowptr_on``,
the row pointers: the engine judges the columns of a pass on the edge lanes as the
first edge pass takes them, the validation pass judging the row pointers only.  The
validator is ready until it has its words, so it can watch a stream another
consumer takes.

Each word is registered with its lanes' indices, its compares are made from those
registers into a second stage of per-lane flags, and the flags' OR lands in the sticky
verdicts a cycle later: no compare of a 32-bit lane feeds an OR of sixteen in one
cycle.  ``start`` restarts it with ``n``, ``rows``, ``edges`` and the words to take (held for the pass); ``done``
is high when both arrays' words have all been taken and judged.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["GraphValidator"]


class GraphValidator(wiring.Component):
    def __init__(self, data_width: int = 512):
        self.lanes = data_width // 32
        words = stream.Signature(data.StructLayout({"data": data_width, "last": 1}))
        super().__init__({
            "rowptr": In(words), "col": In(words),
            "n": In(32), "rows": In(32), "edges": In(32),
            "col_words": In(32), "rowptr_on": In(1),
            "start": In(1),
            "bad_graph": Out(1), "bad_index": Out(1),
            "done": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        lanes, shift = self.lanes, (self.lanes - 1).bit_length()
        n, rows, edges = self.n, self.rows, self.edges
        # the words a pass takes: ceil((rows + 1) / lanes) row-pointer words (or none), the
        # first col_words column words
        rp_words = Signal(33 - shift)
        m.d.sync += rp_words.eq(Mux(self.rowptr_on, (rows + lanes) >> shift, 0))
        rp_taken, col_taken = Signal(33 - shift), Signal(33 - shift)
        rp_more, col_more = rp_taken != rp_words, col_taken != self.col_words
        m.d.comb += [self.rowptr.ready.eq(rp_more), self.col.ready.eq(col_more)]

        # stage 1: the word taken, with where its lanes stand in the array
        rp_word, rp_valid, rp_index = Signal(32 * lanes), Signal(), Signal(33 - shift)
        previous = Signal(32)                 # the last row pointer of the word before
        col_word, col_valid, col_index = Signal(32 * lanes), Signal(), Signal(33 - shift)
        m.d.sync += [rp_valid.eq(0), col_valid.eq(0)]
        with m.If(self.rowptr.valid & rp_more):
            # (the word before stays in rp_word until the next is taken: its last lane is
            # what this word's first row pointer must not fall below)
            m.d.sync += [rp_word.eq(self.rowptr.payload.data), rp_valid.eq(1), rp_index.eq(rp_taken),
                         rp_taken.eq(rp_taken + 1), previous.eq(rp_word[-32:])]
        # (the word and its index registered every cycle, only its valid bit on the take: no
        # enable fans out from the take, which may come from another consumer's ready)
        m.d.sync += [col_word.eq(self.col.payload.data), col_index.eq(col_taken)]
        with m.If(self.col.valid & col_more):
            m.d.sync += [col_valid.eq(1), col_taken.eq(col_taken + 1)]

        # stage 2: per-lane flags from the registered word
        def lane(word, k):
            return word[32 * k:32 * (k + 1)]
        end_word = rows >> shift              # the word and lane holding rowptr[rows]
        end_lane = rows[:shift]
        rp_flags, col_flags = Signal(lanes), Signal(lanes)
        first_word = rp_index == 0
        last_rp = rp_index == end_word
        judged_rp, judged_col = Signal(), Signal()
        m.d.sync += [judged_rp.eq(rp_valid), judged_col.eq(col_valid)]
        for k in range(lanes):
            live = ~last_rp | (k <= end_lane)                 # an element of the array
            before = lane(rp_word, k - 1) if k else Mux(first_word, 0, previous)
            bad = (lane(rp_word, k) < before) | (last_rp & (k == end_lane) & (lane(rp_word, k) != edges))
            if k == 0:
                bad = bad | (first_word & (lane(rp_word, 0) != 0))
            col_live = (Cat(Const(k, shift), col_index) < edges)
            m.d.sync += [rp_flags[k].eq(rp_valid & live & bad),
                         col_flags[k].eq(col_valid & col_live & (lane(col_word, k) >= n))]

        # stage 3: the sticky verdicts
        with m.If(rp_flags.any()):
            m.d.sync += self.bad_graph.eq(1)
        with m.If(col_flags.any()):
            m.d.sync += self.bad_index.eq(1)
        # (registered, a cycle after the last verdict, cleared by start: the words' compares end
        # at a register, not in the engine's state)
        done = Signal()
        m.d.sync += done.eq(~rp_more & ~col_more & ~rp_valid & ~col_valid & ~judged_rp & ~judged_col)
        m.d.comb += self.done.eq(done)
        with m.If(self.start):
            m.d.sync += [done.eq(0), rp_taken.eq(0), col_taken.eq(0), rp_valid.eq(0), col_valid.eq(0), judged_rp.eq(0),
                         judged_col.eq(0), self.bad_graph.eq(0), self.bad_index.eq(0)]
        return m
