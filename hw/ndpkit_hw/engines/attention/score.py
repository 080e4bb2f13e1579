"""The attention datapath's score side: K rows as block-fixed integers (a
:class:`~ndpkit_hw.arith.blockfloat.KeyAlign` for all units) against the group's q rows
(a :class:`~ndpkit_hw.arith.blockfloat.FixedDot` per unit), ``s = dot * scale`` into a
score bank with the running maximum."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.engines.attention import SOFTMAX_BLOCK as BLOCK, KvFormat
from ndpkit_hw.arith.blockfloat import FixedDot, KeyAlign
from ndpkit_hw.arith.dataflow import Dataflow, Timed
from ndpkit_hw.arith.minmax import minmax_value
from ndpkit_hw.engines.attention.qload import q_row_layout
from ndpkit_hw.engines.attention.rows import RowSide, memory_ports, register_file, serves

__all__ = ["ScoreSide", "ScoreDots", "NEG_INF"]

NEG_INF = 0xFF80_0000


class ScoreDots(wiring.Component):
    """The score side's arithmetic: K beats (``i``: ``columns`` 16-bit patterns, ``last``
    on a row's last beat, a ``tag`` and the beat's q bank address ``q_addr``) through one
    :class:`~ndpkit_hw.arith.blockfloat.KeyAlign`; as each aligned beat comes out its
    address goes to ``q_addr`` and the q bank's word (every unit's lanes and row
    exponent, :func:`~ndpkit_hw.engines.attention.qload.q_row_layout`) comes back on
    ``q_data`` a cycle later, where the beat meets it in each unit's
    :class:`~ndpkit_hw.arith.blockfloat.FixedDot`.  ``o``: each unit's binary32 sum of a
    row with the row's tag (valid only); ``room`` as KeyAlign's; ``bf16`` (held).

    ``pair_words`` (two units): a beat is two words' ``columns`` elements each, the
    first for unit 0 and the second for unit 1, aligned together (one KeyAlign of twice
    the lanes: the row's largest exponent over both); with ``pairs`` (held) unit 0's sum
    adds unit 1's row integer before its rounding (both units' beats are one head's
    row), else each unit's beat is the same word (the caller reads it twice)."""

    def __init__(self, *, columns: int, units: int, max_row_beats: int, tag_width: int, q_depth: int,
                 pair_words: bool = False):
        self.columns, self.units, self.pair_words = columns, units, pair_words
        words = 2 if pair_words else 1
        self.align = KeyAlign(lanes=words * columns, max_row_beats=max_row_beats,
                              tag_width=tag_width + (q_depth - 1).bit_length())
        self.dots = [FixedDot(lanes=columns, max_row_beats=max_row_beats, tag_width=tag_width,
                              partnered=pair_words) for _ in range(units)]
        beat = data.StructLayout({"k": data.ArrayLayout(16, words * columns), "last": 1, "tag": tag_width,
                                  "q_addr": range(q_depth)})
        members = {
            "i": In(stream.Signature(beat)), "room": Out(1), "bf16": In(1),
            "q_addr": Out(range(q_depth)), "q_data": In(data.ArrayLayout(q_row_layout(columns), units)),
            "o": Out(stream.Signature(data.ArrayLayout(self.dots[0].o.payload.shape(), units), always_ready=True)),
        }
        if pair_words:
            members["pairs"] = In(1)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        align, tag_width = self.align, len(self.i.payload.tag)
        m.submodules.key_align = align
        m.d.comb += [align.i.valid.eq(self.i.valid), self.i.ready.eq(align.i.ready), self.room.eq(align.room),
                     align.bf16.eq(self.bf16), align.i.payload.k.eq(self.i.payload.k),
                     align.i.payload.last.eq(self.i.payload.last),
                     align.i.payload.tag.eq(Cat(self.i.payload.tag, self.i.payload.q_addr)),
                     self.q_addr.eq(align.o.payload.tag[tag_width:])]
        # the aligned beat a cycle later, beside the q bank's word
        aligned = Signal.like(align.o.payload)
        aligned_valid = Signal()
        m.d.sync += [aligned.eq(align.o.payload), aligned_valid.eq(align.o.valid)]
        C = self.columns
        for h, dot in enumerate(self.dots):
            m.submodules[f"fixed_dot{h}"] = dot
            first = C if self.pair_words and h == 1 else 0
            k = Cat(*[aligned.k[first + c] for c in range(C)])
            m.d.comb += [dot.bf16.eq(self.bf16), dot.i.valid.eq(aligned_valid),
                         dot.i.payload.q.eq(self.q_data[h].q), dot.i.payload.q_exp.eq(self.q_data[h].exp),
                         dot.i.payload.k.eq(k), dot.i.payload.k_exp.eq(aligned.exp),
                         dot.i.payload.last.eq(aligned.last), dot.i.payload.tag.eq(aligned.tag[:tag_width]),
                         self.o.payload[h].eq(dot.o.payload)]
        if self.pair_words:
            m.d.comb += [self.dots[0].partner.eq(self.dots[1].row), self.dots[0].add_partner.eq(self.pairs),
                         self.dots[1].partner.eq(0), self.dots[1].add_partner.eq(0)]
        m.d.comb += self.o.valid.eq(self.dots[0].o.valid)        # (the units' pipelines are alike)
        return m


