"""1:N AXI4 router by address: one master (the host DMA) reaches N memory ports, port
``p`` serving the region ``[base + p * region_size, base + (p + 1) * region_size)``.

Each direction keeps its outstanding transactions on one port at a time: a request
for another port waits until the ones in flight have answered.  That keeps AXI's
ordering (same-ID responses in request order) with no reorder buffer, R and B come
from the one port in use, and W follows AW with no routing queue.  The host's DMA
moves long runs of consecutive addresses, so it changes port once per region it
crosses, which is what this costs.

An address below ``base`` or past the last region goes to the last port, whose
memory answers it with DECERR (it lies outside that port's region too).  W beats are
passed only for an accepted AW (``w_pending``): a master that sends W first waits.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal, Mux
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ndpkit_hw.bus.axi import AXI4Signature

__all__ = ["AxiRegionRouter"]


class AxiRegionRouter(wiring.Component):
    """``s``: the master's port; ``m0``..``m{N-1}``: one per region."""

    def __init__(self, *, num_ports: int, base: int, region_size: int, addr_width: int = 32,
                 data_width: int = 512, id_width: int = 4, max_outstanding: int = 32):
        if num_ports < 2:
            raise ValueError("a region router needs at least two ports")
        if region_size <= 0 or region_size & (region_size - 1):
            raise ValueError(f"region_size must be a power of two, not {region_size}")
        if base % region_size:
            raise ValueError(f"base {base:#x} is not aligned to the region size {region_size:#x}")
        self.num_ports, self.base, self.region_size = num_ports, base, region_size
        self.max_outstanding = max_outstanding
        sig = AXI4Signature(addr_width=addr_width, data_width=data_width, id_width=id_width)
        super().__init__({"s": In(sig), **{f"m{p}": Out(sig) for p in range(num_ports)}})

    def _ports(self):
        return [getattr(self, f"m{p}") for p in range(self.num_ports)]

    def port_of(self, m: Module, addr, name: str):
        """The port an address goes to (a signal)."""
        shift = self.region_size.bit_length() - 1
        index = Signal(range(self.num_ports), name=f"{name}_port")
        region = Signal(len(addr) - shift + 1, name=f"{name}_region")
        m.d.comb += region.eq((addr - self.base) >> shift)
        below = addr < self.base
        m.d.comb += index.eq(Mux(below | (region >= self.num_ports), self.num_ports - 1, region))
        return index

    def _request(self, m: Module, prefix: str, done, extra_ready=1):
        """Forward AR or AW to its port when the direction is idle or already on that
        port; returns (port in use, outstanding count)."""
        s, ports = self.s, self._ports()
        target = self.port_of(m, getattr(s, f"{prefix}addr"), prefix)
        active = Signal(range(self.num_ports), name=f"{prefix}_active")
        count = Signal(range(self.max_outstanding + 1), name=f"{prefix}_outstanding")
        allowed = Signal(name=f"{prefix}_allowed")
        m.d.comb += allowed.eq(((count == 0) | (target == active)) & (count < self.max_outstanding) & extra_ready)
        ready = Signal(name=f"{prefix}_ready")
        for p, port in enumerate(ports):
            m.d.comb += [getattr(port, f"{prefix}valid").eq(getattr(s, f"{prefix}valid") & allowed & (target == p)),
                         *[getattr(port, f"{prefix}{f}").eq(getattr(s, f"{prefix}{f}"))
                           for f in ("id", "addr", "len", "size", "burst")]]
        with m.Switch(target):
            for p, port in enumerate(ports):
                with m.Case(p):
                    m.d.comb += ready.eq(getattr(port, f"{prefix}ready") & allowed)
        m.d.comb += getattr(s, f"{prefix}ready").eq(ready)
        taken = getattr(s, f"{prefix}valid") & ready
        with m.If(taken):
            m.d.sync += active.eq(target)
        m.d.sync += count.eq(count + taken - done)
        return active, count, taken

    def _response(self, m: Module, prefix: str, active, fields):
        s, ports = self.s, self._ports()
        with m.Switch(active):
            for p, port in enumerate(ports):
                with m.Case(p):
                    m.d.comb += [getattr(s, f"{prefix}valid").eq(getattr(port, f"{prefix}valid")),
                                 getattr(s, f"{prefix}id").eq(getattr(port, f"{prefix}id")),
                                 *[getattr(s, f"{prefix}{f}").eq(getattr(port, f"{prefix}{f}")) for f in fields]]
        for p, port in enumerate(ports):
            m.d.comb += getattr(port, f"{prefix}ready").eq(getattr(s, f"{prefix}ready") & (active == p))

    def elaborate(self, platform):
        m = Module()
        s, ports = self.s, self._ports()

        r_done = Signal()
        m.d.comb += r_done.eq(s.rvalid & s.rready & s.rlast)
        r_active, _, _ = self._request(m, "ar", r_done)
        self._response(m, "r", r_active, ("data", "resp", "last"))

        b_done = Signal()
        m.d.comb += b_done.eq(s.bvalid & s.bready)
        w_active, _, aw_taken = self._request(m, "aw", b_done)
        self._response(m, "b", w_active, ("resp",))
        # W: the beats of accepted AWs, all on the port in use
        w_pending = Signal(range(self.max_outstanding + 1))
        w_done = Signal()
        m.d.comb += w_done.eq(s.wvalid & s.wready & s.wlast)
        m.d.sync += w_pending.eq(w_pending + aw_taken - w_done)
        open_ = w_pending != 0
        with m.Switch(w_active):
            for p, port in enumerate(ports):
                with m.Case(p):
                    m.d.comb += s.wready.eq(open_ & port.wready)
        for p, port in enumerate(ports):
            m.d.comb += [port.wvalid.eq(s.wvalid & open_ & (w_active == p)),
                         port.wdata.eq(s.wdata), port.wstrb.eq(s.wstrb), port.wlast.eq(s.wlast)]
        return m
