"""The attention engine's lane x group-size table on a DRAM preset: ``python -m
tb.engines.attention.lane_table`` (``make bench-attention-lanes``).

For each lane count L (``ATTN_TABLE_LANES``, default 32,64,128,256) it runs the engine
bench (:mod:`tb.engines.attention.attention_bench`) on the 512-bit port behind the
``MEMORY`` preset (default ``hbm2_pc``) for G = 1, 2, 3, 4, 7, 8 (``ATTN_GROUPS``), d = 128,
fp16 cache, 2 requests x 2 KV heads at contexts 128, 512 and 2048, and reports each
case's port efficiency at context 2048 against the lane bound ``min(1, L / 32G)`` (each
side of the engine takes ``L / 2`` MAC lanes; a 512-bit word is 32 fp16 elements, and
G query heads take G passes over a row's 32 columns a beat): the target is
``>= 0.85 x`` that bound.  Writes build/perf/attention-lanes-<preset>.json (each lane
count's bench JSON under its ``runs`` entry), copied to docs/bench/presets/, and
docs/bench/attention_lanes.md from it (``--report``: only the document, from the
committed JSON).  A build of two units (L = 128) is built with ``pair_words``; a run of
some lane counts keeps the committed JSON's other rows.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from ndpkit_tools.paths import build_root, source_root

LANES = (32, 64, 128, 256)
GROUPS = (1, 2, 3, 4, 7, 8)
TARGET = 0.85
CONTEXT = 2048


def lane_bound(lanes: int, group: int) -> float:
    """The port efficiency the MAC lanes allow: each side's L / 2 lanes take one 32-column
    word every 32 G / (L / 2) cycles per pass group, against the port's half."""
    return min(1.0, lanes / (32 * group))


