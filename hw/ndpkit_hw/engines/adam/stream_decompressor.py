"""The stream-mode gradient decompressor: (index, value) pairs -> dense gradient vectors.

Spec: :func:`ndpkit.engines.decomp.golden.stream_stop` and :func:`ndpkit.engines.decomp.golden.densify`.

``idx`` and ``val`` are word streams from two burst readers, unpacked to one pair a
cycle by :class:`~.pairs.PairUnpacker`.  ``o`` emits ``vectors = ceil(n / lanes)``
dense vectors of ``lanes`` 32-bit slots (a 16-bit value sits in the low half of its
slot; zeros where no pair names the element), straight into the updater: no dense
gradient touches memory.

One decision per cycle (the pair registered after the unpacker, with its checks): the head pair is checked (index < n, else OUT_OF_WINDOW;
index above the previous one, else BAD_FIELD) and, when it falls in the current
vector, absorbed; otherwise the current vector is emitted into the output register,
from which ``o`` is read while the next one is built.  So a vector costs one cycle plus
one per pair in it, overlapped with the updater's reading of the previous one (a bus
word at a time: ``bus elements / updater lanes`` cycles): at the densities sparse
gradients have (<= 10 %) this is faster than the memory port delivers p, m and v.  On
a bad pair the decompressor stops before emitting the vector that is being built
(``error`` holds the code, ``emitted`` counts the vectors already sent, the last of
which ``o`` may still hold) and drains both inputs.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.codes import ErrorCode
from ndpkit_hw.engines.decomp.pairs import PairLayout, PairsLeft, PairUnpacker

__all__ = ["StreamDecompressor"]


class StreamDecompressor(wiring.Component):
    def __init__(self, *, data_width: int = 512):
        self.data_width = data_width
        self.unpacker = PairUnpacker(data_width=data_width)
        self.lanes = self.unpacker.lanes
        super().__init__({
            "start": In(1),            # pulse: load n/k, clear the state
            "n": In(32),
            "k": In(32),
            "value16": In(1),
            "idx": In(stream.Signature(data_width)),
            "val": In(stream.Signature(data_width)),
            "o": Out(stream.Signature(data.ArrayLayout(32, self.lanes))),
            "error": Out(4),
            "emitted": Out(33),
        })

    def elaborate(self, platform):
        m = Module()
        lanes = self.lanes
        lane_shift = lanes.bit_length() - 1
        m.submodules.unpacker = unpacker = self.unpacker
        wiring.connect(m, wiring.flipped(self.idx), unpacker.idx)
        wiring.connect(m, wiring.flipped(self.val), unpacker.val)
        m.d.comb += [unpacker.start.eq(self.start), unpacker.k.eq(self.k), unpacker.value16.eq(self.value16),
                     unpacker.drain.eq(self.error != 0)]

        # one register stage after the unpacker: the pair with its vector and its verdicts
        # (index < n; index above the pair staged before it, which was absorbed by then), so
        # the lane select and the 32-bit compares each get a cycle before the decision
        staged = Signal(PairLayout, name="staged_pair")
        staged_valid, staged_vector = Signal(name="staged_valid"), Signal(32, name="staged_vector")
        out_of_range, not_increasing, have_prev = Signal(), Signal(), Signal()
        absorb = Signal()
        fresh = unpacker.o.payload
        m.d.comb += unpacker.o.ready.eq(~staged_valid | absorb)
        with m.If(unpacker.o.valid & unpacker.o.ready):
            m.d.sync += [staged_valid.eq(1), staged.eq(fresh), staged_vector.eq(fresh.index >> lane_shift),
                         out_of_range.eq(fresh.index >= self.n),
                         not_increasing.eq(have_prev & (fresh.index <= staged.index)), have_prev.eq(1)]
        with m.Elif(absorb):
            m.d.sync += staged_valid.eq(0)

        before_last = Signal(33)    # vectors - 1 = floor((n - 1) / lanes): "the next is the last" without an increment
        left = PairsLeft()          # pairs not yet absorbed
        current = self.emitted
        acc = Signal(data.ArrayLayout(32, lanes))
        all_emitted = Signal()      # current == vectors, kept as a flag with the count
        running = (self.error == 0) & ~all_emitted

        emit = Signal()
        out_valid = Signal()
        take = Signal()             # the built vector moves to the output register
        with m.If(running):
            with m.If(~left.none):
                with m.If(staged_valid):
                    with m.If(out_of_range):
                        m.d.sync += self.error.eq(ErrorCode.OUT_OF_WINDOW)
                    with m.Elif(not_increasing):
                        m.d.sync += self.error.eq(ErrorCode.BAD_FIELD)
                    with m.Elif(staged_vector == current):
                        m.d.comb += absorb.eq(1)
                    with m.Else():
                        m.d.comb += emit.eq(1)
            with m.Else():
                m.d.comb += emit.eq(1)

        out_word = Signal.like(acc)
        m.d.comb += [take.eq(emit & (~out_valid | self.o.ready)), self.o.valid.eq(out_valid),
                     self.o.payload.eq(out_word)]
        with m.If(self.o.ready):
            m.d.sync += out_valid.eq(0)
        with m.If(take):
            m.d.sync += [current.eq(current + 1), acc.eq(0), out_valid.eq(1), out_word.eq(acc),
                         all_emitted.eq(current == before_last)]
        with m.If(absorb):
            m.d.sync += [acc[staged.index[:lane_shift]].eq(staged.value), *left.step()]
        with m.If(self.start):
            m.d.sync += [current.eq(0), acc.eq(0), *left.load(self.k),
                         before_last.eq((self.n - 1)[:32] >> lane_shift),
                         all_emitted.eq(self.n == 0), self.error.eq(0),
                         out_valid.eq(0), staged_valid.eq(0), have_prev.eq(0)]
        return m
