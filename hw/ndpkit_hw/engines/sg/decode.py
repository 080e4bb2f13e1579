"""The sg unit's request decode (its stage 2's first half): two register stages from a
request to its runs, so the issue stage sends a run a cycle with no arithmetic of its own.

A run is a stretch of consecutive elements in one 64 B column: one AXI beat serves it.
Stage A registers the request's verdict (:func:`~.requests.request_error`) and each
element's column, lane and whether it starts a run; stage B each element's run (how
many runs start among elements 1..j: a count, not a chain of adders), the run count and
what a write beat takes from each element.  Each stage holds one request, so requests
still pass back to back."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.engines.sg import LINE
from ndpkit_hw.engines.sg.requests import MAX_OFFSETS, popcount, request_error, request_layout

__all__ = ["RequestDecoder", "column_bits", "decoded_layout"]


def column_bits(row_bytes: int) -> int:
    """Bits of a column number within a row of ``row_bytes``."""
    return max(1, (row_bytes // LINE - 1).bit_length())


def decoded_layout(addr_width: int, row_bytes: int) -> data.StructLayout:
    """A decoded request: the request (``head``), its error code, per element its
    column in the row, its byte lane in the column and its run; the elements that start
    a run (``starts``), the number of runs; ``live`` elements write (a row element unless a
    later one of its run has its offset; every word of a line write), each into the
    32-bit slots ``slots[j]`` marks."""
    col_bits = column_bits(row_bytes)
    return data.StructLayout({
        "head": request_layout(addr_width), "error": 4,
        "column": data.ArrayLayout(col_bits, MAX_OFFSETS), "lane": data.ArrayLayout(6, MAX_OFFSETS),
        "run": data.ArrayLayout(4, MAX_OFFSETS), "starts": MAX_OFFSETS, "runs": 5,
        "live": MAX_OFFSETS, "slots": data.ArrayLayout(MAX_OFFSETS, MAX_OFFSETS)})


class RequestDecoder(wiring.Component):
    """``requests`` in, ``decoded`` out (:func:`decoded_layout`) two cycles later at the
    earliest; ``window_*``: the memory requests may touch (held while they run)."""

    def __init__(self, *, addr_width: int, row_bytes: int):
        self.addr_width, self.row_bytes = addr_width, row_bytes
        self.layout = decoded_layout(addr_width, row_bytes)
        super().__init__({"requests": In(stream.Signature(request_layout(addr_width))),
                          "decoded": Out(stream.Signature(self.layout)),
                          "window_base": In(addr_width), "window_size": In(addr_width + 1)})

    def elaborate(self, platform):
        m = Module()
        col_bits = column_bits(self.row_bytes)
        raw, out = self.requests.payload, self.decoded
        a_valid, b_valid = Signal(name="decode_a_valid"), Signal(name="decode_b_valid")
        b_load = a_valid & (~b_valid | out.ready)
        a_load = self.requests.valid & self.requests.ready
        m.d.comb += [self.requests.ready.eq(~a_valid | b_load), out.valid.eq(b_valid)]

        # ---- stage A: the verdict, each element's column and lane, the runs' starts ----
        a_head, a_error = Signal(request_layout(self.addr_width), name="a_head"), Signal(4, name="a_error")
        a_column = [Signal(col_bits, name=f"a_column{j}") for j in range(MAX_OFFSETS)]
        a_lane = [Signal(6, name=f"a_lane{j}") for j in range(MAX_OFFSETS)]
        a_starts = Signal(MAX_OFFSETS, name="a_starts")
        # a_same[j][k - j - 1]: elements j < k have one offset (a scatter's later one wins)
        a_same = [Signal(MAX_OFFSETS - 1 - j, name=f"a_same{j}") for j in range(MAX_OFFSETS)]
        raw_error = request_error(m, raw, self.window_base, self.window_size, self.row_bytes)
        with m.If(a_load):
            bytes_at = [Mux(raw.size == 8, raw.offsets[j] << 3, raw.offsets[j] << 2) for j in range(MAX_OFFSETS)]
            m.d.sync += [a_valid.eq(1), a_head.eq(raw), a_error.eq(raw_error)]
            for j in range(MAX_OFFSETS):
                m.d.sync += [a_column[j].eq(bytes_at[j][6:]), a_lane[j].eq(bytes_at[j][:6]),
                             a_starts[j].eq(1 if j == 0 else bytes_at[j][6:] != bytes_at[j - 1][6:])]
                if j < MAX_OFFSETS - 1:
                    m.d.sync += a_same[j].eq(Cat(*[raw.offsets[j] == raw.offsets[k]
                                                   for k in range(j + 1, MAX_OFFSETS)]))
        with m.Elif(b_load):
            m.d.sync += a_valid.eq(0)

        # ---- stage B: each element's run, the run count, the write beat's sources ----
        b = Signal(self.layout, name="decoded")
        m.d.comb += out.payload.eq(b)
        with m.If(b_load):
            in_count = Cat(*[j < a_head.count for j in range(MAX_OFFSETS)])
            a_row, a_size8 = a_head.op[1], a_head.size == 8
            m.d.sync += [b_valid.eq(1), b.head.eq(a_head), b.error.eq(a_error), b.starts.eq(a_starts),
                         b.runs.eq(Mux(a_row, popcount(a_starts & in_count | 1), 1))]
            for j in range(MAX_OFFSETS):
                # a later element k of the same run (no run starts in (j, k]) with the same offset
                overridden = Cat(*[a_same[j][k - j - 1] & in_count[k] & (a_starts[j + 1:k + 1] == 0)
                                   for k in range(j + 1, MAX_OFFSETS)]).any() if j < MAX_OFFSETS - 1 else 0
                m.d.sync += [b.column[j].eq(a_column[j]), b.lane[j].eq(a_lane[j]),
                             b.run[j].eq(Mux(a_row, popcount(a_starts[1:j + 1]), 0) if j else 0),
                             b.live[j].eq(Mux(a_row, in_count[j] & ~overridden, 1)),
                             b.slots[j].eq(Mux(a_row, Mux(a_size8,
                                                          Const(3, MAX_OFFSETS) << Cat(Const(0, 1), a_lane[j][3:]),
                                                          Const(1, MAX_OFFSETS) << a_lane[j][2:]),
                                               1 << j))]
        with m.Elif(out.valid & out.ready):
            m.d.sync += b_valid.eq(0)
        return m
