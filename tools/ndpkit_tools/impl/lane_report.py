"""The attention engine's MAC lanes alone: UltraScale+ LUT, FF and DSP a lane, and logic
levels, from the same flow as `make impl-report` (:func:`ndpkit_tools.impl.flow.implement`,
Yosys ``synth_xilinx``, the block in ``ImplWrapper``).

The score side's lanes are its :class:`~ndpkit_hw.engines.attention.score.ScoreDots` of
one unit (a KeyAlign into a FixedDot, with the register stage between them where the q
bank is read), synthesised at 16 and 32 lanes: the difference over 16 is a lane's cost, the rest the unit's (the row's
accumulator and rounding, the wrapper's I/O).  The value side's lanes are its
:class:`~ndpkit_hw.engines.attention.value.WeightedRows` of one unit (each element's
block-fixed aligner into a WeightedSums lane) at 16 and 32 lanes.  Rows measured
before a redesign stay in docs/impl_lanes.json as the "before" figures.

    python -m ndpkit_tools.impl.lane_report [--report] [--block score|value]
"""
from __future__ import annotations

import argparse
import json

from ndpkit_tools.paths import build_root, source_root

__all__ = ["score_lanes", "markdown_section", "results_path", "load_results"]

WIDTHS = (16, 32)


def results_path():
    return source_root() / "docs" / "impl_lanes.json"


def load_results() -> dict:
    """The rows measured so far (docs/impl_lanes.json), or none."""
    path = results_path()
    return json.loads(path.read_text()) if path.exists() else {}


def score_lanes(lanes: int):
    """The score side's dot products of one unit (KeyAlign into FixedDot), as the score
    side builds them (its q bank's depth at 16 query heads and d = 128)."""
    from ndpkit_hw.engines.attention.score import ScoreDots
    return ScoreDots(columns=lanes, units=1, max_row_beats=8, tag_width=16, q_depth=2 * 16 * (128 // lanes))


def value_lanes(lanes: int):
    """The value side's weighted sums of one unit (the V aligner into WeightedSums), as
    the value side builds them."""
    from ndpkit_hw.engines.attention.value import WeightedRows
    return WeightedRows(columns=lanes, units=1)


BLOCKS = {"score: KeyAlign + FixedDot": score_lanes, "value: WeightedRows": value_lanes}


def per_lane(rows: dict) -> dict:
    """A lane's cost from the two widths, and the unit's."""
    a, b = (rows[str(w)]["xcup"] for w in WIDTHS)
    span = WIDTHS[1] - WIDTHS[0]
    lane = {k: (b[k] - a[k]) / span for k in ("LUT", "FF", "DSP")}
    return {"lane": lane, "unit": {k: a[k] - WIDTHS[0] * lane[k] for k in lane}}


def markdown_section(results: dict) -> list[str]:
    """The MAC lanes' table for docs/impl_report.md."""
    if not results:
        return []
    out = ["", "## Attention MAC lanes (UltraScale+ estimate; `python -m ndpkit_tools.impl.lane_report`)", "",
           "Each side's lane block alone at 16 and 32 lanes in the wrapper; a lane = the difference over 16 lanes, "
           "the unit = the rest (its row accumulator and rounding, the wrapper's I/O).  Target: ≤ 200 LUT and "
           "≤ 1 DSP48E2 a lane.", "",
           "| block | when | LUT at 16 / 32 lanes | LUT a lane | FF a lane | DSP a lane | unit LUT | levels |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, entry in results.items():
        for when in ("before", "now"):
            rows = entry.get(when)
            if not rows:
                continue
            cost = per_lane(rows)
            luts = " / ".join(f"{rows[str(w)]['xcup']['LUT']:,}" for w in WIDTHS)
            lv = max(rows[str(w)]["levels"] for w in WIDTHS)
            label = entry.get(f"{when}_label", when)
            out.append(f"| {name} | {label} | {luts} | {cost['lane']['LUT']:.0f} | {cost['lane']['FF']:.0f} | "
                       f"{cost['lane']['DSP']:g} | {cost['unit']['LUT']:.0f} | {lv} |")
    return out


def main(argv=None) -> int:
    from ndpkit_tools.impl.flow import implement
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", action="store_true", help="no tool runs: print the table from the JSON")
    ap.add_argument("--block", choices=[name.split(":")[0] for name in BLOCKS], action="append",
                    help="measure only this side (again for more; default: both)")
    args = ap.parse_args(argv)
    results = load_results()
    if not args.report:
        for name, make in BLOCKS.items():
            if args.block and name.split(":")[0] not in args.block:
                continue
            rows = {}
            for w in WIDTHS:
                out = implement(make(w), build_root() / "impl" / "lanes" / f"{name.split(':')[0]}{w}",
                                target_mhz=250, ecp5=False)
                rows[str(w)] = {"xcup": out["xcup"], "levels": out["xcup_depth"]["fabric_levels"]}
            results.setdefault(name, {})["now"] = rows
        results_path().write_text(json.dumps(results, indent=1) + "\n")
    print("\n".join(markdown_section(results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
