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
count's bench JSON under its ``runs`` entry).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from ndpkit_tools.paths import build_root

LANES = (32, 64, 128, 256)
GROUPS = (1, 2, 3, 4, 7, 8)
TARGET = 0.85
CONTEXT = 2048


def lane_bound(lanes: int, group: int) -> float:
    """The port efficiency the MAC lanes allow: each side's L / 2 lanes take one 32-column
    word every 32 G / (L / 2) cycles per pass group, against the port's half."""
    return min(1.0, lanes / (32 * group))


def main() -> int:
    memory = os.environ.get("MEMORY", "hbm2_pc")
    lanes_list = tuple(int(x) for x in os.environ.get("ATTN_TABLE_LANES", ",".join(map(str, LANES))).split(","))
    groups = tuple(int(x) for x in os.environ.get("ATTN_GROUPS", ",".join(map(str, GROUPS))).split(","))
    perf = build_root() / "perf"
    perf.mkdir(parents=True, exist_ok=True)
    runs, table = {}, []
    for lanes in lanes_list:
        env = dict(os.environ, MEMORY=memory, ATTN_LANES=str(lanes), ATTN_GROUPS=",".join(map(str, groups)),
                   ATTN_LONG="0", ATTN_PAGED="0")
        subprocess.run([sys.executable, "-m", "tb.engines.attention.attention_bench"], env=env, check=True)
        run = json.loads((perf / f"attention-{memory}.json").read_text())
        runs[lanes] = run
        fits = {f["group"]: f for f in run["fits"]}
        for g in groups:
            row = next(r for r in run["engine"] if r["group"] == g and r["context"] == CONTEXT)
            bound = lane_bound(lanes, g)
            table.append({"lanes": lanes, "group": g, "context": CONTEXT, "cycles": row["cycles"],
                          "efficiency": row["efficiency"], "lane_bound": bound,
                          "of_bound": row["efficiency"] / bound,
                          "steady_state_efficiency": fits[g]["steady_state_efficiency"] if g in fits else None,
                          "meets": row["efficiency"] >= TARGET * bound})
    print(f"\nattention, 512-bit port, d = 128, fp16 cache, 2 x 2 heads, context {CONTEXT}, on {memory}: "
          f"port efficiency (its steady state) / lane bound min(1, L / 32G); target >= {TARGET} of the bound")
    print(f"{'L':>4} " + " ".join(f"{'G = ' + str(g):>22}" for g in groups))
    for lanes in lanes_list:
        cells = []
        for g in groups:
            t = next(x for x in table if x["lanes"] == lanes and x["group"] == g)
            steady = f"({t['steady_state_efficiency']:.3f})" if t["steady_state_efficiency"] else ""
            cells.append(f"{t['efficiency']:.3f}{steady} {t['of_bound']:.2f}{'' if t['meets'] else '!'}")
        print(f"{lanes:>4} " + " ".join(f"{c:>22}" for c in cells))
    out = perf / f"attention-lanes-{memory}.json"
    out.write_text(json.dumps({"memory": memory, "target_of_bound": TARGET, "table": table,
                               "runs": {str(k): v for k, v in runs.items()}}, indent=2))
    print(f"wrote {out}")
    return 0 if all(t["meets"] for t in table) else 1


if __name__ == "__main__":
    raise SystemExit(main())
