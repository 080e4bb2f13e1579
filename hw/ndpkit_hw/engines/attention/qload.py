"""The attention datapath's q loader: a KV head's group of q rows, one element a cycle,
rounded to the KV format and turned into its row's block-fixed integers, into one of two
banks (the next head's group loads while the score side reads this one's)."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ndpkit_spec.blockfloat import Q_BITS
from ndpkit_spec.engines.attention import MAX_GROUP, KvFormat
from ndpkit_hw.arith.blockfloat import (EXP_SHAPE, QLane, decompose, field_exponent, q_lane, row_field,
                                        row_maximum, to_block_fixed)
from ndpkit_hw.arith.dataflow import Dataflow
from ndpkit_hw.arith.fp_common import Pipeline
from ndpkit_hw.bus.axi import log2_exact
from ndpkit_hw.engines.attention.epilogue import MAX_DIM

__all__ = ["QueryBanks", "q_row_layout"]


def q_row_layout(columns: int) -> data.StructLayout:
    """A q bank word: a unit's ``columns`` elements of a row's column group and the row's
    exponent (the block-fixed integers' shared one)."""
    return data.StructLayout({"q": data.ArrayLayout(QLane, columns), "exp": EXP_SHAPE})


class QueryBanks(wiring.Component):
    """``q``: bus words of the group's rows (``group`` rows of d = 128 or 64 elements in
    ``q_format``, row after row, a row's last word padded); each element widened to fp32
    and rounded to ``kv_format`` into a staging row (two of them) while the row's largest
    exponent is taken, then turned into its block-fixed integer (:data:`Q_BITS`,
    :func:`~ndpkit.arith.blockfloat.block_fixed`; one converter, an element a cycle).
    Query head ``g`` goes to unit ``g mod units`` (pass ``g // units``), element ``i``
    to lane ``i mod columns`` of the row's column group ``i // columns``: bank ``b``
    holds at ``((b * max_passes + pass) * groups + i // columns)`` a unit's ``columns``
    elements with the row's exponent (:func:`q_row_layout`).  With ``pairs`` (held; two
    units), head ``g`` is pass ``g`` and column group ``k`` goes to unit ``k mod 2`` at
    ``k // 2``, the row's exponent to both units.

    ``full``: the banks the score side has not finished with (a bank is filled only when
    it is not); ``loaded``: the bank whose group has just gone in (a pulse);
    ``read_addr``/``read_data``: every unit's row of columns at that address, a cycle
    later; ``busy``: a word is still being taken apart."""

    def __init__(self, *, data_width: int, columns: int, units: int):
        self.data_width, self.columns, self.units = data_width, columns, units
        self.elements = data_width // 16
        self.max_passes = MAX_GROUP // units
        self.groups = MAX_DIM // columns
        self.depth = 2 * self.max_passes * self.groups
        super().__init__({
            "q": In(stream.Signature(data_width)),
            "head_dim128": In(1), "group": In(range(MAX_GROUP + 1)), "pairs": In(1), "q_format": In(2),
            "kv_format": In(2),
            "full": In(2), "loaded": Out(2), "busy": Out(1),
            "read_addr": In(range(self.depth)), "read_data": Out(data.ArrayLayout(q_row_layout(columns), units))})

    def elaborate(self, platform):
        m = Module()
        W, P, C, H, PM, GROUPS = (self.data_width, self.elements, self.columns, self.units, self.max_passes,
                                  self.groups)
        h_bits = log2_exact(H, "units")
        c_bits = log2_exact(C, "columns")
        G = self.group
        bank = Signal()                    # the bank being filled
        # the formats' tests registered (the fields are held for a command, and its first q word
        # comes long after it starts): no compare in front of the element selects
        q32, q_bf16, bf16 = Signal(name="q_fp32"), Signal(name="q_bf16"), Signal(name="kv_bf16")
        m.d.sync += [q32.eq(self.q_format == KvFormat.FP32), q_bf16.eq(self.q_format == KvFormat.BF16),
                     bf16.eq(self.kv_format == KvFormat.BF16)]
        per_word = Mux(q32, P // 2, P)
        word = Signal(W)
        held = Signal()                    # a word is being split
        k = Signal(range(P))               # its element being sent
        g, i = Signal(range(MAX_GROUP)), Signal(range(MAX_DIM))
        dim = Mux(self.head_dim128, MAX_DIM, MAX_DIM // 2)
        with m.If(self.q.valid & self.q.ready):
            m.d.sync += [word.eq(self.q.payload), held.eq(1), k.eq(0)]
        # a row goes into a staging row whose last conversion has been read
        send_parity = Signal()
        staging = Signal(2)                # staging rows written and not yet read back
        send = Signal()
        last = Signal()
        m.d.comb += [send.eq(held & ~staging.bit_select(send_parity, 1)), last.eq((g == G - 1) & (i == dim - 1))]
        m.d.comb += self.q.ready.eq(~held & ~self.full.bit_select(bank, 1))
        with m.If(send):
            m.d.sync += [k.eq(k + 1), i.eq(i + 1)]
            with m.If(k == per_word - 1):
                m.d.sync += held.eq(0)
            with m.If(i == dim - 1):
                m.d.sync += [i.eq(0), g.eq(g + 1), send_parity.eq(~send_parity)]
            with m.If(last):
                m.d.sync += [g.eq(0), bank.eq(~bank), held.eq(0)]
        # the element widened to fp32, then rounded to the KV format, through a timed dataflow
        qdf = Dataflow(m, "qload", platform)
        # (one 16-bit select serves both: an fp32 element's low half at 2k, its high half an
        # odd half-word: a 32:1 and a 16:1 select of 16 bits, not a 32:1 and a 16:1 of 32)
        k32 = k[:log2_exact(P // 2, "fp32 elements a word")]
        low = word.word_select(Mux(q32, Cat(Const(0, 1), k32), k), 16)
        raw16 = qdf.input(low)
        raw32 = qdf.input(Cat(low, word.word_select(k32, 32)[16:]))
        wide16 = qdf.select(qdf.static(q_bf16), qdf.op("bf16_to_fp32", raw16),
                            qdf.op("fp16_to_fp32", raw16))
        wide = qdf.select(qdf.static(q32), raw32, wide16)
        rounded = qdf.select(qdf.static(bf16), qdf.op("fp32_to_bf16", wide), qdf.op("fp32_to_fp16", wide))
        at = qdf.latency
        late = {name: qdf.at(qdf.input(v), at) for name, v in
                (("valid", send), ("g", g), ("i", i), ("bank", bank), ("last", send & last),
                 ("parity", send_parity))}
        element = qdf.at(rounded, at)[:16]

        # the staging rows, and each row's largest exponent as it goes in
        stage = Memory(shape=16, depth=2 * MAX_DIM, init=[], attrs={"ram_style": "distributed"})
        m.submodules.staging = stage
        stage_wp, stage_rp = stage.write_port(), stage.read_port()
        m.d.comb += [stage_wp.addr.eq(Cat(late["i"], late["parity"])), stage_wp.data.eq(element),
                     stage_wp.en.eq(late["valid"])]
        row_max = row_maximum(m, row_field(m, decompose(m, element, bf16, "stage"), "stage"), late["i"] == 0,
                              late["valid"], "stage")
        Job = data.StructLayout({"parity": 1, "g": range(MAX_GROUP), "bank": 1, "field": 8, "last": 1})
        jobs = fifo.SyncFIFOBuffered(width=Job.size, depth=2)
        m.submodules.jobs = jobs
        row_done = late["valid"] & (late["i"] == dim - 1)
        m.d.comb += [jobs.w_en.eq(row_done),
                     jobs.w_data.eq(Cat(late["parity"], late["g"], late["bank"], row_max, late["last"]))]

        # the converter: a staged row read back an element a cycle, each turned into its
        # integer against the row's exponent
        job = data.View(Job, jobs.r_data)
        ci = Signal(range(MAX_DIM))
        reading = Signal()
        m.d.comb += [reading.eq(jobs.r_rdy), stage_rp.addr.eq(Cat(ci, job.parity))]
        read_done = reading & (ci == dim - 1)
        m.d.comb += jobs.r_en.eq(read_done)
        with m.If(reading):
            m.d.sync += ci.eq(Mux(read_done, 0, ci + 1))
        set_staging = Signal(2)
        clear_staging = Signal(2)
        m.d.comb += [set_staging.eq(Mux(row_done, 1 << late["parity"], 0)),
                     clear_staging.eq(Mux(read_done, 1 << job.parity, 0))]
        m.d.sync += staging.eq((staging & ~clear_staging) | set_staging)
        conv = Pipeline(m, reading, "qconv")
        # the row's exponent (its largest field less the format's bias) for the bank
        row_exp = Signal(EXP_SHAPE)
        m.d.comb += row_exp.eq(field_exponent(job.field, bf16))
        g_c, i_c, bank_c, field_c, exp_c, end_c, last_c = conv.stage(job.g, ci, job.bank, job.field, row_exp,
                                                                     read_done, job.last & read_done)
        fixed, (g_c, i_c, bank_c, exp_c, end_c, last_c) = to_block_fixed(
            m, conv, decompose(m, stage_rp.data, bf16, "conv"), field_c, Q_BITS, bf16,
            carry=(g_c, i_c, bank_c, exp_c, end_c, last_c))
        lane = q_lane(m, fixed)
        lane_bits = QLane.size
        # a column group's lanes gathered in a register, written as one word (no per-lane
        # write enables: block RAM's byte enables would spread a 22-bit lane over three
        # 9-bit bytes, six RAMs where five hold the word)
        gathered = Signal(lane_bits * C)
        with m.If(conv.valid):
            m.d.sync += gathered.word_select(i_c[:c_bits], lane_bits).eq(lane)
        # (pairs: head g in pass g, its even column groups in unit 0's lanes and its odd
        # ones in unit 1's, at the pair's index; its exponent to both units)
        row_at = Signal(range(2 * PM))
        m.d.comb += row_at.eq(bank_c * PM + Mux(self.pairs, g_c, g_c >> h_bits))
        column_group = i_c >> c_bits
        put = Pipeline(m, conv.valid & (i_c[:c_bits] == C - 1), "qput")
        addr_w, row_w, unit_w, end_w, last_w, bank_w, exp_w = put.stage(
            (row_at * GROUPS) + Mux(self.pairs, column_group >> 1, column_group), row_at,
            Mux(self.pairs, column_group[0], g_c[:h_bits]) if H > 1 else Const(0, 1), end_c, last_c, bank_c, exp_c)
        for h in range(H):
            # the lanes in block RAM (16 of 22 bits: five 72-bit RAMs), the rows' exponents
            # beside them in a small memory read with the same timing
            mem = Memory(shape=lane_bits * C, depth=self.depth, init=[])
            exps = Memory(shape=EXP_SHAPE, depth=2 * PM, init=[], attrs={"ram_style": "distributed"})
            m.submodules[f"q_mem{h}"], m.submodules[f"q_exp{h}"] = mem, exps
            wp, rp = mem.write_port(), mem.read_port()
            exp_wp, exp_rp = exps.write_port(), exps.read_port()
            write = put.valid & (unit_w == h)
            m.d.comb += [wp.addr.eq(addr_w), wp.data.eq(gathered), wp.en.eq(write),
                         exp_wp.addr.eq(row_w), exp_wp.data.eq(exp_w),
                         exp_wp.en.eq(put.valid & end_w & ((unit_w == h) | self.pairs)),
                         rp.addr.eq(self.read_addr), exp_rp.addr.eq(self.read_addr >> log2_exact(GROUPS, "groups")),
                         self.read_data[h].q.eq(rp.data), self.read_data[h].exp.eq(exp_rp.data)]
        m.d.comb += self.loaded.eq(Mux(put.valid & last_w, 1 << bank_w, 0))
        # rows read back whose last integer is not yet written
        converting = Signal()
        with m.If(read_done):
            m.d.sync += converting.eq(1)
        with m.Elif(put.valid & end_w):
            m.d.sync += converting.eq(0)
        # (a queued row's staging bit is set until it is read back)
        m.d.comb += self.busy.eq(held | (staging != 0) | converting)
        return m
