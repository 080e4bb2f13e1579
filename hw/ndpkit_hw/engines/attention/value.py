"""The attention datapath's value side: V rows as block-fixed integers (each row's
largest exponent taken as it fills the row buffer), weighted by the sweep's ``pk`` into
a :class:`~ndpkit_hw.arith.blockfloat.WeightedSums` per unit, four partial sums a
block."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.blockfloat import PARTIALS, V_BITS
from ndpkit_spec.engines.attention import SOFTMAX_BLOCK as BLOCK, KvFormat
from ndpkit_hw.arith.blockfloat import (BLOCK_FIXED_LATENCY, EXP_SHAPE, FLUSH_LATENCY, REVISIT, X_LAG, SumState,
                                        WeightedSums, decompose, field_exponent, to_block_fixed)
from ndpkit_hw.arith.dataflow import delay_line
from ndpkit_hw.arith.fp_common import Pipeline
from ndpkit_hw.bus.axi import log2_exact
from ndpkit_hw.engines.attention.epilogue import EpilogueJob, flush_layout, slot_count, sums_slot
from ndpkit_hw.engines.attention.rows import RowSide, serves
from ndpkit_hw.engines.attention.sweep import PK_BITS

__all__ = ["ValueSide", "WeightedRows", "FLUSH_DELAY", "flush_latency"]

#: cycles from the value side's beat issue to the units' update read (the issue's register
#: and the block-fixed conversion's stages ahead of the units): a shared read port's flush
#: is delayed as much
FLUSH_DELAY = 1 + BLOCK_FIXED_LATENCY - X_LAG


def flush_latency(shared_sums: bool) -> int:
    """Cycles from the epilogue's flush to its state: the units' read and their register,
    and (``shared_sums``) the flush's register and its :data:`FLUSH_DELAY`."""
    return FLUSH_LATENCY + (1 + FLUSH_DELAY if shared_sums else 0)


