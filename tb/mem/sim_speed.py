"""Simulation speed of the card on each memory: ``python -m tb.mem.sim_speed`` copies
``--mib`` MiB on a simulated card with the ideal memory and with each DRAM preset and
writes device cycles per wall-clock second to build/perf/sim_speed.json (read by
:mod:`tb.mem.preset_report`)."""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

import ndpkit
from ndpkit_spec.dram import PRESETS
from ndpkit_tools.paths import build_root


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mib", type=int, default=16)
    args = ap.parse_args(argv)
    length = args.mib << 20
    data = np.random.default_rng(1).integers(0, 256, length, dtype=np.uint8)
    rows = []
    for memory in ("ideal", *PRESETS):
        with ndpkit.open(f"sim?memory={memory}&mem_size=64M") as dev:
            src, dst = dev.upload(data), dev.alloc(length)
            dev.copy(dst, src, length)                         # warm up
            t0, c0 = time.perf_counter(), dev.cycles()
            done = dev.copy(dst, src, length)
            seconds, cycles = time.perf_counter() - t0, dev.cycles() - c0
            assert done.ok and np.array_equal(dst.download(np.uint8, count=length), data)
            rows.append({"memory": memory, "bytes": length, "command_cycles": done.cycles,
                         "device_cycles": cycles, "seconds": seconds, "cycles_per_second": cycles / seconds})
            print(rows[-1], flush=True)
    ideal = rows[0]["cycles_per_second"]
    for r in rows:
        r["vs_ideal"] = r["cycles_per_second"] / ideal
    out = build_root() / "perf" / "sim_speed.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
