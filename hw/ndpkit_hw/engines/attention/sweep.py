"""The attention datapath's softmax sweep: per scored bank, ``corr = exp(m_old - m_new)``
per query head and the weights ``pk = exp(s - m_new)`` rounded to TF32."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.engines.attention import MAX_GROUP, SOFTMAX_BLOCK as BLOCK
from ndpkit_hw.arith.dataflow import Dataflow, Timed
from ndpkit_hw.engines.attention.epilogue import corr_address
from ndpkit_hw.engines.attention.rows import memory_ports, pass_count, register_file, serves

__all__ = ["SoftmaxSweep", "PK_BITS"]

#: a weight: p rounded to TF32, its top 19 bits
PK_BITS = 19


class SoftmaxSweep(wiring.Component):
    """An exp unit per unit of the score side (its query heads of each pass).

    A bank in ``scored`` is taken (``start`` names it): first each query head's
    ``corr``, then row by row, a row's passes together, each score's weight into the
    unit's weight memory at ``(bank * max_passes + pass) * 128 + row``
    (``pk_addr``/``pk_data``: every unit's weight there, a cycle later); ``swept``
    counts the bank's rows done, so the value side follows a row behind; ``done`` names
    the bank when its last weight is in (with ``pairs``, a pass a query head: unit 0
    sweeps, and unit 1's ``pk_data`` is unit 0's).  The scores and maxima come from the score
    side's read ports (``score_addr`` / ``score_data`` a cycle later, ``max_addr`` /
    ``m_new``, ``m_old`` the same cycle).

    A unit keeps its query heads' corrections in a register file at
    :func:`~ndpkit_hw.engines.attention.epilogue.corr_address` (the head's pass, the
    bank, the bank's generation, which flips as each of the bank's blocks ends), read
    at ``corr_addr`` (``corr_data``: every unit's, the same cycle).  The epilogue takes
    the bank's blocks in the same order and keeps the same generations, so a block's
    corrections stay readable until the bank's block after next is swept, past the
    block's fold: nothing is copied."""

    def __init__(self, *, units: int):
        self.units = units
        self.max_passes = PM = MAX_GROUP // units
        super().__init__({
            "scored": In(2),
            "bank_rows": In(data.ArrayLayout(range(BLOCK + 1), 2)),
            "start": Out(stream.Signature(1, always_ready=True)),
            "done": Out(stream.Signature(1, always_ready=True)),
            "score_addr": Out(range(2 * PM * BLOCK)), "score_data": In(data.ArrayLayout(32, units)),
            "max_addr": Out(range(2 * PM)),
            "m_new": In(data.ArrayLayout(32, units)), "m_old": In(data.ArrayLayout(32, units)),
            "corr_addr": In(range(4 * PM)), "corr_data": Out(data.ArrayLayout(32, units)),
            "swept": Out(data.ArrayLayout(range(BLOCK + 1), 2)),
            "pk_addr": In(range(2 * PM * BLOCK)), "pk_data": Out(data.ArrayLayout(PK_BITS, units)),
            "group": In(range(MAX_GROUP + 1)), "pairs": In(1),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        H, PM = self.units, self.max_passes
        passes = pass_count(m, self.group, H, self.pairs)
        sw_active, sw_b = self.busy, Signal()
        sw_j, sw_t = Signal(range(PM)), Signal(range(BLOCK + 1))     # sw_t == 0: corr
        sw_issue, sw_end = Signal(), Signal()
        bank_rows, swept = self.bank_rows, self.swept
        m.d.comb += sw_end.eq(sw_issue & (sw_t == bank_rows[sw_b]) & (sw_j == passes - 1))
        m.d.comb += [self.start.valid.eq(~sw_active & self.scored.bit_select(sw_b, 1)), self.start.payload.eq(sw_b)]
        with m.If(~sw_active):
            with m.If(self.start.valid):
                m.d.sync += [sw_active.eq(1), sw_j.eq(0), sw_t.eq(0), swept[sw_b].eq(0)]
        with m.Else():
            m.d.comb += sw_issue.eq(1)
            m.d.sync += sw_j.eq(sw_j + 1)
            with m.If(sw_j == passes - 1):
                m.d.sync += [sw_j.eq(0), sw_t.eq(sw_t + 1)]
                with m.If(sw_t == bank_rows[sw_b]):
                    m.d.sync += sw_active.eq(0)
        generation = Signal(2)             # each bank's, flipped as its block ends
        with m.If(sw_end):
            m.d.sync += [sw_b.eq(~sw_b), generation.eq(generation ^ (1 << sw_b))]
        is_corr = sw_t == 0
        m.d.comb += [self.score_addr.eq((sw_b * PM + sw_j) * BLOCK + (sw_t - 1)), self.max_addr.eq(Cat(sw_j, sw_b))]
        pk_read = []
        for h in range(H):
            xdf = Dataflow(m, f"softmax{h}", platform)
            arg = Timed(Mux(xdf.at(xdf.input(is_corr), 1), xdf.at(xdf.input(self.m_old[h]), 1), self.score_data[h]), 1)
            e = xdf.op("exp", xdf.sub(arg, Timed(xdf.at(xdf.input(self.m_new[h]), 1), 1)))
            # pk: p rounded to TF32 (RNE at bit 13; p is +0..1 or NaN), its top 19 bits
            pk_value = Signal(PK_BITS, name=f"pk{h}")
            p_nan = (e.value[23:31] == 0xFF) & (e.value[:23] != 0)
            m.d.sync += pk_value.eq(Mux(p_nan, 0x7FC00000 >> 13, (e.value + 0xFFF + e.value[13])[13:32]))
            x_time = e.time + 1
            x_at = {name: xdf.at(xdf.input(v), x_time) for name, v in
                    (("valid", sw_issue), ("corr", is_corr), ("j", sw_j), ("t", sw_t - 1), ("b", sw_b),
                     ("end", sw_end), ("generation", generation.bit_select(sw_b, 1)))}
            wp, rp = memory_ports(m, f"pk_mem{h}", PK_BITS, 2 * PM * BLOCK)
            m.d.comb += [wp.addr.eq((x_at["b"] * PM + x_at["j"]) * BLOCK + x_at["t"]), wp.data.eq(pk_value),
                         wp.en.eq(x_at["valid"] & ~x_at["corr"] & serves(x_at["j"], h, self.group, H, self.pairs)),
                         rp.addr.eq(self.pk_addr)]
            # (with pairs, unit 1 weighs its words of unit 0's head with unit 0's weights)
            pk_read.append(rp.data)
            m.d.comb += self.pk_data[h].eq(Mux(self.pairs, pk_read[0], rp.data) if h else rp.data)
            # this unit's query heads' corrections (a distributed RAM, not a register a head and bank)
            corr_wp, corr_rp = register_file(m, f"corr{h}", 32, 4 * PM)
            m.d.comb += [corr_wp.addr.eq(corr_address(x_at["j"], x_at["b"], x_at["generation"], H)),
                         corr_wp.data.eq(xdf.at(e, x_time)), corr_wp.en.eq(x_at["valid"] & x_at["corr"]),
                         corr_rp.addr.eq(self.corr_addr), self.corr_data[h].eq(corr_rp.data)]
            if h == 0:
                with m.If(x_at["valid"] & ~x_at["corr"] & (x_at["j"] == passes - 1)):
                    m.d.sync += swept[x_at["b"]].eq(x_at["t"] + 1)
                m.d.comb += [self.done.valid.eq(x_at["end"]), self.done.payload.eq(x_at["b"])]
        return m
