"""adam engine benchmark (part of `make perf` once built): elements per cycle and port
efficiency of dense updates at a 200-cycle memory latency on a 512-bit port.

The port-limited bound of a dense update is the read side: p, m, v and an fp32
gradient are 16 bytes per element, so 4 elements per cycle at 64 B/cycle (fp16/bf16
gradients: 14 bytes, 4.57 elements per cycle); writes (12 B + the 16-bit copy) are
below it.  Efficiency = measured elements per cycle / that bound.  The engine alone
with the memory model (no shell); cycles from the command's acceptance to its
completion.  Writes build/perf/adam.json.  QUICK=1 uses fewer elements.
"""
from __future__ import annotations

import json
import os

import cocotb
from cocotb.triggers import RisingEdge

from ndpkit.golden.adam import Format, scalars_for_step
from ndpkit.regs.blocks import ADAM
from ndpkit.sim.bench import StreamSink, StreamSource, bench_params, start_clock_and_reset

OUT_NAME = "adam.json"


@cocotb.test(timeout_time=3600, timeout_unit="sec")
async def adam_throughput(dut):
    from ndpkit_hw.shell.engine_frontend import CompletionLayout, command_layout
    p = bench_params()
    source = StreamSource(dut, "cmd", command_layout(ADAM))
    sink = StreamSink(dut, "cpl", CompletionLayout)
    dut.read_latency.value = p["latency"]
    dut.write_latency.value = p["latency"]
    await start_clock_and_reset(dut)
    rows = []
    n = p["elements"]
    arr = n * 4
    for grad, copy in ((Format.FP32, 0), (Format.FP16, Format.FP16), (Format.BF16, Format.BF16)):
        fields = {"format_mode": 0, "format_grad": int(grad), "format_copy": int(copy), "count": n, "tag": 1,
                  "p": 0, "m": arr, "v": 2 * arr, "g": 3 * arr, "copy": 4 * arr,
                  **scalars_for_step(1, lr=1e-3).bits()}
        cycles = 0
        source.send(fields)
        while not sink.items:
            await RisingEdge(dut.clk)
            cycles += 1
        cpl = sink.items.popleft()
        assert cpl["error"] == 0, cpl
        read_bytes = 12 + (4 if grad == Format.FP32 else 2)
        bound = p["data_width"] // 8 / read_bytes
        rows.append({"grad": grad.name, "copy": copy.name if copy else "none", "elements": n, "cycles": cycles,
                     "elements_per_cycle": n / cycles, "bound": bound, "efficiency": n / cycles / bound,
                     "latency": p["latency"], "data_width": p["data_width"]})
    with open(p["out"], "w") as f:
        json.dump(rows, f, indent=2)


def main() -> int:
    from ndpkit.sim.runner import PROJECT_ROOT, Design, run_bench
    from ndpkit_hw.cores.adam.engine import AdamEngine
    from ndpkit_hw.cores.harness import EngineHarness
    quick = os.environ.get("QUICK", "0") not in ("", "0")
    out = PROJECT_ROOT / "build" / "perf" / OUT_NAME
    out.parent.mkdir(parents=True, exist_ok=True)
    params = {"data_width": 512, "latency": 200, "elements": (1 << 16) if quick else (1 << 18), "out": str(out)}
    print("adam benchmark: building the 512-bit engine (16 lanes) once; the first build takes several minutes")
    run_bench(Design(EngineHarness(AdamEngine(data_width=512), mem_size=params["elements"] * 20 + (1 << 16)),
                     "adam_engine_512"), "tb.adam.adam_bench", params=params)
    rows = json.loads(out.read_text())
    print(f"\nadam engine, dense update, 512-bit port, memory latency {params['latency']} cycles")
    print(f"{'grad':>6} {'copy':>6} {'elements':>9} {'cycles':>8} {'elem/cycle':>11} {'bound':>6} {'efficiency':>11}")
    for r in rows:
        print(f"{r['grad']:>6} {r['copy']:>6} {r['elements']:>9} {r['cycles']:>8} {r['elements_per_cycle']:>11.3f} "
              f"{r['bound']:>6.2f} {r['efficiency']:>11.3f}")
    print(f"wrote {out.relative_to(PROJECT_ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
