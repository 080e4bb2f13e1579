"""Where the graph engine's result words go: to the output writer, held on chip until
the first edge pass's columns are judged, or into the source window."""
from __future__ import annotations

from amaranth.hdl import Const, Module, Mux
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["ResultWords"]


class ResultWords(wiring.Component):
    """The word packer's result words (``results``) and the window reader's words
    (``loaded``) to the writer (``out``) and the source window's load (``window``).

    - ``into_window`` (PageRank's contributions pass filling the window): the results
      go to the window instead of the reader's words, none to the writer.
    - Otherwise the results go to the writer through a queue of ``depth`` words (block
      RAM; 0: straight through, a build whose passes are never held).  While
      ``holding`` (the first edge pass, its columns not yet judged) none leaves the
      queue; with ``drop`` (a bad column: the results are of a graph the command
      refuses) the queue empties without writing.  A pass on the edge lanes has at most
      the window's vertices as rows, so ``depth`` of the window's words never fills.
    - ``left``: result words not yet handed on (the pass is not over while any are)."""

    def __init__(self, data_width: int, depth: int):
        self.data_width, self.depth = data_width, depth
        words = data.StructLayout({"data": data_width, "last": 1})
        super().__init__({
            "results": In(stream.Signature(data.StructLayout({"data": data_width, "strb": data_width // 8}))),
            "loaded": In(stream.Signature(words)),
            "out": Out(stream.Signature(data.StructLayout({"data": data_width, "strb": data_width // 8}))),
            "window": Out(stream.Signature(words)),
            "into_window": In(1),
            "holding": In(1),
            "drop": In(1),
            "left": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        results, out = self.results, self.out
        m.d.comb += [self.window.valid.eq(Mux(self.into_window, results.valid, self.loaded.valid)),
                     self.window.payload.data.eq(Mux(self.into_window, results.payload.data,
                                                     self.loaded.payload.data)),
                     self.loaded.ready.eq(self.window.ready)]
        if self.depth == 0:
            m.d.comb += [out.valid.eq(results.valid & ~self.into_window), out.payload.eq(results.payload),
                         results.ready.eq(Mux(self.into_window, self.window.ready, out.ready)),
                         self.left.eq(Const(0))]
            return m
        m.submodules.queue = queue = fifo.SyncFIFOBuffered(width=self.data_width, depth=self.depth)
        m.d.comb += [queue.w_en.eq(results.valid & ~self.into_window), queue.w_data.eq(results.payload.data),
                     results.ready.eq(Mux(self.into_window, self.window.ready, queue.w_rdy)),
                     out.valid.eq(queue.r_rdy & ~self.holding), out.payload.data.eq(queue.r_data),
                     out.payload.strb.eq(-1),
                     queue.r_en.eq(Mux(self.drop, 1, out.ready & ~self.holding)),
                     self.left.eq((queue.level != 0) | results.valid)]
        return m
