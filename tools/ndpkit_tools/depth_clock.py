"""The depth model: the clock a number of logic levels between registers supports, and
the evidence a clock figure stands on.

Shared by the board builds' clock bound (:func:`ndpkit_tools.boards.resources.engine_clock`)
and the implementation reports and benches (:mod:`ndpkit_tools.impl.clock`, which reads
the impl report and re-exports these names), so neither package imports the other for
it.  The model: :data:`FIXED_NS` + :data:`NS_PER_LEVEL` per level (clock-to-out, setup
and skew, then about 0.27 ns a LUT level with its routing: public verilog-axi timing
reports on UltraScale+; 8 levels ≈ 250 MHz).  It is an estimate from logic depth, not a
routed figure, and :attr:`ClockEvidence.text` says so.  The levels count a DSP48E2 short of
its registers by its AMD DS923 delay in these units (:data:`NS_PER_LEVEL` a level), and a
register-bounded DSP whose own path supports less than the fabric's deepest path by the
levels of a fabric path of that clock (:mod:`ndpkit_tools.impl.depth`).

>>> round(depth_clock_mhz(8)), round(depth_clock_mhz(18))
(250, 149)
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FIXED_NS", "NS_PER_LEVEL", "ClockEvidence", "depth_clock_mhz"]

FIXED_NS = 1.84           # clock-to-out + setup + clock skew, UltraScale+ (ns)
NS_PER_LEVEL = 0.27       # a LUT level with its routing (ns)


def depth_clock_mhz(levels: float) -> float:
    """The clock ``levels`` logic levels between registers support, by the depth model."""
    return 1000.0 / (FIXED_NS + NS_PER_LEVEL * levels)


@dataclass(frozen=True)
class ClockEvidence:
    engine: str
    config: str
    mhz: int                  # whole MHz, rounded down
    levels: float
    exact: bool = True        # measured at the configuration asked about (else: the deepest measured)

    @property
    def limit_text(self) -> str:
        """The bound as a board build states it (``ndpkit_tools.boards.resources.clock_limit``)."""
        where = (f"its {self.config} configuration" if self.exact else
                 f"no measurement at this configuration; its deepest measured, {self.config}")
        return (f"{self.engine} supports {self.mhz} MHz: {self.levels:g} logic levels between registers "
                f"({where}; docs/impl_report.md, depth model of ndpkit_tools.impl.clock)")

    @property
    def text(self) -> str:
        return (f"{self.mhz} MHz: the clock {self.levels:g} logic levels support (the deepest register-to-register "
                f"path of the {self.engine} {self.config} UltraScale+ netlist, docs/impl_report.json; depth model "
                f"{FIXED_NS} ns + {NS_PER_LEVEL} ns a level, not a routed figure)")
