"""The card's window exchange: every graph instance's shared result words to every
instance's source window, so a round of a graph split over instances
(:class:`ndpkit.engines.graph.api.SlicedGraph`) finds its sources on chip instead of
loading the whole vertex array from memory (the register document's ``exchange``).

An instance's words wait in its queue (:class:`~ndpkit_hw.engines.graph.engine.GraphEngine`'s
``share``); a round-robin arbiter takes one word a cycle from them onto one register
that every instance's window takes (``shared``: a broadcast, no back-pressure).  A round
of eight slices at scale 14 shares 1,024 words over its edge passes, a word every few
cycles; the bus's word a cycle is the receiving window's write port's rate.
"""
from __future__ import annotations

from amaranth.hdl import Const, Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.engines.graph import MAX_VERTICES
from ndpkit_hw.bus.interconnect import round_robin

__all__ = ["ROUND_BITS", "exchange_word", "WindowExchange"]

#: the exchange's rounds (the ``exchange.round`` field)
ROUND_BITS = 16


def exchange_word(data_width: int) -> data.StructLayout:
    """A word on the card's window exchange: bus word ``word`` of the vertex array from a
    command of round ``round`` (``poison``: that command ended with an error, no data)."""
    return data.StructLayout({"word": (MAX_VERTICES * 32 // data_width - 1).bit_length(), "round": ROUND_BITS,
                              "poison": 1, "data": data_width})


class WindowExchange(wiring.Component):
    """``share[i]``: instance ``i``'s words; ``out``: the word of the cycle, to every
    instance's ``shared`` (its ``ready`` is not looked at)."""

    def __init__(self, instances: int, data_width: int = 512):
        if instances < 1:
            raise ValueError("graph: the window exchange needs at least one instance")
        self.instances = instances
        layout = exchange_word(data_width)
        super().__init__({"share": In(stream.Signature(layout)).array(instances),
                          "out": Out(stream.Signature(layout))})

    def elaborate(self, platform):
        m = Module()
        share, out = self.share, self.out
        if self.instances == 1:
            m.d.comb += share[0].ready.eq(1)
            m.d.sync += [out.valid.eq(share[0].valid), out.payload.eq(share[0].payload)]
            return m
        grant, granted = round_robin(m, [s.valid for s in share], Const(1), "exchange")
        m.d.sync += out.valid.eq(0)
        for i, s in enumerate(share):
            m.d.comb += s.ready.eq(granted & (grant == i))
            with m.If(s.valid & s.ready):
                m.d.sync += [out.valid.eq(1), out.payload.eq(s.payload)]
        return m
