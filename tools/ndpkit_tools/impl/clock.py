"""The clock an engine configuration's timing evidence supports, for per-second figures.

Every per-second figure (benches, the bench report, the system model) multiplies
simulated cycles by a clock; this module is the one place that clock comes from, so a
figure never rests on a clock the logic cannot reach.  The evidence is the impl
report's (``docs/impl_report.json``, ``make impl-report``): the most logic levels
between registers of the configuration's UltraScale+ ``synth_xilinx`` netlist, turned
into a period by the depth model of :data:`FIXED_NS` + :data:`NS_PER_LEVEL` per level
(clock-to-out, setup and skew, then about 0.27 ns a LUT level with its routing:
public verilog-axi timing reports on UltraScale+; 8 levels ≈ 250 MHz; the model and
:class:`ClockEvidence` are :mod:`ndpkit_tools.depth_clock`'s, re-exported here).  It is an
estimate from logic depth, not a routed figure, and :attr:`ClockEvidence.text` says so.

>>> round(depth_clock_mhz(8)), round(depth_clock_mhz(18))
(250, 149)
"""
from __future__ import annotations

import json
import math
from pathlib import Path

# the depth model and the evidence type live below both this package and the board
# builds (which bound a build's clock by them): ndpkit_tools.depth_clock
from ndpkit_tools.depth_clock import FIXED_NS, NS_PER_LEVEL, ClockEvidence, depth_clock_mhz

__all__ = ["FIXED_NS", "NS_PER_LEVEL", "ClockEvidence", "depth_clock_mhz", "supported_clock"]


def supported_clock(engine: str, config: str, report: Path | dict | None = None) -> ClockEvidence:
    """The clock the impl report's depth measure supports for ``engine``'s ``config``.

    Raises ``LookupError`` naming what is missing when the report has no depth for it
    (a per-second figure then has no clock to stand on)."""
    if report is None:
        from ndpkit_tools.impl.engines_report import results_path
        report = results_path()
    rows = (report if isinstance(report, dict) else json.loads(Path(report).read_text()))["rows"]
    for row in rows:
        if row.get("engine") == engine and row.get("config") == config:
            depth = row.get("xcup_depth")
            if not depth or depth.get("levels") is None:
                raise LookupError(f"{engine} {config}: the impl report has no logic depth "
                                  f"(`python -m ndpkit_tools.impl.engines_report {engine} --xcup-only`)")
            levels = depth["levels"]
            return ClockEvidence(engine, config, math.floor(depth_clock_mhz(levels)), levels)
    raise LookupError(f"{engine} {config}: not in the impl report")


def registry_config(engine: str, **params) -> str:
    """The name of ``engine``'s registry configuration with ``params`` (those given must
    match), e.g. ``registry_config("adam", data_width=512) == "max"``."""
    from ndpkit_spec.registry import REGISTRY
    for name, values in REGISTRY[engine].configs.items():
        if all(values.get(k) == v for k, v in params.items()):
            return name
    raise LookupError(f"{engine}: no registry configuration has {params}")
