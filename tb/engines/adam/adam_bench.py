"""adam engine benchmark (part of `make perf` and `make bench`): elements per cycle and
port efficiency of dense and stream-decompressed (sparse) updates at a 200-cycle memory
latency on a 512-bit port (128-bit with QUICK=1), next to PyTorch's AdamW on this
machine's CPU.

The port-limited bound of an update is its busier direction (AXI reads and writes
move on separate channels): reads of p, m, v and an fp32 gradient are 16 bytes per
element, so 4 elements per cycle at 64 B/cycle (fp16/bf16 gradients: 14 bytes, 4.57
elements per cycle; a quarter of that on a 128-bit port); a sparse gradient of density d reads 12 + d * (4 + value bytes)
per element (fp32 values: 12 + 8 d); writes are 12 bytes, 14 with the 16-bit copy,
which then bounds the sparse update.  The engine's lanes (the port's element rate at
fp32 gradients: 4 at 512 bits) bound it too: 16-bit and sparse gradients read less
than 16 bytes per element, so there the lanes, not the port, are the limit.
Efficiency = measured elements per cycle / min(port bound, lanes).
The engine alone with the memory model (no shell); cycles from the command's
acceptance to its completion.  Writes build/perf/adam.json.  QUICK=1: the 128-bit
engine and fewer elements.

MEMORY=hbm2_pc (or ddr4_2400): the same cases on that DRAM preset (the engine at the
boards' 200 MHz behind the card's clock crossing), written to adam-<preset>.json, each
case also against the memory bound: reads and writes share one data bus, so an update
moving r + w bytes an element runs at most at the preset's peak / (r + w).
"""
from __future__ import annotations

import json
import os
import time

import cocotb
import numpy as np

from ndpkit.engines.adam.golden import Format, scalars_for_step
from ndpkit_spec.engines.adam import BLOCK as ADAM
from ndpkit_tools.impl.clock import registry_config, supported_clock
from ndpkit_tools.sim.bench import BulkBackdoor, StreamSink, StreamSource, bench_params, start_clock_and_reset

DENSITIES = (0.01, 0.02, 0.05, 0.10)

OUT_NAME = "adam.json"


@cocotb.test(timeout_time=3600, timeout_unit="sec")
async def adam_throughput(dut):
    from ndpkit_hw.shell.engine_frontend import CompletionLayout, command_layout
    p = bench_params()
    source = StreamSource(dut, "cmd", command_layout(ADAM))
    sink = StreamSink(dut, "cpl", CompletionLayout)
    await start_clock_and_reset(dut)
    rows = []
    n = p["elements"]
    arr = n * 4
    word = p["data_width"] // 8
    memory = BulkBackdoor(dut.memory.storage, dut.clk, word)
    rng = np.random.default_rng(1)
    cases = [(grad, copy, None) for grad, copy in ((Format.FP32, 0), (Format.FP16, Format.FP16),
                                                  (Format.BF16, Format.BF16))]
    cases += [(Format.FP32, 0, d) for d in DENSITIES] + [(Format.FP16, 0, 0.05), (Format.FP32, Format.FP16, 0.05)]
    if p.get("dense_only"):
        cases = cases[:1]
    # the dense fp32 update over the latency sweep, then every case at the main latency
    jobs = [(lat, cases[0]) for lat in p.get("sweep_latencies", ()) if lat != p["latency"]]
    for latency, (grad, copy, density) in jobs + [(p["latency"], c) for c in cases]:
        dut.read_latency.value = latency
        dut.write_latency.value = latency
        fields = {"format_mode": 0, "format_grad": int(grad), "format_copy": int(copy), "format_sparse": 0,
                  "count": n, "pairs": 0, "idx": 0, "tag": 1, "p": 0, "m": arr, "v": 2 * arr, "g": 3 * arr,
                  "copy": 4 * arr, **scalars_for_step(1, lr=1e-3).bits()}
        value_bytes = 4 if grad == Format.FP32 else 2
        read_bytes = 12 + value_bytes
        if density is not None:
            k = round(density * n)
            indices = np.sort(rng.choice(n, size=k, replace=False)).astype(np.uint32)
            raw = indices.tobytes()
            await memory.write(5 * arr, raw + bytes(-len(raw) % word))
            fields.update(format_sparse=1, pairs=k, idx=5 * arr)
            read_bytes = 12 + density * (4 + value_bytes)
        t0 = time.perf_counter()
        source.send(fields)
        cpl, cycles = await sink.timed_receive()
        assert cpl["error"] == 0, cpl
        write_bytes = 12 + (2 if copy else 0)
        port_bound = word / max(read_bytes, write_bytes)       # reads and writes use separate AXI channels
        bound = min(port_bound, p["lanes"])
        rows.append({"grad": grad.name, "copy": copy.name if copy else "none",
                     "density": density, "elements": n, "cycles": cycles,
                     "elements_per_cycle": n / cycles, "port_bound": port_bound, "lanes": p["lanes"],
                     "bound": bound, "efficiency": n / cycles / bound,
                     "read_bytes_per_element": read_bytes, "write_bytes_per_element": write_bytes, "latency": latency,
                     "data_width": p["data_width"], "sim_cycles_per_second": cycles / (time.perf_counter() - t0)})
    with open(p["out"], "w") as f:
        json.dump(rows, f, indent=2)


