"""Between bus words and 32-bit elements: the graph engine's arrays stream through
these (row pointers, columns, values in; results out)."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["WordUnpacker", "WordPacker"]


class WordUnpacker(wiring.Component):
    """A reader's bus words -> ``count`` 32-bit elements, in order (the last word's
    unused elements dropped).  ``start`` restarts; ``count`` is taken the cycle after
    it (it must hold from then until the pass ends).

    The elements leave from registers, with a second register that catches the element
    fetched in the cycle the consumer stalls (a skid buffer): the consumer's ``ready``
    (a compare of the element, in the graph engine) then reaches only these registers.
    The elements left to fetch count down in a register with its "more" and "last"
    flags beside it, so the word selection and the reader's ``ready`` come from
    registers alone (not from the count's arithmetic on the command's fields)."""

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
        loading = Signal()               # the cycle after start: the count is taken
        remaining = Signal(32)           # elements left to fetch
        more, last = Signal(), Signal()  # remaining != 0, remaining == 1
        head, head_valid = Signal(32), Signal()       # the element offered
        spare, spare_valid = Signal(32), Signal()     # the one fetched while the head stalled
        element = self.words.payload.data.word_select(lane, 32)
        fetch = self.words.valid & more & ~spare_valid
        out_fire = self.elements.valid & self.elements.ready
        m.d.comb += [self.elements.valid.eq(head_valid), self.elements.payload.eq(head),
                     self.done.eq(~more & ~loading & ~head_valid)]
        m.d.sync += loading.eq(0)
        with m.If(loading):
            m.d.sync += [remaining.eq(self.count), more.eq(self.count != 0), last.eq(self.count == 1)]
        with m.If(out_fire):
            m.d.sync += [head.eq(spare), head_valid.eq(spare_valid), spare_valid.eq(0)]
        with m.If(fetch):
            m.d.sync += [remaining.eq(remaining - 1), more.eq(~last), last.eq(remaining == 2),
                         lane.eq(lane + 1)]
            with m.If((lane == self.lanes - 1) | last):
                m.d.comb += self.words.ready.eq(1)
                m.d.sync += lane.eq(0)
            with m.If(head_valid & ~out_fire):
                m.d.sync += [spare.eq(element), spare_valid.eq(1)]
            with m.Else():               # (the spare is empty whenever a fetch happens)
                m.d.sync += [head.eq(element), head_valid.eq(1)]
        with m.If(self.start):
            m.d.sync += [loading.eq(1), more.eq(0), lane.eq(0), head_valid.eq(0), spare_valid.eq(0)]
        return m


class WordPacker(wiring.Component):
    """``count`` 32-bit elements -> whole bus words for a writer (the last one padded
    with zeros).  ``start`` restarts; ``count`` is taken from the cycle after it (no
    element is taken in that cycle) and must hold until the pass ends.  ``done``
    (registered, a cycle late) once every element of the pass was taken and its last
    word handed on."""

    def __init__(self, data_width: int):
        self.lanes = data_width // 32
        super().__init__({
            "elements": In(stream.Signature(32)),
            "words": Out(stream.Signature(data.StructLayout({"data": data_width, "strb": data_width // 8}))),
            "count": In(32),
            "start": In(1),
            "done": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        lane = Signal(range(self.lanes))
        left = Signal(32)                # elements not yet taken, counted down
        word = Signal(len(self.words.payload.data))
        full = Signal()
        # "the next element is the last", registered: from the down-count's compares with
        # constants, so the word's completion and the writer's valid start at a flop and
        # no add or compare of two counts stands in front of it (the count settles the
        # cycle after start, `fresh`: it is loaded then, and no element is taken)
        last, fresh = Signal(), Signal()
        fire = self.elements.valid & self.elements.ready
        m.d.sync += [last.eq(Mux(fresh, self.count == 1, Mux(fire, left == 2, left == 1))), fresh.eq(self.start)]
        m.d.comb += [self.words.valid.eq(full), self.words.payload.data.eq(word), self.words.payload.strb.eq(-1),
                     self.elements.ready.eq(~full & ~fresh)]
        with m.If(self.words.valid & self.words.ready):
            m.d.sync += [full.eq(0), word.eq(0)]
        with m.If(fresh):
            m.d.sync += left.eq(self.count)
        with m.If(fire):
            m.d.sync += [word.word_select(lane, 32).eq(self.elements.payload), left.eq(left - 1),
                         lane.eq(lane + 1)]
            with m.If((lane == self.lanes - 1) | last):
                m.d.sync += [full.eq(1), lane.eq(0)]
        m.d.sync += self.done.eq(~self.start & ~fresh & (left == 0) & ~full)
        with m.If(self.start):
            m.d.sync += [lane.eq(0), word.eq(0), full.eq(0)]
        return m
