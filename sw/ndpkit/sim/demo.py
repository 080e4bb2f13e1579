"""`make demo`: a memory-to-memory copy on the simulated card, through every bus block.

Builds the CopyDemo device (AXI4-Lite CSR block -> burst reader -> burst writer ->
AXI4 interconnect -> card memory model) with Verilator, runs it under cocotb, and
prints what it did: the copy, three rejected commands and a copy after them.
"""
from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path

from .runner import Design, run_bench


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--length", type=int, default=256 * 1024, help="bytes to copy (default 256 KiB)")
    ap.add_argument("--latency", type=int, default=64, help="memory read latency in cycles (default 64)")
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args(argv)
    from ndpkit_hw.demo import CopyDemo

    data_width, mem_size = 512, 1 << 20
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    params = dict(data_width=data_width, mem_size=mem_size, length=args.length, seed=seed,
                  read_latency=args.latency)
    design = Design(CopyDemo(data_width=data_width, mem_size=mem_size, read_latency=args.latency), "copy_demo")
    print(f"ndpkit demo: building the copy device (512-bit AXI4, {mem_size >> 10} KiB card memory, "
          f"{args.latency}-cycle read latency) and running it in Verilator ...", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "demo.json"
        run_bench(design, "ndpkit.sim.demo_bench", params=params, seed=seed,
                  extra_env={"NDP_RESULT_FILE": str(out)})
        report = json.loads(out.read_text())

    peak = data_width // 8
    print(f"\n{'what':<20}{'src':>10}{'dst':>10}{'bytes':>9}{'status':>15}{'cycles':>9}"
          f"{'B/cycle':>9}{'of peak':>9}{'sim cyc/s':>11}")
    for run in report["runs"]:
        cycles = run["cycles"]
        rate = run["bytes_written"] / cycles if cycles and run["bytes_written"] else 0.0
        speed = cycles / run["wall_seconds"] if run["wall_seconds"] > 0 and cycles > 100 else 0
        print(f"{run['what']:<20}{run['src']:>#10x}{run['dst']:>#10x}{run['length']:>9}{run['error']:>15}"
              f"{cycles:>9}{rate:>9.2f}{rate / peak:>9.3f}{speed:>11,.0f}")
    print(f"\nEvery copy was checked word for word through the memory backdoor; the rejected commands "
          f"wrote nothing,\nthe guard pages around the destination are intact, and the device kept working "
          f"after each error.\n(peak = {peak} B/cycle: one 512-bit beat per cycle; a copy reads and writes "
          f"the same memory port concurrently, seed {seed})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