def cpu_adamw(n: int, steps: int = 5) -> list[dict]:
    """PyTorch AdamW on this machine's CPU (fp32 p, m, v, g), elements per second:
    the best of the foreach and fused implementations, and the single-tensor loop."""
    try:
        import torch
    except ImportError:
        return []
    rows = []
    threads = torch.get_num_threads()
    for impl, kw in (("foreach", {"foreach": True}), ("fused", {"fused": True}), ("for-loop", {"foreach": False})):
        p = torch.nn.Parameter(torch.randn(n))
        p.grad = torch.randn(n) * 1e-2
        try:
            opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01, **kw)
            opt.step()                                   # warm-up, allocates the state
        except (RuntimeError, TypeError) as e:
            rows.append({"impl": impl, "error": str(e).splitlines()[0]})
            continue
        t0 = time.perf_counter()
        for _ in range(steps):
            opt.step()
        seconds = (time.perf_counter() - t0) / steps
        rows.append({"impl": impl, "elements": n, "seconds_per_step": seconds, "elements_per_second": n / seconds,
                     "threads": threads, "torch": torch.__version__,
                     "load_average": os.getloadavg()[0]})     # other jobs on the cores slow the CPU side
    return rows


def host_link_table() -> list[dict]:
    """Host-link bytes per element and step: ZeRO-Infinity-style offload (p, m, v read
    from and written back to the SSD through the host: 24 B; fp16 gradient down, fp16
    parameters up: 4 B) against the near-storage step (p, m, v move SSD <-> card peer to
    peer; the host link carries the fp16 gradient or its pairs and the fp16 copy)."""
    rows = [{"scheme": "ZeRO-Infinity-style offload", "bytes_per_element": 24 + 2 + 2}]
    rows.append({"scheme": "near-storage, dense fp16 gradient", "bytes_per_element": 2 + 2})
    for d in DENSITIES:
        rows.append({"scheme": f"near-storage, top-{d:.0%} (int32 index + fp16 value)",
                     "bytes_per_element": d * (4 + 2) + 2})
    for r in rows:
        r["vs_offload"] = rows[0]["bytes_per_element"] / r["bytes_per_element"]
    return rows