class ScoreSide(RowSide):
    """Per KV head (``jobs``: its token count), its K rows (``k``) against the q rows of
    the bank the q loader filled (``q_full``; ``q_release`` when the head's last row has
    been issued; ``q_addr``/``q_data`` the loader's read port): a row's ``passes`` go
    beat by beat into each unit's dot product, ``s = dot * scale`` into the unit's score
    memory at ``(bank * max_passes + pass) * 128 + row``.  The K beats go through one
    KeyAlign (the row's largest exponent, then its integers); the q bank is read as each
    aligned beat comes out (``q_addr`` travels with the beat), and the beat meets its q
    lanes in every unit's FixedDot a cycle later.

    The rows go in blocks of 128 tokens, block n to score bank n mod 2 once that bank is
    ``free``: ``fill`` names the bank as its first beat goes in (its ``bank_rows``,
    ``bank_first``, ``bank_last`` are set then), ``scored`` once its last score is in.
    Per unit and pass the running maximum; at a block's end the bank's maxima of each
    query head, the new one and the one before the block (-inf for a head's first
    block), for the sweep to read at ``max_addr`` = Cat(pass, bank) (``m_new``,
    ``m_old``: a register file's read, the same cycle); ``score_addr``/``score_data``:
    every unit's score at that address, a cycle later."""

    def members(self) -> dict:
        W, C, H, PM = self.data_width, self.columns, self.units, self.max_passes
        return {
            **super().members(),
            "k": In(stream.Signature(W)),
            "q_full": In(2), "q_release": Out(2),
            "q_addr": Out(range(2 * PM * self.groups)), "q_data": In(data.ArrayLayout(q_row_layout(C), H)),
            "free": In(2),
            "fill": Out(stream.Signature(1, always_ready=True)),
            "scored": Out(stream.Signature(1, always_ready=True)),
            "bank_rows": Out(data.ArrayLayout(range(BLOCK + 1), 2)), "bank_first": Out(2), "bank_last": Out(2),
            "score_addr": In(range(2 * PM * BLOCK)), "score_data": Out(data.ArrayLayout(32, H)),
            "max_addr": In(range(2 * PM)),
            "m_new": Out(data.ArrayLayout(32, H)), "m_old": Out(data.ArrayLayout(32, H)),
            "scale": In(32),
        }

    def elaborate(self, platform):
        m = Module()
        C, H, PM, S, GROUPS = self.columns, self.units, self.max_passes, self.beats, self.groups
        jobs = self.jobs
        k_rows, rows_words, passes = self.row_stream(m, "k", self.k)
        k_active, k_left = self.busy, Signal(self.token_bits)     # rows of the head still to issue
        k_row0, k_t, k_b = Signal(), Signal(range(BLOCK)), Signal()
        k_j, k_w, k_c = Signal(range(PM)), Signal(range(self.row_words)), Signal(range(S))
        k_qbank, k_first_block = Signal(), Signal()
        m.d.comb += jobs.ready.eq(~k_active)
        with m.If(jobs.valid & ~k_active):
            m.d.sync += [k_active.eq(jobs.payload != 0), k_left.eq(jobs.payload), k_row0.eq(1), k_t.eq(0),
                         k_first_block.eq(1)]
        ScoreTag = data.StructLayout({"t": range(BLOCK), "j": range(PM), "b": 1, "block_end": 1, "row0": 1})
        m.submodules.dots = dots = ScoreDots(columns=C, units=H, max_row_beats=GROUPS, tag_width=ScoreTag.size,
                                             q_depth=2 * PM * GROUPS, pair_words=self.pair_words)
        m.d.comb += [dots.bf16.eq(self.kv_format == KvFormat.BF16), self.q_addr.eq(dots.q_addr),
                     dots.q_data.eq(self.q_data)]
        if self.pair_words:
            m.d.comb += dots.pairs.eq(self.pairs)
        block_start = (k_t == 0) & (k_j == 0) & (k_w == 0) & (k_c == 0)
        k_issue = Signal()
        m.d.comb += k_issue.eq(k_active & k_rows.ready & self.q_full.bit_select(k_qbank, 1) & dots.room &
                               (~block_start | self.free.bit_select(k_b, 1)))
        k_last_row_block = (k_t == BLOCK - 1) | (k_left == 1)
        row_end = self.row_end(k_c, k_w, rows_words)
        m.d.comb += [self.fill.valid.eq(k_issue & block_start), self.fill.payload.eq(k_b)]
        with m.If(k_issue):
            with m.If(block_start):
                m.d.sync += [self.bank_first.bit_select(k_b, 1).eq(k_first_block),
                             self.bank_last.bit_select(k_b, 1).eq(k_left <= BLOCK),
                             self.bank_rows[k_b].eq(Mux(k_left < BLOCK, k_left, BLOCK))]
            with m.If(self.step(m, k_c, k_w, k_j, rows_words, passes)):
                m.d.sync += [k_t.eq(k_t + 1), k_left.eq(k_left - 1), k_row0.eq(0)]
                m.d.comb += k_rows.release.eq(1)
                with m.If(k_last_row_block):
                    m.d.sync += [k_t.eq(0), k_b.eq(~k_b), k_first_block.eq(0)]
                with m.If(k_left == 1):
                    m.d.sync += [k_active.eq(0), k_qbank.eq(~k_qbank)]
                    m.d.comb += self.q_release.eq(1 << k_qbank)
        # the beat a cycle later, read from the row buffer, into the dot products
        words = self.read_beat(m, k_rows, k_w, k_c)
        k_beat = Cat(*words) if self.pair_words else words[0]
        tag = Signal(ScoreTag)
        m.d.comb += [tag.t.eq(k_t), tag.j.eq(k_j), tag.b.eq(k_b), tag.block_end.eq(k_last_row_block),
                     tag.row0.eq(k_row0)]
        beat_valid, beat_tag, beat_last = Signal(), Signal(ScoreTag), Signal()
        beat_q_addr = Signal.like(dots.i.payload.q_addr)
        m.d.sync += [beat_valid.eq(k_issue), beat_tag.eq(tag), beat_last.eq(row_end),
                     beat_q_addr.eq(((k_qbank * PM + k_j) * GROUPS) + k_w * S + k_c)]
        m.d.comb += [dots.i.valid.eq(beat_valid), dots.i.payload.k.eq(k_beat),
                     dots.i.payload.last.eq(beat_last), dots.i.payload.tag.eq(beat_tag),
                     dots.i.payload.q_addr.eq(beat_q_addr)]
        # scores: s = dot * scale into the bank; the running maximum; the block's end
        for h in range(H):
            dot = dots.o.payload[h]
            sdf = Dataflow(m, f"scale{h}", platform)
            # (the row's sum registered first: the dot's rounding increment and the multiplier's
            # operand decode were one 11-level path; the product's normalising count a stage
            # before its shift amount: 10 levels in the 128-lane build's netlist)
            s = sdf.op("mul_split", Timed(sdf.at(sdf.input(dot.value), 1), 1), sdf.static(self.scale))
            s_tag = data.View(ScoreTag, sdf.at(sdf.input(dot.tag), s.time))
            s_valid = sdf.at(sdf.input(dots.o.valid), s.time)
            wp, rp = memory_ports(m, f"score_mem{h}", 32, 2 * PM * BLOCK)
            m.d.comb += [wp.addr.eq((s_tag.b * PM + s_tag.j) * BLOCK + s_tag.t), wp.data.eq(s.value),
                         wp.en.eq(s_valid & serves(s_tag.j, h, self.group, H, self.pairs)),
                         rp.addr.eq(self.score_addr), self.score_data[h].eq(rp.data)]
            # per pass: the running maximum and the one at the last block's end
            run_wp, run_rp = register_file(m, f"m_run{h}", 32, PM)
            prev_wp, prev_rp = register_file(m, f"m_prev{h}", 32, PM)
            m.d.comb += [run_rp.addr.eq(s_tag.j), prev_rp.addr.eq(s_tag.j)]
            current = Mux(s_tag.row0, NEG_INF, run_rp.data)
            new_max = minmax_value(m, current, s.value, Const(1))
            block_end = s_valid & s_tag.block_end
            m.d.comb += [run_wp.addr.eq(s_tag.j), run_wp.data.eq(new_max), run_wp.en.eq(s_valid),
                         prev_wp.addr.eq(s_tag.j), prev_wp.data.eq(new_max), prev_wp.en.eq(block_end)]
            # the bank's maxima of this unit's head of pass j: per unit (each writes its heads'
            # at a block's end, all units in one cycle) a register file addressed by (pass,
            # bank): distributed RAM, no register array and 32-way select
            new_wp, new_rp = register_file(m, f"m_new{h}", 32, 2 * PM)
            old_wp, old_rp = register_file(m, f"m_old{h}", 32, 2 * PM)
            m.d.comb += [new_wp.addr.eq(Cat(s_tag.j, s_tag.b)), new_wp.data.eq(new_max), new_wp.en.eq(block_end),
                         old_wp.addr.eq(Cat(s_tag.j, s_tag.b)), old_wp.en.eq(block_end),
                         old_wp.data.eq(Mux(self.bank_first.bit_select(s_tag.b, 1), NEG_INF, prev_rp.data)),
                         new_rp.addr.eq(self.max_addr), old_rp.addr.eq(self.max_addr),
                         self.m_new[h].eq(new_rp.data), self.m_old[h].eq(old_rp.data)]
            if h == 0:
                m.d.comb += [self.scored.valid.eq(s_valid & s_tag.block_end & (s_tag.j == passes - 1)),
                             self.scored.payload.eq(s_tag.b)]
        return m
