"""The source-value cache: ``lines`` lines of 16 values (4 KiB at 64 lines), direct
mapped by vertex id: entry ``u mod 16·lines``, tag ``u / 16·lines``, a valid bit per
entry.

A lookup (``u``) answers in the same cycle (``hit``, ``value``).  A fill writes one
value (``whole`` low: Piccolo mode caches only the value the reducer took from a
gather response — fine-grained) or a whole 64-byte line (``whole`` high: baseline
mode's line cache), from ``fill_line`` (the value at its lane, or the line).
``clear`` empties it (every pass: the source array changes between passes).  With
``lines = 0`` there is no cache: nothing hits.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ndpkit_spec.engines.graph import MAX_VERTICES
from ndpkit_spec.engines.sg import LINE
from ndpkit_hw.bus.axi import log2_exact

__all__ = ["SourceCache"]


class SourceCache(wiring.Component):
    u: In(24)
    hit: Out(1)
    value: Out(32)
    fill: In(1)
    fill_u: In(24)
    fill_line: In(8 * LINE)
    whole: In(1)
    clear: In(1)

    def __init__(self, lines: int = 64):
        if lines < 0 or lines & (lines - 1) or 16 * lines > MAX_VERTICES:
            raise ValueError(f"graph: cache_lines must be 0 or a power of two up to {MAX_VERTICES // 16}, "
                             f"not {lines}")
        self.lines = lines
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        if not self.lines:
            return m
        lines = self.lines
        index_bits = log2_exact(16 * lines, "cache entries")
        tag_bits = 24 - index_bits
        u, fill_u = self.u, self.fill_u
        m.submodules.data = cache_data = Memory(shape=8 * LINE, depth=lines, init=[])
        m.submodules.tags = cache_tags = Memory(shape=16 * tag_bits, depth=lines, init=[])
        data_read, tags_read = cache_data.read_port(domain="comb"), cache_tags.read_port(domain="comb")
        data_write, tags_write = cache_data.write_port(granularity=32), cache_tags.write_port(granularity=tag_bits)
        valid = Signal(16 * lines)
        m.d.comb += [data_read.addr.eq(u[4:index_bits]), tags_read.addr.eq(u[4:index_bits]),
                     self.value.eq(data_read.data.word_select(u[:4], 32)),
                     self.hit.eq(valid.bit_select(u[:index_bits], 1) &
                                 (tags_read.data.word_select(u[:4], tag_bits) == u[index_bits:]))]
        lanes = Mux(self.fill, Mux(self.whole, 0xFFFF, Const(1, 16) << fill_u[:4]), 0)
        m.d.comb += [data_write.addr.eq(fill_u[4:index_bits]), tags_write.addr.eq(fill_u[4:index_bits]),
                     data_write.data.eq(self.fill_line), tags_write.data.eq(Cat(*[fill_u[index_bits:]] * 16)),
                     data_write.en.eq(lanes), tags_write.en.eq(lanes)]
        # the valid bits a fill sets, decoded per line and per lane and ANDed: a
        # variable-offset write of one bit of 1024 became a ten-stage shifter of the fill's
        # vertex id (19 logic levels in the 512-bit engine)
        line_hit = Signal(lines)
        lane_hit = Signal(16)
        m.d.comb += [line_hit.eq(Cat(fill_u[4:index_bits] == i for i in range(lines))),
                     lane_hit.eq(Cat(self.whole | (fill_u[:4] == k) for k in range(16)))]
        for i in range(lines):
            for k in range(16):
                with m.If(self.clear):
                    m.d.sync += valid[16 * i + k].eq(0)
                with m.Elif(self.fill & line_hit[i] & lane_hit[k]):
                    m.d.sync += valid[16 * i + k].eq(1)
        return m
