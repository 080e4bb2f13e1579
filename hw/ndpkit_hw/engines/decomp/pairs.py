"""Compressed-gradient pairs off the bus: index and value word streams -> one
(index, value) pair per cycle.

``idx`` carries ``lanes = data_width / 32`` uint32 indices a word; ``val`` carries
``lanes`` fp32 or ``2 * lanes`` fp16/bf16 values a word (``value16``; a 16-bit value
comes out zero-extended).  ``start`` loads the pair count ``k``; after ``k`` pairs the
unpacker stops (both streams end on their last, partly used word).  ``drain`` discards
whatever the readers still deliver, for a command that stops on a bad pair.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal, Array, Mux
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["PairUnpacker", "PairLayout", "PairsLeft"]

PairLayout = data.StructLayout({"index": 32, "value": 32})


class PairsLeft:
    """A count of pairs still to come with "none left" and "one left" kept as flags
    beside it, so the logic that takes a pair meets a flag, not a 32-bit compare.
    ``load(k)`` and ``step()`` are the synchronous statements that set and decrement it."""

    def __init__(self, name: str = "pairs_left"):
        self.count = Signal(32, name=name)
        self.none, self.one = Signal(init=1, name=f"{name}_none"), Signal(name=f"{name}_one")

    def load(self, k) -> list:
        return [self.count.eq(k), self.none.eq(k == 0), self.one.eq(k == 1)]

    def step(self) -> list:
        return [self.count.eq(self.count - 1), self.none.eq(self.one), self.one.eq(self.count == 2)]


class PairUnpacker(wiring.Component):
    def __init__(self, *, data_width: int = 512):
        self.data_width = data_width
        self.lanes = data_width // 32
        if self.lanes < 2 or self.lanes & (self.lanes - 1):
            raise ValueError(f"data_width must be 64 times a power of two, not {data_width}")
        super().__init__({
            "start": In(1),
            "k": In(32),
            "value16": In(1),
            "drain": In(1),
            "idx": In(stream.Signature(data_width)),
            "val": In(stream.Signature(data_width)),
            "o": Out(stream.Signature(PairLayout)),
        })

    def elaborate(self, platform):
        m = Module()
        lanes = self.lanes
        lane_shift = lanes.bit_length() - 1
        idx_pos = Signal(range(lanes))
        val_pos = Signal(range(2 * lanes))
        left = PairsLeft()          # (flags: no 32-bit compare from a FIFO's head through take)
        idx_slots = Array(self.idx.payload[32 * i:32 * (i + 1)] for i in range(lanes))
        val32 = Array(self.val.payload[32 * i:32 * (i + 1)] for i in range(lanes))
        val16 = Array(self.val.payload[16 * i:16 * (i + 1)] for i in range(2 * lanes))
        m.d.comb += [
            self.o.valid.eq(~left.none & self.idx.valid & self.val.valid & ~self.drain),
            self.o.payload.index.eq(idx_slots[idx_pos]),
            self.o.payload.value.eq(Mux(self.value16, val16[val_pos], val32[val_pos[:lane_shift]])),
        ]
        take = self.o.valid & self.o.ready
        last_pair = left.one
        idx_word_done = (idx_pos == lanes - 1) | last_pair
        val_word_done = (val_pos == 2 * lanes - 1) | (~self.value16 & (val_pos == lanes - 1)) | last_pair
        m.d.comb += [self.idx.ready.eq(self.drain | (take & idx_word_done)),
                     self.val.ready.eq(self.drain | (take & val_word_done))]
        with m.If(take):
            m.d.sync += [idx_pos.eq(idx_pos + 1), val_pos.eq(val_pos + 1), *left.step()]
            with m.If((~self.value16 & (val_pos == lanes - 1)) | last_pair):
                m.d.sync += val_pos.eq(0)
            with m.If(last_pair):
                m.d.sync += idx_pos.eq(0)
        with m.If(self.start):
            m.d.sync += [idx_pos.eq(0), val_pos.eq(0), *left.load(self.k)]
        return m
