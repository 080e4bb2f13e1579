"""The modelled off-chip link's pacing (the sg unit's stages 1 and 4): a transfer holds
the link for as many cycles as it has flits, so the next waits."""
from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["LinkGate"]


class LinkGate(wiring.Component):
    """``i`` passes to ``o`` unchanged while the link is free; the item passing takes
    ``flits`` cycles of it (1 .. ``max_flits``; a transfer of one flit leaves it free the
    next cycle), during which nothing passes.  Neither stream waits on the other's
    valid more than the link's state: ``o.valid`` is ``i.valid`` while free."""

    def __init__(self, shape, max_flits: int):
        if max_flits < 1:
            raise ValueError(f"max_flits: at least 1, not {max_flits}")
        self.max_flits = max_flits
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape)),
                          "flits": In(range(max_flits + 1))})

    def elaborate(self, platform):
        m = Module()
        busy = Signal(range(self.max_flits), name="link_busy")     # cycles the link stays held
        free = busy == 0
        m.d.comb += [self.o.payload.eq(self.i.payload), self.o.valid.eq(self.i.valid & free),
                     self.i.ready.eq(self.o.ready & free)]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += busy.eq(self.flits - 1)
        with m.Elif(~free):
            m.d.sync += busy.eq(busy - 1)
        return m
