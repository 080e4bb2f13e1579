"""The attention engine's arithmetic: one pass over K and V, block online softmax.

Bit for bit :func:`ndpkit.engines.attention.golden.decode_group` (read its docstring first).
The datapath takes, per KV head, the group's q rows, then the K rows and the V rows of
the head's context (``tokens`` rows, each ``R = d / P`` bus words of ``P = W / 16``
16-bit elements), and gives back the G output rows.  ``lanes`` (L) MAC lanes: L/2 on
the score side, L/2 on the value side, as ``H`` units of ``C`` columns (C = min(P, L/2),
H = L / 2C).  A beat is C columns of a bus word for H query heads; G > H heads take
ceil(G / H) passes over each row.  L = 32 at a 512-bit port (C = 16, H = 1) keeps pace
with the port for G = 1: K and V share it, each side takes a word every two cycles.

- **q loader**: the group's q elements, one a cycle, rounded to the KV format, into
  the q bank of the head (two banks: the next head loads while this one runs).
- **score side**: per unit a :class:`~ndpkit_hw.arith.blockfloat.RowDot` (exact
  products, the row's window sum, one rounding), ``s = dot * scale``; the scores of a
  block of 128 tokens go to a score bank with the running maximum; at the block's end
  the bank keeps ``m_new`` and the maximum before it.
- **softmax sweep** (one exp unit): per bank, ``corr = exp(m_old - m_new)`` and
  ``pk = exp(s - m_new)`` rounded to TF32, into the bank's weight memory.
- **value side**: per unit a :class:`~ndpkit_hw.arith.blockfloat.RunningSums` of C + 1
  lanes (the last one sums ``pk * 1``: the denominator), four partial sums a block
  (token j -> partial j mod 4), in the RunningSums bank of the block's parity.
- **epilogue** (one merge unit, one rounding, one fma, one divider, serial): per block
  the partials are merged in order, rounded, and folded in with
  ``o = fma(o, corr, ob)``, ``l = fma(l, corr, lb)``; after a head's last block
  ``out = o / l``, narrowed, packed into output words.

K of block n + 1 streams while V of block n is consumed and block n - 1's partials are
merged, so the memory port, not the arithmetic, bounds the engine when G <= H.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal, Const, Mux, Array, Cat
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ndpkit_spec.blockfloat import PARTIALS
from ndpkit_spec.engines.attention import SOFTMAX_BLOCK as BLOCK, KvFormat
from ndpkit_hw.arith.blockfloat import (REVISIT, ROOM_AHEAD, MergedState, RowDot, RunningSums,
                                        merge_states, sum_to_fp32)
from ndpkit_hw.arith.dataflow import Dataflow, Timed
from ndpkit_hw.arith.fp_common import Pipeline
from ndpkit_hw.arith.minmax import minmax_value

__all__ = ["AttentionDatapath", "lane_shape"]

NEG_INF = 0xFF80_0000
MAX_GROUP = 16
MAX_DIM = 128
ONE = {KvFormat.FP16: 0x3C00, KvFormat.BF16: 0x3F80}


def _log2(n: int) -> int:
    return n.bit_length() - 1


def lane_shape(data_width: int, lanes: int) -> tuple[int, int]:
    """(C columns, H units) of ``lanes`` MAC lanes at a ``data_width``-bit port."""
    if data_width not in (64, 128, 256, 512):
        raise ValueError(f"data_width must be 64, 128, 256 or 512, not {data_width}")
    elements = data_width // 16
    if lanes < 4 or lanes & (lanes - 1):
        raise ValueError(f"lanes must be a power of two of at least 4, not {lanes}")
    columns = min(elements, lanes // 2)
    units = lanes // 2 // columns
    if units > MAX_GROUP:
        raise ValueError(f"{lanes} lanes at {data_width} bits serve {units} query heads at once; "
                         f"a group has at most {MAX_GROUP}: at most {4 * MAX_GROUP * elements // 2} lanes")
    if MAX_DIM // 2 // columns < 2:
        raise ValueError(f"{columns} columns a beat leave a d = 64 row one beat")     # (never at <= 512 bits)
    return columns, units


class _RowBuffer:
    """Two row slots filled from a word stream (``R`` words a row, runtime), read by
    one consumer that releases a slot when it has issued its last word."""

    def __init__(self, m: Module, name: str, words_in: stream.Interface, rows_words, max_words: int, width: int):
        mem = Memory(shape=width, depth=2 * max_words, init=[])
        m.submodules[f"{name}_rows"] = mem
        wp, self._rp = mem.write_port(), mem.read_port()
        self.full = Signal(2, name=f"{name}_full")
        fill_slot, self.read_slot = Signal(name=f"{name}_fill_slot"), Signal(name=f"{name}_read_slot")
        fill_word = Signal(range(max_words), name=f"{name}_fill_word")
        self.release = Signal(name=f"{name}_release")
        self._max_words = max_words
        m.d.comb += words_in.ready.eq(~self.full.bit_select(fill_slot, 1))
        set_full = Signal(2, name=f"{name}_set_full")
        m.d.comb += [wp.addr.eq(Cat(fill_word, fill_slot)), wp.data.eq(words_in.payload),
                     wp.en.eq(words_in.valid & words_in.ready)]
        with m.If(words_in.valid & words_in.ready):
            m.d.sync += fill_word.eq(fill_word + 1)
            with m.If(fill_word == rows_words - 1):
                m.d.sync += [fill_word.eq(0), fill_slot.eq(~fill_slot)]
                m.d.comb += set_full.eq(1 << fill_slot)
        clear = Signal(2, name=f"{name}_clear")
        with m.If(self.release):
            m.d.comb += clear.eq(1 << self.read_slot)
            m.d.sync += self.read_slot.eq(~self.read_slot)
        m.d.sync += self.full.eq((self.full & ~clear) | set_full)
        self.ready = self.full.bit_select(self.read_slot, 1)

    def read(self, m: Module, index):
        """The word ``index`` of the slot being read, a cycle later (a memory read)."""
        m.d.comb += self._rp.addr.eq(Cat(index[:_log2(self._max_words)], self.read_slot))
        return self._rp.data


class AttentionDatapath(wiring.Component):
    """``q``, ``k``, ``v``: bus words; ``head``: one entry per KV head (its token
    count); ``out``: the output words.  ``head_dim128``, ``group``, the formats and
    ``scale`` are held for a whole command."""

    def __init__(self, *, data_width: int = 512, lanes: int = 32):
        self.columns, self.units = lane_shape(data_width, lanes)
        self.data_width, self.lanes = data_width, lanes
        self.elements = data_width // 16                  # P
        self.row_words = MAX_DIM // self.elements          # R at d = 128 (twice R at d = 64)
        self.max_passes = MAX_GROUP // self.units
        super().__init__({
            "q": In(stream.Signature(data_width)),
            "k": In(stream.Signature(data_width)),
            "v": In(stream.Signature(data_width)),
            "head": In(stream.Signature(32)),
            "out": Out(stream.Signature(data_width)),
            "head_dim128": In(1),
            "group": In(range(MAX_GROUP + 1)),
            "q_format": In(2),
            "kv_format": In(2),
            "out_format": In(2),
            "scale": In(32),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W, P, C, H, PM = self.data_width, self.elements, self.columns, self.units, self.max_passes
        R128 = self.row_words
        S = P // C                                              # beats a word
        GROUPS = MAX_DIM // C                                   # column groups of a d = 128 row
        h_bits = _log2(H)
        rows_words = Mux(self.head_dim128, R128, R128 // 2)     # R
        row_groups = Mux(self.head_dim128, GROUPS, GROUPS // 2)  # beats a row: d / C
        passes = Signal(range(PM + 1))
        m.d.comb += passes.eq((self.group + H - 1) >> h_bits)
        G = self.group
        bf16 = self.kv_format == KvFormat.BF16

        def unit_of(g):
            return g[:h_bits] if H > 1 else Const(0, 1)

        def serves(j, h):
            """Unit h's pass j has a query head of the group."""
            return ((j << h_bits) + h) < G

        def slot_of(j, group, r):
            """The RunningSums slot of pass j, column group ``group``, partial r."""
            return ((j * GROUPS + group) << _log2(PARTIALS)) + r

        # ---- head jobs: one queue per side ---------------------------------------------
        k_jobs = fifo.SyncFIFOBuffered(width=32, depth=4)
        v_jobs = fifo.SyncFIFOBuffered(width=32, depth=4)
        m.submodules.k_jobs, m.submodules.v_jobs = k_jobs, v_jobs
        m.d.comb += [self.head.ready.eq(k_jobs.w_rdy & v_jobs.w_rdy),
                     k_jobs.w_en.eq(self.head.valid & self.head.ready), k_jobs.w_data.eq(self.head.payload),
                     v_jobs.w_en.eq(self.head.valid & self.head.ready), v_jobs.w_data.eq(self.head.payload)]

        def memory(name, shape, depth, granularity=None):
            """A memory's write port and read port."""
            mem = Memory(shape=shape, depth=depth, init=[])
            m.submodules[name] = mem
            return mem.write_port(granularity=granularity), mem.read_port()

        def small_memory(name, shape, depth, reads=1):
            """A memory's write port and ``reads`` asynchronous read ports (a register
            file's timing: a read sees the value written at an earlier edge)."""
            mem = Memory(shape=shape, depth=depth, init=[])
            m.submodules[name] = mem
            return (mem.write_port(), *[mem.read_port(domain="comb") for _ in range(reads)])

        # ---- q loader: one element a cycle, rounded to the KV format, into the head's bank --
        q_full = Signal(2)                 # bank holds a loaded head the score side has not finished
        q_bank = Signal()
        q32 = self.q_format == KvFormat.FP32
        per_word = Mux(q32, P // 2, P)
        q_word = Signal(W)
        q_held = Signal()                  # a word is being split
        q_k = Signal(range(P))             # its element being sent
        q_g, q_i = Signal(range(MAX_GROUP)), Signal(range(MAX_DIM))
        dim = Mux(self.head_dim128, MAX_DIM, MAX_DIM // 2)
        m.d.comb += self.q.ready.eq(~q_held & ~q_full.bit_select(q_bank, 1))
        with m.If(self.q.valid & self.q.ready):
            m.d.sync += [q_word.eq(self.q.payload), q_held.eq(1), q_k.eq(0)]
        q_send = Signal()
        q_last = Signal()
        m.d.comb += [q_send.eq(q_held), q_last.eq((q_g == G - 1) & (q_i == dim - 1))]
        with m.If(q_send):
            m.d.sync += [q_k.eq(q_k + 1), q_i.eq(q_i + 1)]
            with m.If(q_k == per_word - 1):
                m.d.sync += q_held.eq(0)
            with m.If(q_i == dim - 1):
                m.d.sync += [q_i.eq(0), q_g.eq(q_g + 1)]
            with m.If(q_last):
                m.d.sync += [q_g.eq(0), q_bank.eq(~q_bank), q_held.eq(0)]
        qdf = Dataflow(m, "qload", platform)
        raw32 = qdf.input(q_word.word_select(q_k[:_log2(P // 2)], 32))
        raw16 = qdf.input(q_word.word_select(q_k, 16))
        wide16 = qdf.select(qdf.static(self.q_format == KvFormat.BF16), qdf.op("bf16_to_fp32", raw16),
                            qdf.op("fp16_to_fp32", raw16))
        wide = qdf.select(qdf.static(q32), raw32, wide16)
        qk = qdf.select(qdf.static(bf16), qdf.op("fp32_to_bf16", wide), qdf.op("fp32_to_fp16", wide))
        q_time = qdf.latency
        q_at = {name: qdf.at(qdf.input(v), q_time) for name, v in
                (("valid", q_send), ("g", q_g), ("i", q_i), ("bank", q_bank), ("last", q_send & q_last))}
        q_mem = [memory(f"q_mem{h}", 16 * C, 2 * PM * GROUPS, granularity=16) for h in range(H)]
        for h, (wp, _) in enumerate(q_mem):
            m.d.comb += [wp.addr.eq(((q_at["bank"] * PM + (q_at["g"] >> h_bits)) * GROUPS) + (q_at["i"] >> _log2(C))),
                         wp.data.eq(Cat(*[qdf.at(qk, q_time)[:16] for _ in range(C)])),
                         wp.en.eq(Mux(q_at["valid"] & (unit_of(q_at["g"]) == h), 1 << q_at["i"][:_log2(C)], 0))]
        q_loaded = Signal(2)
        m.d.comb += q_loaded.eq(Mux(q_at["last"], 1 << q_at["bank"], 0))

        # ---- score banks ------------------------------------------------------------------
        # per bank: free, the score side fills it, scored, the sweep computes its weights,
        # weights ready, the value side reads it, merging (freed as the epilogue takes the
        # block, its corr values copied)
        FREE, FILLING, SCORED, SWEEPING, READY, STREAMING, MERGING = range(7)
        bank_state = Array(Signal(3, name=f"bank{b}_state") for b in range(2))
        bank_rows = Array(Signal(range(BLOCK + 1), name=f"bank{b}_rows") for b in range(2))
        bank_first = Array(Signal(name=f"bank{b}_first") for b in range(2))
        bank_last = Array(Signal(name=f"bank{b}_last") for b in range(2))
        # per bank and query head, indexed by Cat(g, bank) (flat: Yosys writes an empty
        # case for a nested Array's assignment, which Verilog rejects)
        corr = Array(Signal(32, name=f"corr_b{b}_g{g}") for b in range(2) for g in range(MAX_GROUP))
        # m_new / m_old of each bank's query heads: per unit (each writes its heads' at a
        # block's end, all units in one cycle) a small memory with an asynchronous read
        # (distributed RAM), addressed by (bank, pass): no register file and 32-way select
        m_new_mem = [small_memory(f"m_new{h}", 32, 2 * PM) for h in range(H)]
        m_old_mem = [small_memory(f"m_old{h}", 32, 2 * PM) for h in range(H)]

        def at_bank(b, g):
            return Cat(g[:_log2(MAX_GROUP)], b)

        # ---- score side ---------------------------------------------------------------------
        k_rows = _RowBuffer(m, "k", self.k, rows_words, R128, W)
        k_active, k_left = Signal(), Signal(32)           # rows of the head still to issue
        k_row0, k_t, k_b = Signal(), Signal(range(BLOCK)), Signal()
        k_j, k_w, k_c = Signal(range(PM)), Signal(range(R128)), Signal(range(S))
        k_qbank, k_first_block = Signal(), Signal()
        m.d.comb += k_jobs.r_en.eq(~k_active)
        with m.If(k_jobs.r_rdy & ~k_active):
            m.d.sync += [k_active.eq(k_jobs.r_data != 0), k_left.eq(k_jobs.r_data), k_row0.eq(1), k_t.eq(0),
                         k_first_block.eq(1)]
        ScoreTag = data.StructLayout({"t": range(BLOCK), "j": range(PM), "b": 1, "block_end": 1, "row0": 1})
        dots = [RowDot(lanes=C, max_row_beats=GROUPS, tag_width=ScoreTag.size) for _ in range(H)]
        for h, dot in enumerate(dots):
            m.submodules[f"row_dot{h}"] = dot
            m.d.comb += dot.bf16.eq(bf16)
        block_start = (k_t == 0) & (k_j == 0) & (k_w == 0) & (k_c == 0)
        k_issue = Signal()
        m.d.comb += k_issue.eq(k_active & k_rows.ready & q_full.bit_select(k_qbank, 1) & dots[0].room &
                               (~block_start | (bank_state[k_b] == FREE)))
        k_last_row_block = (k_t == BLOCK - 1) | (k_left == 1)
        row_end = (k_w == rows_words - 1) & (k_c == S - 1)
        q_release = Signal(2)
        with m.If(k_issue):
            with m.If(block_start):
                m.d.sync += [bank_state[k_b].eq(FILLING), bank_first[k_b].eq(k_first_block),
                             bank_last[k_b].eq(k_left <= BLOCK),
                             bank_rows[k_b].eq(Mux(k_left < BLOCK, k_left, BLOCK))]
            m.d.sync += k_c.eq(k_c + 1)
            with m.If(k_c == S - 1):
                m.d.sync += [k_c.eq(0), k_w.eq(k_w + 1)]
            with m.If(row_end):
                m.d.sync += [k_w.eq(0), k_j.eq(k_j + 1)]
                with m.If(k_j == passes - 1):
                    m.d.sync += [k_j.eq(0), k_t.eq(k_t + 1), k_left.eq(k_left - 1), k_row0.eq(0)]
                    m.d.comb += k_rows.release.eq(1)
                    with m.If(k_last_row_block):
                        m.d.sync += [k_t.eq(0), k_b.eq(~k_b), k_first_block.eq(0)]
                    with m.If(k_left == 1):
                        m.d.sync += [k_active.eq(0), k_qbank.eq(~k_qbank)]
                        m.d.comb += q_release.eq(1 << k_qbank)
        m.d.sync += q_full.eq((q_full & ~q_release) | q_loaded)
        # the beat a cycle later: the K word and the q columns read from memory
        k_word = k_rows.read(m, k_w)
        tag = Signal(ScoreTag)
        m.d.comb += [tag.t.eq(k_t), tag.j.eq(k_j), tag.b.eq(k_b), tag.block_end.eq(k_last_row_block), tag.row0.eq(k_row0)]
        beat_valid, beat_tag, beat_c, beat_last = Signal(), Signal(ScoreTag), Signal(range(S)), Signal()
        m.d.sync += [beat_valid.eq(k_issue), beat_tag.eq(tag), beat_c.eq(k_c), beat_last.eq(row_end)]
        for h, dot in enumerate(dots):
            _, rp = q_mem[h]
            m.d.comb += rp.addr.eq(((k_qbank * PM + k_j) * GROUPS) + k_w * S + k_c)
            slice_ = k_word.word_select(beat_c, 16 * C) if S > 1 else k_word
            m.d.comb += [dot.i.valid.eq(beat_valid), dot.i.payload.q.eq(rp.data), dot.i.payload.k.eq(slice_),
                         dot.i.payload.last.eq(beat_last), dot.i.payload.tag.eq(beat_tag)]
        # scores: s = dot * scale into the bank; the running maximum; the block's end
        score_rp = []
        scored = Signal()
        for h, dot in enumerate(dots):
            sdf = Dataflow(m, f"scale{h}", platform)
            s = sdf.op("mul", sdf.input(dot.o.payload.value), sdf.static(self.scale))
            s_tag = data.View(ScoreTag, sdf.at(sdf.input(dot.o.payload.tag), s.time))
            s_valid = sdf.at(sdf.input(dot.o.valid), s.time)
            wp, rp = memory(f"score_mem{h}", 32, 2 * PM * BLOCK)
            score_rp.append(rp)
            m.d.comb += [wp.addr.eq((s_tag.b * PM + s_tag.j) * BLOCK + s_tag.t), wp.data.eq(s.value),
                         wp.en.eq(s_valid & serves(s_tag.j, h))]
            # per pass: the running maximum and the one at the last block's end
            run_wp, run_rp = small_memory(f"m_run{h}", 32, PM)
            prev_wp, prev_rp = small_memory(f"m_prev{h}", 32, PM)
            m.d.comb += [run_rp.addr.eq(s_tag.j), prev_rp.addr.eq(s_tag.j)]
            current = Mux(s_tag.row0, NEG_INF, run_rp.data)
            new_max = minmax_value(m, current, s.value, Const(1))
            block_end = s_valid & s_tag.block_end
            m.d.comb += [run_wp.addr.eq(s_tag.j), run_wp.data.eq(new_max), run_wp.en.eq(s_valid),
                         prev_wp.addr.eq(s_tag.j), prev_wp.data.eq(new_max), prev_wp.en.eq(block_end)]
            # the bank's maxima of this unit's head of pass j: the new one, and the one before
            # this block (-inf for a head's first block)
            (new_wp, _), (old_wp, _) = m_new_mem[h], m_old_mem[h]
            m.d.comb += [new_wp.addr.eq(Cat(s_tag.j, s_tag.b)), new_wp.data.eq(new_max), new_wp.en.eq(block_end),
                         old_wp.addr.eq(Cat(s_tag.j, s_tag.b)), old_wp.en.eq(block_end),
                         old_wp.data.eq(Mux(bank_first[s_tag.b], NEG_INF, prev_rp.data))]
            if h == 0:
                m.d.comb += scored.eq(s_valid & s_tag.block_end & (s_tag.j == passes - 1))
                scored_bank = s_tag.b
        with m.If(scored):
            m.d.sync += bank_state[scored_bank].eq(SCORED)

        # ---- softmax sweep: corr and the weights pk of a scored bank ---------------------
        sw_active, sw_b = Signal(), Signal()
        sw_g, sw_t = Signal(range(MAX_GROUP)), Signal(range(BLOCK + 1))     # sw_t == 0: corr
        sw_issue, sw_end = Signal(), Signal()
        m.d.comb += sw_end.eq(sw_issue & (sw_t == bank_rows[sw_b]) & (sw_g == G - 1))
        with m.If(~sw_active):
            with m.If(bank_state[sw_b] == SCORED):
                m.d.sync += [sw_active.eq(1), sw_g.eq(0), sw_t.eq(0), bank_state[sw_b].eq(SWEEPING)]
        with m.Else():
            m.d.comb += sw_issue.eq(1)
            m.d.sync += sw_t.eq(sw_t + 1)
            with m.If(sw_t == bank_rows[sw_b]):
                m.d.sync += [sw_t.eq(0), sw_g.eq(sw_g + 1)]
                with m.If(sw_g == G - 1):
                    m.d.sync += sw_active.eq(0)
        for h, rp in enumerate(score_rp):
            m.d.comb += rp.addr.eq((sw_b * PM + (sw_g >> h_bits)) * BLOCK + (sw_t - 1))
        xdf = Dataflow(m, "softmax", platform)
        read_score = Array(rp.data for rp in score_rp)[xdf.at(xdf.input(unit_of(sw_g)), 1)] if H > 1 else \
            score_rp[0].data
        is_corr = sw_t == 0
        for (_, new_rp), (_, old_rp) in zip(m_new_mem, m_old_mem):
            # (the head's pass: its bits above the unit's; `>>` would keep the width and push the bank out)
            m.d.comb += [new_rp.addr.eq(Cat(sw_g[h_bits:], sw_b)), old_rp.addr.eq(Cat(sw_g[h_bits:], sw_b))]
        sw_old = Array(rp.data for _, rp in m_old_mem)[unit_of(sw_g)] if H > 1 else m_old_mem[0][1].data
        sw_new = Array(rp.data for _, rp in m_new_mem)[unit_of(sw_g)] if H > 1 else m_new_mem[0][1].data
        arg = Timed(Mux(xdf.at(xdf.input(is_corr), 1), xdf.at(xdf.input(sw_old), 1), read_score), 1)
        mn = xdf.at(xdf.input(sw_new), 1)
        e = xdf.op("exp", xdf.sub(arg, Timed(mn, 1)))
        # pk: p rounded to TF32 (RNE at bit 13; p is +0..1 or NaN), its top 19 bits
        pk_value = Signal(19)
        p_nan = (e.value[23:31] == 0xFF) & (e.value[:23] != 0)
        m.d.sync += pk_value.eq(Mux(p_nan, 0x7FC00000 >> 13, (e.value + 0xFFF + e.value[13])[13:32]))
        pk = Timed(pk_value, e.time + 1)
        x_time = pk.time
        x_at = {name: xdf.at(xdf.input(v), x_time) for name, v in
                (("valid", sw_issue), ("corr", is_corr), ("g", sw_g), ("t", sw_t - 1), ("b", sw_b),
                 ("end", sw_end))}
        pk_mem = [memory(f"pk_mem{h}", 19, 2 * PM * BLOCK) for h in range(H)]
        for h, (wp, _) in enumerate(pk_mem):
            m.d.comb += [wp.addr.eq((x_at["b"] * PM + (x_at["g"] >> h_bits)) * BLOCK + x_at["t"]),
                         wp.data.eq(pk.value),
                         wp.en.eq(x_at["valid"] & ~x_at["corr"] & (unit_of(x_at["g"]) == h))]
        corr_we, corr_value = Signal(name="corr_we"), Signal(32, name="corr_value")
        corr_at = Signal(5, name="corr_at")
        m.d.comb += [corr_we.eq(x_at["valid"] & x_at["corr"]), corr_value.eq(xdf.at(e, x_time)),
                     corr_at.eq(at_bank(x_at["b"], x_at["g"]))]
        with m.If(corr_we):
            m.d.sync += corr[corr_at].eq(corr_value)
        with m.If(x_at["end"]):
            m.d.sync += bank_state[x_at["b"]].eq(READY)
        with m.If(sw_end):
            m.d.sync += sw_b.eq(~sw_b)

        # ---- value side ---------------------------------------------------------------------
        v_rows = _RowBuffer(m, "v", self.v, rows_words, R128, W)
        v_t, v_b = Signal(range(BLOCK)), Signal()
        v_j, v_w, v_c = Signal(range(PM)), Signal(range(R128)), Signal(range(S))
        v_issue = Signal()
        sums = [RunningSums(lanes=C + 1, slots=1 << (PM * GROUPS * PARTIALS - 1).bit_length()) for _ in range(H)]
        for h, unit in enumerate(sums):
            m.submodules[f"running_sums{h}"] = unit
            m.d.comb += unit.bf16.eq(bf16)
        ends = fifo.SyncFIFOBuffered(width=3 + 8, depth=4)          # blocks for the epilogue
        m.submodules.block_ends = ends
        sums_busy = Signal(2)          # a RunningSums bank the epilogue has still to merge
        sums_set, sums_clear = Signal(2), Signal(2)
        m.d.sync += sums_busy.eq((sums_busy & ~sums_clear) | sums_set)
        v_row_end = (v_w == rows_words - 1) & (v_c == S - 1)
        v_block_end = v_row_end & (v_j == passes - 1) & (v_t == bank_rows[v_b] - 1)
        drain = Signal(range(REVISIT + 8))
        m.d.comb += v_jobs.r_en.eq(0)
        with m.FSM(name="value_side") as value_fsm:
            with m.State("IDLE"):
                with m.If(v_jobs.r_rdy):
                    m.d.comb += v_jobs.r_en.eq(1)
                    m.d.sync += [v_t.eq(0), v_j.eq(0), v_w.eq(0), v_c.eq(0)]
                    with m.If(v_jobs.r_data != 0):
                        m.next = "WAIT_BANK"
            with m.State("WAIT_BANK"):
                # (and the epilogue has merged the block two back, which used the same sums bank)
                with m.If((bank_state[v_b] == READY) & ~sums_busy.bit_select(v_b, 1)):
                    m.d.sync += bank_state[v_b].eq(STREAMING)
                    m.next = "STREAM"
            with m.State("STREAM"):
                m.d.comb += v_issue.eq(v_rows.ready)
                with m.If(v_issue):
                    m.d.sync += v_c.eq(v_c + 1)
                    with m.If(v_c == S - 1):
                        m.d.sync += [v_c.eq(0), v_w.eq(v_w + 1)]
                    with m.If(v_row_end):
                        m.d.sync += [v_w.eq(0), v_j.eq(v_j + 1)]
                        with m.If(v_j == passes - 1):
                            m.d.sync += [v_j.eq(0), v_t.eq(v_t + 1)]
                            m.d.comb += v_rows.release.eq(1)
                    with m.If(v_block_end):
                        m.d.sync += [v_t.eq(0), drain.eq(REVISIT + 4)]
                        m.next = "DRAIN"
            with m.State("DRAIN"):
                # the block's last updates land before the epilogue reads the sums
                m.d.sync += drain.eq(drain - 1)
                with m.If((drain == 0) & ends.w_rdy):
                    m.d.comb += [ends.w_en.eq(1),
                                 ends.w_data.eq(Cat(v_b, bank_first[v_b], bank_last[v_b], bank_rows[v_b]))]
                    m.d.comb += sums_set.eq(1 << v_b)
                    m.d.sync += [bank_state[v_b].eq(MERGING), v_b.eq(~v_b)]
                    with m.If(bank_last[v_b]):
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "WAIT_BANK"
        # the beat a cycle later: the V word and each unit's weight read from memory
        v_word = v_rows.read(m, v_w)
        Beat = data.StructLayout({"c": range(S), "slot": range(PM * GROUPS * PARTIALS), "b": 1, "fresh": 1,
                                  "first_group": 1, "j": range(PM)})
        vb = Signal(Beat)
        vb_valid = Signal()
        m.d.sync += [vb_valid.eq(v_issue), vb.c.eq(v_c), vb.b.eq(v_b), vb.fresh.eq(v_t < PARTIALS),
                     vb.first_group.eq((v_w == 0) & (v_c == 0)), vb.j.eq(v_j),
                     vb.slot.eq(slot_of(v_j, v_w * S + v_c, v_t[:_log2(PARTIALS)]))]
        one = Mux(bf16, ONE[KvFormat.BF16], ONE[KvFormat.FP16])
        for h, unit in enumerate(sums):
            _, rp = pk_mem[h]
            m.d.comb += rp.addr.eq((v_b * PM + v_j) * BLOCK + v_t)
            slice_ = v_word.word_select(vb.c, 16 * C) if S > 1 else v_word
            m.d.comb += [unit.i.valid.eq(vb_valid & serves(vb.j, h)),
                         unit.i.payload.p.eq(rp.data),
                         unit.i.payload.v.eq(Cat(slice_, Mux(vb.first_group, one, 0)[:16])),
                         unit.i.payload.slot.eq(vb.slot), unit.i.payload.bank.eq(vb.b),
                         unit.i.payload.fresh.eq(vb.fresh)]

        # ---- epilogue: merge a block's partials, fold them into o and l -----------------------
        job = Signal(data.StructLayout({"b": 1, "first": 1, "last": 1, "rows": 8}))
        m.d.comb += job.as_value().eq(ends.r_data)
        e_g, e_grp, e_r, e_lane = Signal(range(MAX_GROUP)), Signal(range(GROUPS)), Signal(range(PARTIALS + 1)), \
            Signal(range(C + 2))
        lanes_here = Signal(range(C + 2))
        m.d.comb += lanes_here.eq(Mux(e_grp == 0, C + 1, C))         # the denominator lane with group 0
        partials_here = Signal(range(PARTIALS + 1))
        m.d.comb += partials_here.eq(Mux(job.rows < PARTIALS, job.rows, PARTIALS))
        e_unit = unit_of(e_g)
        flush = Signal()
        for h, unit in enumerate(sums):
            m.d.comb += [unit.flush.valid.eq(flush & (e_unit == h)),
                         unit.flush.payload.slot.eq(slot_of(e_g >> h_bits, e_grp, e_r)),
                         unit.flush.payload.bank.eq(job.b)]
        flushed_valid = Cat(*[unit.state.valid for unit in sums]).any()       # one unit flushes at a time
        flushed = data.View(sums[0].state.payload.shape(),
                            Array(unit.state.payload.as_value() for unit in sums)[e_unit])
        acc = [Signal(MergedState, name=f"acc{i}") for i in range(C + 1)]
        part = [Signal(MergedState, name=f"part{i}") for i in range(C + 1)]
        take_first, take_part = Signal(), Signal()
        with m.If(flushed_valid):
            for i in range(C + 1):
                src = flushed[i]
                value = Signal(MergedState, name=f"flushed{i}")
                m.d.comb += [value.sum.eq(src.sum), value.exp.eq(src.exp), value.pos_inf.eq(src.pos_inf),
                             value.neg_inf.eq(src.neg_inf), value.nan.eq(src.nan)]
                with m.If(take_first):
                    m.d.sync += acc[i].eq(value)
                with m.If(take_part):
                    m.d.sync += part[i].eq(value)
        # the serial merge: lane by lane, acc = merge(acc, part)
        # (the lane's states are selected into registers first: a 17-way select and the
        # merge's or the rounding's first stage are never one cycle)
        merge_issue = Signal()
        acc_a, part_a = Array(acc), Array(part)
        mpipe = Pipeline(m, merge_issue, "merge")
        m_acc, m_part, m_lane = mpipe.stage(acc_a[e_lane], part_a[e_lane], e_lane)
        m_acc, m_part = data.View(MergedState, m_acc), data.View(MergedState, m_part)
        merged, (merged_lane,) = merge_states(m, mpipe, m_acc, m_part, carry=(m_lane,))
        merge_drain = mpipe.depth + 1
        with m.If(mpipe.valid):
            for i in range(C + 1):
                with m.If(merged_lane == i):
                    m.d.sync += acc[i].eq(merged)
        # rounding and folding: lane by lane, value = round(acc); o/l = fma(o/l, corr, value)
        fold_issue = Signal()
        rpipe = Pipeline(m, fold_issue, "fold_round")
        chosen, out_of = rpipe.stage(acc_a[e_lane], Cat(e_g, e_grp, e_lane))
        chosen = data.View(MergedState, chosen)
        value, (fold_tag,) = sum_to_fp32(m, rpipe, chosen.sum, chosen.exp, chosen.nan, chosen.pos_inf,
                                         chosen.neg_inf, carry=(out_of,))
        f_g = fold_tag[:len(e_g)]
        f_grp = fold_tag[len(e_g):len(e_g) + len(e_grp)]
        f_lane = fold_tag[len(e_g) + len(e_grp):]
        o_wp, o_rp = memory("o_mem", 32, MAX_GROUP * MAX_DIM)
        # the heads' denominators: read by the fold and by the final division
        l_wp, l_fold_rp, l_final_rp = small_memory("l_mem", 32, MAX_GROUP, reads=2)
        final_g, final_i = Signal(range(MAX_GROUP)), Signal(range(MAX_DIM))
        finishing = Signal()
        is_l = f_lane == C
        element = Cat(f_lane[:_log2(C)], f_grp)                   # grp * C + lane
        m.d.comb += o_rp.addr.eq(Mux(finishing, final_g * MAX_DIM + final_i, f_g * MAX_DIM + element))
        fdf = Dataflow(m, "fold", platform)
        fold_valid = rpipe.valid
        first = fdf.static(job.first)
        m.d.comb += l_fold_rp.addr.eq(f_g)
        old = Timed(Mux(fdf.at(fdf.input(is_l), 1), fdf.at(fdf.input(l_fold_rp.data), 1), o_rp.data), 1)
        # the job's corr values, kept: its score bank is freed as the epilogue starts
        e_corr = Array(Signal(32, name=f"e_corr{g}") for g in range(MAX_GROUP))
        c_val = fdf.at(fdf.input(e_corr[f_g]), 1)
        folded = fdf.op("fma", fdf.select(first, fdf.static(Const(0, 32)), old), Timed(c_val, 1),
                        Timed(fdf.at(fdf.input(value), 1), 1))
        fold_time = folded.time
        fo = {name: fdf.at(fdf.input(v), fold_time) for name, v in
              (("valid", fold_valid), ("l", is_l), ("g", f_g), ("element", element))}
        m.d.comb += [o_wp.addr.eq(fo["g"] * MAX_DIM + fo["element"]), o_wp.data.eq(folded.value),
                     o_wp.en.eq(fo["valid"] & ~fo["l"])]
        m.d.comb += [l_wp.addr.eq(fo["g"]), l_wp.data.eq(folded.value), l_wp.en.eq(fo["valid"] & fo["l"])]
        fold_drain = rpipe.depth + fold_time + 2

        # the final division: out = o / l, narrowed, packed into words
        final_issue = Signal()
        ddf = Dataflow(m, "final", platform)
        m.d.comb += l_final_rp.addr.eq(final_g)
        quotient = ddf.op("div", Timed(o_rp.data, 1), Timed(ddf.at(ddf.input(l_final_rp.data), 1), 1))
        narrow = ddf.select(ddf.static(self.out_format == KvFormat.BF16), ddf.op("fp32_to_bf16", quotient),
                            ddf.op("fp32_to_fp16", quotient))
        d_time = ddf.latency
        d_valid = ddf.at(ddf.input(final_issue), d_time)
        out32 = self.out_format == KvFormat.FP32
        result = Mux(out32, ddf.at(quotient, d_time), ddf.at(narrow, d_time)[:16])
        out_per_word = Mux(out32, P // 2, P)
        pack = Signal(W)
        pack_n = Signal(range(P + 1))
        out_depth = 16
        m.submodules.out_fifo = out_fifo = fifo.SyncFIFOBuffered(width=W, depth=out_depth)
        packed_word = Mux(out32, Cat(pack[32:], result), Cat(pack[16:], result[:16]))
        m.d.comb += [out_fifo.w_data.eq(packed_word), self.out.valid.eq(out_fifo.r_rdy),
                     self.out.payload.eq(out_fifo.r_data), out_fifo.r_en.eq(self.out.ready)]
        with m.If(d_valid):
            m.d.sync += [pack.eq(packed_word), pack_n.eq(pack_n + 1)]
            with m.If(pack_n == out_per_word - 1):
                m.d.sync += pack_n.eq(0)
                m.d.comb += out_fifo.w_en.eq(1)
        # elements in flight: never more than the queue's room holds
        in_flight = Signal(range(64 + P))
        m.d.sync += in_flight.eq(in_flight + final_issue - d_valid)
        words_ahead = Mux(out32, (in_flight + P // 2) >> _log2(P // 2), (in_flight + P) >> _log2(P))
        room = out_fifo.level + words_ahead + 1 < out_depth

        # ---- the epilogue's sequence -----------------------------------------------------------
        wait = Signal(range(64))
        m.d.comb += ends.r_en.eq(0)
        with m.FSM(name="epilogue") as epilogue:
            def after_partial(taken):
                """The next partial's flush, or (all taken) the fold."""
                with m.If(taken == partials_here):
                    m.d.sync += e_lane.eq(0)
                    m.next = "FOLD"
                with m.Else():
                    m.next = "FLUSH"

            with m.State("IDLE"):
                with m.If(ends.r_rdy):
                    m.d.sync += [e_g.eq(0), e_grp.eq(0), e_r.eq(0), bank_state[job.b].eq(FREE)]
                    m.d.sync += [e_corr[g].eq(corr[at_bank(job.b, Const(g, 4))]) for g in range(MAX_GROUP)]
                    m.next = "FLUSH"
            with m.State("FLUSH"):
                m.d.comb += flush.eq(1)
                m.d.sync += wait.eq(2)
                m.next = "TAKE"
            with m.State("TAKE"):
                # the flushed states arrive two cycles after the flush
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 1):
                    with m.If(e_r == 0):
                        m.d.comb += take_first.eq(1)
                        m.d.sync += e_r.eq(1)
                        after_partial(1)
                    with m.Else():
                        m.d.comb += take_part.eq(1)
                        m.d.sync += e_lane.eq(0)
                        m.next = "MERGE"
            with m.State("MERGE"):
                m.d.comb += merge_issue.eq(1)
                m.d.sync += e_lane.eq(e_lane + 1)
                with m.If(e_lane == lanes_here - 1):
                    m.d.sync += [e_r.eq(e_r + 1), wait.eq(merge_drain)]
                    m.next = "MERGE_DRAIN"
            with m.State("MERGE_DRAIN"):
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 0):
                    after_partial(e_r)
            with m.State("FOLD"):
                m.d.comb += fold_issue.eq(1)
                m.d.sync += e_lane.eq(e_lane + 1)
                with m.If(e_lane == lanes_here - 1):
                    m.d.sync += [e_r.eq(0), e_grp.eq(e_grp + 1)]
                    m.next = "FLUSH"
                    with m.If(e_grp == row_groups - 1):
                        m.d.sync += [e_grp.eq(0), e_g.eq(e_g + 1)]
                        with m.If(e_g == G - 1):
                            m.d.sync += wait.eq(fold_drain)
                            m.next = "FOLD_DRAIN"
            with m.State("FOLD_DRAIN"):
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 0):
                    m.d.comb += [ends.r_en.eq(1), sums_clear.eq(1 << job.b)]
                    m.d.sync += [final_g.eq(0), final_i.eq(0)]
                    with m.If(job.last):
                        m.next = "FINAL"
                    with m.Else():
                        m.next = "IDLE"
            with m.State("FINAL"):
                m.d.comb += [finishing.eq(1), final_issue.eq(room)]
                with m.If(room):
                    m.d.sync += final_i.eq(final_i + 1)
                    with m.If(final_i == dim - 1):
                        m.d.sync += [final_i.eq(0), final_g.eq(final_g + 1)]
                        with m.If(final_g == G - 1):
                            m.next = "IDLE"
        idle = Signal()
        m.d.comb += idle.eq(~k_active & ~k_jobs.r_rdy & ~v_jobs.r_rdy & value_fsm.ongoing("IDLE") &
                            epilogue.ongoing("IDLE") & ~ends.r_rdy & (in_flight == 0) & (q_full == 0) &
                            ~out_fifo.r_rdy & ~sw_active & ~q_held)
        m.d.comb += self.idle.eq(idle)
        return m
