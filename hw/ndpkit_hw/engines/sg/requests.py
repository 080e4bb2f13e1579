"""What the scatter-gather unit's stages share (:mod:`~ndpkit_hw.engines.sg.unit`): the
request and response layouts, the request checks (the unit's decode and the sg engine's
descriptor checks), and balanced reductions."""
from __future__ import annotations

import operator

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data

from ndpkit_spec.codes import AxiResp, ErrorCode
from ndpkit_spec.engines.sg import LINE
from ndpkit_hw.bus.axi import log2_exact

__all__ = ["MAX_OFFSETS", "COUNTER_WIDTH", "request_layout", "ResponseLayout", "request_error", "balanced",
           "popcount", "or_all", "axi_error_code"]

MAX_OFFSETS = LINE // 4
COUNTER_WIDTH = 48


def request_layout(addr_width: int) -> data.StructLayout:
    return data.StructLayout({
        "op": 2,                                    # ndpkit.engines.sg.golden.Op
        "size": 4,                                  # element bytes: 4 or 8 (row requests)
        "count": 5,                                 # elements, 1..64/size (row requests)
        "address": addr_width,                      # line address, or the row's address
        "offsets": data.ArrayLayout(16, MAX_OFFSETS),   # element offsets within the row
        "data": 8 * LINE,                           # line write / packed scatter data
    })


ResponseLayout = data.StructLayout({"op": 2, "error": 4, "data": 8 * LINE})


def request_error(m: Module, head, window_base, window_size, row_bytes: int):
    """A request's error code (0 = good) in the golden model's order: element size,
    count, alignment, window, offsets.  The unit and the sg engine (which checks
    descriptors before it forwards them) share it.

    The window's last row and last line starts are registered from ``window_*`` (held
    while requests run), so the window test is two compares of the address, not an
    adder before a compare."""
    W = len(head.address)
    is_row = head.op[1]
    size8 = head.size == 8
    max_count = Mux(size8, LINE // 8, LINE // 4)
    offset_limit = Mux(size8, row_bytes // 8, row_bytes // 4)
    window_end = window_base + window_size
    last_start = {}
    for name, span in (("row", row_bytes), ("line", LINE)):
        start, fits = Signal(W + 1, name=f"window_last_{name}"), Signal(name=f"window_fits_{name}")
        m.d.sync += [start.eq(window_end - span), fits.eq(window_size >= span)]
        last_start[name] = (start, fits)
    (last_row, row_fits), (last_line, line_fits) = last_start["row"], last_start["line"]
    in_window = ((head.address >= window_base) & Mux(is_row, row_fits & (head.address <= last_row),
                                                    line_fits & (head.address <= last_line)))
    bad_offset = Cat(*[(j < head.count) & (head.offsets[j] >= offset_limit) for j in range(MAX_OFFSETS)]).any()
    error = Signal(4)
    with m.If(is_row & (head.size != 4) & (head.size != 8)):
        m.d.comb += error.eq(ErrorCode.BAD_FIELD)
    with m.Elif(is_row & ((head.count == 0) | (head.count > max_count))):
        m.d.comb += error.eq(ErrorCode.BAD_FIELD)
    with m.Elif(Mux(is_row, head.address[:log2_exact(row_bytes, "row_bytes")], head.address[:6]) != 0):
        m.d.comb += error.eq(ErrorCode.UNALIGNED)
    with m.Elif(~in_window):
        m.d.comb += error.eq(ErrorCode.OUT_OF_WINDOW)
    with m.Elif(is_row & bad_offset):
        m.d.comb += error.eq(ErrorCode.BAD_INDEX)
    return error


def balanced(values, combine):
    """``values`` combined pairwise as a balanced tree (log depth, not a chain)."""
    while len(values) > 1:
        values = [combine(values[i], values[i + 1]) if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


def popcount(bits):
    """The number of set bits of ``bits``."""
    return balanced([bits[i] for i in range(len(bits))], operator.add)


def or_all(values):
    return balanced(values, operator.or_)


def axi_error_code(resp):
    """The error code of the worst AXI response seen (EXOKAY counts as OKAY)."""
    return Mux(resp == AxiResp.DECERR, ErrorCode.DECERR, Mux(resp == AxiResp.SLVERR, ErrorCode.SLVERR, 0))
