"""The attention engine's arithmetic: one pass over K and V, block online softmax.

Bit for bit :func:`ndpkit.engines.attention.golden.decode_group` (read its docstring first).
The datapath takes, per KV head, the group's q rows, then the K rows and the V rows of
the head's context (``tokens`` rows, each ``R = d / P`` bus words of ``P = W / 16``
16-bit elements), and gives back the G output rows.  ``lanes`` (L) MAC lanes: L/2 on
the score side, L/2 on the value side, as ``H`` units of ``C`` columns (C = min(P, L/2),
H = L / 2C).  A beat is C columns of a bus word for H query heads; G > H heads take
ceil(G / H) passes over each row.  L = 32 at a 512-bit port (C = 16, H = 1) keeps pace
with the port for G = 1: K and V share it, each side takes a word every two cycles.

- **q loader** (:class:`~ndpkit_hw.engines.attention.qload.QueryBanks`): the group's q
  elements, one a cycle, rounded to the KV format, into the q bank of the head (two
  banks: the next head loads while this one runs).
- **score side**: per unit a :class:`~ndpkit_hw.arith.blockfloat.RowDot` (exact
  products, the row's window sum, one rounding), ``s = dot * scale``; the scores of a
  block of 128 tokens go to a score bank with the running maximum; at the block's end
  the bank keeps ``m_new`` and the maximum before it.
- **softmax sweep** (an exp unit per unit): per bank, ``corr = exp(m_old - m_new)``
  and ``pk = exp(s - m_new)`` rounded to TF32, into the bank's weight memory, row by
  row (a row's passes together): the value side follows a row behind.
- **value side**: per unit a :class:`~ndpkit_hw.arith.blockfloat.RunningSums` of C + 1
  lanes (the last one sums ``pk * 1``: the denominator), four partial sums a block
  (token j -> partial j mod 4), in the RunningSums bank of the block's parity.
- **epilogue** (:class:`~ndpkit_hw.engines.attention.epilogue.Epilogue`): per block
  and column group the four partials flushed into shift registers, merged in order,
  rounded and folded in with ``o = fma(o, corr, ob)``, ``l = fma(l, corr, lb)``, ``E``
  lanes a cycle (``E = max(1, L / 128)``: its cost per block below the value side's);
  after a head's last block ``out = o / l``, narrowed, packed into output words.

K of block n + 1 streams while V of block n is consumed and block n - 1's partials are
merged, so the memory port, not the arithmetic, bounds the engine when G <= H.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal, Const, Mux, Array, Cat
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ndpkit_spec.blockfloat import PARTIALS
from ndpkit_spec.engines.attention import MAX_GROUP, SOFTMAX_BLOCK as BLOCK, KvFormat
from ndpkit_hw.arith.blockfloat import REVISIT, RowDot, RunningSums
from ndpkit_hw.arith.dataflow import Dataflow, Timed
from ndpkit_hw.engines.attention.epilogue import MAX_DIM, Epilogue, epilogue_width
from ndpkit_hw.engines.attention.qload import QueryBanks
from ndpkit_hw.arith.minmax import minmax_value

__all__ = ["AttentionDatapath", "lane_shape"]

NEG_INF = 0xFF80_0000
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
        self.epilogue_width = epilogue_width(lanes)
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
        m.submodules.q_banks = q_banks = QueryBanks(data_width=W, columns=C, units=H)
        wiring.connect(m, wiring.flipped(self.q), q_banks.q)
        m.d.comb += [q_banks.head_dim128.eq(self.head_dim128), q_banks.group.eq(G), q_banks.q_format.eq(self.q_format),
                     q_banks.kv_format.eq(self.kv_format), q_banks.full.eq(q_full)]
        q_loaded, q_held = q_banks.loaded, q_banks.busy

        # ---- score banks ------------------------------------------------------------------
        # per bank: free, the score side fills it, scored, the sweep computes its weights
        # (the value side follows it row by row), weights ready, merging (freed as the
        # epilogue takes the block, its corr values copied)
        FREE, FILLING, SCORED, SWEEPING, READY, MERGING = range(6)
        bank_state = Array(Signal(3, name=f"bank{b}_state") for b in range(2))
        bank_rows = Array(Signal(range(BLOCK + 1), name=f"bank{b}_rows") for b in range(2))
        bank_first = Array(Signal(name=f"bank{b}_first") for b in range(2))
        bank_last = Array(Signal(name=f"bank{b}_last") for b in range(2))
        # corr per bank and query head, at bank * MAX_GROUP + g (the epilogue copies a block's)
        corr = [Signal(32, name=f"corr_b{b}_g{g}") for b in range(2) for g in range(MAX_GROUP)]
        # m_new / m_old of each bank's query heads: per unit (each writes its heads' at a
        # block's end, all units in one cycle) a small memory with an asynchronous read
        # (distributed RAM), addressed by (bank, pass): no register file and 32-way select
        m_new_mem = [small_memory(f"m_new{h}", 32, 2 * PM) for h in range(H)]
        m_old_mem = [small_memory(f"m_old{h}", 32, 2 * PM) for h in range(H)]

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
        m.d.comb += q_banks.read_addr.eq(((k_qbank * PM + k_j) * GROUPS) + k_w * S + k_c)
        for h, dot in enumerate(dots):
            slice_ = k_word.word_select(beat_c, 16 * C) if S > 1 else k_word
            m.d.comb += [dot.i.valid.eq(beat_valid), dot.i.payload.q.eq(q_banks.read_data[h]),
                         dot.i.payload.k.eq(slice_),
                         dot.i.payload.last.eq(beat_last), dot.i.payload.tag.eq(beat_tag)]
        # scores: s = dot * scale into the bank; the running maximum; the block's end
        score_rp = []
        scored = Signal()
        for h, dot in enumerate(dots):
            sdf = Dataflow(m, f"scale{h}", platform)
            # (the row's sum registered first: RowDot's rounding increment and the multiplier's
            # operand decode were one 11-level path)
            s = sdf.op("mul", Timed(sdf.at(sdf.input(dot.o.payload.value), 1), 1), sdf.static(self.scale))
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

        # ---- softmax sweep: corr and the weights pk of a scored bank -----------------------
        # an exp unit per unit (its query heads of each pass); row by row, a row's passes
        # together, so the value side follows a row behind (``swept``: the bank's rows done)
        sw_active, sw_b = Signal(), Signal()
        sw_j, sw_t = Signal(range(PM)), Signal(range(BLOCK + 1))     # sw_t == 0: corr
        sw_issue, sw_end = Signal(), Signal()
        swept = Array(Signal(range(BLOCK + 1), name=f"bank{b}_swept") for b in range(2))
        m.d.comb += sw_end.eq(sw_issue & (sw_t == bank_rows[sw_b]) & (sw_j == passes - 1))
        with m.If(~sw_active):
            with m.If(bank_state[sw_b] == SCORED):
                m.d.sync += [sw_active.eq(1), sw_j.eq(0), sw_t.eq(0), bank_state[sw_b].eq(SWEEPING),
                             swept[sw_b].eq(0)]
        with m.Else():
            m.d.comb += sw_issue.eq(1)
            m.d.sync += sw_j.eq(sw_j + 1)
            with m.If(sw_j == passes - 1):
                m.d.sync += [sw_j.eq(0), sw_t.eq(sw_t + 1)]
                with m.If(sw_t == bank_rows[sw_b]):
                    m.d.sync += sw_active.eq(0)
        with m.If(sw_end):
            m.d.sync += sw_b.eq(~sw_b)
        is_corr = sw_t == 0
        pk_mem = [memory(f"pk_mem{h}", 19, 2 * PM * BLOCK) for h in range(H)]
        for h in range(H):
            xdf = Dataflow(m, f"softmax{h}", platform)
            (_, new_rp), (_, old_rp) = m_new_mem[h], m_old_mem[h]
            m.d.comb += [score_rp[h].addr.eq((sw_b * PM + sw_j) * BLOCK + (sw_t - 1)),
                         new_rp.addr.eq(Cat(sw_j, sw_b)), old_rp.addr.eq(Cat(sw_j, sw_b))]
            arg = Timed(Mux(xdf.at(xdf.input(is_corr), 1), xdf.at(xdf.input(old_rp.data), 1), score_rp[h].data), 1)
            e = xdf.op("exp", xdf.sub(arg, Timed(xdf.at(xdf.input(new_rp.data), 1), 1)))
            # pk: p rounded to TF32 (RNE at bit 13; p is +0..1 or NaN), its top 19 bits
            pk_value = Signal(19, name=f"pk{h}")
            p_nan = (e.value[23:31] == 0xFF) & (e.value[:23] != 0)
            m.d.sync += pk_value.eq(Mux(p_nan, 0x7FC00000 >> 13, (e.value + 0xFFF + e.value[13])[13:32]))
            x_time = e.time + 1
            x_at = {name: xdf.at(xdf.input(v), x_time) for name, v in
                    (("valid", sw_issue), ("corr", is_corr), ("j", sw_j), ("t", sw_t - 1), ("b", sw_b),
                     ("end", sw_end))}
            wp, _ = pk_mem[h]
            m.d.comb += [wp.addr.eq((x_at["b"] * PM + x_at["j"]) * BLOCK + x_at["t"]), wp.data.eq(pk_value),
                         wp.en.eq(x_at["valid"] & ~x_at["corr"] & serves(x_at["j"], h))]
            corr_value = xdf.at(e, x_time)
            # this unit's query heads (pass g // H), each bank's register by name (an Array
            # assignment with a constant part leaves Yosys an empty case Verilog rejects)
            for g in range(h, MAX_GROUP, H):
                for b in range(2):
                    with m.If(x_at["valid"] & x_at["corr"] & (x_at["j"] == g >> h_bits) & (x_at["b"] == b)):
                        m.d.sync += corr[b * MAX_GROUP + g].eq(corr_value)
            if h == 0:
                with m.If(x_at["valid"] & ~x_at["corr"] & (x_at["j"] == passes - 1)):
                    m.d.sync += swept[x_at["b"]].eq(x_at["t"] + 1)
                with m.If(x_at["end"]):
                    m.d.sync += bank_state[x_at["b"]].eq(READY)

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
                with m.If(((bank_state[v_b] == SWEEPING) | (bank_state[v_b] == READY)) &
                          ~sums_busy.bit_select(v_b, 1)):
                    m.next = "STREAM"
            with m.State("STREAM"):
                # a row once the sweep has its weights
                m.d.comb += v_issue.eq(v_rows.ready & (swept[v_b] > v_t))
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

        # ---- epilogue: merge a block's partials, fold them into o and l; the division ----------
        ep = Epilogue(data_width=W, columns=C, units=H, width=self.epilogue_width)
        m.submodules.epilogue = ep
        m.d.comb += [ep.job.valid.eq(ends.r_rdy), ep.job.payload.eq(ends.r_data), ends.r_en.eq(ep.job.ready),
                     ep.head_dim128.eq(self.head_dim128), ep.group.eq(self.group), ep.out_format.eq(self.out_format),
                     sums_clear.eq(Mux(ep.released, 1 << ep.released_bank, 0))]
        with m.If(ep.job.valid & ep.job.ready):          # the block's scores and weights are no longer read
            m.d.sync += bank_state[ep.job.payload.b].eq(FREE)
        m.d.comb += [ep.corr[i].eq(corr[i]) for i in range(2 * MAX_GROUP)]
        for h, unit in enumerate(sums):
            m.d.comb += [unit.flush.valid.eq(ep.flush.valid & (ep.flush.payload.unit == h)),
                         unit.flush.payload.slot.eq(ep.flush.payload.slot),
                         unit.flush.payload.bank.eq(ep.flush.payload.bank)]
        # one unit's state at a time
        state = Const(0, len(ep.state.payload.as_value()))
        for unit in sums:
            state = state | Mux(unit.state.valid, unit.state.payload.as_value(), 0)
        m.d.comb += [ep.state.valid.eq(Cat(*[unit.state.valid for unit in sums]).any()), ep.state.payload.eq(state)]
        wiring.connect(m, ep.out, wiring.flipped(self.out))

        idle = Signal()
        m.d.comb += idle.eq(~k_active & ~k_jobs.r_rdy & ~v_jobs.r_rdy & value_fsm.ongoing("IDLE") &
                            ep.idle & ~ends.r_rdy & (q_full == 0) & ~sw_active & ~q_held)
        m.d.comb += self.idle.eq(idle)
        return m
