"""The resource model behind the board builds' fit check.

**Engines**: the UltraScale+ figures of ``make impl-report`` (``docs/impl_report.json``,
copied here as ``engine_resources.json`` by the report: yosys ``synth_xilinx``
estimates, LUT6/FF/DSP48E2/BRAM36/URAM) of every configuration a device can build
(``default``, ``max``, and the smaller ECP5 build where the device sets its parameters).
An engine's size is the product of its configuration's parameters (data width, times
attention lanes), and resources are piecewise linear in that size through the measured
points (one point: constant), never below zero.

**Shell**: a stated estimate, not a measurement (there is no Vivado here): the XDMA
subsystem, the memory IP's soft logic, one AXI clock/width adapter per memory port, and
the device's own shell (registers, address decoder, N:1 interconnect).  The numbers are
in :data:`SHELL` with where each comes from.

:func:`fit` totals engines and shell for a board and refuses (``BoardError``, naming the
resource and the numbers) a build above the budget (70 % of every resource by default,
the share a Vivado build of this kind routes reliably at speed).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

__all__ = ["RESOURCES", "BUDGET", "SHREG_MIN_SIZE", "SHELL", "engine_resources", "shell_resources", "totals", "fit",
           "write_engine_table", "TABLE", "DEPTH_TABLE", "engine_clock", "clock_limit", "binding"]

RESOURCES = ("lut", "ff", "dsp", "bram36", "uram")
BUDGET = 0.70
#: Register chains of fewer stages than this stay flip-flops; longer ones become SRL16E /
#: SRLC32E shift registers (a LUT each).  Vivado's ``synth_design -shreg_min_size`` (default
#: 3): the board projects set it (:mod:`ndpkit_tools.boards.vivado`) and the engines'
#: estimate applies it (:func:`ndpkit_tools.impl.flow.synthesize_xcup`).  Why 8: the cards run out
#: of LUTs long before flip-flops (U55C attention build: 69 % of the LUTs, 44 % of the
#: flip-flops), and a chain of 3 to 7 stages costs 3 to 7 flip-flops for the LUT it frees.
SHREG_MIN_SIZE = 8
#: package data: the engine rows of the implementation report
TABLE = Path(__file__).resolve().parent / "engine_resources.json"
#: package data: every report row's logic depth (the clock evidence), engine-internal configurations too
DEPTH_TABLE = Path(__file__).resolve().parent / "engine_depth.json"
_REPORT_KEYS = {"lut": "LUT", "ff": "FF", "dsp": "DSP", "bram36": "BRAM", "uram": "URAM"}

#: stated estimates (not measured), per block: resources and the reason
SHELL = {
    "xdma": ({"lut": 55_000, "ff": 70_000, "dsp": 0, "bram36": 90, "uram": 0},
             "XDMA Gen3 x16, 512-bit AXI-MM + AXI4-Lite BAR (PG195); order of Intel's MCDMA Gen3 x16 "
             "figures (44k ALM, 109k registers, 532 M20K) for a comparable soft DMA engine"),
    "hbm": ({"lut": 6_000, "ff": 9_000, "dsp": 0, "bram36": 0, "uram": 0},
            "HBM IP (PG276): hard controller and switch; APB, reset and clocking soft logic"),
    "ddr4": ({"lut": 18_000, "ff": 22_000, "dsp": 0, "bram36": 26, "uram": 0},
             "DDR4 MIG (PG150), one 64-bit controller: its calibration MicroBlaze and PHY soft logic"),
    "memory_port": ({"lut": 4_000, "ff": 6_000, "dsp": 0, "bram36": 2, "uram": 0},
                    "per memory port: AXI SmartConnect clock and width conversion to the memory's port"),
    "device_shell": ({"lut": 6_000, "ff": 7_000, "dsp": 0, "bram36": 4, "uram": 0},
                     "ndpkit's shell: global registers, AXI4-Lite decoder, N:1 interconnect, interrupt logic"),
}


def write_engine_table(rows: list[dict], path: Path = TABLE, depth_path: Path = DEPTH_TABLE) -> None:
    """Keep the UltraScale+ figures of the report's rows (``make impl-report`` calls it):
    the configurations a device build can choose (parameters the device sets: the bus
    width and the engine's ``device_params``), not the smaller ECP5 fitting builds of
    engine-internal parameters; and every row's logic depth (``depth_path``)."""
    from ndpkit_spec.registry import REGISTRY
    depth = {}
    for row in rows:
        levels = (row.get("xcup_depth") or {}).get("levels")
        if levels is not None:
            depth.setdefault(row["engine"], {})[row["config"]] = {"params": row["params"], "levels": levels}
    depth_path.write_text(json.dumps(depth, indent=1, sort_keys=True) + "\n")
    table = {}
    for row in rows:
        spec = REGISTRY.get(row["engine"])
        settable = {"data_width", *spec.device_params.values()} if spec else set()
        if row.get("xcup") and set(row["params"]) <= settable:
            # the larger of the two mappings' counts: the cell counts are Yosys's own mapping,
            # the clock the logic levels support is the delay mapping's (a LUT or two more)
            delay = row.get("xcup_delay") or {}
            entry = {"params": row["params"], "estimate": bool(row.get("estimate")),
                     **{k: max(row["xcup"][v], delay.get(v, 0)) for k, v in _REPORT_KEYS.items()}}
            table.setdefault(row["engine"], {})[row["config"]] = entry
    path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")


def _size(params: dict) -> float:
    return math.prod(v for v in params.values() if isinstance(v, (int, float)) and not isinstance(v, bool))


def engine_resources(engine: str, params: dict, table: dict | None = None) -> dict:
    """Resources of ``engine`` built with ``params`` (as in its registry ``configs``):
    piecewise linear in the configuration's size through the measured points (beyond
    the ends, the end segment's line; one point: constant), never below zero."""
    table = json.loads(TABLE.read_text()) if table is None else table
    if engine not in table:
        from ndpkit_tools.boards import BoardError
        raise BoardError(f"engine {engine!r} has no implementation figures for the fit check: run "
                         f"make impl-report ENGINES={engine} first")
    by_size = {}
    for p in table[engine].values():
        by_size.setdefault(_size(p["params"]), p)
    points = sorted(by_size.items())
    size = _size({k: v for k, v in params.items() if k in points[0][1]["params"]})
    if len(points) == 1:
        return {r: points[0][1][r] for r in RESOURCES}
    i = 0
    while i < len(points) - 2 and size > points[i + 1][0]:
        i += 1
    (s0, lo), (s1, hi) = points[i], points[i + 1]
    t = (size - s0) / (s1 - s0)
    return {r: max(0.0, lo[r] + t * (hi[r] - lo[r])) for r in RESOURCES}


def shell_resources(board, options: dict) -> dict:
    """The stated shell estimate for ``board`` with ``options`` (its memory ports)."""
    blocks = ["xdma", "hbm" if board.memory["kind"] == "hbm" else "ddr4", "device_shell"]
    blocks += ["memory_port"] * int(options["memory_ports"])
    return {r: sum(SHELL[b][0][r] for b in blocks) for r in RESOURCES}


def totals(board, options: dict, table: dict | None = None) -> dict:
    """Per block (each engine, ``shell``) and ``total``: resources of the build."""
    from ndpkit_spec.registry import instance_counts
    out = {}
    for engine, count in instance_counts(options["engines"]).items():
        one = engine_resources(engine, engine_params(engine, options), table)
        out[engine if count == 1 else f"{engine}*{count}"] = {r: count * one[r] for r in RESOURCES}
    out["shell"] = shell_resources(board, options)
    out["total"] = {r: sum(block[r] for block in out.values()) for r in RESOURCES}
    return out


def fit(board, options: dict, budget: float = BUDGET, table: dict | None = None) -> dict:
    """:func:`totals`, or ``BoardError`` when a resource exceeds ``budget`` of the part."""
    from ndpkit_tools.boards import BoardError
    result = totals(board, options, table)
    for r in RESOURCES:
        have = board.resources.get(r, 0)
        used = result["total"][r]
        if used > budget * have:
            biggest = max((k for k in result if k != "total"), key=lambda k: result[k][r])
            raise BoardError(f"{board.name}: the build needs {used:,.0f} {r.upper()} of the {board.part}'s "
                             f"{have:,} ({used / have:.0%}), over the {budget:.0%} budget "
                             f"({budget * have:,.0f}); the largest part is {biggest} with {result[biggest][r]:,.0f} "
                             f"(engines {', '.join(options['engines'])}, data_width {options['data_width']}, "
                             f"attention_lanes {options['attention_lanes']})")
    return result


def binding(board, options: dict, engine: str = "attention", budget: float = BUDGET,
            table: dict | None = None) -> dict:
    """What bounds the build: its most used resource (``most_used``, ``share`` of the part)
    and the resources one more ``engine`` instance (with its own memory port, as the
    default builds give every instance) would take over ``budget`` (``one_more``:
    {resource: share}; empty when it would still fit).  The resources in ``one_more``
    bind: any one of them alone stops the next instance."""
    from ndpkit_spec.registry import instance_counts
    total = totals(board, options, table)["total"]
    have = {r: board.resources[r] for r in RESOURCES if board.resources.get(r)}
    most = max(have, key=lambda r: total[r] / have[r])
    counts = instance_counts(options["engines"])
    more = dict(options, memory_ports=options["memory_ports"] + 1,
                engines=[f"{n}*{c + (n == engine)}" for n, c in counts.items()]
                + ([] if engine in counts else [engine]))
    more_total = totals(board, more, table)["total"]
    return {"most_used": most, "share": total[most] / have[most],
            "one_more": {r: more_total[r] / have[r] for r in have if more_total[r] > budget * have[r]}}


def engine_clock(engine: str, params: dict, table: dict | None = None):
    """The clock ``engine`` built with ``params`` supports by the impl report's logic
    depth: its own configuration's when measured, else the deepest of the engine's
    measured configurations (a larger build is at least as deep)."""
    from ndpkit_tools.boards import BoardError
    from ndpkit_tools.depth_clock import ClockEvidence, depth_clock_mhz
    table = json.loads(DEPTH_TABLE.read_text()) if table is None else table
    rows = table.get(engine)
    if not rows:
        raise BoardError(f"engine {engine!r} has no logic-depth figure, so no clock is supported by evidence: run "
                         f"make impl-report ENGINES={engine} first")
    exact = [(name, r) for name, r in rows.items() if r["params"] == params]
    name, row = exact[0] if exact else max(rows.items(), key=lambda kv: kv[1]["levels"])
    return ClockEvidence(engine, name, math.floor(depth_clock_mhz(row["levels"])), row["levels"], bool(exact))


def clock_limit(options: dict, table: dict | None = None):
    """The slowest of the build's engines by :func:`engine_clock`: the device's clock bound."""
    from ndpkit_spec.registry import instance_counts
    return min((engine_clock(engine, engine_params(engine, options), table)
                for engine in instance_counts(options["engines"])), key=lambda limit: limit.mhz)


def engine_params(engine: str, options: dict) -> dict:
    """``engine``'s configuration parameters in a device built with ``options``."""
    from ndpkit_spec.registry import REGISTRY
    spec = REGISTRY[engine]
    return {"data_width": options["data_width"],
            **{engine_kw: options[device_kw] for device_kw, engine_kw in spec.device_params.items()}}
