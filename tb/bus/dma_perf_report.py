"""`make perf`: read/write engine efficiency vs memory latency and burst size.

Runs the ``efficiency`` bench of ``tb/bus/test_dma_perf.py`` for each engine and
maximum burst size (one cached Verilator build each, two at a time), with the
memory latency swept at run time, then prints the table and writes JSON to
``build/perf/dma_efficiency.json``.  Figures are simulated cycles of the RTL.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from ndpkit_tools.sim.runner import run_bench

from ndpkit_tools.paths import build_root
from ndpkit_tools.sim.verilator import verilator_version
from tb.bus.test_dma_perf import perf_design, perf_params

BURSTS = (256, 512, 1024, 2048, 4096)
LATENCIES = (2, 64, 200)


def _run(p: dict) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        run_bench(perf_design(p), "tb.bus.test_dma_perf", params=p, extra_env={"NDP_RESULT_FILE": str(out)})
        return json.loads(out.read_text())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="4 KiB and 256 B bursts only, 256 KiB transfers")
    ap.add_argument("--outstanding", type=int, default=8, help="bursts in flight (default 8)")
    ap.add_argument("--data-width", type=int, default=512)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--output", type=Path, default=build_root() / "perf" / "dma_efficiency.json")
    args = ap.parse_args(argv)
    bursts = (256, 4096) if args.quick else BURSTS
    transfer = (1 << 18) if args.quick else (1 << 20)
    jobs = [perf_params(engine, burst, data_width=args.data_width, max_outstanding=args.outstanding,
                        latencies=LATENCIES, transfer=transfer)
            for engine in ("read", "write") for burst in bursts]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        rows = [row for result in pool.map(_run, jobs) for row in result]

    peak = args.data_width // 8
    print(f"\nDMA engine efficiency = bytes per busy cycle / {peak} B per cycle (port peak), "
          f"{args.data_width}-bit bus, {args.outstanding} bursts outstanding, {transfer >> 10} KiB per command")
    header = f"{'engine':<7}{'burst':>8}" + "".join(f"{'lat ' + str(l):>10}" for l in LATENCIES)
    print(header)
    print("-" * len(header))
    for engine in ("read", "write"):
        for burst in bursts:
            cells = []
            for lat in LATENCIES:
                r = next(r for r in rows if (r["engine"], r["max_burst_bytes"], r["latency"]) == (engine, burst, lat))
                cells.append(f"{r['efficiency']:>10.3f}")
            print(f"{engine:<7}{str(burst) + ' B':>8}" + "".join(cells))
    speeds = [r["sim_cycles_per_second"] for r in rows if r["sim_cycles_per_second"]]
    speed = statistics.median(speeds) if speeds else 0.0
    print(f"\nsimulation speed: median {speed:,.0f} device cycles per wall second "
          f"(min {min(speeds):,.0f}, max {max(speeds):,.0f})")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "what": "DMA burst engine efficiency vs memory latency and max burst size (simulated RTL cycles)",
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "cpus": os.cpu_count()},
        "tools": {"verilator": verilator_version()},
        "params": {"data_width": args.data_width, "max_outstanding": args.outstanding, "transfer": transfer,
                   "latencies": list(LATENCIES), "bursts": list(bursts)},
        "rows": rows,
        "sim_cycles_per_second_median": speed,
    }
    args.output.write_text(json.dumps(report, indent=1))
    print(f"JSON: {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
