"""The collector: a collection-extended MSHR (after Piccolo).

``slots`` groups are open at once, each collecting the edges whose source values
share one DRAM row (Piccolo mode: up to 16 offsets, one row gather) or one 64-byte
line (baseline mode: an ordinary MSHR merging misses to a line).  An edge whose
value the cache holds (``hit``) carries it in its ticket and skips the groups; any
other edge joins the open group with its key or opens one in a free slot (taking the
response table's next id); with no slot free, the round-robin victim is sent (the next
cycle) to make room.  A group also leaves when full, after ``timeout`` cycles without a new member,
or when the pass's edges are all taken (``flush``).  Every taken edge writes one
ticket (``ticket``, ``ticket_en``): row start/end, weight, and where its source value
will be (response id and lane, or the cached value).

An edge waits in an input register while it is decided, and its key is compared with
the groups' keys as it enters (a register of match bits beside it), against the keys
the groups will have in the next cycle: a group the waiting edge opens in that cycle
takes the waiting edge's key (forwarded).  While an edge waits no group changes its key
(only a taken edge opens a group), so its match bits stay true; a group that leaves is
masked by its open bit.  The decision then starts from registers, not from the compares.
"""
from __future__ import annotations

import operator
from functools import reduce

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.engines.sg import Op
from ndpkit_hw.bus.axi import log2_exact
from ndpkit_hw.engines.graph.edges import EdgeLayout
from ndpkit_hw.engines.sg.unit import MAX_OFFSETS, request_layout

__all__ = ["Collector", "ticket_layout"]


def ticket_layout(ids: int) -> data.StructLayout:
    """A ticket per edge: row start/end, the response id and lane holding its source
    value, or (a cache hit) the value itself; the source vertex for the cache fill."""
    return data.StructLayout({"empty": 1, "first": 1, "last": 1, "id": range(ids), "lane": 4, "weight": 32,
                              "hit": 1, "value": 32, "u": 24})


