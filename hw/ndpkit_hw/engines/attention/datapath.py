"""The attention engine's arithmetic: one pass over K and V, block online softmax.

Bit for bit :func:`ndpkit.engines.attention.golden.decode_group` (read its docstring first).
The datapath takes, per KV head, the group's q rows, then the K rows and the V rows of
the head's context (``tokens`` rows, each ``R = d / P`` bus words of ``P = W / 16``
16-bit lanes), and gives back the G output rows.  Two sides run apart, decoupled by
two score banks (one block of 128 tokens each):

- **score side** (q, K): ``units`` (U) dot units of P multipliers and a P-way adder
  tree; unit u serves the query heads g = j * U + u (``passes`` = ceil(G / U) passes
  over each K row, so G <= U uses each K word once per cycle).  A row's word sums go
  through the tree over the row's words, then the score is written to the bank and
  the running maximum updated; at a block's last row the block maximum ``m_new`` and
  ``corr = exp(m_prev - m_new)`` are stored with the bank.
- **value side** (V): for every V word, ``p = exp(s - m_new)`` per unit and P fma
  lanes ``op[r] = fma(p, V, op[r])`` into an 8-way interleaved partial memory (token
  j of the block -> partial j mod 8, so a partial is revisited at least 16 cycles
  later, after its 13-cycle fma), and ``lp[r] += p``.  After the block the shared
  epilogue reads the 8 partials of every (head, word) one per cycle through a serial
  pairwise tree (3 adders a lane: the golden tree order) into ``o = fma(o, corr,
  tree)``, ``l = fma(l, corr, tree(lp))``, zeroing the partials behind it; after a
  head's last block it divides ``o / l``, narrows, and sends the output words.

K of block n + 1 streams while V of block n is consumed, and the next head's q loads
into the other q bank while this head runs, so the memory port, not the arithmetic,
bounds the engine when G <= U.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal, Const, Mux, Array, Cat
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ndpkit_spec.engines.attention import SOFTMAX_BLOCK as BLOCK, INTERLEAVE, KvFormat
from ndpkit_hw.arith.add import ADD_LATENCY, add_datapath
from ndpkit_hw.arith.dataflow import Dataflow, Timed
from ndpkit_hw.arith.fp_common import Pipeline
from ndpkit_hw.arith.minmax import minmax_value

__all__ = ["AttentionDatapath"]

NEG_INF = 0xFF80_0000
MAX_GROUP = 16


def _log2(n: int) -> int:
    return n.bit_length() - 1


def _widen(df: Dataflow, raw16: Timed, fmt) -> Timed:
    """fp16 or bf16 (``fmt``, a static signal) to fp32, exactly."""
    return df.select(df.static(fmt == KvFormat.FP16), df.op("fp16_to_fp32", raw16),
                     Timed(Cat(Const(0, 16), raw16.value), raw16.time))


def _tree(df: Dataflow, values: list) -> list:
    """The pairwise tree (adjacent pairs, level by level); returns every level."""
    levels = [values]
    while len(values) > 1:
        values = [df.op("add", values[i], values[i + 1]) for i in range(0, len(values), 2)]
        levels.append(values)
    return levels


class _RowBuffer:
    """Two row slots filled from a word stream (``R`` words a row, runtime), read by
    one consumer that releases a slot when it has issued its last word."""

    def __init__(self, m: Module, name: str, words_in: stream.Interface, rows_words, max_words: int, width: int):
        self.slots = [[Signal(width, name=f"{name}_row{s}_w{w}", reset_less=True) for w in range(max_words)]
                      for s in range(2)]
        self.full = Signal(2, name=f"{name}_full")
        fill_slot, self.read_slot = Signal(name=f"{name}_fill_slot"), Signal(name=f"{name}_read_slot")
        fill_word = Signal(range(max_words), name=f"{name}_fill_word")
        self.release = Signal(name=f"{name}_release")
        m.d.comb += words_in.ready.eq(~self.full.bit_select(fill_slot, 1))
        set_full = Signal(2, name=f"{name}_set_full")
        with m.If(words_in.valid & words_in.ready):
            for s in range(2):
                for w in range(max_words):
                    with m.If((fill_slot == s) & (fill_word == w)):
                        m.d.sync += self.slots[s][w].eq(words_in.payload)
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

    def word(self, index):
        return Array(Array(s) for s in self.slots)[self.read_slot][index]


class _PairStage:
    """One level of a serial pairwise tree: values arrive one per cycle (with tags);
    every second one is added to the one before it (``add(first, second)``), the sum
    leaving ``ADD_LATENCY`` cycles later with the second value's tags."""

    def __init__(self, m: Module, name: str, values: list, valid, tags: list):
        held = [Signal(32, name=f"{name}_held{i}", reset_less=True) for i in range(len(values))]
        second = Signal(name=f"{name}_second")
        with m.If(valid):
            m.d.sync += second.eq(~second)
            with m.If(~second):
                m.d.sync += [h.eq(v) for h, v in zip(held, values)]
        fire = valid & second
        self.values = []
        pipe = None
        for i, (h, v) in enumerate(zip(held, values)):
            pipe = Pipeline(m, fire, f"{name}_lane{i}")
            self.values.append(add_datapath(m, pipe, h, v))
        self.valid = pipe.valid
        self.tags = []
        for t in tags:
            for stage in range(ADD_LATENCY):
                nxt = Signal(t.shape(), name=f"{name}_tag_s{stage}", reset_less=True)
                m.d.sync += nxt.eq(t)
                t = nxt
            self.tags.append(t)


