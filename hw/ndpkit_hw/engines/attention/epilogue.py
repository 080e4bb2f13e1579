"""The attention datapath's epilogue: per block, merge each lane's four partial running
sums, round, fold into the output and denominator; after a head's last block divide.

Bit for bit the block step of :func:`ndpkit.engines.attention.golden.decode_group`:
``ob[i] = round(merge(merge(merge(s0, s1), s2), s3))``, ``o[i] = fma(o[i], corr, ob[i])``
(``o`` = +0 before a head's first block), ``l`` likewise from the denominator lane,
and ``out[i] = div(o[i], l)`` narrowed to the output format.

The work is per column group (a WeightedSums slot of ``C + 1`` sums: C value columns,
and with group 0 the denominator): its four partials are flushed on four consecutive
cycles into four registers, read ``E`` lanes a cycle (``width``) into ``E`` merge
chains (three merge units each, the later partials delayed to meet them), ``E``
roundings and ``E`` fmas.  The next group's flushes are issued so that
its states land as the last lanes leave: a group costs ``ceil(lanes / E)`` cycles,
with no gap, so the epilogue keeps up with the value side whenever
``E >= lanes / 128`` (its cost per block and head ``(d + 1) / E`` cycles against the
value side's ``128 * d / C`` beats per pass of ``H`` heads).

Interfaces: ``job`` (one entry per block: the WeightedSums bank, whether it is the head's
first and last block, its rows), accepted as the epilogue starts it (the block's score
bank can be reused then: the job's ``corr`` values are copied); ``flush`` / ``state``
to the WeightedSums units (the state two cycles after its flush, from the unit the
flush names); ``released`` pulses with ``released_bank`` when the job's sums bank is
no longer read; ``out`` the packed output words.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal, Const, Mux, Array, Cat
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ndpkit_spec.blockfloat import PARTIALS
from ndpkit_spec.engines.attention import HEAD_DIMS, MAX_GROUP, KvFormat
from ndpkit_hw.arith.blockfloat import (FLUSH_LATENCY, NO_TERM, MergedState, SumState, merge_states,
                                        sum_to_fp32)
from ndpkit_hw.arith.dataflow import Dataflow, Timed
from ndpkit_hw.arith.fp_common import Pipeline
from ndpkit_hw.bus.axi import log2_exact

__all__ = ["Epilogue", "epilogue_width", "EpilogueJob", "MAX_DIM", "flush_layout", "slot_count", "sums_slot"]

MAX_DIM = max(HEAD_DIMS)
#: a block for the epilogue: its WeightedSums bank, the head's first / last block, its rows
EpilogueJob = data.StructLayout({"b": 1, "first": 1, "last": 1, "rows": 8})


def epilogue_width(lanes: int) -> int:
    """Lanes a cycle the epilogue needs to keep pace with ``lanes`` MAC lanes."""
    return max(1, lanes // 128)


def sums_slot(j, group, r, groups: int):
    """The WeightedSums slot of pass ``j``, column group ``group`` (of ``groups`` in a
    d = 128 row) and partial ``r``: where the value side adds and the epilogue flushes."""
    return ((j * groups + group) << log2_exact(PARTIALS, "partials")) + r


def slot_count(columns: int, units: int) -> int:
    """The WeightedSums slots a unit uses: one per pass, column group and partial."""
    return MAX_GROUP // units * (MAX_DIM // columns) * PARTIALS


def flush_layout(columns: int, units: int) -> data.StructLayout:
    """A flush of one WeightedSums slot: the slot (pass, column group, partial), the
    sums bank, the unit."""
    return data.StructLayout({"slot": range(slot_count(columns, units)), "bank": 1, "unit": range(max(2, units))})


class Epilogue(wiring.Component):
    def __init__(self, *, data_width: int, columns: int, units: int, width: int = 1):
        if width < 1 or width & (width - 1) or columns % width:
            raise ValueError(f"width must be a power of two dividing the {columns} columns, not {width}")
        self.data_width, self.columns, self.units, self.width = data_width, columns, units, width
        self.elements = data_width // 16
        self.flush_layout = flush_layout(columns, units)
        super().__init__({
            "job": In(stream.Signature(EpilogueJob)),
            "corr": In(data.ArrayLayout(32, 2 * MAX_GROUP)),        # by Cat(query head, bank)
            "flush": Out(stream.Signature(self.flush_layout, always_ready=True)),
            "state": In(stream.Signature(data.ArrayLayout(SumState, columns + 1), always_ready=True)),
            "released": Out(1),
            "released_bank": Out(1),
            "out": Out(stream.Signature(data_width)),
            "head_dim128": In(1),
            "group": In(range(MAX_GROUP + 1)),
            "out_format": In(2),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W, P, C, H, E = self.data_width, self.elements, self.columns, self.units, self.width
        GROUPS = MAX_DIM // C
        h_bits, c_bits, e_bits = log2_exact(H, "units"), log2_exact(C, "columns"), log2_exact(E, "width")
        G = self.group
        row_groups = Mux(self.head_dim128, GROUPS, GROUPS // 2)
        dim = Mux(self.head_dim128, MAX_DIM, MAX_DIM // 2)
        chunks_all = -(-(C + 1) // E)                 # chunks of group 0 (with the denominator)
        chunks_rest = C // E
        NL = chunks_all * E                           # lanes a partial register holds

        # ---- the job -----------------------------------------------------------------------
        job = Signal(EpilogueJob)
        corr = Array(Signal(32, name=f"e_corr{g}") for g in range(MAX_GROUP))
        partials = Signal(range(PARTIALS + 1))
        m.d.comb += partials.eq(Mux(job.rows < PARTIALS, job.rows, PARTIALS))

        # ---- flush issue: a group's four partials on four consecutive cycles -----------------
        i_g, i_grp = Signal(range(MAX_GROUP)), Signal(range(GROUPS))     # the next group to issue
        issuing = Signal()                   # groups of the job are left to issue
        issue = Signal()
        Flush = data.StructLayout({"valid": 1, "g": range(MAX_GROUP), "grp": range(GROUPS), "r": range(PARTIALS)})
        flush_line = [Signal(Flush, name=f"flush_r{r}") for r in range(PARTIALS)]
        m.d.comb += [flush_line[0].valid.eq(issue), flush_line[0].g.eq(i_g), flush_line[0].grp.eq(i_grp)]
        for r in range(1, PARTIALS):
            m.d.sync += [flush_line[r].eq(flush_line[r - 1]), flush_line[r].r.eq(r)]
        f = flush_line
        # one flush a cycle: partial r of the group issued r cycles after partial 0
        now = Signal(Flush)
        m.d.comb += now.eq(Mux(issue, f[0].as_value(), 0))
        for r in range(1, PARTIALS):
            with m.If(f[r].valid):
                m.d.comb += now.eq(f[r])
        j = now.g >> h_bits
        m.d.comb += [self.flush.valid.eq(now.valid),
                     self.flush.payload.slot.eq(sums_slot(j, now.grp, now.r, GROUPS)),
                     self.flush.payload.bank.eq(job.b),
                     self.flush.payload.unit.eq(now.g[:h_bits] if H > 1 else 0)]
        # the response's partial and group, FLUSH_LATENCY cycles later
        resp, responses = now, []
        for _ in range(FLUSH_LATENCY):
            later = Signal(Flush)
            m.d.sync += later.eq(resp)
            resp = later
            responses.append(resp.valid)

        # ---- four registers of C + 1 lanes, read E lanes a cycle -----------------------------
        # (loaded whole, with an enable: no multiplexer in front of them; the lanes read
        # through a select behind them, the partials a short block never touched replaced
        # by empty sums there)
        empty = Const({"sum": 0, "exp": NO_TERM, "pos_inf": 0, "neg_inf": 0, "nan": 0}, SumState)
        regs = [[Signal(SumState, name=f"part{r}_{i}", reset_less=True) for i in range(NL)]
                for r in range(PARTIALS)]
        for r in range(PARTIALS):
            with m.If(resp.valid & (resp.r == r)):
                m.d.sync += [regs[r][i].eq(self.state.payload[i]) for i in range(C + 1)]
        for r in range(PARTIALS):
            for i in range(C + 1, NL):                  # the last chunk's padding: never used
                m.d.comb += regs[r][i].eq(empty)

        # partial 0's lanes: chunks left, and the group they belong to
        left = Signal(range(chunks_all + 1))
        Tag = data.StructLayout({"g": range(MAX_GROUP), "grp": range(GROUPS), "k": range(chunks_all)})
        cur = Signal(Tag)
        emit = Signal()
        m.d.comb += emit.eq(left != 0)
        with m.If(emit):
            m.d.sync += [left.eq(left - 1), cur.k.eq(cur.k + 1)]
        with m.If(resp.valid & (resp.r == 0)):
            m.d.sync += [left.eq(Mux(resp.grp == 0, chunks_all, chunks_rest)), cur.g.eq(resp.g),
                         cur.grp.eq(resp.grp), cur.k.eq(0)]
        # the next flush when partial 0's register empties as its states land (FLUSH_LATENCY
        # + 1 cycles from now), and not while one is in flight
        in_flight = Cat(*[x.valid for x in f[1:]]).any()
        m.d.comb += issue.eq(issuing & (left <= FLUSH_LATENCY + 1) & ~in_flight)
        flushing = in_flight | Cat(*responses).any()      # a flush or its state in flight

        # ---- the merge chains: ((p0 + p1) + p2) + p3, then rounding --------------------------
        # partial r's lanes leave r cycles after partial 0's
        def delayed(value, n, name):
            for s in range(n):
                reg = Signal(value.shape(), name=f"{name}_d{s}", reset_less=True)
                m.d.sync += reg.eq(value)
                value = reg
            return value

        # partial r's chunk is read r cycles after partial 0's, a register behind each select
        chunk = [cur.k]
        for r in range(1, PARTIALS):
            chunk.append(delayed(chunk[-1], 1, f"chunk{r}"))
        read = []                                       # read[r][e]: ready r + 1 cycles after the emission
        for r in range(PARTIALS):
            lanes = []
            for e in range(E):
                sel = Array(regs[r][c * E + e].as_value() for c in range(chunks_all))[chunk[r]]
                reg = Signal(SumState, name=f"read{r}_{e}", reset_less=True)
                m.d.sync += reg.eq(Mux(r < partials, sel, empty.as_value()) if r else sel)
                lanes.append(reg)
            read.append(lanes)
        first_stage = Pipeline(m, emit, "chain")
        tag = first_stage.stage(cur.as_value())
        tag = first_stage.stage(tag)                    # partial 0 meets partial 1, two cycles on
        results = []
        for e in range(E):
            chain = Pipeline(m, first_stage.valid, f"chain{e}")
            chain.depth = first_stage.depth
            p0 = data.View(SumState, delayed(read[0][e].as_value(), 1, f"p0_{e}"))
            merged, carry = merge_states(m, chain, p0, read[1][e], carry=(tag,) if e == 0 else ())
            # partial r's lanes are ready r + 1 cycles after the emission
            p2 = data.View(SumState, delayed(read[2][e].as_value(), chain.depth - 3, f"p2_{e}"))
            merged, carry = merge_states(m, chain, data.View(MergedState, merged), p2, carry=carry)
            p3 = data.View(SumState, delayed(read[3][e].as_value(), chain.depth - 4, f"p3_{e}"))
            merged, carry = merge_states(m, chain, data.View(MergedState, merged), p3, carry=carry)
            # (the last merge's add and the rounding's negation are not one cycle)
            staged = chain.stage(merged, *carry)
            merged, carry = data.View(MergedState, staged[0] if carry else staged), staged[1:] if carry else []
            value, carry = sum_to_fp32(m, chain, merged.sum, merged.exp, merged.nan, merged.pos_inf,
                                       merged.neg_inf, carry=carry)
            results.append(value)
            if e == 0:
                (tag_out,) = carry
                out_valid, chain_depth = chain.valid, chain.depth
        rtag = data.View(Tag, tag_out)

        # ---- the fold: o = fma(o, corr, value), l likewise -------------------------------------
        o_mem = Memory(shape=32 * E, depth=MAX_GROUP * MAX_DIM // E, init=[])
        m.submodules.o_mem = o_mem
        o_wp, o_rp = o_mem.write_port(), o_mem.read_port()
        l_mem = Memory(shape=32, depth=MAX_GROUP, init=[])
        m.submodules.l_mem = l_mem
        l_wp, l_fold_rp, l_final_rp = l_mem.write_port(), l_mem.read_port(domain="comb"), \
            l_mem.read_port(domain="comb")
        finishing = Signal()
        final_g, final_w = Signal(range(MAX_GROUP)), Signal(range(MAX_DIM // E))
        lane0 = Cat(Const(0, e_bits), rtag.k) if E > 1 else rtag.k          # k * E
        is_l = (rtag.grp == 0) & (lane0 == C)
        word = Cat(lane0[:c_bits], rtag.grp)[e_bits:]                      # (grp * C + k * E) / E
        o_at = rtag.g * (MAX_DIM // E) + word
        m.d.comb += o_rp.addr.eq(Mux(finishing, final_g * (MAX_DIM // E) + final_w, o_at))
        m.d.comb += l_fold_rp.addr.eq(rtag.g)
        fdf = Dataflow(m, "fold", platform)
        first = fdf.static(job.first)
        c_val = fdf.at(fdf.input(corr[rtag.g]), 1)
        l_old = fdf.at(fdf.input(l_fold_rp.data), 1)
        l_now = fdf.at(fdf.input(is_l), 1)
        folded = []
        for e in range(E):
            old = Mux(l_now, l_old, o_rp.data.word_select(e, 32)) if e == 0 else o_rp.data.word_select(e, 32)
            # the accumulator operand selected and registered before the fma (the selects and
            # the fma's operand decode were one 10-level path)
            chosen = fdf.select(first, fdf.static(Const(0, 32)), Timed(old, 1))
            folded.append(fdf.op("fma", Timed(fdf.at(chosen, 2), 2), Timed(c_val, 1),
                                 Timed(fdf.at(fdf.input(results[e]), 1), 1)))
        fold_time = max(x.time for x in folded)
        fo = {name: fdf.at(fdf.input(v), fold_time) for name, v in
              (("valid", out_valid), ("l", is_l), ("g", rtag.g), ("at", o_at))}
        m.d.comb += [o_wp.addr.eq(fo["at"]), o_wp.data.eq(Cat(*[fdf.at(x, fold_time) for x in folded])),
                     o_wp.en.eq(fo["valid"] & ~fo["l"]),
                     l_wp.addr.eq(fo["g"]), l_wp.data.eq(fdf.at(folded[0], fold_time)),
                     l_wp.en.eq(fo["valid"] & fo["l"])]
        drain = chain_depth + fold_time + 2

        # ---- the final division: out = o / l, narrowed, packed into words ------------------------
        final_issue = Signal()
        ddf = Dataflow(m, "final", platform)
        m.d.comb += l_final_rp.addr.eq(final_g)
        l_final = Timed(ddf.at(ddf.input(l_final_rp.data), 1), 1)
        out32 = self.out_format == KvFormat.FP32
        narrowed = []
        for e in range(E):
            quotient = ddf.op("div", Timed(o_rp.data.word_select(e, 32), 1), l_final)
            narrow = ddf.select(ddf.static(self.out_format == KvFormat.BF16), ddf.op("fp32_to_bf16", quotient),
                                ddf.op("fp32_to_fp16", quotient))
            narrowed.append((quotient, narrow))
        d_time = ddf.latency
        d_valid = ddf.at(ddf.input(final_issue), d_time)
        wide = Cat(*[ddf.at(q, d_time) for q, _ in narrowed])
        half = Cat(*[ddf.at(n, d_time)[:16] for _, n in narrowed])
        out_per_word = Mux(out32, P // 2 // E, P // E)          # pack steps a word
        pack = Signal(W)
        pack_n = Signal(range(P + 1))
        out_depth = 16
        m.submodules.out_fifo = out_fifo = fifo.SyncFIFOBuffered(width=W, depth=out_depth)
        packed_word = Mux(out32, Cat(pack[32 * E:], wide), Cat(pack[16 * E:], half))
        m.d.comb += [out_fifo.w_data.eq(packed_word), self.out.valid.eq(out_fifo.r_rdy),
                     self.out.payload.eq(out_fifo.r_data), out_fifo.r_en.eq(self.out.ready)]
        with m.If(d_valid):
            m.d.sync += [pack.eq(packed_word), pack_n.eq(pack_n + 1)]
            with m.If(pack_n == out_per_word - 1):
                m.d.sync += pack_n.eq(0)
                m.d.comb += out_fifo.w_en.eq(1)
        # pack steps in flight: never more than the queue's room holds
        in_flight_div = Signal(range(64 + P))
        m.d.sync += in_flight_div.eq(in_flight_div + final_issue - d_valid)
        words_ahead = Mux(out32, (in_flight_div + P // 2 // E) >> log2_exact(P // 2 // E, "fp32 words a chunk"),
                          (in_flight_div + P // E) >> log2_exact(P // E, "16-bit words a chunk"))
        room = out_fifo.level + words_ahead + 1 < out_depth

        # ---- the sequence ------------------------------------------------------------------------
        wait = Signal(range(64))
        m.d.comb += [self.job.ready.eq(0), self.released_bank.eq(job.b)]
        with m.FSM(name="epilogue") as fsm:
            with m.State("IDLE"):
                m.d.comb += self.job.ready.eq(1)
                with m.If(self.job.valid):
                    m.d.sync += [job.eq(self.job.payload), i_g.eq(0), i_grp.eq(0), issuing.eq(1)]
                    m.d.sync += [corr[g].eq(self.corr[Cat(Const(g, 4), self.job.payload.b)])
                                 for g in range(MAX_GROUP)]
                    m.next = "MERGE"
            with m.State("MERGE"):
                with m.If(issue):
                    m.d.sync += i_grp.eq(i_grp + 1)
                    with m.If(i_grp == row_groups - 1):
                        m.d.sync += [i_grp.eq(0), i_g.eq(i_g + 1)]
                        with m.If(i_g == G - 1):
                            m.d.sync += issuing.eq(0)
                with m.If(~issuing & ~issue & ~flushing & ~emit):
                    m.d.sync += wait.eq(drain)
                    m.next = "DRAIN"
            with m.State("DRAIN"):
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 0):
                    m.d.comb += self.released.eq(1)
                    m.d.sync += [final_g.eq(0), final_w.eq(0)]
                    with m.If(job.last):
                        m.next = "FINAL"
                    with m.Else():
                        m.next = "IDLE"
            with m.State("FINAL"):
                m.d.comb += [finishing.eq(1), final_issue.eq(room)]
                with m.If(room):
                    m.d.sync += final_w.eq(final_w + 1)
                    with m.If(final_w == (dim >> e_bits) - 1):
                        m.d.sync += [final_w.eq(0), final_g.eq(final_g + 1)]
                        with m.If(final_g == G - 1):
                            m.next = "IDLE"
        m.d.comb += self.idle.eq(fsm.ongoing("IDLE") & (in_flight_div == 0) & ~out_fifo.r_rdy & ~self.job.valid)
        return m
