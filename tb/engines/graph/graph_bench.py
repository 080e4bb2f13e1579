"""Graph benchmark (part of `make perf` / `make bench`): the graph engine in window mode
(source values from the on-chip source window, loaded with full bursts; Piccolo row
gathers for the sources beyond it), Piccolo mode (every source value by row gathers)
and baseline mode (64-byte line reads), on the same work, two kernels per graph: one connected-components iteration (every edge of the
symmetric graph pulls its source's label) and one PageRank iteration (the engine's
PageRank command with an iteration limit of 1: the contributions pass, the pull pass in
which every in-edge pulls its source's fp32 contribution, the update pass with the L1
change; only the pull pass differs between the modes), over Graph500 Kronecker and
uniform random graphs (edge factor 16) and networkx's real graphs.

The engine alone on the RTL memory model (512-bit port, 200-cycle latency, 256 requests
queued), its unit's
link 16 bytes per cycle each way, 2 KiB rows.  Per graph and mode: cycles of the
command (validation pass + one iteration) and of the validation pass alone (the same
command with its last row pointer not the edge count: the engine reads the row pointers
and columns whole, then refuses it; on the edge lanes, where the first edge pass judges
the columns, the row pointers with the window's load beside them), edges per cycle with and without the validation pass, link bytes, useful
bytes (4 per edge) ÷ link bytes, row activations; the speed-up is baseline cycles ÷
the mode's cycles, and the geometric mean over the (graph, kernel) pairs.  Each result is checked against the golden model.
Writes build/perf/graph.json.  QUICK=1: scales 10 and 12 (else 10, 12, 14);
GRAPH_SCALES=14,16,18 picks the scales (the memory model grows to hold them; scale 16
simulates for about half an hour on two cores, 18 for hours); GRAPH_KERNELS=pagerank,cc
and GRAPH_MODES=window,baseline pick kernels and modes (to re-measure a few rows: the
speed-up over baseline mode is then left out where that mode did not run), and with
GRAPH_BASE=<a recorded graph.json> their rows replace that run's same (graph, kernel,
mode) rows, the others kept as recorded, the summaries over the whole.
"""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import cocotb
import numpy as np

from ndpkit_spec.codes import ErrorCode
from ndpkit.engines.graph import golden
from ndpkit.engines.graph.golden import Program
from ndpkit_spec.engines.graph import BLOCK as GRAPH, WINDOW_VERTICES
from ndpkit_tools.sim.bench import (BulkBackdoor, StreamSink, StreamSource, bench_params, memory_stats,
                                   start_clock_and_reset, stats_delta, unpack)

MEM = 32 << 20
OUT_NAME = "graph.json"
KERNELS = ("cc", "pagerank", "spmv", "sssp")
#: (mode, format_mode, source window): the window holds as many of the first vertices as
#: the build's window takes; the other two fetch every source through the unit
MODES = (("window", 0, WINDOW_VERTICES), ("piccolo", 0, 0), ("baseline", 1, 0))


def chosen(name: str, every: tuple) -> tuple:
    """The items of ``every`` the environment variable ``name`` lists (all without it)."""
    picked = os.environ.get(name, "")
    if not picked:
        return every
    unknown = set(picked.split(",")) - set(every)
    if unknown:
        raise ValueError(f"{name}: {sorted(unknown)} are not among {list(every)}")
    return tuple(x for x in every if x in picked.split(","))


def scales(quick: bool) -> tuple[int, ...]:
    picked = os.environ.get("GRAPH_SCALES", "")
    return tuple(int(x) for x in picked.split(",")) if picked else (10, 12) if quick else (10, 12, 14)


def memory_bytes(quick: bool) -> int:
    """Room for the largest graph's arrays (about 160 bytes per vertex at edge factor 16)."""
    need = 160 << max(scales(quick))
    return max(MEM, 1 << (need - 1).bit_length())


def workloads(chosen_scales):
    from ndpkit.engines.graph import generators
    for scale in chosen_scales:
        yield f"kronecker-{scale}", generators.kronecker(scale, 16, seed=scale)
        yield f"uniform-{scale}", generators.uniform(scale, 16, seed=scale)
    for name in ("karate_club_graph", "les_miserables_graph"):
        yield name.replace("_graph", ""), generators.real_graph(name)