class ValueSide(RowSide):
    """Per KV head (``jobs``: its token count), its V rows (``v``), block by block: a
    block's bank once it is ``weighing`` (the sweep has started it) and the WeightedSums
    bank of its parity has been merged (``released`` / ``released_bank`` from the
    epilogue), then each row once the sweep has its weights (``swept``), its passes
    beat by beat into each unit's WeightedSums of ``columns`` lanes (which also sums
    ``pk`` itself with the row's first column group: the denominator), row t into
    partial ``t mod 4``, with the weight read at ``pk_addr`` (``pk_data`` a cycle
    later).  The row buffer takes each row's largest exponent as it fills; a beat's
    elements become the row's integers (:func:`~ndpkit_hw.arith.blockfloat.
    to_block_fixed`, once for all the units) on the way to the units.

    After a block's last row and the sums' last updates, the block goes to the epilogue
    (``blocks``: its sums bank, first / last, rows) and ``merging`` names its score
    bank; ``flush`` / ``state``: the epilogue's port to the units' sums (a unit's state
    two cycles after its flush).

    ``shared_sums``: the units' sums memories have one read port for the updates and the
    flushes (one copy of each, :class:`~ndpkit_hw.arith.blockfloat.WeightedSums`'s
    ``shared_read``; for an epilogue that flushes a few cycles a column group, not one
    that flushes every cycle): a flush, registered, takes the next cycle's beat issue (no
    beat is issued then: the flushes cost the value side H / 32 of its beats, H =
    ``units``) and reaches the units :data:`FLUSH_DELAY` cycles later, where that beat
    would have, so its state comes out :meth:`flush_latency` cycles after it."""

    def __init__(self, *, shared_sums: bool = False, **shape):
        self.shared_sums = shared_sums
        super().__init__(**shape)

    def flush_latency(self) -> int:
        """Cycles from a flush to its state."""
        return flush_latency(self.shared_sums)

    def members(self) -> dict:
        C, H, PM = self.columns, self.units, self.max_passes
        return {
            **super().members(),
            "v": In(stream.Signature(self.data_width)),
            "weighing": In(2),
            "swept": In(data.ArrayLayout(range(BLOCK + 1), 2)),
            "bank_rows": In(data.ArrayLayout(range(BLOCK + 1), 2)), "bank_first": In(2), "bank_last": In(2),
            "pk_addr": Out(range(2 * PM * BLOCK)), "pk_data": In(data.ArrayLayout(PK_BITS, H)),
            "blocks": Out(stream.Signature(EpilogueJob)),
            "merging": Out(stream.Signature(1, always_ready=True)),
            "flush": In(stream.Signature(flush_layout(C, H), always_ready=True)),
            "state": Out(stream.Signature(data.ArrayLayout(SumState, C + 1), always_ready=True)),
            "released": In(1), "released_bank": In(1),
        }

    def elaborate(self, platform):
        m = Module()
        C, H, PM, S, GROUPS = self.columns, self.units, self.max_passes, self.beats, self.groups
        bf16 = self.kv_format == KvFormat.BF16
        jobs, bank_rows = self.jobs, self.bank_rows
        v_rows, rows_words, passes = self.row_stream(m, "v", self.v, bf16)
        v_t, v_b = Signal(range(BLOCK)), Signal()
        v_j, v_w, v_c = Signal(range(PM), name="v_j"), Signal(range(self.row_words), name="v_w"), \
            Signal(range(S), name="v_c")
        v_want, v_issue = Signal(), Signal()          # a beat is ready; it is issued
        # a flush (shared: registered, so no path runs from the epilogue's issue into the
        # side's state; it takes a cycle of the beats' and meets the units where that beat would)
        flush = Cat(self.flush.valid, self.flush.payload)
        if self.shared_sums:
            line = delay_line(m, flush, 1 + FLUSH_DELAY, "shared_flush", reset=True)
            flush = line[-1]
            m.d.comb += v_issue.eq(v_want & ~line[1][0])
        else:
            m.d.comb += v_issue.eq(v_want)
        rows = WeightedRows(columns=C, units=H, shared_read=self.shared_sums, pair_words=self.pair_words)
        m.submodules.weighted_rows = rows
        ends = fifo.SyncFIFOBuffered(width=EpilogueJob.size, depth=4)          # blocks for the epilogue
        m.submodules.block_ends = ends
        m.d.comb += [self.blocks.valid.eq(ends.r_rdy), self.blocks.payload.eq(ends.r_data),
                     ends.r_en.eq(self.blocks.ready)]
        sums_busy = Signal(2)          # a WeightedSums bank the epilogue has still to merge
        sums_set = Signal(2)
        sums_clear = Mux(self.released, 1 << self.released_bank, 0)
        m.d.sync += sums_busy.eq((sums_busy & ~sums_clear) | sums_set)
        # the block's rows left after this one, counted down from the bank's count as the block
        # starts: its last row a compare with zero, not with the bank's count selected and less one
        rows_left = Signal.like(v_t, name="v_rows_left")
        v_block_end = self.row_end(v_c, v_w, rows_words) & (v_j == passes - 1) & (rows_left == 0)
        # (the beat's way to its sums' write: the aligner's stages the units do not overlap)
        drain_cycles = REVISIT + 4 + BLOCK_FIXED_LATENCY - X_LAG
        drain = Signal(range(drain_cycles + 1))
        with m.FSM(name="value_side") as value_fsm:
            with m.State("IDLE"):
                m.d.comb += jobs.ready.eq(1)
                with m.If(jobs.valid):
                    m.d.sync += [v_t.eq(0), v_j.eq(0), v_w.eq(0), v_c.eq(0)]
                    with m.If(jobs.payload != 0):
                        m.next = "WAIT_BANK"
            with m.State("WAIT_BANK"):
                # (and the epilogue has merged the block two back, which used the same sums bank)
                m.d.sync += rows_left.eq(bank_rows[v_b] - 1)
                with m.If(self.weighing.bit_select(v_b, 1) & ~sums_busy.bit_select(v_b, 1)):
                    m.next = "STREAM"
            with m.State("STREAM"):
                # a row once the sweep has its weights
                m.d.comb += v_want.eq(v_rows.ready & (self.swept[v_b] > v_t))
                with m.If(v_issue):
                    with m.If(self.step(m, v_c, v_w, v_j, rows_words, passes)):
                        m.d.sync += [v_t.eq(v_t + 1), rows_left.eq(rows_left - 1)]
                        m.d.comb += v_rows.release.eq(1)
                    with m.If(v_block_end):
                        m.d.sync += [v_t.eq(0), drain.eq(drain_cycles)]
                        m.next = "DRAIN"
            with m.State("DRAIN"):
                # the block's last updates land before the epilogue reads the sums
                m.d.sync += drain.eq(drain - 1)
                with m.If((drain == 0) & ends.w_rdy):
                    m.d.comb += [ends.w_en.eq(1),
                                 ends.w_data.eq(Cat(v_b, self.bank_first.bit_select(v_b, 1),
                                                    self.bank_last.bit_select(v_b, 1), bank_rows[v_b])),
                                 sums_set.eq(1 << v_b), self.merging.valid.eq(1), self.merging.payload.eq(v_b)]
                    m.d.sync += v_b.eq(~v_b)
                    with m.If(self.bank_last.bit_select(v_b, 1)):
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "WAIT_BANK"
        m.d.comb += self.busy.eq(~value_fsm.ongoing("IDLE") | ends.r_rdy)
        # the beat a cycle later: read from the row buffer, its row's largest exponent field and each unit's
        # weight read from memory
        v_words = self.read_beat(m, v_rows, v_w, v_c)
        Beat = data.StructLayout({"slot": range(slot_count(C, H)), "b": 1, "fresh": 1,
                                  "first_group": 1, "j": range(PM), "field": 8})
        vb = Signal(Beat)
        vb_valid = Signal()
        m.d.sync += [vb_valid.eq(v_issue), vb.b.eq(v_b), vb.fresh.eq(v_t < PARTIALS),
                     vb.first_group.eq((v_w == 0) & (v_c == 0)), vb.j.eq(v_j), vb.field.eq(v_rows.field),
                     vb.slot.eq(sums_slot(v_j, v_w * S + v_c, v_t[:log2_exact(PARTIALS, "partials")], GROUPS))]
        m.d.comb += self.pk_addr.eq((v_b * PM + v_j) * BLOCK + v_t)
        m.d.comb += [rows.bf16.eq(bf16), rows.i.valid.eq(vb_valid), rows.i.payload.v.eq(v_words[0]),
                     rows.i.payload.field.eq(vb.field), rows.i.payload.pk.eq(self.pk_data),
                     # (pairs: both units take every beat, each its word of the pass's head)
                     rows.i.payload.units.eq(Cat(*[serves(vb.j, h, self.group, H) | self.pairs for h in range(H)])),
                     rows.i.payload.total.eq(vb.first_group), rows.i.payload.slot.eq(vb.slot),
                     rows.i.payload.bank.eq(vb.b), rows.i.payload.fresh.eq(vb.fresh)]
        if self.pair_words:
            m.d.comb += rows.i.payload.v_second.eq(v_words[1])
        m.d.comb += [rows.flush.valid.eq(flush[0]), rows.flush.payload.eq(flush[1:])]
        wiring.connect(m, rows.state, wiring.flipped(self.state))
        return m


