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

With ``sets = 2`` the window is two such memories (each in its copies), for the card's
window exchange (:class:`~ndpkit_hw.engines.graph.exchange.WindowExchange`): a command reads and loads set ``set``, while
the ``shared`` words (every instance's results, tagged with their round) go into set
``(round + 1) mod 2``, port A of its copies, which the command does not use (unless
``reading``, a command running, and it is ``set``: then they are dropped; the command
reads and loads set ``set`` only while ``reading``).  Each set keeps the round of its
latest word, how many words of that round it took and whether that round was poisoned
(a sharing command that ended with an error); ``complete`` tells whether set ``round mod
2`` holds ``need`` words from round ``round - 1`` (the command's ``take``), and
``invalidate`` (a load from memory into set ``set``) empties that record.  The model of
this is :class:`ndpkit.engines.graph.golden.WindowSets`.
"""
from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ndpkit_spec.engines.graph import MAX_VERTICES
from ndpkit_hw.engines.graph.edges import EdgeLayout
from ndpkit_hw.engines.graph.exchange import ROUND_BITS, exchange_word

__all__ = ["SourceWindow", "WindowedEdge", "windowed_queue"]

#: an edge with its source's window lookup
WindowedEdge = data.StructLayout({"edge": EdgeLayout, "hit": 1, "value": 32, "address": 32})


def windowed_queue(width: int) -> fifo.SyncFIFOBuffered:
    """The queue between the window's stage and the collector: its output and its room
    from registers, and an edge a cycle through it (a buffered queue of two passes one
    every other cycle, so it holds three)."""
    return fifo.SyncFIFOBuffered(width=width, depth=3)


class SourceWindow(wiring.Component):
    def __init__(self, vertices: int, data_width: int = 512, read_lanes: int = 0, sets: int = 1):
        self.lanes = data_width // 32
        if sets not in (1, 2) or sets == 2 and not vertices:
            raise ValueError(f"graph: window_sets must be 1, or 2 with a window, not {sets}")
        self.sets = sets
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
            # the window exchange (sets = 2)
            "set": In(1), "reading": In(1), "invalidate": In(2),
            "shared": In(stream.Signature(exchange_word(data_width))),
            "round": In(ROUND_BITS), "need": In(range(max(1, vertices // self.lanes) + 1)),
            "complete": Out(1),
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
        if self.sets == 1:
            m.d.comb += self.shared.ready.eq(1)          # (a build without sets: nothing reaches it)
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
        shared = self._exchange(m, words) if self.sets == 2 else None
        # The memory in copies of two ports each, a block RAM's two: port A writes the load
        # and reads the single-edge path's edge (copy 0) or an even lane, port B reads an
        # odd lane.  The load, the single-edge path and the lanes never share a cycle, so
        # port A's one address serves all three (a read-write port to the RAM mapper).
        # With two sets, the set the command does not read takes the exchange's words on
        # its port A instead.
        lane = Signal(lane_bits)
        with m.If(take):
            m.d.sync += lane.eq(edge.payload.u[:lane_bits])
        active = Signal()                   # the set read, a cycle behind `set` (as the data)
        m.d.sync += active.eq(self.set)
        single = [None] * self.sets
        lane_words = [[None] * self.sets for _ in range(max(1, self.read_lanes))]
        for k in range(self.sets):
            # (the command's own while it reads the set; the exchange's otherwise)
            mine = self.reading & (self.set == k) if self.sets == 2 else Const(1)
            for c in range(max(1, (self.read_lanes + 1) // 2)):
                name = f"values{c}" if self.sets == 1 else f"set{k}_values{c}"
                m.submodules[name] = values = Memory(shape=lanes * 32, depth=words, init=[])
                write, port_a = values.write_port(), values.read_port()     # (a read-enabled port holds its data)
                addr_a = Signal(range(words), name=f"{name}_addr")
                read_addr, read_en = (word_of(edge.payload.u), take) if c == 0 else (0, 0)
                if 2 * c < self.read_lanes:
                    read_addr = Mux(self.lane_en, word_of(self.lane_u[2 * c]), read_addr)
                    read_en = read_en | self.lane_en
                own_addr = Mux(writing, self.loaded, read_addr)
                if shared is None:
                    m.d.comb += [addr_a.eq(own_addr), write.data.eq(self.load.payload.data), write.en.eq(writing)]
                else:
                    m.d.comb += [addr_a.eq(Mux(mine, own_addr, shared.word)),
                                 write.data.eq(Mux(mine, self.load.payload.data, shared.data)),
                                 write.en.eq(Mux(mine, writing, shared.write[k]))]
                m.d.comb += [write.addr.eq(addr_a), port_a.addr.eq(addr_a), port_a.en.eq(read_en & mine)]
                ports = [(2 * c, port_a)]
                if c == 0:
                    single[k] = port_a.data
                if 2 * c + 1 < self.read_lanes:
                    port_b = values.read_port()
                    m.d.comb += [port_b.addr.eq(word_of(self.lane_u[2 * c + 1])), port_b.en.eq(self.lane_en & mine)]
                    ports.append((2 * c + 1, port_b))
                for j, port in ports[:self.read_lanes - 2 * c]:     # (copy 0's port A: a lane's only with lanes)
                    lane_words[j][k] = port.data

        def of_active(words_by_set, at):
            picked = [word.word_select(at, 32) for word in words_by_set]
            return picked[0] if self.sets == 1 else Mux(active, picked[1], picked[0])
        m.d.comb += out.payload.value.eq(Mux(in_window, of_active(single, lane), cached_value))
        for j in range(self.read_lanes):
            at = Signal(lane_bits, name=f"lane{j}_at")
            m.d.comb += self.lane_value[j].eq(of_active(lane_words[j], at))
            with m.If(self.lane_en):
                m.d.sync += at.eq(self.lane_u[j][:lane_bits])
        with m.If(writing):
            m.d.sync += self.loaded.eq(self.loaded + 1)
        with m.If(self.start):
            m.d.sync += self.loaded.eq(0)
        return m

    def _exchange(self, m: Module, words: int) -> SimpleNamespace:
        """The shared words into the set they fill, a cycle later (registered: address,
        data and each set's write), and each set's record of its round."""
        w = self.shared.payload
        m.d.comb += self.shared.ready.eq(1)           # (a broadcast: every word is taken)
        target = ~w.round[0]                           # set (round + 1) mod 2
        arrive = self.shared.valid & ~(self.reading & (target == self.set))
        counted = ~w.poison & (w.word < words)         # a word of the window (not a poison)
        q = SimpleNamespace(word=Signal(range(words), name="shared_word"), data=Signal(len(w.data), name="shared_data"),
                            write=[Signal(name=f"shared_write{k}") for k in range(2)])
        m.d.sync += [q.word.eq(w.word), q.data.eq(w.data)]
        held, tag, next_round, count, bad = [], [], [], [], []
        for k in range(2):
            held.append(Signal(name=f"set{k}_held"))               # it took words since its last load
            tag.append(Signal(ROUND_BITS, name=f"set{k}_round"))
            next_round.append(Signal(ROUND_BITS, name=f"set{k}_next_round"))   # its round + 1: the take it serves
            count.append(Signal(range(words + 1), name=f"set{k}_count"))
            bad.append(Signal(name=f"set{k}_bad"))
            into = arrive & (target == k)
            m.d.sync += q.write[k].eq(into & counted)
            with m.If(self.invalidate[k]):
                m.d.sync += [held[k].eq(0), count[k].eq(0), bad[k].eq(0)]
            with m.Elif(into):
                with m.If(~held[k] | (tag[k] != w.round)):          # a newer round: count again
                    m.d.sync += [held[k].eq(1), tag[k].eq(w.round), next_round[k].eq(w.round + 1), count[k].eq(counted),
                                 bad[k].eq(w.poison)]
                with m.Else():
                    m.d.sync += [count[k].eq(count[k] + counted), bad[k].eq(bad[k] | w.poison)]
        s = self.round[0]
        m.d.comb += self.complete.eq(Mux(s, held[1], held[0]) & ~Mux(s, bad[1], bad[0]) &
                                     (Mux(s, next_round[1], next_round[0]) == self.round) &
                                     (Mux(s, count[1], count[0]) == self.need))
        return q