def _arrays(pull, kernel: str, *, renumber: bool):
    """(program, rowptr, col, val, initial values, the golden result) of one iteration
    of ``kernel`` over the pull graph; ``renumber``: the most-pulled sources first
    (csr.hot_first, as the driver numbers a graph larger than the window; CC's values
    stay the vertices' own ids; SpMV renumbers only the columns, its x reordered).
    SpMV: random fp32 entries and x (fixed seed); SSSP: one iteration from vertex 0
    (every edge is still pulled), the weights ``pull.values``."""
    from ndpkit.engines.graph import csr
    n = pull.n
    order = np.arange(n)
    rng = np.random.default_rng(n)
    if kernel == "spmv":                        # the same entries and x, renumbered or not
        entries = rng.standard_normal(len(pull.col)).astype(np.float32).view(np.uint32)
        vector = rng.standard_normal(n).astype(np.float32).view(np.uint32)
    if renumber:
        pull, order = csr.hot_first(pull, rows=kernel != "spmv")
    rowptr, col = pull.rowptr, pull.col
    if kernel == "cc":
        x = order.astype(np.uint32)
        return Program.CC, rowptr, col, None, x, golden.min_iteration(rowptr, col, x)
    if kernel == "spmv":
        x = vector[order]
        return Program.SPMV, rowptr, col, entries, x, golden.row_sums(rowptr, entries, x[col])
    if kernel == "sssp":
        x = np.full(n, golden.INF, np.uint32)
        x[0] = 0
        x = x[order]
        return Program.SSSP, rowptr, col, pull.values, x, golden.min_iteration(rowptr, col, x, pull.values)
    val = golden.out_degrees(n, col)            # PageRank's first iteration
    constants = golden.PageRankConstants.for_graph(n)
    x = np.full(n, constants.inv_n, np.uint32)
    return Program.PAGERANK, rowptr, col, val, x, golden.pagerank_iteration(rowptr, col, val, x, constants)[0]


