"""The response table: where the unit's responses wait, and the lifetime of a group's
response id.

A group takes the next free id when it opens (``open``; ``next_id`` and ``next_free``
say which and whether it may), records its member count when it is sent (``send``,
``send_id``, ``send_members``) and the id joins the queue of ids in flight.  The
unit answers in send order: each response (``resp``) is written under the oldest id
in flight and marked arrived.  The reducer reads by id (``read_id`` -> ``line``,
``arrived``) and reports each member it took (``consume``); after the group's last
member the id is free again.
"""
from __future__ import annotations

from amaranth.hdl import Array, Module, Mux, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ndpkit_spec.engines.sg import LINE

__all__ = ["ResponseTable"]


class ResponseTable(wiring.Component):
    def __init__(self, ids: int):
        if ids < 2 or ids & (ids - 1):
            raise ValueError(f"graph: response_ids must be a power of two >= 2, not {ids}")
        self.ids = ids
        super().__init__({
            "open": In(1), "next_id": Out(range(ids)), "next_free": Out(1),
            "send": In(1), "send_id": In(range(ids)), "send_members": In(5),
            "resp": In(stream.Signature(8 * LINE)),
            "read_id": In(range(ids)), "line": Out(8 * LINE), "arrived": Out(1),
            "consume": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        ids = self.ids
        m.submodules.sent_ids = sent_ids = fifo.SyncFIFO(width=len(self.send_id), depth=ids)
        members = Array(Signal(5, name=f"id{i}_members") for i in range(ids))
        used = Array(Signal(5, name=f"id{i}_used") for i in range(ids))
        busy = Signal(ids)               # a group holds the id from opening until its members are read
        arrived = Signal(ids)
        m.d.comb += [self.next_free.eq(~busy.bit_select(self.next_id, 1)),
                     sent_ids.w_en.eq(self.send), sent_ids.w_data.eq(self.send_id)]
        with m.If(self.send):
            m.d.sync += members[self.send_id].eq(self.send_members)
        with m.If(self.open):
            m.d.sync += self.next_id.eq(self.next_id + 1)

        m.submodules.lines = lines = Memory(shape=8 * LINE, depth=ids, init=[])
        write, read = lines.write_port(), lines.read_port(domain="comb")
        resp = self.resp
        m.d.comb += [resp.ready.eq(1), sent_ids.r_en.eq(resp.valid),
                     write.addr.eq(sent_ids.r_data), write.data.eq(resp.payload), write.en.eq(resp.valid)]

        rid = self.read_id
        m.d.comb += [read.addr.eq(rid), self.line.eq(read.data), self.arrived.eq(arrived.bit_select(rid, 1))]
        freed = Signal()                 # the group's last member read: its id is free again
        m.d.comb += freed.eq(self.consume & (used[rid] + 1 == members[rid]))
        with m.If(self.consume):
            m.d.sync += used[rid].eq(Mux(freed, 0, used[rid] + 1))
        # each id's flags set and cleared by its own decode (a variable-offset bit write is
        # a shifter of the id), a clear after a set in the same cycle winning as before
        for i in range(ids):
            with m.If(self.open & (self.next_id == i)):
                m.d.sync += busy[i].eq(1)
            with m.If(resp.valid & (sent_ids.r_data == i)):
                m.d.sync += arrived[i].eq(1)
            with m.If(freed & (rid == i)):
                m.d.sync += [arrived[i].eq(0), busy[i].eq(0)]
        return m
