"""The stream-mode gradient decompressor: (index, value) pairs -> dense gradient vectors.

Spec: :func:`ndpkit.golden.decomp.stream_stop` and :func:`ndpkit.golden.decomp.decompress_stream`.

``idx`` and ``val`` are word streams from two burst readers: ``lanes`` uint32 indices
per word, and ``lanes`` fp32 or ``2 * lanes`` fp16/bf16 values per word (``value16``).
``o`` emits ``vectors = ceil(n / lanes)`` dense vectors of ``lanes`` 32-bit slots (a
16-bit value sits in the low half of its slot; zeros where no pair names the element),
straight into the updater: no dense gradient touches memory.

One decision per cycle: the head pair is checked (index < n, else OUT_OF_WINDOW;
index above the previous one, else BAD_FIELD) and, when it falls in the current
vector, absorbed; otherwise the current vector is emitted.  So a vector costs one
cycle plus one per pair in it: at the densities sparse gradients have (<= 10 %) this
is faster than the memory port delivers p, m and v.  On a bad pair the decompressor
stops before emitting the vector that is being built (``error`` holds the code,
``emitted`` counts the vectors already sent) and drains both inputs.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal, Array, Const, Mux
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit.codes import ErrorCode

__all__ = ["StreamDecompressor"]


class StreamDecompressor(wiring.Component):
    def __init__(self, *, data_width: int = 512):
        self.data_width = data_width
        self.lanes = data_width // 32
        if self.lanes < 1 or self.lanes & (self.lanes - 1):
            raise ValueError(f"data_width must be 32 times a power of two, not {data_width}")
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
        vectors = Signal(33)
        m.d.comb += vectors.eq((self.n + (lanes - 1)) >> lane_shift)

        idx_pos = Signal(range(lanes))
        val_pos = Signal(range(2 * lanes))
        pairs_left = Signal(32)
        prev = Signal(32)
        first = Signal()
        current = self.emitted
        acc = Signal(data.ArrayLayout(32, lanes))

        idx_slots = Array(self.idx.payload[32 * i:32 * (i + 1)] for i in range(lanes))
        val32 = Array(self.val.payload[32 * i:32 * (i + 1)] for i in range(lanes))
        val16 = Array(self.val.payload[16 * i:16 * (i + 1)] for i in range(2 * lanes))
        head_idx, head_val = Signal(32), Signal(32)
        m.d.comb += [head_idx.eq(idx_slots[idx_pos]),
                     head_val.eq(Mux(self.value16, val16[val_pos], val32[val_pos[:lane_shift]]))]
        have_pairs = pairs_left != 0
        head_ready = have_pairs & self.idx.valid & self.val.valid
        in_current = (head_idx >> lane_shift) == current
        running = (self.error == 0) & (current != vectors)
        last_pair = pairs_left == 1

        absorb = Signal()
        emit = Signal()
        with m.If(running):
            with m.If(have_pairs):
                with m.If(head_ready):
                    with m.If(head_idx >= self.n):
                        m.d.sync += self.error.eq(ErrorCode.OUT_OF_WINDOW)
                    with m.Elif(~first & (head_idx <= prev)):
                        m.d.sync += self.error.eq(ErrorCode.BAD_FIELD)
                    with m.Elif(in_current):
                        m.d.comb += absorb.eq(1)
                    with m.Else():
                        m.d.comb += emit.eq(1)
            with m.Else():
                m.d.comb += emit.eq(1)

        m.d.comb += [self.o.valid.eq(emit), self.o.payload.eq(acc)]
        with m.If(emit & self.o.ready):
            m.d.sync += [current.eq(current + 1), acc.eq(0)]
        with m.If(absorb):
            m.d.sync += [acc[head_idx[:lane_shift] if lane_shift else 0].eq(head_val),
                         pairs_left.eq(pairs_left - 1), prev.eq(head_idx), first.eq(0),
                         idx_pos.eq(idx_pos + 1)]
            m.d.sync += val_pos.eq(val_pos + 1)
            with m.If(~self.value16 & (val_pos == lanes - 1)):
                m.d.sync += val_pos.eq(0)
        idx_word_done = (idx_pos == lanes - 1) | last_pair
        val_word_done = (val_pos == Const(2 * lanes - 1)) | (~self.value16 & (val_pos == lanes - 1)) | last_pair
        draining = self.error != 0
        m.d.comb += [self.idx.ready.eq(draining | (absorb & idx_word_done)),
                     self.val.ready.eq(draining | (absorb & val_word_done))]
        with m.If(absorb & last_pair):
            m.d.sync += [idx_pos.eq(0), val_pos.eq(0)]

        with m.If(self.start):
            m.d.sync += [current.eq(0), acc.eq(0), idx_pos.eq(0), val_pos.eq(0), pairs_left.eq(self.k),
                         first.eq(1), self.error.eq(0)]
        return m
