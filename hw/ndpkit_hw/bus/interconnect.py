"""N:1 AXI4 interconnect: several masters share one memory port.

AR and AW are each granted round-robin (one request per cycle, the grant chosen a
cycle ahead, a register stage on each), and the master's index is prepended to its ID (``id_width`` grows by
``ceil(log2 N)`` bits), so R and B responses route back by their ID with no state.
W beats follow AW grant order: the granted index is queued, and W is taken from
that master until WLAST.  A master may therefore send W before its AW is accepted
downstream only if the slave tolerates it (ours do); our write engines never do.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal, Cat, Const, Mux
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_hw.bus.axi import AXI4Signature

__all__ = ["AxiInterconnect", "round_robin"]


def round_robin(m: Module, requests, advance, name: str):
    """Round-robin arbiter, registered: returns (grant index, grant valid) for this cycle,
    chosen the cycle before among the requests then pending, the one ``advance`` took
    that cycle left out (an AXI request stays valid until it is taken, so the grant
    still names a pending request).  ``advance`` commits the grant.  The grant costs a
    cycle of latency and keeps the arbitration out of the path from a master's request
    to its ready."""
    n = len(requests)
    last = Signal(range(n), name=f"{name}_last")
    grant = Signal(range(n), name=f"{name}_grant")
    granted = Signal(name=f"{name}_granted")
    taken = Signal(n, name=f"{name}_taken")          # the request advanced this cycle
    for i in range(n):
        m.d.comb += taken[i].eq(advance & granted & (grant == i))
    pending = Cat(*requests) & ~taken
    after = Mux(advance & granted, grant, last)     # round-robin from the one taken last
    next_grant = Signal(range(n), name=f"{name}_next")
    with m.Switch(after):
        for previous in range(n):
            with m.Case(previous):
                # Lowest priority first, so the highest-priority request is assigned last.
                for k in reversed(range(n)):
                    index = (previous + 1 + k) % n
                    with m.If(pending[index]):
                        m.d.comb += next_grant.eq(index)
    m.d.sync += [grant.eq(next_grant), granted.eq(pending.any())]
    with m.If(advance & granted):
        m.d.sync += last.eq(grant)
    return grant, granted


class AxiInterconnect(wiring.Component):
    """``s0``..``s{N-1}``: slave ports for the masters; ``m``: the shared master port."""

    def __init__(self, *, num_masters: int, addr_width: int = 32, data_width: int = 512,
                 id_width: int = 4, w_route_depth: int = 8):
        if num_masters < 2:
            raise ValueError("an interconnect needs at least two masters")
        self.num_masters = num_masters
        self.index_bits = (num_masters - 1).bit_length()
        self.id_width = id_width
        self.w_route_depth = w_route_depth
        slave_sig = AXI4Signature(addr_width=addr_width, data_width=data_width, id_width=id_width)
        members = {f"s{i}": In(slave_sig) for i in range(num_masters)}
        members["m"] = Out(AXI4Signature(addr_width=addr_width, data_width=data_width,
                                         id_width=id_width + self.index_bits))
        super().__init__(members)

    def _ports(self):
        return [getattr(self, f"s{i}") for i in range(self.num_masters)]

    def _address_channel(self, m: Module, prefix: str, extra_ready=1):
        """Arbitrate AR or AW into a register stage on the master port; returns (grant, load)."""
        ports = self._ports()
        down = self.m
        valid = getattr(down, f"{prefix}valid")
        load = Signal(name=f"{prefix}_load")
        m.d.comb += load.eq((~valid | getattr(down, f"{prefix}ready")) & extra_ready)
        requests = [getattr(p, f"{prefix}valid") for p in ports]
        grant, any_request = round_robin(m, requests, load, prefix)
        for i, port in enumerate(ports):
            m.d.comb += getattr(port, f"{prefix}ready").eq(load & any_request & (grant == i))
        with m.If(load):
            m.d.sync += valid.eq(any_request)
            with m.Switch(grant):
                for i, port in enumerate(ports):
                    with m.Case(i):
                        m.d.sync += [
                            getattr(down, f"{prefix}id").eq(Cat(getattr(port, f"{prefix}id"), Const(i, self.index_bits))),
                            *[getattr(down, f"{prefix}{f}").eq(getattr(port, f"{prefix}{f}"))
                              for f in ("addr", "len", "size", "burst")],
                        ]
        with m.Elif(getattr(down, f"{prefix}ready")):
            # taken while the stage cannot reload (W route full): it must empty, or the
            # same request would be issued twice (found by the bounded proof)
            m.d.sync += valid.eq(0)
        return grant, load & any_request

    def _response_channel(self, m: Module, prefix: str, fields):
        """Route R or B back to the master named by the upper ID bits."""
        down = self.m
        rid = getattr(down, f"{prefix}id")
        target = rid[self.id_width:]
        ready = getattr(down, f"{prefix}ready")
        for i, port in enumerate(self._ports()):
            m.d.comb += [
                getattr(port, f"{prefix}valid").eq(getattr(down, f"{prefix}valid") & (target == i)),
                getattr(port, f"{prefix}id").eq(rid[:self.id_width]),
                *[getattr(port, f"{prefix}{f}").eq(getattr(down, f"{prefix}{f}")) for f in fields],
            ]
        with m.Switch(target):
            for i, port in enumerate(self._ports()):
                with m.Case(i):
                    m.d.comb += ready.eq(getattr(port, f"{prefix}ready"))

    def elaborate(self, platform):
        m = Module()
        down = self.m
        self._address_channel(m, "ar")
        self._response_channel(m, "r", ("data", "resp", "last"))

        m.submodules.w_route = w_route = fifo.SyncFIFO(width=max(1, self.index_bits), depth=self.w_route_depth)
        aw_grant, aw_granted = self._address_channel(m, "aw", extra_ready=w_route.w_rdy)
        m.d.comb += [w_route.w_en.eq(aw_granted), w_route.w_data.eq(aw_grant)]

        head = w_route.r_data
        ports = self._ports()
        with m.Switch(head):
            for i, port in enumerate(ports):
                with m.Case(i):
                    m.d.comb += [
                        down.wvalid.eq(w_route.r_rdy & port.wvalid),
                        down.wdata.eq(port.wdata), down.wstrb.eq(port.wstrb), down.wlast.eq(port.wlast),
                    ]
        for i, port in enumerate(ports):
            m.d.comb += port.wready.eq(w_route.r_rdy & (head == i) & down.wready)
        m.d.comb += w_route.r_en.eq(down.wvalid & down.wready & down.wlast)

        self._response_channel(m, "b", ("resp",))
        return m
