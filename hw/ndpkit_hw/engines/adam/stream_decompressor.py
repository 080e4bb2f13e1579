"""The stream-mode gradient decompressor: (index, value) pairs -> dense gradient vectors.

Spec: :func:`ndpkit.engines.decomp.golden.stream_stop` and :func:`ndpkit.engines.decomp.golden.densify`.

``idx`` and ``val`` are word streams from two burst readers, unpacked to one pair a
cycle by :class:`~.pairs.PairUnpacker`.  ``o`` emits ``vectors = ceil(n / lanes)``
dense vectors of ``lanes`` 32-bit slots (a 16-bit value sits in the low half of its
slot; zeros where no pair names the element), straight into the updater: no dense
gradient touches memory.

One decision per cycle: the head pair is checked (index < n, else OUT_OF_WINDOW;
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
from ndpkit_hw.engines.decomp.pairs import PairUnpacker

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

        vectors = Signal(33)
        m.d.comb += vectors.eq((self.n + (lanes - 1)) >> lane_shift)
        prev = Signal(32)
        first = Signal()
        pairs_left = Signal(32)
        current = self.emitted
        acc = Signal(data.ArrayLayout(32, lanes))
        head = unpacker.o.payload
        in_current = (head.index >> lane_shift) == current
        running = (self.error == 0) & (current != vectors)

        absorb = Signal()
        emit = Signal()
        out_valid = Signal()
        take = Signal()             # the built vector moves to the output register
        with m.If(running):
            with m.If(pairs_left != 0):
                with m.If(unpacker.o.valid):
                    with m.If(head.index >= self.n):
                        m.d.sync += self.error.eq(ErrorCode.OUT_OF_WINDOW)
                    with m.Elif(~first & (head.index <= prev)):
                        m.d.sync += self.error.eq(ErrorCode.BAD_FIELD)
                    with m.Elif(in_current):
                        m.d.comb += absorb.eq(1)
                    with m.Else():
                        m.d.comb += emit.eq(1)
            with m.Else():
                m.d.comb += emit.eq(1)

        out_word = Signal.like(acc)
        m.d.comb += [take.eq(emit & (~out_valid | self.o.ready)), self.o.valid.eq(out_valid),
                     self.o.payload.eq(out_word), unpacker.o.ready.eq(absorb)]
        with m.If(self.o.ready):
            m.d.sync += out_valid.eq(0)
        with m.If(take):
            m.d.sync += [current.eq(current + 1), acc.eq(0), out_valid.eq(1), out_word.eq(acc)]
        with m.If(absorb):
            m.d.sync += [acc[head.index[:lane_shift]].eq(head.value), prev.eq(head.index), first.eq(0),
                         pairs_left.eq(pairs_left - 1)]
        with m.If(self.start):
            m.d.sync += [current.eq(0), acc.eq(0), first.eq(1), pairs_left.eq(self.k), self.error.eq(0),
                         out_valid.eq(0)]
        return m
