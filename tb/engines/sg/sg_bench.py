"""Scatter-gather benchmark (part of `make perf` / `make bench`): raw gather throughput
of the memory-side unit, row gathers (Piccolo) against 64-byte line reads (the
baseline), for random 4-byte elements of a 1 MiB table at several densities (elements
per 2 KiB DRAM row), at memory latencies of 64 and 200 cycles, over a link of 16 bytes
per cycle each way.

Both modes fetch the same elements: the gather mode sends the driver's row requests
(``ndpkit.engines.sg.golden.group_by_row``: up to 16 elements of one row per request); the
baseline reads every distinct 64-byte line that holds a wanted element, once (a
perfectly coalescing line cache).  Cycles from the first request to the last
response; the unit's counters give link bytes, useful bytes, row activations and
column accesses.  Useful elements per cycle are set against the link's peak for 4-byte
elements (16 B/cycle = 4 elements per cycle).  Writes build/perf/sg.json.
"""
from __future__ import annotations

import json
import os

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge

from ndpkit.engines.sg import golden
from ndpkit_tools.sim.bench import (StreamSink, StreamSource, bench_params, memory_stats, start_clock_and_reset,
                                   stats_delta, unpack)

TABLE = 1 << 20
ROW = 2048
LINK_BYTES = 16
OUT_NAME = "sg.json"


def requests_for(mode: str, indices: np.ndarray) -> list[dict]:
    """The link requests that fetch ``indices`` (4-byte elements of a table at 0)."""
    if mode == "gather":
        return [{"op": int(golden.Op.ROW_GATHER), "size": 4, "count": len(offs), "address": row,
                 "offsets": sum(int(o) << (16 * j) for j, o in enumerate(offs)), "data": 0}
                for row, offs, _ in golden.group_by_row(indices * 4, 4, ROW)]
    lines = np.unique(indices * 4 // 64) * 64
    return [{"op": int(golden.Op.LINE_READ), "size": 0, "count": 0, "address": int(a), "offsets": 0, "data": 0}
            for a in lines]


@cocotb.test(timeout_time=3600, timeout_unit="sec")
async def sg_throughput(dut):
    from ndpkit_hw.engines.sg.unit import ResponseLayout, SgUnit, request_layout
    p = bench_params()
    source = StreamSource(dut, "req", request_layout(32))
    sink = StreamSink(dut, "resp", ResponseLayout)
    dut.clear.value = 0
    dut.error_base.value = 0
    dut.error_size.value = 0
    await start_clock_and_reset(dut)
    counter_layout = SgUnit().signature.members["counters"].shape
    rng = np.random.default_rng(1)
    rows = []
    for latency in p["latencies"]:
        dut.read_latency.value = latency
        dut.write_latency.value = latency
        for density in p["densities"]:
            indices = rng.choice(TABLE // 4, size=density * (TABLE // ROW), replace=False)
            for mode in ("gather", "line"):
                reqs = requests_for(mode, indices)
                dut.clear.value = 1
                await RisingEdge(dut.clk)
                dut.clear.value = 0
                before = memory_stats(dut.memory, preset=p.get("memory"))
                for r in reqs:
                    source.send(r)
                cycles = 0
                while len(sink.items) < len(reqs):
                    await RisingEdge(dut.clk)
                    cycles += 1
                assert all(item["error"] == 0 for item in sink.items)
                sink.items.clear()
                c = unpack(counter_layout, int(dut.counters.value))
                real = stats_delta(memory_stats(dut.memory, preset=p.get("memory")), before)
                useful = 4 * len(indices)
                rows.append({"mode": mode, "latency": latency, "elements_per_row": density,
                             "elements": len(indices), "requests": len(reqs), "cycles": cycles,
                             "link_bytes": c["link_bytes"], "useful_bytes": useful,
                             "useful_fraction": useful / c["link_bytes"], "activations": c["activations"],
                             "column_accesses": c["column_accesses"], "elements_per_cycle": len(indices) / cycles,
                             "link_peak_elements_per_cycle": p["link_bytes"] / 4,
                             "link_efficiency": len(indices) / cycles / (p["link_bytes"] / 4), **real})
                dut._log.info(f"{mode} L={latency} {density}/row: {cycles} cycles, "
                              f"{rows[-1]['elements_per_cycle']:.3f} elements/cycle")
    with open(p["out"], "w") as f:
        json.dump(rows, f, indent=1)


def main() -> int:
    from ndpkit_tools.sim.runner import Design, run_bench
    from ndpkit_tools.paths import build_root
    from ndpkit_hw.engines.sg.harness import SgHarness
    from ndpkit_hw.engines.sg.unit import SgUnit
    quick = os.environ.get("QUICK", "0") not in ("", "0")
    memory = os.environ.get("MEMORY") or None        # a DRAM preset: one run, the latency ports unused
    out = build_root() / "perf" / (OUT_NAME if memory is None else OUT_NAME.replace(".json", f"-{memory}.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    params = {"latencies": [0] if memory else [64, 200], "densities": [1, 4, 16] if quick else [1, 2, 4, 8, 16],
              "link_bytes": LINK_BYTES, "out": str(out), "memory": memory}
    # enough requests in flight to cover a 200-cycle latency at the link's rate, and a
    # memory that queues as many column reads (a DRAM's banks work in parallel)
    unit = SgUnit(row_bytes=ROW, link_bytes=LINK_BYTES, max_inflight=64)
    run_bench(Design(SgHarness(unit, mem_size=TABLE, max_outstanding=256, memory=memory),
                     "sg_unit_perf" if memory is None else f"sg_unit_perf_{memory}",
                     key=f"perf {ROW} {LINK_BYTES} 64 256 {TABLE} {memory}"), "tb.engines.sg.sg_bench", params=params)
    rows = json.loads(out.read_text())
    print(f"\nscatter-gather unit: random 4-byte elements of a 1 MiB table, 2 KiB rows, link {LINK_BYTES} B/cycle "
          f"each way (peak {LINK_BYTES // 4} elements/cycle)")
    print(f"{'latency':>7} {'el/row':>6} {'mode':>6} {'requests':>8} {'cycles':>8} {'el/cycle':>9} {'of peak':>8} "
          f"{'link B':>9} {'useful/link':>11} {'activations':>11} {'speed-up':>8} {'AXI B/el':>9}"
          + (f" {'DRAM ns/el':>10} {'ACT/el':>7}" if memory else ""))
    for r in rows:
        other = next(x for x in rows if x["latency"] == r["latency"] and
                     x["elements_per_row"] == r["elements_per_row"] and x["mode"] == "line")
        speedup = other["cycles"] / r["cycles"]
        r["speedup_vs_line"] = speedup
        print(f"{r['latency']:>7} {r['elements_per_row']:>6} {r['mode']:>6} {r['requests']:>8} {r['cycles']:>8} "
              f"{r['elements_per_cycle']:>9.3f} {r['link_efficiency']:>8.3f} {r['link_bytes']:>9} "
              f"{r['useful_fraction']:>11.3f} {r['activations']:>11} {speedup:>7.2f}x "
              f"{(r['axi_read_bytes'] + r['axi_write_bytes']) / r['elements']:>9.1f}"
              + (f" {r['dram_bus_ns'] / r['elements']:>10.2f} {r['dram_activations'] / r['elements']:>7.3f}"
                 if memory else ""))
    out.write_text(json.dumps(rows, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
