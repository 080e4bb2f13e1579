"""The attention datapath's q loader: a KV head's group of q rows, one element a cycle,
rounded to the KV format, into one of two banks (the next head's group loads while the
score side reads this one's)."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ndpkit_spec.engines.attention import MAX_GROUP, KvFormat
from ndpkit_hw.arith.dataflow import Dataflow
from ndpkit_hw.bus.axi import log2_exact
from ndpkit_hw.engines.attention.epilogue import MAX_DIM

__all__ = ["QueryBanks"]

class QueryBanks(wiring.Component):
    """``q``: bus words of the group's rows (``group`` rows of d = 128 or 64 elements in
    ``q_format``, row after row, a row's last word padded); each element widened to fp32
    and rounded to ``kv_format``.  Query head ``g`` goes to unit ``g mod units`` (pass
    ``g // units``), element ``i`` to lane ``i mod columns`` of the row's column group
    ``i // columns``: bank ``b`` holds at ``((b * max_passes + pass) * groups + i //
    columns)`` a unit's ``columns`` elements.

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
            "head_dim128": In(1), "group": In(range(MAX_GROUP + 1)), "q_format": In(2), "kv_format": In(2),
            "full": In(2), "loaded": Out(2), "busy": Out(1),
            "read_addr": In(range(self.depth)), "read_data": Out(data.ArrayLayout(16 * columns, units))})

    def elaborate(self, platform):
        m = Module()
        W, P, C, H, PM, GROUPS = (self.data_width, self.elements, self.columns, self.units, self.max_passes,
                                  self.groups)
        h_bits = log2_exact(H, "units")
        c_bits = log2_exact(C, "columns")
        G = self.group
        bank = Signal()                    # the bank being filled
        q32 = self.q_format == KvFormat.FP32
        per_word = Mux(q32, P // 2, P)
        word = Signal(W)
        held = self.busy                   # a word is being split
        k = Signal(range(P))               # its element being sent
        g, i = Signal(range(MAX_GROUP)), Signal(range(MAX_DIM))
        dim = Mux(self.head_dim128, MAX_DIM, MAX_DIM // 2)
        m.d.comb += self.q.ready.eq(~held & ~self.full.bit_select(bank, 1))
        with m.If(self.q.valid & self.q.ready):
            m.d.sync += [word.eq(self.q.payload), held.eq(1), k.eq(0)]
        send = Signal()
        last = Signal()
        m.d.comb += [send.eq(held), last.eq((g == G - 1) & (i == dim - 1))]
        with m.If(send):
            m.d.sync += [k.eq(k + 1), i.eq(i + 1)]
            with m.If(k == per_word - 1):
                m.d.sync += held.eq(0)
            with m.If(i == dim - 1):
                m.d.sync += [i.eq(0), g.eq(g + 1)]
            with m.If(last):
                m.d.sync += [g.eq(0), bank.eq(~bank), held.eq(0)]
        # the element widened to fp32, then rounded to the KV format, through a timed dataflow
        qdf = Dataflow(m, "qload", platform)
        raw32 = qdf.input(word.word_select(k[:log2_exact(P // 2, "fp32 elements a word")], 32))
        raw16 = qdf.input(word.word_select(k, 16))
        wide16 = qdf.select(qdf.static(self.q_format == KvFormat.BF16), qdf.op("bf16_to_fp32", raw16),
                            qdf.op("fp16_to_fp32", raw16))
        wide = qdf.select(qdf.static(q32), raw32, wide16)
        bf16 = self.kv_format == KvFormat.BF16
        rounded = qdf.select(qdf.static(bf16), qdf.op("fp32_to_bf16", wide), qdf.op("fp32_to_fp16", wide))
        at = qdf.latency
        late = {name: qdf.at(qdf.input(v), at) for name, v in
                (("valid", send), ("g", g), ("i", i), ("bank", bank), ("last", send & last))}
        for h in range(H):
            mem = Memory(shape=16 * C, depth=self.depth, init=[])
            m.submodules[f"q_mem{h}"] = mem
            wp, rp = mem.write_port(granularity=16), mem.read_port()
            unit = late["g"][:h_bits] if H > 1 else Const(0, 1)
            m.d.comb += [wp.addr.eq(((late["bank"] * PM + (late["g"] >> h_bits)) * GROUPS) + (late["i"] >> c_bits)),
                         wp.data.eq(Cat(*[qdf.at(rounded, at)[:16] for _ in range(C)])),
                         wp.en.eq(Mux(late["valid"] & (unit == h), 1 << late["i"][:c_bits], 0)),
                         rp.addr.eq(self.read_addr), self.read_data[h].eq(rp.data)]
        m.d.comb += self.loaded.eq(Mux(late["last"], 1 << late["bank"], 0))
        return m