def main() -> int:
    from ndpkit_tools.sim.runner import Design, run_bench
    from ndpkit_tools.paths import build_root
    from ndpkit_hw.engines.adam.engine import AdamEngine
    from ndpkit_spec.engines.adam import port_lanes
    from ndpkit_hw.engines.harness import EngineHarness
    quick = os.environ.get("QUICK", "0") not in ("", "0")
    memory = os.environ.get("MEMORY") or None
    out = build_root() / "perf" / (OUT_NAME if memory is None else OUT_NAME.replace(".json", f"-{memory}.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    width = 128 if quick else 512
    lanes = port_lanes(width)
    params = {"data_width": width, "lanes": lanes, "latency": 200, "sweep_latencies": [] if memory else [2, 64],
              "elements": (1 << 14) if quick else (1 << 18), "out": str(out)}
    if memory:
        return memory_main(memory, width, lanes, params, out)
    print(f"adam benchmark: building the {width}-bit engine ({lanes} lanes) once; the first build takes "
          "several minutes")
    run_bench(Design(EngineHarness(AdamEngine(data_width=width), mem_size=params["elements"] * 24 + (1 << 16)),
                     f"adam_engine_{width}", key=f"w{width} x{lanes} {params['elements']}"), "tb.engines.adam.adam_bench",
              params=params)
    rows = json.loads(out.read_text())
    print(f"\nadam engine, {width}-bit port ({width // 8} B/cycle), {lanes} lanes, memory latency "
          f"{params['latency']} cycles; bound = min(port bound, lanes)")
    print(f"{'grad':>6} {'copy':>6} {'density':>8} {'elements':>9} {'cycles':>8} {'read B/el':>10} "
          f"{'write B/el':>11} {'elem/cycle':>11} {'port':>6} {'bound':>6} {'efficiency':>11}")
    for r in rows:
        if r["latency"] != params["latency"]:
            continue
        dens = "dense" if r["density"] is None else f"{r['density']:.0%}"
        print(f"{r['grad']:>6} {r['copy']:>6} {dens:>8} {r['elements']:>9} {r['cycles']:>8} "
              f"{r['read_bytes_per_element']:>10.2f} {r['write_bytes_per_element']:>11} {r['elements_per_cycle']:>11.3f} {r['port_bound']:>6.2f} {r['bound']:>6.2f} "
              f"{r['efficiency']:>11.3f}")
    cpu = cpu_adamw((1 << 22) if quick else (1 << 24))
    sweep = [r for r in rows if r["grad"] == "FP32" and r["copy"] == "none" and r["density"] is None]
    print("dense fp32 update vs memory latency: " + ", ".join(
        f"{r['latency']} cycles {r['efficiency']:.3f}" for r in sweep))
    # the clock the configuration's timing evidence supports (never a stated one)
    clock = supported_clock("adam", registry_config("adam", data_width=params["data_width"]))
    dense = sweep[-1]["elements_per_cycle"] * clock.mhz * 1e6
    if cpu:
        print(f"\nagainst PyTorch AdamW on this CPU (fp32, {cpu[0].get('elements', 0)} elements, "
              f"{cpu[0].get('threads', '?')} threads); the engine at {clock.text}, dense fp32 "
              f"gradient: {dense / 1e9:.2f} G elements/s (simulated cycles, not a measured card)")
        print(f"{'implementation':>16} {'elements/s':>12} {'engine / CPU':>13}")
        for r in cpu:
            if "error" in r:
                print(f"{r['impl']:>16}  unavailable: {r['error']}")
                continue
            print(f"{r['impl']:>16} {r['elements_per_second']:>12.3e} {dense / r['elements_per_second']:>12.1f}x")
    link = host_link_table()
    print("\nhost-link bytes per element and step")
    for r in link:
        print(f"  {r['scheme']:<48} {r['bytes_per_element']:>6.2f} B   {r['vs_offload']:>5.1f}x less")
    report = {"engine": rows, "cpu_adamw": cpu, "host_link": link, "clock_mhz": clock.mhz,
              "clock_evidence": clock.text}
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")
    return 0


ENGINE_MHZ = 200       # the board builds' engine clock


def memory_main(memory: str, width: int, lanes: int, params: dict, out) -> int:
    """The cases on a DRAM preset: elements per cycle against the lanes, the port and the
    memory's shared bus."""
    from ndpkit_tools.sim.runner import Design, run_bench
    from ndpkit_hw.engines.adam.engine import AdamEngine
    from ndpkit_hw.engines.harness import EngineHarness
    from ndpkit_spec.dram import preset
    timing = preset(memory)
    mem = params["elements"] * 24 + (1 << 16)
    bus = timing.peak_bytes_per_cycle(ENGINE_MHZ)           # the shared bus, bytes an engine cycle
    # the lane sweep: the port-sized engine, then half its lanes (lanes are a power of two),
    # the dense fp32 update only: where the memory, not the lanes, binds
    sweep = []
    for n in [x for x in (lanes // 2, lanes) if x >= 1]:
        part = out.with_name(out.stem + f"-x{n}.json")
        only = dict(params, lanes=n, out=str(part), dense_only=n != lanes)
        run_bench(Design(EngineHarness(AdamEngine(data_width=width, lanes=n), mem_size=mem, memory=memory,
                                       engine_mhz=ENGINE_MHZ),
                         f"adam_engine_{width}_x{n}_{memory}", key=f"w{width} x{n} {params['elements']} {memory}"),
                  "tb.engines.adam.adam_bench", params=only)
        got = json.loads(part.read_text())
        part.unlink()
        dense = next(r for r in got if r["density"] is None and r["grad"] == "FP32" and r["copy"] == "none")
        feeds = bus / (dense["read_bytes_per_element"] + dense["write_bytes_per_element"])
        sweep.append({"lanes": n, "elements_per_cycle": dense["elements_per_cycle"], "memory_bound": feeds,
                      "binds": "lanes" if n < feeds and dense["elements_per_cycle"] > 0.9 * n else "memory"})
        if n == lanes:
            rows = got
    print(f"\nadam dense fp32 on {memory}: lanes against what the memory feeds ({sweep[0]['memory_bound']:.2f} "
          "elements a cycle on its shared bus)")
    for r in sweep:
        print(f"  {r['lanes']} lanes: {r['elements_per_cycle']:.3f} elements/cycle, {r['binds']} bind")
    print(f"\nadam engine, {width}-bit port, {lanes} lanes, on {memory} ({timing.peak_bytes_per_s / 1e9:.1f} GB/s, "
          f"{bus:.1f} B per {ENGINE_MHZ} MHz cycle, reads and writes together)")
    print(f"{'grad':>6} {'copy':>6} {'density':>8} {'elem/cycle':>11} {'lanes/port':>11} {'memory':>7} "
          f"{'of memory bound':>16} {'lanes the memory feeds':>23}")
    for r in rows:
        r["memory"] = memory
        r["memory_bound"] = bus / (r["read_bytes_per_element"] + r["write_bytes_per_element"])
        r["of_memory_bound"] = r["elements_per_cycle"] / min(r["bound"], r["memory_bound"])
        dens = "dense" if r["density"] is None else f"{r['density']:.0%}"
        print(f"{r['grad']:>6} {r['copy']:>6} {dens:>8} {r['elements_per_cycle']:>11.3f} {r['bound']:>11.2f} "
              f"{r['memory_bound']:>7.2f} {r['of_memory_bound']:>16.3f} {r['memory_bound']:>23.2f}")
    out.write_text(json.dumps({"engine": rows, "memory": memory, "engine_mhz": ENGINE_MHZ,
                               "memory_bytes_per_cycle": bus, "lane_sweep": sweep}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
