"""Between bus words and 32-bit elements: the graph engine's arrays stream through
these (row pointers, columns, values in; results out)."""
from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["WordUnpacker", "WordPacker", "group_layout"]


def group_layout(group: int) -> data.StructLayout:
    """Up to ``group`` consecutive 32-bit elements: ``count`` of them, in ``data[0 ..
    count - 1]`` (PageRank's vertex passes take their vertices in such groups)."""
    return data.StructLayout({"data": data.ArrayLayout(32, group), "count": range(group + 1)})


class WordUnpacker(wiring.Component):
    """A reader's bus words -> ``count`` 32-bit elements, in order (the last word's
    unused elements dropped).  ``start`` restarts; ``count`` is taken the cycle after
    it (it must hold from then until the pass ends).

    The elements leave from registers, with a second register that catches the element
    fetched in the cycle the consumer stalls (a skid buffer): the consumer's ``ready``
    (a compare of the element, in the graph engine) then reaches only these registers.
    The elements left to fetch count down in a register with its "more" and "last"
    flags beside it, so the word selection and the reader's ``ready`` come from
    registers alone (not from the count's arithmetic on the command's fields).

    With ``group`` (a power of two dividing the word's elements), the elements leave
    ``group`` at a time (:func:`group_layout`: the pass's last group holds what is left),
    a word's groups in order."""

    def __init__(self, data_width: int, group: int | None = None):
        self.group = group or 1
        if data_width % (32 * self.group) or self.group & (self.group - 1):
            raise ValueError(f"graph: an unpacker's group must be a power of two dividing {data_width // 32}, "
                             f"not {group}")
        self.lanes = data_width // (32 * self.group)        # the groups in a word
        self.in_groups = group is not None
        super().__init__({
            "words": In(stream.Signature(data.StructLayout({"data": data_width, "last": 1}))),
            "elements": Out(stream.Signature(32 if group is None else group_layout(group))),
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
        shape = self.elements.payload.shape()
        head, head_valid = Signal(shape), Signal()       # the element (group) offered
        spare, spare_valid = Signal(shape), Signal()     # the one fetched while the head stalled
        g = self.group
        if not self.in_groups:
            element = self.words.payload.data.word_select(lane, 32)
        else:                            # a group: the last one holds what is left
            element = Signal(shape)
            m.d.comb += [element.data.eq(self.words.payload.data.word_select(lane, 32 * g)),
                         element.count.eq(Mux(last, remaining[:g.bit_length()], g))]
        fetch = self.words.valid & more & ~spare_valid
        out_fire = self.elements.valid & self.elements.ready
        m.d.comb += [self.elements.valid.eq(head_valid), self.elements.payload.eq(head),
                     self.done.eq(~more & ~loading & ~head_valid)]
        m.d.sync += loading.eq(0)
        with m.If(loading):
            m.d.sync += [remaining.eq(self.count), more.eq(self.count != 0), last.eq(self.count <= g)]
        with m.If(out_fire):
            m.d.sync += [head.eq(spare), head_valid.eq(spare_valid), spare_valid.eq(0)]
        with m.If(fetch):
            # (`last` is "at most a group left": then `remaining` is not needed again)
            m.d.sync += [remaining.eq(remaining - g), more.eq(~last),
                         last.eq(remaining == 2 if g == 1 else remaining <= 2 * g), lane.eq(lane + 1)]
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
    word handed on.

    With ``group`` (a power of two dividing the word's elements) the elements come as
    :func:`group_layout` groups: one element a cycle in ``data[0]`` (``count`` ignored),
    or with ``grouped`` a whole group a cycle, every group full but the pass's last (so
    each starts at a multiple of ``group`` in its word)."""

    def __init__(self, data_width: int, group: int | None = None):
        self.group = group or 1
        if data_width % (32 * self.group) or self.group & (self.group - 1):
            raise ValueError(f"graph: a packer's group must be a power of two dividing {data_width // 32}, "
                             f"not {group}")
        self.lanes = data_width // 32
        members = {
            "elements": In(stream.Signature(32 if group is None else group_layout(group))),
            "words": Out(stream.Signature(data.StructLayout({"data": data_width, "strb": data_width // 8}))),
            "count": In(32),
            "start": In(1),
            "done": Out(1),
        }
        self.in_groups = group is not None
        if self.in_groups:
            members["grouped"] = In(1)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        g = self.group
        grouped = Const(0)
        if self.in_groups:
            # a register: a pass's kind is set in the cycle it starts, and its first element
            # comes a stream's latency later (`last`, recomputed every cycle, has settled by
            # then), so the state's decode stays out of the down-count's subtraction
            grouped = Signal()
            m.d.sync += grouped.eq(self.grouped)
        lane = Signal(range(self.lanes))
        left = Signal(32)                # elements not yet taken, counted down
        word = Signal(len(self.words.payload.data))
        full = Signal()
        # "the next element (group) is the last", registered: from the down-count's compares
        # with constants, so the word's completion and the writer's valid start at a flop and
        # no add or compare of two counts stands in front of it (the count settles the
        # cycle after start, `fresh`: it is loaded then, and no element is taken)
        last, fresh = Signal(), Signal()
        fire = self.elements.valid & self.elements.ready
        single_last = Mux(fresh, self.count == 1, Mux(fire, left == 2, left == 1))
        if g == 1:
            m.d.sync += last.eq(single_last)
        else:
            group_last = Mux(fresh, self.count <= g, Mux(fire, left <= 2 * g, left <= g))
            m.d.sync += last.eq(Mux(grouped, group_last, single_last))
        m.d.sync += fresh.eq(self.start)
        m.d.comb += [self.words.valid.eq(full), self.words.payload.data.eq(word), self.words.payload.strb.eq(-1),
                     self.elements.ready.eq(~full & ~fresh)]
        with m.If(self.words.valid & self.words.ready):
            m.d.sync += [full.eq(0), word.eq(0)]
        with m.If(fresh):
            m.d.sync += left.eq(self.count)
        payload = self.elements.payload
        word_full = lane == self.lanes - 1
        with m.If(fire):
            if g == 1:
                element = payload.data[0] if self.in_groups else payload
                m.d.sync += [word.word_select(lane, 32).eq(element), left.eq(left - 1), lane.eq(lane + 1)]
            else:
                # a group fills the word's lanes from its own (a multiple of the group), an
                # element the lane it is at
                shift = (g - 1).bit_length()
                for j in range(self.lanes):
                    hit = Mux(grouped, (lane >> shift == j >> shift) & (j % g < payload.count), lane == j)
                    with m.If(hit):
                        m.d.sync += word.word_select(j, 32).eq(Mux(grouped, payload.data[j % g], payload.data[0]))
                m.d.sync += [left.eq(left - Mux(grouped, payload.count, 1)), lane.eq(lane + Mux(grouped, g, 1))]
                word_full = Mux(grouped, lane >= self.lanes - g, word_full)
            with m.If(word_full | last):
                m.d.sync += [full.eq(1), lane.eq(0)]
        m.d.sync += self.done.eq(~self.start & ~fresh & (left == 0) & ~full)
        with m.If(self.start):
            m.d.sync += [lane.eq(0), word.eq(0), full.eq(0)]
        return m