class Collector(wiring.Component):
    def __init__(self, *, addr_width: int, row_bytes: int, slots: int, ids: int, timeout: int):
        if slots < 1:
            raise ValueError(f"graph: mshr_slots must be >= 1, not {slots}")
        self.addr_width, self.row_bytes, self.slots, self.ids, self.timeout = addr_width, row_bytes, slots, ids, timeout
        self.ticket_layout = ticket_layout(ids)
        super().__init__({
            "edge": In(stream.Signature(EdgeLayout)),
            "address": In(addr_width),       # the edge's source value: its byte address (a stage before)
            "key": In(addr_width - 6),       # its group's key, group_key(address, baseline) (a stage before)
            "baseline": In(1),
            "hit": In(1), "value": In(32),   # the cache's answer for the edge's source
            "ticket": Out(self.ticket_layout), "ticket_en": Out(1), "ticket_room": In(1),
            "flush": In(1),                  # the pass's edges are all taken: send every group
            "req": Out(stream.Signature(request_layout(addr_width))),
            "open": Out(1), "next_id": In(range(ids)), "next_free": In(1),
            "send": Out(1), "send_id": Out(range(ids)), "send_members": Out(5),
            "busy": Out(1),                  # an edge waits or a group is open
            "waiting": Out(1),               # an edge waits (in the input register)
        })

    def group_key(self, address, baseline):
        """The key of the group an edge with source value at ``address`` joins: its DRAM
        row (Piccolo mode), or its 64-byte line (baseline mode).  The engine registers
        it with the edge, so the collector's compares start at a flop."""
        row_shift = log2_exact(self.row_bytes, "row_bytes")
        return Mux(baseline, address >> 6, address >> row_shift)[:self.addr_width - 6]

    def elaborate(self, platform):
        m = Module()
        slots = self.slots
        baseline = self.baseline
        ticket = self.ticket
        # the waiting edge (input register) and its match bits
        waiting = self.waiting
        edge = Signal.like(self.edge.payload, name="edge")
        address, key = Signal(self.addr_width, name="edge_address"), Signal(self.addr_width - 6, name="edge_key")
        hit, value = Signal(name="edge_hit"), Signal(32, name="edge_value")
        matches = Signal(slots)
        m.d.comb += [ticket.empty.eq(edge.empty), ticket.first.eq(edge.first), ticket.last.eq(edge.last),
                     ticket.weight.eq(edge.weight), ticket.u.eq(edge.u)]
        row_shift = log2_exact(self.row_bytes, "row_bytes")
        slot_open = Signal(slots)
        slot_key = Array(Signal(self.addr_width - 6, name=f"slot{i}_key") for i in range(slots))
        slot_count = Array(Signal(5, name=f"slot{i}_count") for i in range(slots))
        slot_id = Array(Signal(range(self.ids), name=f"slot{i}_id") for i in range(slots))
        slot_idle = Array(Signal(range(self.timeout + 1), name=f"slot{i}_idle") for i in range(slots))
        slot_offsets = Array(Signal(16 * MAX_OFFSETS, name=f"slot{i}_offsets") for i in range(slots))
        m.d.comb += self.busy.eq(waiting | (slot_open != 0))
        lookup = waiting & ~edge.empty & ~hit & self.ticket_room
        # open groups' keys differ (a second group opens on a key only once the first is
        # full), so an edge hits at most one slot: one-hot selects, no priority, and the
        # joined slot's offsets are written by that slot's own hit, not through an index
        hits = Signal(slots)
        m.d.comb += hits.eq(Cat(slot_open[i] & matches[i] & (slot_count[i] < MAX_OFFSETS) for i in range(slots)))
        victim = Signal(range(slots))
        # no slot free and none hit: the round-robin victim goes next cycle (registered, so a
        # group's leaving never waits on this cycle's key compares)
        evicting = Signal()
        want = Signal(slots)
        m.d.comb += want.eq(Cat(slot_open[i] & ((slot_count[i] == MAX_OFFSETS) | (slot_idle[i] == self.timeout) |
                                                self.flush | (evicting & (victim == i)))
                                for i in range(slots)))
        send_slot = Signal(range(slots))
        for i in reversed(range(slots)):         # the lowest slot that wants to go
            with m.If(want[i]):
                m.d.comb += send_slot.eq(i)
        request = self.req.payload
        m.d.comb += [self.req.valid.eq(want.any()),
                     request.op.eq(Mux(baseline, Op.LINE_READ, Op.ROW_GATHER)), request.size.eq(4),
                     request.count.eq(slot_count[send_slot]),
                     request.address.eq(Mux(baseline, slot_key[send_slot] << 6, slot_key[send_slot] << row_shift)),
                     request.offsets.eq(slot_offsets[send_slot]), request.data.eq(0)]
        sent = self.req.valid & self.req.ready
        sending = Signal(slots)
        m.d.comb += sending.eq(Mux(sent, Const(1, slots) << send_slot, 0))
        m.d.comb += [self.send.eq(sent), self.send_id.eq(slot_id[send_slot]),
                     self.send_members.eq(slot_count[send_slot])]
        with m.If(sent & evicting & (send_slot == victim)):
            m.d.sync += victim.eq(Mux(victim == slots - 1, 0, victim + 1))
        # any group leaving frees a slot: then no eviction is needed
        m.d.sync += evicting.eq(~sent & (evicting | lookup & (hits == 0) & slot_open.all()))
        joinable = hits & ~want          # a group about to leave takes no more members
        free_slot = Signal(range(slots))
        for i in reversed(range(slots)):
            with m.If(~slot_open[i]):
                m.d.comb += free_slot.eq(i)
        # each slot's join from its own compare (one LUT beyond the key compare), not
        # through the take decision below
        slot_join = Signal(slots)
        m.d.comb += slot_join.eq(Cat(lookup & joinable[i] for i in range(slots)))
        join_id, join_count = Signal(range(self.ids)), Signal(5)
        m.d.comb += [join_id.eq(reduce(operator.or_, (Mux(joinable[i], slot_id[i], 0) for i in range(slots)))),
                     join_count.eq(reduce(operator.or_, (Mux(joinable[i], slot_count[i], 0) for i in range(slots))))]
        can_open = (hits == 0) & ~slot_open.all() & self.next_free
        take = Signal()
        joined = Signal(slots)
        opening = Signal(slots)          # the slot the waiting edge opens (with its key)
        with m.If(waiting & self.ticket_room):
            with m.If(edge.empty):
                m.d.comb += take.eq(1)
            with m.Elif(hit):
                m.d.comb += [take.eq(1), ticket.hit.eq(1), ticket.value.eq(value)]
            with m.Elif(joinable.any()):
                m.d.comb += [take.eq(1), ticket.id.eq(join_id),
                             ticket.lane.eq(Mux(baseline, address[2:6], join_count[:4])), joined.eq(joinable)]
            with m.Elif(can_open):
                m.d.comb += [take.eq(1), ticket.id.eq(self.next_id), ticket.lane.eq(Mux(baseline, address[2:6], 0)),
                             joined.eq(Const(1, slots) << free_slot), opening.eq(Const(1, slots) << free_slot),
                             self.open.eq(1)]
                m.d.sync += [slot_key[free_slot].eq(key), slot_count[free_slot].eq(1),
                             slot_id[free_slot].eq(self.next_id),
                             slot_offsets[free_slot].word_select(0, 16).eq(address[2:row_shift])]
        for i in range(slots):
            with m.If(slot_join[i]):
                m.d.sync += [slot_offsets[i].word_select(slot_count[i][:4], 16).eq(address[2:row_shift]),
                             slot_count[i].eq(slot_count[i] + 1)]
        m.d.sync += slot_open.eq((slot_open | joined) & ~sending)
        for i in range(slots):
            with m.If(joined[i]):
                m.d.sync += slot_idle[i].eq(0)
            with m.Elif(slot_open[i] & (slot_idle[i] != self.timeout)):
                m.d.sync += slot_idle[i].eq(slot_idle[i] + 1)
        m.d.comb += [self.edge.ready.eq(~waiting | take), self.ticket_en.eq(take)]
        # the entering edge: registered with its key's matches against next cycle's groups
        enter = self.edge.valid & self.edge.ready
        with m.If(enter):
            m.d.sync += [waiting.eq(1), edge.eq(self.edge.payload), address.eq(self.address), key.eq(self.key),
                         hit.eq(self.hit), value.eq(self.value),
                         matches.eq(Cat(Mux(opening[i], self.key == key, self.key == slot_key[i])
                                        for i in range(slots)))]
        with m.Elif(take):
            m.d.sync += waiting.eq(0)
        return m