class WeightedRows(wiring.Component):
    """The value side's arithmetic: beats of ``columns`` V elements (``i``: the row's
    largest exponent ``field``, each unit's weight ``pk``, the ``units`` that take the
    beat, and where: ``slot``, ``bank``, ``fresh``; ``total`` on a row's first beat) as
    the row's block-fixed integers (:func:`~ndpkit_hw.arith.blockfloat.to_block_fixed`,
    once for all the units), then into each unit's
    :class:`~ndpkit_hw.arith.blockfloat.WeightedSums`; ``flush`` names a unit's slot,
    whose state comes out on ``state`` (:data:`~ndpkit_hw.arith.blockfloat.
    FLUSH_LATENCY` cycles later).  ``bf16`` (held): the format.  A unit's memory has
    :func:`~ndpkit_hw.engines.attention.epilogue.slot_count` slots, to a power of two;
    ``shared_read``: see :class:`~ndpkit_hw.arith.blockfloat.WeightedSums` (a flush
    never in a beat's cycle).  ``pair_words`` (two units): the beat has a second word's
    elements (``v_second``), unit 1's (its own converters; the caller gives the same word
    twice where the units share one)."""

    def __init__(self, *, columns: int, units: int, shared_read: bool = False, pair_words: bool = False):
        self.columns, self.units, self.pair_words = columns, units, pair_words
        slots = 1 << (slot_count(columns, units) - 1).bit_length()
        # half the units' sums in block RAM (UltraScale+): a card of instances of many lanes
        # runs out of UltraRAM first otherwise, with block RAM to spare
        self.sums = [WeightedSums(lanes=columns, slots=slots, shared_read=shared_read, ultra=h < -(-units // 2))
                     for h in range(units)]
        fields = {"v": data.ArrayLayout(16, columns), "field": 8,
                  "pk": data.ArrayLayout(PK_BITS, units), "units": units, "total": 1,
                  "slot": range(slots), "bank": 1, "fresh": 1}
        if pair_words:
            fields["v_second"] = data.ArrayLayout(16, columns)
        beat = data.StructLayout(fields)
        super().__init__({
            "i": In(stream.Signature(beat, always_ready=True)), "bf16": In(1),
            "flush": In(stream.Signature(flush_layout(columns, units), always_ready=True)),
            "state": Out(stream.Signature(data.ArrayLayout(SumState, columns + 1), always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        C, beat = self.columns, self.i.payload
        words = [(beat.v, "")] + ([(beat.v_second, "second_")] if self.pair_words else [])
        word_lanes = []
        for word, name in words:
            lanes = []
            for c in range(C):
                pipe = Pipeline(m, self.i.valid, f"{name}v_lane{c}")
                v = decompose(m, word[c], self.bf16, f"{name}v{c}")
                fixed, _ = to_block_fixed(m, pipe, v, beat.field, V_BITS, self.bf16, magnitude=True)
                lanes.append(fixed)
            word_lanes.append(lanes)
        # the rest of the beat alongside, with the row's exponent, to meet the elements X_LAG
        # cycles behind it in the units
        v_exp = Signal(EXP_SHAPE)
        m.d.comb += v_exp.eq(field_exponent(beat.field, self.bf16))
        carried = Cat(beat.as_value(), v_exp)
        tag_pipe = Pipeline(m, self.i.valid, "v_beat")
        for _ in range(BLOCK_FIXED_LATENCY - X_LAG):
            carried = tag_pipe.stage(carried)
        ab = data.View(beat.shape(), carried[:beat.shape().size])
        ab_exp = carried[beat.shape().size:]
        for h, unit in enumerate(self.sums):
            m.submodules[f"weighted_sums{h}"] = unit
            m.d.comb += [unit.bf16.eq(self.bf16), unit.i.valid.eq(tag_pipe.valid & ab.units[h]),
                         unit.i.payload.p.eq(ab.pk[h]), unit.i.payload.v_exp.eq(ab_exp),
                         unit.i.payload.total.eq(ab.total), unit.i.payload.slot.eq(ab.slot),
                         unit.i.payload.bank.eq(ab.bank), unit.i.payload.fresh.eq(ab.fresh)]
            lanes = word_lanes[1] if self.pair_words and h == 1 else word_lanes[0]
            m.d.comb += [unit.x[c].eq(fixed) for c, fixed in enumerate(lanes)]
            m.d.comb += [unit.flush.valid.eq(self.flush.valid & (self.flush.payload.unit == h)),
                         unit.flush.payload.slot.eq(self.flush.payload.slot),
                         unit.flush.payload.bank.eq(self.flush.payload.bank)]
        # one unit's state at a time
        state = Const(0, len(self.state.payload.as_value()))
        for unit in self.sums:
            state = state | Mux(unit.state.valid, unit.state.payload.as_value(), 0)
        m.d.comb += [self.state.valid.eq(Cat(*[unit.state.valid for unit in self.sums]).any()),
                     self.state.payload.eq(state)]
        return m