class AttentionDatapath(wiring.Component):
    """``q``, ``k``, ``v``: bus words; ``head``: one entry per KV head (its token
    count); ``out``: the output words.  ``head_dim128``, ``group``, the formats and
    ``scale`` are held for a whole command."""

    def __init__(self, *, data_width: int = 512, units: int = 8):
        if data_width not in (64, 128, 256, 512):
            raise ValueError(f"data_width must be 64, 128, 256 or 512, not {data_width}")
        if units < 1 or units > MAX_GROUP or units & (units - 1):
            raise ValueError(f"units must be a power of two from 1 to {MAX_GROUP}, not {units}")
        self.data_width, self.units = data_width, units
        self.lanes = data_width // 16                      # P
        self.row_words = 128 // self.lanes                 # R at d = 128 (twice R at d = 64)
        self.max_passes = MAX_GROUP // units
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
        W, P, U, R128, PM = self.data_width, self.lanes, self.units, self.row_words, self.max_passes
        R64 = R128 // 2
        u_bits = _log2(U)
        rows_words = Mux(self.head_dim128, R128, R64)           # R
        r_shift = Mux(self.head_dim128, _log2(R128), _log2(R64))
        passes = Signal(range(PM + 1))
        m.d.comb += passes.eq((self.group + U - 1) >> u_bits)
        G = self.group

        # ---- head jobs: one FIFO per side ---------------------------------------------
        k_jobs = fifo.SyncFIFOBuffered(width=32, depth=4)
        v_jobs = fifo.SyncFIFOBuffered(width=32, depth=4)
        m.submodules.k_jobs, m.submodules.v_jobs = k_jobs, v_jobs
        m.d.comb += [self.head.ready.eq(k_jobs.w_rdy & v_jobs.w_rdy),
                     k_jobs.w_en.eq(self.head.valid & self.head.ready), k_jobs.w_data.eq(self.head.payload),
                     v_jobs.w_en.eq(self.head.valid & self.head.ready), v_jobs.w_data.eq(self.head.payload)]

        # ---- memories ---------------------------------------------------------------------
        def memory(name, width, depth, granularity=None):
            mem = Memory(shape=width, depth=depth, init=[])
            m.submodules[name] = mem
            return mem, mem.read_port(), mem.write_port(granularity=granularity)

        q_mem = [memory(f"q_mem{u}", 32 * P, 2 * PM * R128, granularity=32) for u in range(U)]
        score_mem = [memory(f"score_mem{u}", 32, 2 * PM * BLOCK) for u in range(U)]
        op_mem = [memory(f"partial_mem{u}", 32 * P, PM * R128 * INTERLEAVE) for u in range(U)]
        o_mem = memory("o_mem", 32 * P, MAX_GROUP * R128)

        # ---- q loader: q rows -> q * scale in fp32, into q bank (head parity) ---------------
        q_full = Signal(2)                 # bank holds a loaded head the score side has not finished
        q_bank, q_g, q_w, q_half = Signal(), Signal(range(MAX_GROUP)), Signal(range(R128)), Signal()
        q32 = self.q_format == KvFormat.FP32
        take_q = Signal()
        m.d.comb += [self.q.ready.eq(~q_full.bit_select(q_bank, 1)), take_q.eq(self.q.valid & self.q.ready)]
        q_last = (q_g == G - 1) & (q_w == rows_words - 1) & (~q32 | q_half)
        with m.If(take_q):
            m.d.sync += q_half.eq(q32 & ~q_half)
            with m.If(~q32 | q_half):
                m.d.sync += q_w.eq(q_w + 1)
                with m.If(q_w == rows_words - 1):
                    m.d.sync += [q_w.eq(0), q_g.eq(q_g + 1)]
            with m.If(q_last):
                m.d.sync += [q_g.eq(0), q_bank.eq(~q_bank)]
        qdf = Dataflow(m, "qload", platform)
        q_lanes = []
        for i in range(P):
            raw16 = qdf.input(self.q.payload[16 * i:16 * (i + 1)])
            raw32 = qdf.input(self.q.payload.word_select(i % (P // 2), 32))
            wide = qdf.select(qdf.static(q32), raw32, _widen(qdf, raw16, self.q_format))
            q_lanes.append(qdf.op("mul", wide, qdf.static(self.scale)))
        q_time = qdf.latency
        q_unit = q_g[:u_bits] if U > 1 else Const(0, 1)
        q_addr = Signal(range(2 * PM * R128))
        m.d.comb += q_addr.eq(((q_bank * PM + (q_g >> u_bits)) * R128) + q_w)
        half_mask = Const((1 << (P // 2)) - 1, P)
        q_mask = Mux(q32, Mux(q_half, half_mask << (P // 2), half_mask), (1 << P) - 1)
        at_q = {name: qdf.at(qdf.input(v), q_time) for name, v in
                (("valid", take_q), ("unit", q_unit), ("addr", q_addr), ("mask", q_mask), ("last", take_q & q_last),
                 ("bank", q_bank))}
        for u, (_, _, wp) in enumerate(q_mem):
            m.d.comb += [wp.addr.eq(at_q["addr"]), wp.data.eq(Cat(*[qdf.at(x, q_time) for x in q_lanes])),
                         wp.en.eq(Mux(at_q["valid"] & (at_q["unit"] == u), at_q["mask"], 0))]
        q_loaded = Signal(2)
        m.d.comb += q_loaded.eq(Mux(at_q["last"], 1 << at_q["bank"], 0))

        def in_group(j, u):
            """Unit u's pass j serves a query head of the group."""
            return ((j << u_bits) + u) < G

        # ---- score banks ------------------------------------------------------------------
        # per bank: 0 free, 1 the score side fills it, 2 ready for the value side, 3 in use by it
        FREE, FILLING, READY, DRAINING = 0, 1, 2, 3
        bank_state = Array(Signal(2, name=f"bank{b}_state") for b in range(2))
        bank_rows = Array(Signal(range(BLOCK + 1), name=f"bank{b}_rows") for b in range(2))
        bank_first = Array(Signal(name=f"bank{b}_first") for b in range(2))
        bank_last = Array(Signal(name=f"bank{b}_last") for b in range(2))
        m_new = [[Array(Signal(32, name=f"mnew_u{u}_b{b}_{j}") for j in range(PM)) for b in range(2)] for u in range(U)]
        corr = [[Array(Signal(32, name=f"corr_u{u}_b{b}_{j}") for j in range(PM)) for b in range(2)] for u in range(U)]

        # ---- score side ---------------------------------------------------------------------
        k_rows = _RowBuffer(m, "k", self.k, rows_words, R128, W)
        k_active, k_left = Signal(), Signal(32)           # rows of the head still to issue
        k_row0, k_t, k_b, k_j, k_w = Signal(), Signal(range(BLOCK)), Signal(), Signal(range(PM)), Signal(range(R128))
        k_qbank, k_first_block = Signal(), Signal()
        m.d.comb += k_jobs.r_en.eq(~k_active)
        with m.If(k_jobs.r_rdy & ~k_active):
            m.d.sync += [k_active.eq(k_jobs.r_data != 0), k_left.eq(k_jobs.r_data), k_row0.eq(1), k_t.eq(0),
                         k_first_block.eq(1)]
        block_start = (k_t == 0) & (k_j == 0) & (k_w == 0)
        k_issue = Signal()
        m.d.comb += k_issue.eq(k_active & k_rows.ready & q_full.bit_select(k_qbank, 1) &
                               (~block_start | (bank_state[k_b] == FREE)))
        k_last_row_block = (k_t == BLOCK - 1) | (k_left == 1)
        q_release = Signal(2)
        with m.If(k_issue):
            with m.If(block_start):
                m.d.sync += [bank_state[k_b].eq(FILLING), bank_first[k_b].eq(k_first_block),
                             bank_last[k_b].eq(k_left <= BLOCK),
                             bank_rows[k_b].eq(Mux(k_left < BLOCK, k_left, BLOCK))]
            m.d.sync += k_w.eq(k_w + 1)
            with m.If(k_w == rows_words - 1):
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

        kdf = Dataflow(m, "score", platform)
        k_word = kdf.at(kdf.input(k_rows.word(k_w)), 1)
        k_lanes = [_widen(kdf, Timed(k_word[16 * i:16 * (i + 1)], 1), self.kv_format) for i in range(P)]
        k_time = max(x.time for x in k_lanes)
        tags = {"valid": k_issue, "j": k_j, "w": k_w, "t": k_t, "b": k_b, "row0": k_row0,
"block_end": k_last_row_block, "first_block": k_first_block,
                "fire": k_issue & (k_w == rows_words - 1)}
        k_tag = {name: kdf.input(v) for name, v in tags.items()}
        q_read_addr = kdf.at(kdf.input((k_qbank * PM + k_j) * R128 + k_w), k_time - 1)
        for u in range(U):
            _, rp, _ = q_mem[u]
            m.d.comb += rp.addr.eq(q_read_addr)
        score_time = None
        score_of = []                      # each unit's score (Timed)
        for u in range(U):
            qd = q_mem[u][1].data
            products = [kdf.op("mul", Timed(qd.word_select(i, 32), k_time), k_lanes[i]) for i in range(P)]
            word_sum = _tree(kdf, products)[-1][0]
            # the row's word sums, collected; the tree over them fires with the row's last word
            # (the fire tag is tapped here first: that fixes the delay registers' names, so the
            # cached Verilator builds stay valid)
            kdf.at(k_tag["fire"], word_sum.time)
            w_at = kdf.at(k_tag["w"], word_sum.time)
            seen = [Signal(32, name=f"row_sum_u{u}_{i}", reset_less=True) for i in range(R128)]
            with m.If(kdf.at(k_tag["valid"], word_sum.time)):
                for i in range(R128):
                    with m.If(w_at == i):
                        m.d.sync += seen[i].eq(word_sum.value)
            inputs = [Timed(Mux(w_at == i, word_sum.value, seen[i]), word_sum.time) for i in range(R128)]
            levels = _tree(kdf, inputs)
            s = kdf.select(kdf.static(self.head_dim128), levels[-1][0], levels[-2][0])
            score_of.append(s)
            score_time = s.time
        at_s = {name: kdf.at(t, score_time) for name, t in k_tag.items()}
        s_fire = kdf.at(k_tag["fire"], score_time)
        bank_done = Signal()
        m.d.comb += bank_done.eq(s_fire & at_s["block_end"] & (at_s["j"] == passes - 1))
        with m.If(bank_done):
            m.d.sync += bank_state[at_s["b"]].eq(READY)
        m_run = [Array(Signal(32, name=f"mrun_u{u}_{j}") for j in range(PM)) for u in range(U)]
        m_prev = [Array(Signal(32, name=f"mprev_u{u}_{j}") for j in range(PM)) for u in range(U)]
        cdf = Dataflow(m, "corr", platform)
        for u in range(U):
            s = score_of[u]
            _, _, wp = score_mem[u]
            g_valid = in_group(at_s["j"], u)
            m.d.comb += [wp.addr.eq((at_s["b"] * PM + at_s["j"]) * BLOCK + at_s["t"]), wp.data.eq(s.value),
                         wp.en.eq(s_fire & g_valid)]
            current = Mux(at_s["row0"], NEG_INF, m_run[u][at_s["j"]])
            new_max = minmax_value(m, current, s.value, Const(1))
            with m.If(s_fire):
                m.d.sync += m_run[u][at_s["j"]].eq(new_max)
                with m.If(at_s["block_end"]):
                    m.d.sync += m_prev[u][at_s["j"]].eq(new_max)
                    for b in range(2):
                        with m.If(at_s["b"] == b):
                            m.d.sync += m_new[u][b][at_s["j"]].eq(new_max)
            # corr = exp(m_prev - m_new) (m_prev = -inf before a head's first block)
            prev = Mux(at_s["first_block"], NEG_INF, m_prev[u][at_s["j"]])
            c = cdf.op("exp", cdf.sub(cdf.input(prev), cdf.input(new_max)))
            c_en = cdf.at(cdf.input(s_fire & at_s["block_end"]), c.time)
            c_b, c_j = cdf.at(cdf.input(at_s["b"]), c.time), cdf.at(cdf.input(at_s["j"]), c.time)
            with m.If(c_en):
                for b in range(2):
                    with m.If(c_b == b):
                        m.d.sync += corr[u][b][c_j].eq(c.value)
        corr_latency = cdf.latency

        # ---- value side ---------------------------------------------------------------------
        v_rows = _RowBuffer(m, "v", self.v, rows_words, R128, W)
        v_t, v_b, v_j, v_w = Signal(range(BLOCK)), Signal(), Signal(range(PM)), Signal(range(R128))
        v_first, v_last = Signal(), Signal()             # the block being consumed: a head's first / last
        v_corr = Array(Signal(32, name=f"vcorr{g}") for g in range(MAX_GROUP))
        vdf = Dataflow(m, "value", platform)
        v_issue = Signal()
        v_block_end = (v_t == bank_rows[v_b] - 1) & (v_j == passes - 1) & (v_w == rows_words - 1)
        v_tags = {"valid": v_issue, "j": v_j, "w": v_w, "r": v_t[:3], "b": v_b}
        v_tag = {name: vdf.input(v) for name, v in v_tags.items()}
        v_word = vdf.input(v_rows.word(v_w))
        v_lanes = [_widen(vdf, Timed(v_word.value[16 * i:16 * (i + 1)], 0), self.kv_format) for i in range(P)]
        for u in range(U):
            _, rp, _ = score_mem[u]
            m.d.comb += rp.addr.eq((v_b * PM + v_j) * BLOCK + v_t)
        p_of = []
        for u in range(U):
            s = Timed(score_mem[u][1].data, 1)
            mn = vdf.at(vdf.input(Array(m_new[u][b] for b in range(2))[v_b][v_j]), 1)
            p_of.append(vdf.op("exp", vdf.sub(s, Timed(mn, 1))))
        p_time = p_of[0].time
        # the partial memories: the value side's read-modify-write, or the epilogue's read-and-zero
        partial_read_addr = vdf.at(vdf.input((v_j * R128 + v_w) * INTERLEAVE + v_t[:3]), p_time - 1)
        lp = [[Array(Signal(32, name=f"lp_u{u}_{j}_{r}") for r in range(INTERLEAVE)) for j in range(PM)] for u in range(U)]
        lp_of = [Array(lp[u]) for u in range(U)]
        updates = []
        for u in range(U):
            partial = Timed(op_mem[u][1].data, p_time)
            acc = [vdf.op("fma", p_of[u], v_lanes[i], Timed(partial.value.word_select(i, 32), p_time))
                   for i in range(P)]
            at_p = {k: vdf.at(t, p_time) for k, t in v_tag.items()}
            lp_sum = vdf.op("add", p_of[u], Timed(lp_of[u][at_p["j"]][at_p["r"]], p_time))
            updates.append((acc, lp_sum))
        fma_time = updates[0][0][0].time
        lp_time = updates[0][1].time
        at_f = {k: vdf.at(t, fma_time) for k, t in v_tag.items()}
        at_l = {k: vdf.at(t, lp_time) for k, t in v_tag.items()}
        partial_write_addr = vdf.at(vdf.input((v_j * R128 + v_w) * INTERLEAVE + v_t[:3]), fma_time)
        drain = fma_time + 2

        # ---- epilogue: combine a block's partials, then divide after a head's last block ----
        c_g, c_w, c_r = Signal(range(MAX_GROUP)), Signal(range(R128)), Signal(range(INTERLEAVE))
        combining = Signal()
        c_unit = c_g[:u_bits] if U > 1 else Const(0, 1)
        c_addr = ((c_g >> u_bits) * R128 + c_w) * INTERLEAVE + c_r
        for u in range(U):
            _, rp, wp = op_mem[u]
            acc, _ = updates[u]
            m.d.comb += [rp.addr.eq(Mux(combining, c_addr, partial_read_addr)),
                         wp.addr.eq(Mux(combining, c_addr, partial_write_addr)),
                         wp.data.eq(Mux(combining, 0, Cat(*[a.value for a in acc]))),
                         wp.en.eq(Mux(combining, c_unit == u, at_f["valid"] & in_group(at_f["j"], u)))]
            _, lp_sum = updates[u]
            # (partials of heads beyond the group stay +0, ready for a later command's larger G)
            with m.If(at_l["valid"] & (at_l["w"] == 0) & in_group(at_l["j"], u)):
                for j in range(PM):
                    for r in range(INTERLEAVE):
                        with m.If((at_l["j"] == j) & (at_l["r"] == r)):
                            m.d.sync += lp[u][j][r].eq(lp_sum.value)
        c_lp = Signal(32)
        m.d.comb += c_lp.eq(Array(lp_of[u] for u in range(U))[c_unit][c_g >> u_bits][c_r])
        with m.If(combining & (c_w == 0)):
            for u in range(U):
                for j in range(PM):
                    for r in range(INTERLEAVE):
                        with m.If((c_unit == u) & ((c_g >> u_bits) == j) & (c_r == r)):
                            m.d.sync += lp[u][j][r].eq(0)
        # one cycle later: the partial from its unit's memory, the lp alongside
        e_valid, e_unit, e_g, e_w, e_lp = Signal(), Signal(max(1, u_bits)), Signal(range(MAX_GROUP)), \
            Signal(range(R128)), Signal(32)
        m.d.sync += [e_valid.eq(combining), e_unit.eq(c_unit), e_g.eq(c_g), e_w.eq(c_w), e_lp.eq(c_lp)]
        e_values = [Array(op_mem[u][1].data for u in range(U))[e_unit].word_select(i, 32) for i in range(P)] + [e_lp]
        stage = (e_values, e_valid, [e_g, e_w])
        for level in range(_log2(INTERLEAVE)):
            ps = _PairStage(m, f"combine{level}", stage[0], stage[1], stage[2])
            stage = (ps.values, ps.valid, ps.tags)
        t_values, t_valid, (t_g, t_w) = stage
        # o = fma(o, corr, tree), l = fma(l, corr, tree(lp)); +0 before a head's first block
        o_rp, o_wp = o_mem[1], o_mem[2]
        f_g, f_w = Signal(range(MAX_GROUP)), Signal(range(R128))
        finishing = Signal()
        m.d.comb += o_rp.addr.eq(Mux(finishing, f_g * R128 + f_w, t_g * R128 + t_w))
        edf = Dataflow(m, "combine", platform)
        first = edf.static(v_first)
        cr = edf.at(edf.input(v_corr[t_g]), 1)
        l_reg = Array(Signal(32, name=f"l{g}") for g in range(MAX_GROUP))
        zero = Const(0, 32)
        o_old = [Timed(o_rp.data.word_select(i, 32), 1) for i in range(P)]
        tv = [edf.at(edf.input(v), 1) for v in t_values]
        new_o = [edf.op("fma", edf.select(first, edf.static(zero), o_old[i]), Timed(cr, 1), Timed(tv[i], 1))
                 for i in range(P)]
        new_l = edf.op("fma", edf.select(first, edf.static(zero), Timed(edf.at(edf.input(l_reg[t_g]), 1), 1)), Timed(cr, 1),
                       Timed(tv[P], 1))
        o_time = new_o[0].time
        o_en, o_g, o_w = (edf.at(edf.input(x), o_time) for x in (t_valid, t_g, t_w))
        m.d.comb += [o_wp.addr.eq(o_g * R128 + o_w), o_wp.data.eq(Cat(*[x.value for x in new_o])), o_wp.en.eq(o_en)]
        with m.If(o_en & (o_w == 0)):
            m.d.sync += l_reg[o_g].eq(edf.at(new_l, o_time))
        combine_drain = 1 + _log2(INTERLEAVE) * ADD_LATENCY + o_time + 2

        # final: out = o / l, narrowed, into the output FIFO (credits keep it from overflowing)
        fdf = Dataflow(m, "final", platform)
        f_issue = Signal()
        f_o = [Timed(o_rp.data.word_select(i, 32), 1) for i in range(P)]
        f_l = fdf.at(fdf.input(l_reg[f_g]), 1)
        results = []
        for i in range(P):
            x = fdf.op("div", f_o[i], Timed(f_l, 1))
            narrow = fdf.select(fdf.static(self.out_format == KvFormat.BF16), fdf.op("fp32_to_bf16", x),
                                fdf.op("fp32_to_fp16", x))
            results.append((x, narrow))
        f_time = fdf.latency
        out32 = self.out_format == KvFormat.FP32
        packed = Mux(out32, Cat(*[fdf.at(x, f_time) for x, _ in results]),
                     Cat(*[fdf.at(n, f_time)[:16] for _, n in results]))
        out_depth = 1 << (f_time + 8).bit_length()
        m.submodules.out_fifo = out_fifo = fifo.SyncFIFOBuffered(width=2 * W, depth=out_depth)
        f_valid = fdf.at(fdf.input(f_issue), f_time)
        m.d.comb += [out_fifo.w_data.eq(packed), out_fifo.w_en.eq(f_valid)]
        in_flight = Signal(range(out_depth + 1))
        popped = out_fifo.r_en & out_fifo.r_rdy
        m.d.sync += in_flight.eq(in_flight + f_issue - popped)
        out_high = Signal()
        m.d.comb += [self.out.valid.eq(out_fifo.r_rdy),
                     self.out.payload.eq(Mux(out_high, out_fifo.r_data[W:], out_fifo.r_data[:W])),
                     out_fifo.r_en.eq(self.out.ready & (~out32 | out_high))]
        with m.If(self.out.valid & self.out.ready & out32):
            m.d.sync += out_high.eq(~out_high)

        # ---- the value side's sequence ------------------------------------------------------
        wait = Signal(range(max(drain, combine_drain, corr_latency) + 2))
        m.d.comb += v_jobs.r_en.eq(0)
        with m.FSM(name="value_side") as value_fsm:
            with m.State("IDLE"):
                with m.If(v_jobs.r_rdy):
                    m.d.comb += v_jobs.r_en.eq(1)
                    m.d.sync += [v_t.eq(0), v_j.eq(0), v_w.eq(0)]
                    with m.If(v_jobs.r_data != 0):
                        m.next = "WAIT_BANK"
            with m.State("WAIT_BANK"):
                with m.If(bank_state[v_b] == READY):
                    m.d.sync += [bank_state[v_b].eq(DRAINING), v_first.eq(bank_first[v_b]),
                                 v_last.eq(bank_last[v_b])]
                    m.next = "STREAM"
            with m.State("STREAM"):
                m.d.comb += v_issue.eq(v_rows.ready)
                with m.If(v_issue):
                    m.d.sync += v_w.eq(v_w + 1)
                    with m.If(v_w == rows_words - 1):
                        m.d.sync += [v_w.eq(0), v_j.eq(v_j + 1)]
                        with m.If(v_j == passes - 1):
                            m.d.sync += [v_j.eq(0), v_t.eq(v_t + 1)]
                            m.d.comb += v_rows.release.eq(1)
                    with m.If(v_block_end):
                        m.d.sync += [v_t.eq(0), wait.eq(max(drain, corr_latency + 1))]
                        m.next = "DRAIN"
            with m.State("DRAIN"):
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 0):
                    # the block's corr values are in the bank by now: keep them, free the bank
                    for g in range(MAX_GROUP):
                        m.d.sync += v_corr[g].eq(Array(corr[u][b] for u in range(U) for b in range(2))
                                                 [(g % U) * 2 + v_b][g // U])
                    m.d.sync += [bank_state[v_b].eq(FREE), v_b.eq(~v_b), c_g.eq(0), c_w.eq(0), c_r.eq(0)]
                    m.next = "COMBINE"
            with m.State("COMBINE"):
                m.d.comb += combining.eq(1)
                m.d.sync += c_r.eq(c_r + 1)
                with m.If(c_r == INTERLEAVE - 1):
                    m.d.sync += c_w.eq(c_w + 1)
                    with m.If(c_w == rows_words - 1):
                        m.d.sync += [c_w.eq(0), c_g.eq(c_g + 1)]
                        with m.If(c_g == G - 1):
                            m.d.sync += wait.eq(combine_drain)
                            m.next = "COMBINE_DRAIN"
            with m.State("COMBINE_DRAIN"):
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 0):
                    m.d.sync += [f_g.eq(0), f_w.eq(0)]
                    with m.If(v_last):
                        m.next = "FINAL"
                    with m.Else():
                        m.next = "WAIT_BANK"
            with m.State("FINAL"):
                m.d.comb += [finishing.eq(1), f_issue.eq(in_flight < out_depth - 1)]
                with m.If(f_issue):
                    m.d.sync += f_w.eq(f_w + 1)
                    with m.If(f_w == rows_words - 1):
                        m.d.sync += [f_w.eq(0), f_g.eq(f_g + 1)]
                        with m.If(f_g == G - 1):
                            m.next = "IDLE"
        idle = Signal()
        m.d.comb += idle.eq(~k_active & ~k_jobs.r_rdy & ~v_jobs.r_rdy & value_fsm.ongoing("IDLE") &
                            (in_flight == 0) & (q_full == 0))
        m.d.comb += self.idle.eq(idle)
        return m
