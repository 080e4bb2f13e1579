"""The source window: the values of the first ``vertices`` vertices on chip.

Before each edge pass the engine streams the source array's first ``count`` values
(whole bus words, full bursts) into ``load``; the window writes them word by word
(16 values a word at 512 bits) into one memory of ``vertices / lanes`` words.  In the
pass, every edge goes through one register stage: the memory is read with the edge's
source vertex as it enters, and the edge leaves with ``hit`` (its source is below
``count``) and, on a hit, ``value`` — the source value with no request to the unit —
and the value's byte ``address`` in the source array at ``base`` (for the collector's
requests, computed here so that its adder is a stage before the collector's compares).
So an edge's source costs a memory read instead of a gather, and the memory sees
only the sequential load (the tiles of Serpens and ThunderGP hold a window of source
values on chip the same way).

The stage also registers the source-value cache's answer for the entering edge
(``cache_hit``, ``cache_value``, looked up with the edge's source as it enters): an edge
leaves with ``hit`` when its source is in the window or the cache, so the collector
behind it decides from registers.  (A fill in the cycle of the lookup is not seen: the
edge then fetches a value the cache would have had, the same value.)

With ``read_lanes`` (the edge lanes, :mod:`~ndpkit_hw.engines.graph.lanes`) the memory has
a read port a lane, in copies of two ports (the single-edge path's read and the load share
the first copy's first port): ``lane_u`` (read with ``lane_en``) answers on ``lane_value``
the cycle after, one source value a lane.

``start`` restarts the load at word 0 (every pass: the source array changes between
passes); ``loaded`` counts the words written.  With ``vertices = 0`` there is no
memory: nothing hits and the edges pass through the register stage.
"""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ndpkit_spec.engines.graph import MAX_VERTICES
from ndpkit_hw.engines.graph.edges import EdgeLayout

__all__ = ["SourceWindow", "WindowedEdge", "windowed_queue"]

#: an edge with its source's window lookup
WindowedEdge = data.StructLayout({"edge": EdgeLayout, "hit": 1, "value": 32, "address": 32})


def windowed_queue(width: int) -> fifo.SyncFIFOBuffered:
    """The queue between the window's stage and the collector: its output and its room
    from registers, and an edge a cycle through it (a buffered queue of two passes one
    every other cycle, so it holds three)."""
    return fifo.SyncFIFOBuffered(width=width, depth=3)


class SourceWindow(wiring.Component):
    def __init__(self, vertices: int, data_width: int = 512, read_lanes: int = 0):
        self.lanes = data_width // 32
        if read_lanes and not vertices:
            raise ValueError(f"graph: edge_lanes={read_lanes} read the source window: with window_vertices=0 "
                             "pass edge_lanes=1")
        self.read_lanes = read_lanes
        if vertices and (vertices & (vertices - 1) or not self.lanes <= vertices <= MAX_VERTICES):
            raise ValueError(f"graph: window_vertices must be 0 or a power of two from {self.lanes} to "
                             f"{MAX_VERTICES}, not {vertices}")
        self.vertices = vertices
        super().__init__({
            "load": In(stream.Signature(data.StructLayout({"data": data_width, "last": 1}))),
            "start": In(1),
            "count": In(range(MAX_VERTICES + 1)),     # the pass's window: min(window, n)
            "loaded": Out(range(max(1, vertices // self.lanes) + 1)),
            "edge": In(stream.Signature(EdgeLayout)),
            "cache_hit": In(1), "cache_value": In(32),   # the cache's answer for the entering edge
            "base": In(32),                           # the source array's byte address
            "out": Out(stream.Signature(WindowedEdge)),
            "lane_u": In(data.ArrayLayout(32, max(1, read_lanes))), "lane_en": In(1),
            "lane_value": Out(data.ArrayLayout(32, max(1, read_lanes))),
        })

    def elaborate(self, platform):
        m = Module()
        edge, out = self.edge, self.out
        # the stage: an edge enters when the stage is empty or its edge leaves
        m.d.comb += edge.ready.eq(~out.valid | out.ready)
        take = edge.valid & edge.ready
        in_window, cached_value = Signal(), Signal(32)
        with m.If(take):
            m.d.sync += [out.valid.eq(1), out.payload.edge.eq(edge.payload),
                         in_window.eq(edge.payload.u < self.count),
                         out.payload.hit.eq((edge.payload.u < self.count) | self.cache_hit),
                         cached_value.eq(self.cache_value),
                         out.payload.address.eq(self.base + (edge.payload.u << 2))]
        with m.Elif(out.ready):
            m.d.sync += out.valid.eq(0)
        with m.If(self.start):
            m.d.sync += out.valid.eq(0)
        if not self.vertices:
            m.d.comb += [self.load.ready.eq(1), out.payload.value.eq(cached_value)]
            return m
        lanes = self.lanes
        words = self.vertices // lanes
        lane_bits = (lanes - 1).bit_length()

        def word_of(u):
            return u[lane_bits:lane_bits + (words - 1).bit_length()]
        writing = self.load.valid & (self.loaded < words)
        m.d.comb += self.load.ready.eq(1)
        # The memory in copies of two ports each, a block RAM's two: port A writes the load
        # and reads the single-edge path's edge (copy 0) or an even lane, port B reads an
        # odd lane.  The load, the single-edge path and the lanes never share a cycle, so
        # port A's one address serves all three (a read-write port to the RAM mapper).
        lane = Signal(lane_bits)
        with m.If(take):
            m.d.sync += lane.eq(edge.payload.u[:lane_bits])
        for c in range(max(1, (self.read_lanes + 1) // 2)):
            m.submodules[f"values{c}"] = values = Memory(shape=lanes * 32, depth=words, init=[])
            write, port_a = values.write_port(), values.read_port()     # (a read-enabled port holds its data)
            addr_a = Signal(range(words), name=f"copy{c}_addr")
            read_addr, read_en = (word_of(edge.payload.u), take) if c == 0 else (0, 0)
            if 2 * c < self.read_lanes:
                read_addr = Mux(self.lane_en, word_of(self.lane_u[2 * c]), read_addr)
                read_en = read_en | self.lane_en
            m.d.comb += [addr_a.eq(Mux(writing, self.loaded, read_addr)),
                         write.addr.eq(addr_a), write.data.eq(self.load.payload.data), write.en.eq(writing),
                         port_a.addr.eq(addr_a), port_a.en.eq(read_en)]
            ports = [(2 * c, port_a)]
            if c == 0:
                m.d.comb += out.payload.value.eq(Mux(in_window, port_a.data.word_select(lane, 32), cached_value))
            if 2 * c + 1 < self.read_lanes:
                port_b = values.read_port()
                m.d.comb += [port_b.addr.eq(word_of(self.lane_u[2 * c + 1])), port_b.en.eq(self.lane_en)]
                ports.append((2 * c + 1, port_b))
            for j, port in ports[:self.read_lanes - 2 * c]:     # (copy 0's port A: a lane's only with lanes)
                at = Signal(lane_bits, name=f"lane{j}_at")
                m.d.comb += self.lane_value[j].eq(port.data.word_select(at, 32))
                with m.If(self.lane_en):
                    m.d.sync += at.eq(self.lane_u[j][:lane_bits])
        with m.If(writing):
            m.d.sync += self.loaded.eq(self.loaded + 1)
        with m.If(self.start):
            m.d.sync += self.loaded.eq(0)
        return m