@cocotb.test(timeout_time=36000, timeout_unit="sec")
async def graph_throughput(dut):
    from ndpkit_hw.engines.sg.unit import SgUnit
    from ndpkit_hw.shell.engine_frontend import CompletionLayout, command_layout
    p = bench_params()
    source = StreamSource(dut, "cmd", command_layout(GRAPH))
    sink = StreamSink(dut, "cpl", CompletionLayout)
    dut.read_latency.value = p["latency"]
    dut.write_latency.value = p["latency"]
    await start_clock_and_reset(dut)
    memory = BulkBackdoor(dut.memory.storage, dut.clk, 64)
    counters = SgUnit().signature.members["counters"].shape
    rows = []
    from ndpkit.engines.graph import csr, generators
    modes = [m for m in MODES if m[0] in p["modes"]]
    for (name, g), kernel in ((w, k) for w in workloads(p["scales"]) for k in p["kernels"]):
        # rebuilt here: the arrays are too big for the command line
        if kernel == "sssp":                    # random integer weights (a networkx graph: its adjacency)
            g = generators.random_weights(csr.adjacency(g, weight=None)[0] if csr.is_networkx(g) else g, 1, 100, seed=7)
        pull = csr.pull(g, kernel)
        n, e = pull.n, len(pull.col)
        program, rowptr, col, val, x, want = _arrays(pull, kernel, renumber=False)
        layout, addr = {}, 0
        for key, count in (("rowptr", n + 1), ("col", e), ("val", len(val) if val is not None else 0), ("a", n),
                           ("b", n), ("scratch", 2 * -(-n // 16) * 16 if kernel == "pagerank" else 0)):
            layout[key] = addr
            addr += -(-4 * count // 4096) * 4096
        assert addr <= p["mem"], name

        def image_of(rowptr, col, val, x):
            image = np.zeros(addr, np.uint8)
            for key, arr in (("rowptr", rowptr), ("col", col), ("val", val), ("a", x)):
                if arr is not None:
                    image[layout[key]:layout[key] + 4 * len(arr)] = arr.view(np.uint8)
            return image
        image = image_of(rowptr, col, val, x)
        validations = {}           # by whether the first edge pass judges the columns
        for mode, format_mode, window in modes:
            renumber = mode == "window" and kernel != "pagerank" and n > window
            if renumber:        # what the driver does for a graph beyond the window: hot sources first
                _, rowptr_w, col_w, val_w, x_w, want_w = _arrays(pull, kernel, renumber=True)
                image_w = image_of(rowptr_w, col_w, val_w, x_w)
            fields = {"format_program": int(program), "format_mode": format_mode, "n": n,
                      "edges": e, "rowptr": layout["rowptr"], "col": layout["col"], "val": layout["val"],
                      "a": layout["a"], "b": layout["b"], "max_iterations": 1, "tag": 1, "source_window": min(window, n)}
            if program == Program.PAGERANK:
                c = golden.PageRankConstants.for_graph(n)
                fields.update(scratch=layout["scratch"], damping=c.damping, teleport=c.teleport, inv_n=c.inv_n,
                              tolerance=c.tolerance)
            inline = golden.columns_judged_in_first_pass(fields)
            validation = validations.get(inline)
            if validation is None and e:
                # the validation pass alone: the last row pointer not the edge count is refused
                # after the pass (on the edge lanes: the row pointers only, the window loading
                # beside them, the columns judged in the edge pass; nothing else runs)
                bad = image.copy()
                bad[layout["rowptr"] + 4 * n:layout["rowptr"] + 4 * (n + 1)] = \
                    np.array([e + 1], np.uint32).view(np.uint8)
                await memory.write(0, bad.tobytes())
                source.send(fields)
                cpl, validation = await sink.timed_receive()
                assert cpl["error"] == ErrorCode.BAD_GRAPH, cpl
                validations[inline] = validation
            await memory.write(0, (image_w if renumber else image).tobytes())
            before = unpack(counters, int(dut.link.value))
            port_before = memory_stats(dut.memory, preset=p.get("memory"))
            t0 = time.perf_counter()
            source.send(fields)
            cpl, cycles = await sink.timed_receive()
            seconds = time.perf_counter() - t0
            assert cpl["error"] == 0 and cpl["aux"] & ~golden.CONVERGED == 1, cpl
            got = np.frombuffer(await memory.read(layout["b"], -(-4 * n // 64) * 64), np.uint32)[:n]
            assert np.array_equal(got, want_w if renumber else want), f"{name} {mode}: result differs from the golden model"
            after = unpack(counters, int(dut.link.value))
            delta = {k: after[k] - before[k] for k in after}
            real = stats_delta(memory_stats(dut.memory, preset=p.get("memory")), port_before)
            rows.append({"graph": name, "kernel": kernel, "mode": mode, "window": fields["source_window"],
                         "hot_first": renumber, "vertices": n,
                         "edges": e, "cycles": cycles, "validation_cycles": validation or 0,
                         "edges_per_cycle": e / cycles,
                         "edges_per_cycle_without_validation": e / (cycles - (validation or 0)),
                         "link_bytes": delta["link_bytes"],
                         "requests": delta["requests"], "useful_bytes": 4 * e,
                         # (none through the link: every source from the window)
                         "useful_fraction": 4 * e / delta["link_bytes"] if delta["link_bytes"] else None,
                         "activations": delta["activations"], "column_accesses": delta["column_accesses"],
                         "sim_cycles_per_second": cycles / seconds, **real})
            dut._log.info(f"{name} {kernel} {mode}: {cycles} cycles, {delta['link_bytes']} link bytes")
    with open(p["out"], "w") as f:
        json.dump(rows, f, indent=1)


def merged(recorded: list[dict], measured: list[dict]) -> list[dict]:
    """``recorded``'s rows with those ``measured`` again in their place (the same graph,
    kernel and mode), in the recorded order, the new ones after."""
    def key(r):
        return r["graph"], r["kernel"], r["mode"]
    again = {key(r): r for r in measured}
    rows = [again.pop(key(r), r) for r in recorded]
    return rows + [r for r in measured if key(r) in again]


def main() -> int:
    from ndpkit_tools.sim.runner import Design, run_bench
    from ndpkit_tools.paths import build_root
    from ndpkit_hw.engines.graph.engine import GraphEngine
    from ndpkit_hw.engines.harness import EngineHarness
    quick = os.environ.get("QUICK", "0") not in ("", "0")
    memory = os.environ.get("MEMORY") or None        # a DRAM preset: the latency ports unused
    out = build_root() / "perf" / (OUT_NAME if memory is None else OUT_NAME.replace(".json", f"-{memory}.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    mem = memory_bytes(quick)
    params = {"latency": 200, "scales": list(scales(quick)), "out": str(out), "mem": mem, "memory": memory,
              "kernels": list(chosen("GRAPH_KERNELS", KERNELS)),
              "modes": list(chosen("GRAPH_MODES", tuple(m[0] for m in MODES)))}
    print(f"graph benchmark: {len(list(workloads(scales(quick))))} graphs, window, Piccolo and baseline modes (the "
          "first build takes minutes)")
    # a memory controller that queues as many requests as a DRAM's banks serve in parallel (the
    # default 16 would let the streams' bursts starve the unit's single-column reads)
    engine = GraphEngine()
    run_bench(Design(EngineHarness(engine, mem_size=mem, max_outstanding=256, memory=memory),
                     "graph_engine_perf" if memory is None else f"graph_engine_perf_{memory}",
                     key=f"perf {mem} 256 {memory}"), "tb.engines.graph.graph_bench", params=params)
    rows = json.loads(out.read_text())
    if os.environ.get("GRAPH_BASE"):
        rows = merged(json.loads(Path(os.environ["GRAPH_BASE"]).read_text())["rows"], rows)
    print("\ngraph engine: one iteration of connected components (cc), PageRank, SpMV and SSSP (from vertex 0), "
          f"512-bit port, {'latency 200' if memory is None else memory + ' at 200 MHz'}, link 16 B/cycle, "
          f"2 KiB rows, 4 KiB source-value cache, {engine.window.vertices}-vertex source window; edges/cyc without "
          "the validation pass in brackets; AXI B/edge: bytes through the memory port (both ways)")
    print(f"{'graph':>16} {'kernel':>8} {'vertices':>8} {'edges':>8} {'mode':>9} {'cycles':>9} {'edges/cyc':>17} {'link B':>10} "
          f"{'useful/link':>11} {'activations':>11} {'speed-up':>8} {'AXI B/edge':>10}"
          + (f" {'DRAM ns/edge':>12} {'ACT/edge':>8}" if memory else ""))
    cache_values = 16 * engine.cache_lines
    speedups, beyond = [], []
    for r in rows:
        base = next((x for x in rows if x["graph"] == r["graph"] and x["kernel"] == r["kernel"]
                     and x["mode"] == "baseline"), None)
        r["speedup_vs_baseline"] = base and base["cycles"] / r["cycles"]
        if r["mode"] == "piccolo" and base:
            speedups.append(r["speedup_vs_baseline"])
            if r["vertices"] > cache_values:
                beyond.append(r["speedup_vs_baseline"])
        print(f"{r['graph']:>16} {r['kernel']:>8} {r['vertices']:>8} {r['edges']:>8} {r['mode']:>9} {r['cycles']:>9} "
              f"{r['edges_per_cycle']:>9.3f} ({r['edges_per_cycle_without_validation']:.3f}) {r['link_bytes']:>10} "
              f"{'–' if r['useful_fraction'] is None else format(r['useful_fraction'], '.3f'):>11} "
              f"{r['activations']:>11} "
              f"{'–' if r['speedup_vs_baseline'] is None else format(r['speedup_vs_baseline'], '.2f') + 'x':>8} "
              f"{(r['axi_read_bytes'] + r['axi_write_bytes']) / r['edges']:>10.1f}"
              + (f" {r['dram_bus_ns'] / r['edges']:>12.3f} {r['dram_activations'] / r['edges']:>8.3f}" if memory else ""))
    def geometric_mean(values):
        return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None
    geomean, geomean_beyond = geometric_mean(speedups), geometric_mean(beyond)
    window_rows = [r for r in rows if r["mode"] == "window"]
    piccolo = {(x["graph"], x["kernel"]): x for x in rows if x["mode"] == "piccolo"}
    window_over_piccolo = geometric_mean([piccolo[r["graph"], r["kernel"]]["cycles"] / r["cycles"]
                                          for r in window_rows if (r["graph"], r["kernel"]) in piccolo])
    if speedups:
        print(f"\nPiccolo mode over baseline mode: geometric mean {geomean:.2f}x over every (graph, kernel), "
              + (f"{geomean_beyond:.2f}x over the graphs larger than the {cache_values}-value cache, " if beyond else "")
              + f"max {max(speedups):.2f}x (Piccolo, HPCA 2025: 1.62x geomean, 3.28x max)")
    if window_over_piccolo:
        print(f"Window mode over Piccolo mode: geometric mean {window_over_piccolo:.2f}x")
    out.write_text(json.dumps({"rows": rows, "geomean": geomean, "geomean_beyond_cache": geomean_beyond,
                               "cache_values": cache_values, "max": max(speedups, default=None), "memory": memory,
                               "window_vertices": engine.window.vertices, "window_over_piccolo": window_over_piccolo,
                               "engine_mhz": 200}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