def pass_bound(lanes: int, group: int) -> float:
    """The bound of the pass structure: H units of C columns take the group's heads H at a
    time, so ceil(G / H) passes a row (below the lane bound when H does not divide G)."""
    units = units_of(lanes)
    return min(1.0, lanes / (32 * units * -(-group // units)))


def pairs_build(lanes: int) -> bool:
    """Whether the table's ``lanes``-lane engine is built with ``pair_words``: wherever it
    has two units (an odd group then takes a pass a head, its rows' words in pairs)."""
    from ndpkit_hw.engines.attention.rows import pairs_supported
    return pairs_supported(units_of(lanes))


def run_key(lanes: int, pairs: bool) -> str:
    """A run's key in the table's ``runs``: the lane count ("128"; the build the cards use),
    "+pairs" for the pair_words build of a two-unit lane count."""
    return f"{lanes}+pairs" if pairs else str(lanes)


def run_lanes(key: str) -> int:
    """The lane count of a :func:`run_key`."""
    return int(key.split("+")[0])


def units_of(lanes: int) -> int:
    from ndpkit_hw.engines.attention.datapath import lane_shape
    return lane_shape(512, lanes)[1]


def lane_shape_text(lanes: int) -> str:
    from ndpkit_hw.engines.attention.datapath import lane_shape
    columns, units = lane_shape(512, lanes)
    return f"{units} unit{'s' if units > 1 else ''} of {columns} columns"


def main() -> int:
    memory = os.environ.get("MEMORY", "hbm2_pc")
    lanes_list = tuple(int(x) for x in os.environ.get("ATTN_TABLE_LANES", ",".join(map(str, LANES))).split(","))
    groups = tuple(int(x) for x in os.environ.get("ATTN_GROUPS", ",".join(map(str, GROUPS))).split(","))
    perf = build_root() / "perf"
    perf.mkdir(parents=True, exist_ok=True)
    docs = source_root() / "docs" / "bench"
    out = perf / f"attention-lanes-{memory}.json"
    runs, table = {}, []
    # a run of some lane counts keeps the committed table's other rows
    committed = docs / "presets" / out.name
    if committed.exists() and set(lanes_list) != set(LANES):
        previous = json.loads(committed.read_text())
        table = [t for t in previous["table"] if t["lanes"] not in lanes_list]
        runs = {k: v for k, v in previous.get("runs", {}).items() if run_lanes(k) not in lanes_list}
    for lanes in lanes_list:
        # a build of two units twice: without pair_words (the card's grouped-query build, its
        # runs the decode tables' figures) and with (the table's row)
        for pairs in (False, True) if pairs_build(lanes) else (False,):
            key = run_key(lanes, pairs)
            name = f"attention-lanes-run-{key}-{memory}.json"     # (not the standard run's file)
            env = dict(os.environ, MEMORY=memory, ATTN_LANES=str(lanes), ATTN_GROUPS=",".join(map(str, groups)),
                       ATTN_LONG="0", ATTN_PAGED="0", ATTN_OUT=name, ATTN_PAIRS=str(int(pairs)))
            subprocess.run([sys.executable, "-m", "tb.engines.attention.attention_bench"], env=env, check=True)
            runs[key] = json.loads((perf / name).read_text())
        run = runs[run_key(lanes, pairs_build(lanes))]               # the table's build
        fits = {f["group"]: f for f in run["fits"]}
        for g in groups:
            row = next(r for r in run["engine"] if r["group"] == g and r["context"] == CONTEXT)
            bound = lane_bound(lanes, g)
            table.append({"lanes": lanes, "pair_words": pairs_build(lanes), "group": g, "context": CONTEXT,
                          "cycles": row["cycles"],
                          "efficiency": row["efficiency"], "lane_bound": bound,
                          "of_bound": row["efficiency"] / bound,
                          "steady_state_efficiency": fits[g]["steady_state_efficiency"] if g in fits else None,
                          "meets": row["efficiency"] >= TARGET * bound})
    table.sort(key=lambda t: (t["lanes"], t["group"]))
    result = {"memory": memory, "target_of_bound": TARGET, "table": table,
              "runs": dict(sorted(runs.items(), key=lambda kv: (run_lanes(kv[0]), kv[0])))}
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")
    committed.write_text(out.read_text())
    print("\n".join(report(result)))
    return 0


def report(result: dict) -> list[str]:
    """docs/bench/attention_lanes.md from a table's JSON (returns its lines)."""
    memory, table = result["memory"], result["table"]
    cell = {(t["lanes"], t["group"]): t for t in table}
    lanes_list, groups = sorted({t["lanes"] for t in table}), sorted({t["group"] for t in table})
    clocks = sorted({run.get("engine_mhz") for run in result.get("runs", {}).values()} - {None})
    clock = " and ".join(f"{mhz} MHz" for mhz in clocks) or "an unrecorded clock"
    lines = [f"# Attention: MAC lanes x group size on {memory}", "",
             f"Generated by `python -m tb.engines.attention.lane_table` (`make bench-attention-lanes`) from "
             f"`docs/bench/presets/attention-lanes-{memory}.json`.  The engine alone on the {memory} DRAM "
             f"preset (behind the card's clock crossing, the engine at {clock}, the U55C build's clock): 512-bit port, d = 128, fp16 "
             f"cache and q, fp32 output, one command of 2 requests x 2 KV heads at context {CONTEXT}, cycles "
             f"from its acceptance to its completion.  Each cell: the port efficiency (KV bytes per cycle / 64), "
             f"its steady state in brackets (the slope of a fit over contexts 128, 512 and 2048), and the share "
             f"of the lane bound min(1, L / 32G) it reaches; the target is {result['target_of_bound']} of the "
             f"bound.", "",
             "| L | " + " | ".join(f"G = {g}" for g in groups) + " |",
             "|---:|" + "---:|" * len(groups)]
    for lanes in lanes_list:
        cells = []
        for g in groups:
            t = cell[(lanes, g)]
            steady = f" ({t['steady_state_efficiency']:.3f})" if t["steady_state_efficiency"] else ""
            mark = "" if t["meets"] else " **missed**"
            cells.append(f"{t['efficiency']:.3f}{steady}, {t['of_bound']:.2f} of {t['lane_bound']:.3g}{mark}")
        pairs = any(t.get("pair_words") for t in table if t["lanes"] == lanes)
        lines.append(f"| {lanes}{' (pair_words)' if pairs else ''} | " + " | ".join(cells) + " |")
    worst = min(table, key=lambda t: t["of_bound"])
    lines += ["", f"Lowest share of the bound: {worst['of_bound']:.3f} (L = {worst['lanes']}, G = {worst['group']}); "
              f"{sum(t['meets'] for t in table)} of {len(table)} cells meet the target."]
    for t in table:
        if not t["meets"]:
            bound = pass_bound(t["lanes"], t["group"])
            lines.append(f"- L = {t['lanes']}, G = {t['group']}: the {t['lanes'] // 2} lanes a side are "
                         f"{lane_shape_text(t['lanes'])}; {t['group']} query heads take "
                         f"{-(-t['group'] // units_of(t['lanes']))} passes a row, the last not full: the pass "
                         f"structure bounds it at {bound:.3g}, of which it reaches {t['efficiency'] / bound:.2f}.")
    for lanes in lanes_list:
        plain = result.get("runs", {}).get(str(lanes))
        if not any(t.get("pair_words") for t in table if t["lanes"] == lanes) or not plain:
            continue
        cells = []
        for g in groups:
            row = next((r for r in plain["engine"] if r["group"] == g and r["context"] == CONTEXT), None)
            if row:
                bound = lane_bound(lanes, g)
                cells.append(f"G = {g} {row['efficiency']:.3f} ({row['efficiency'] / bound:.2f} of the bound)")
        lines += ["", f"The L = {lanes} row is the build with `pair_words` (an odd group of three to seven query "
                  f"heads takes a pass a head, each row's words in pairs over the two units).  Without it (the "
                  f"U55C grouped-query build's instances, whose runs the decode tables use): " + ", ".join(cells)
                  + "."]
    lines.append("")
    (source_root() / "docs" / "bench" / "attention_lanes.md").write_text("\n".join(lines))
    return lines


if __name__ == "__main__":
    if "--report" in sys.argv[1:]:
        path = source_root() / "docs" / "bench" / "presets" / f"attention-lanes-{os.environ.get('MEMORY', 'hbm2_pc')}.json"
        print("\n".join(report(json.loads(path.read_text()))))
        raise SystemExit(0)
    raise SystemExit(main())
