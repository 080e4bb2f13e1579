"""Performance bench: read and write engine efficiency against the memory model.

The engine and the memory model are both gateware (``DmaPerfHarness``), so one
command of ``transfer`` bytes runs with no per-cycle Python; the engine's own
counters give the bytes moved and the busy cycles.  efficiency = bytes per busy
cycle / bus bytes per cycle (the port's peak; 1.0 is the physical limit).  The
memory latency is swept at run time.  Results are written as JSON to the file
named by ``NDP_RESULT_FILE``; ``python -m tb.bus.dma_perf_report`` runs the full sweep and
prints the table.  The pytest entry asserts the foundation's target as a
cycle-count bound: >= 0.95 of peak with 4 KiB bursts at 200 cycles of latency.
"""
import json
import os
import time

import cocotb
import pytest
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge

from ndpkit_tools.sim.bench import bench_params, pack, start_clock_and_reset


@cocotb.test(timeout_time=1, timeout_unit="sec")
async def efficiency(dut):
    from ndpkit_hw.bus.dma import DmaCommandLayout
    p = bench_params()
    word = p["data_width"] // 8
    dut.clear_counters.value = 0
    dut.status_ready.value = 1
    dut.cmd_valid.value = 0
    if p["engine"] == "read":
        dut.data_ready.value = 1
    else:
        dut.data_valid.value = 1
        dut.data_payload.value = (((1 << word) - 1) << p["data_width"]) | 0x5A5A
    await start_clock_and_reset(dut)
    results = []
    for latency in p["latencies"]:
        dut.read_latency.value = latency
        dut.write_latency.value = latency
        dut.clear_counters.value = 1
        await ClockCycles(dut.clk, 1)
        dut.clear_counters.value = 0
        await ClockCycles(dut.clk, 1)
        dut.cmd_payload.value = pack(DmaCommandLayout(32), {"addr": 0, "length": p["transfer"]})
        dut.cmd_valid.value = 1
        while True:
            await RisingEdge(dut.clk)
            if int(dut.cmd_ready.value):
                break
        dut.cmd_valid.value = 0
        started = time.perf_counter()
        await FallingEdge(dut.busy)
        wall = time.perf_counter() - started
        await ClockCycles(dut.clk, 2)
        moved, cycles = int(dut.bytes_count.value), int(dut.busy_cycles.value)
        assert moved == p["transfer"], f"moved {moved} of {p['transfer']} bytes"
        results.append({
            "engine": p["engine"], "data_width": p["data_width"], "max_burst_bytes": p["max_burst_bytes"],
            "max_outstanding": p["max_outstanding"], "latency": latency, "bytes": moved, "cycles": cycles,
            "bytes_per_cycle": moved / cycles, "efficiency": moved / (cycles * word),
            "sim_cycles_per_second": cycles / wall if wall > 0 else None,
        })
        dut._log.info("%s burst %d B latency %d: %.3f of peak (%d cycles, %.0f cycles/s)", p["engine"],
                      p["max_burst_bytes"], latency, results[-1]["efficiency"], cycles,
                      results[-1]["sim_cycles_per_second"] or 0)
    out = os.environ.get("NDP_RESULT_FILE")
    if out:
        with open(out, "w") as f:
            json.dump(results, f, indent=1)
    for r in results:
        if "min_efficiency" in p and r["latency"] == p["assert_latency"]:
            assert r["efficiency"] >= p["min_efficiency"], \
                f"{r['engine']}: {r['efficiency']:.3f} of peak < {p['min_efficiency']} at latency {r['latency']}"


def perf_design(p):
    from ndpkit_tools.sim.runner import Design
    from ndpkit_hw.bus.dma_harness import DmaPerfHarness
    return Design(DmaPerfHarness(engine=p["engine"], data_width=p["data_width"],
                                 max_burst_bytes=p["max_burst_bytes"], max_outstanding=p["max_outstanding"],
                                 mem_size=p["mem_size"]),
                  f"dma_perf_{p['engine']}")


def perf_params(engine, max_burst_bytes, *, data_width=512, max_outstanding=8, latencies=(2, 64, 200),
                transfer=1 << 20):
    return dict(engine=engine, data_width=data_width, max_burst_bytes=max_burst_bytes,
                max_outstanding=max_outstanding, latencies=list(latencies), transfer=transfer,
                mem_size=transfer)


@pytest.mark.sim
@pytest.mark.parametrize("engine", ["read", "write"])
def test_efficiency_4k_bursts_200_cycles(engine):
    from ndpkit_tools.sim.runner import run_bench
    p = perf_params(engine, 4096, latencies=(200,), transfer=1 << 19)
    p.update(min_efficiency=0.95, assert_latency=200)
    run_bench(perf_design(p), __name__, params=p)
