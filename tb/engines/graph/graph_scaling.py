"""Graph instances over memory channels (part of `make bench`, step ``graph_scaling``):
one graph split by rows over N = 1, 2, 4, 8 graph engine instances, each on its own
memory region with its own memory model (an HBM pseudo-channel's controller on the
``hbm2_pc`` preset), all started at once.

    python -m tb.engines.graph.graph_scaling                  # ideal memory: build/perf/graph_scaling.json
    MEMORY=hbm2_pc python -m tb.engines.graph.graph_scaling   # graph_scaling-hbm2_pc.json

The driver's split (:class:`ndpkit.engines.graph.api.SlicedGraph`): row slices of about
equal entries, each instance holding its slice's row pointers and columns and a whole
vertex array, window mode (the first 16,384 sources on chip; a larger graph's hot
sources first, as the driver numbers it).  Per graph, kernel (one iteration of
connected components, PageRank, SSSP from vertex 0; one SpMV) and N: the span from the
first start to the last completion (the instances' cycle stamps), every command
including its validation pass (PageRank on several instances: an iteration of the
driver's split, each instance passing over its own rows with the contributions the
host exchanged; the one contributions round before the first iteration is
``setup_cycles``); aggregate edges per cycle = the graph's entries over
the span; scaling = aggregate / (N x the N = 1 rate).  Every slice's rows are checked
against the golden model's one iteration of the whole graph, bit for bit.  Beside it,
the same N's round over the card's window exchange (the round after the first; every
instance's sources taken on chip as the round before shared its rows, no window load,
nothing through the host: ``exchange_cycles``, ``exchange_scaling``, N = 1 taking its
own rows back the same way).
QUICK=1: scale 12 (else 14), N = 1, 2, 4.

Larger graphs (``GRAPH_LARGE=16,18``): at those scales only N = 8 runs (one instance alone
would simulate for hours), connected components and SpMV, each beside a CPU peer doing the
same iteration on this machine (SpMV: ``scipy.sparse`` ``A @ x`` in float32; CC: NumPy's
``minimum.reduceat`` over the pulled labels; the best of three), in edges a second.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

import ndpkit
from ndpkit.engines.graph import csr, generators, golden
from ndpkit.engines.graph.api import SlicedGraph, instances_for
from ndpkit.engines.graph.golden import Program
from ndpkit.engine import span
from ndpkit_tools.paths import build_root
from tb.engines.graph.graph_bench import _arrays

INSTANCES = 8
KERNELS = ("cc", "pagerank", "spmv", "sssp")


def card(memory: str | None, instances: int, region_mib: int = 32) -> str:
    latency = "read_latency=200&write_latency=200" if memory is None else f"memory={memory}"
    # (eight 512-bit graph engines: a Verilator build of most of an hour on a loaded machine)
    return (f"sim?engines=graph*{instances}&memory_ports={instances}&mem_size={region_mib * instances}M"
            f"&mem_queue=256&{latency}&start_timeout=7200")


def _problem(g, kernel: str, window: int):
    """(pull graph, program, initial values, edge values or PageRank's degrees, the golden
    model's one iteration): the graph bench's problem for ``kernel`` (its
    :func:`~tb.engines.graph.graph_bench._arrays`: SSSP's weights, SpMV's entries and x,
    hot sources first beyond the window as the driver numbers them)."""
    if kernel == "sssp":
        g = generators.random_weights(g, 1, 100, seed=7)
    pull = csr.pull(g, kernel)
    program, rowptr, col, val, x, want = _arrays(pull, kernel, renumber=pull.n > window and kernel != "pagerank")
    return csr.PullGraph(pull.n, rowptr, col, None, None), program, x, val, want


def _next_iteration(pull, program, values, current):
    """The golden model's next iteration (SpMV: the product) over ``current``."""
    if program == Program.SPMV:
        return golden.spmv(pull.rowptr, pull.col, values, current).values
    return golden.min_iteration(pull.rowptr, pull.col, current, values if program == Program.SSSP else None)


def runs(dev, name: str, g, counts, on_row=None) -> list[dict]:
    """Every kernel's rows on ``g`` for each N of ``counts``; ``on_row(rows)`` after each
    (the run's file kept up to date: a run stopped part way leaves what it measured)."""
    rows = []
    window = instances_for(dev)[0].window_capacity
    for kernel in KERNELS:
        pull, program, x, values, want = _problem(g, kernel, window)
        extra = {"constants": golden.PageRankConstants.for_graph(pull.n)} if program == Program.PAGERANK else {}
        for n in counts:
            pagerank = program == Program.PAGERANK
            setup = None
            with SlicedGraph(dev, pull, instances_for(dev, n), mode="piccolo", window=True, exchange=not pagerank,
                             values=None if pagerank else values, degrees=values if pagerank else None) as sliced:
                t0 = time.perf_counter()
                if pagerank and n > 1:
                    # the driver's split iteration without the exchange: the contributions
                    # round once, then each iteration's passes over the instance's own rows,
                    # the host writing every slice's contributions into every region (the
                    # steady state measured)
                    rounds = sliced.pagerank_rounds(x, extra["constants"])
                    setup = span(next(rounds)[1]).cycles
                    got, done = next(rounds)
                elif pagerank:
                    got, done = sliced.step(x, program, 1, **extra)
                else:
                    # rounds over the window exchange: the first loads its window from memory
                    # (every region holding x), the second takes it as the first's rows filled it
                    rounds = sliced.rounds(x, program)
                    done = next(rounds)
                    got = sliced.gather()
                wall = time.perf_counter() - t0
                if not pagerank:
                    t0 = time.perf_counter()
                    taken = next(rounds)
                    assert np.array_equal(sliced.gather(), _next_iteration(pull, program, values, want)), \
                        f"{name} {kernel} N={n}: the exchanged round's rows differ from the golden model"
                    exchanged = _exchanged(taken, time.perf_counter() - t0)
                slices = sliced.slices
            assert np.array_equal(got, want), f"{name} {kernel} N={n}: the slices' rows differ from the golden model"
            if pagerank:
                exchanged = pagerank_exchanged(dev, pull, n, x, values, want, extra)
            cycles = span(done).cycles
            rows.append({"graph": name, "kernel": kernel, "instances": n, "slices": len(slices),
                         "vertices": pull.n, "edges": len(pull.col), "cycles": cycles,
                         "per_instance_cycles": [d.cycles for d in done],
                         "start_skew": max(d.start for d in done) - min(d.start for d in done),
                         "slice_edges": [int(pull.rowptr[f + r] - pull.rowptr[f]) for f, r in slices],
                         "bytes": sum(d.bytes_read + d.bytes_written for d in done), "wall_seconds": wall,
                         **({"setup_cycles": setup} if setup is not None else {}), **exchanged})
            print(f"{name} {kernel} N={n}: {cycles} cycles, {len(pull.col) / max(cycles, 1):.3f} edges/cycle; "
                  f"over the exchange {exchanged['exchange_cycles']} cycles", flush=True)
            if on_row:
                on_row(rows)
    return rows


def _exchanged(done, wall: float) -> dict:
    return {"exchange_cycles": span(done).cycles, "exchange_per_instance_cycles": [d.cycles for d in done],
            "exchange_wall_seconds": wall}


def pagerank_exchanged(dev, pull, n: int, x, degrees, want, extra) -> dict:
    """PageRank's split iteration over the window exchange on ``n`` instances (N = 1
    too: one slice taking its own contributions back): the contributions round
    shared, then the iteration measured, its pull taking them from the window."""
    with SlicedGraph(dev, pull, instances_for(dev, n), mode="piccolo", window=True, degrees=degrees) as sliced:
        assert sliced.exchanges, "the card's graph instances do not reach each other's windows"
        rounds = sliced.pagerank_rounds(x, extra["constants"])
        next(rounds)
        t0 = time.perf_counter()
        got, done = next(rounds)
    assert np.array_equal(got, want), f"PageRank N={n}: the exchanged iteration differs from the golden model"
    return _exchanged(done, time.perf_counter() - t0)


def cpu_seconds(pull, kernel: str, x, entries=None) -> float:
    """The CPU peer's time for one iteration of ``kernel`` over ``pull`` (SpMV: its
    ``entries``, fp32 bits), the best of three."""
    import scipy.sparse as sp
    rowptr, col = pull.rowptr.astype(np.int64), pull.col.astype(np.int64)
    if kernel == "spmv":
        a = sp.csr_array((entries.view(np.float32), col, rowptr), shape=(pull.n, pull.n))
        v = x.view(np.float32)
        work = lambda: a @ v                                       # noqa: E731
    else:
        starts = rowptr[:-1]
        nonempty = starts < rowptr[1:]
        own = x.copy()

        def work():
            pulled = x[col]
            best = own.copy()
            best[nonempty] = np.minimum(own[nonempty], np.minimum.reduceat(pulled, starts[nonempty]))
            return best
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        work()
        times.append(time.perf_counter() - t0)
    return min(times)


def large_runs(dev, scales) -> list[dict]:
    """N = 8 only (all the card's instances), CC and SpMV, with the CPU peer."""
    rows = []
    window = instances_for(dev)[0].window_capacity
    for scale in scales:
        for name, g in ((f"uniform-{scale}", generators.uniform(scale, 16, seed=scale)),
                        (f"kronecker-{scale}", generators.kronecker(scale, 16, seed=scale))):
            for kernel in ("cc", "spmv"):
                pull, program, x, values, want = _problem(g, kernel, window)
                with SlicedGraph(dev, pull, instances_for(dev), mode="piccolo", window=True,
                                 values=values) as sliced:
                    got, done = sliced.step(x, program, 1)
                assert np.array_equal(got, want), f"{name} {kernel}: the slices' rows differ from the golden model"
                cycles = span(done).cycles
                rows.append({"graph": name, "kernel": kernel, "instances": len(done), "vertices": pull.n,
                             "edges": len(pull.col), "cycles": cycles, "per_instance_cycles": [d.cycles for d in done],
                             "edges_per_cycle": len(pull.col) / cycles,
                             "per_instance": len(pull.col) / cycles / len(done),
                             "cpu_seconds": cpu_seconds(pull, kernel, x, values)})
                print(f"{name} {kernel} N={len(done)}: {cycles} cycles, {len(pull.col) / cycles:.3f} edges/cycle; "
                      f"CPU {len(pull.col) / rows[-1]['cpu_seconds'] / 1e9:.3f} GTEPS", flush=True)
    return rows


def with_scaling(rows: list[dict]) -> list[dict]:
    """Each row's rates and scalings: of its command (window loaded) against the N = 1
    command's rate and, where measured, of its round over the window exchange against
    the better of the two N = 1 rates (PageRank's one instance runs its whole iteration
    in one command faster than its split over the exchange)."""
    for key, rate_of, scaling in (("cycles", "edges_per_cycle", "scaling"),
                                  ("exchange_cycles", "exchange_edges_per_cycle", "exchange_scaling")):
        single = {(r["graph"], r["kernel"]): r["edges"] / min(r[k] for k in ("cycles", key) if k in r)
                  for r in rows if r["instances"] == 1 and key in r}
        for r in rows:
            if key in r and (r["graph"], r["kernel"]) in single:
                rate = r["edges"] / r[key]
                r.update({rate_of: rate, scaling: rate / (r["instances"] * single[(r["graph"], r["kernel"])])})
    for r in rows:
        r["per_instance"] = r["edges_per_cycle"] / r["instances"]
    return rows


def table(rows: list[dict]) -> str:
    lines = [f"{'graph':>14} {'kernel':>9} {'N':>3} {'cycles':>9} {'edges/cycle':>12} {'per inst.':>10} "
             f"{'scaling':>8} {'exchanged':>10} {'scaling':>8}"]
    for r in rows:
        lines.append(f"{r['graph']:>14} {r['kernel']:>9} {r['instances']:>3} {r['cycles']:>9} "
                     f"{r['edges_per_cycle']:>12.3f} {r['per_instance']:>10.3f} {r['scaling']:>8.3f} "
                     f"{r.get('exchange_cycles', 0):>10} {r.get('exchange_scaling', 0):>8.3f}")
    return "\n".join(lines)


def main() -> int:
    quick = os.environ.get("QUICK", "0") not in ("", "0")
    memory = os.environ.get("MEMORY") or None
    out = build_root() / "perf" / ("graph_scaling.json" if memory is None else f"graph_scaling-{memory}.json")
    scale = 12 if quick else 14
    counts = (1, 2, 4) if quick else (1, 2, 4, 8)
    large = tuple(int(x) for x in os.environ.get("GRAPH_LARGE", "").split(",") if x)
    started = time.monotonic()
    out.parent.mkdir(parents=True, exist_ok=True)
    # a large-only run keeps the scaling table beside it, and a run without GRAPH_LARGE the large rows
    before = json.loads(out.read_text()) if out.exists() else {}

    def save(rows, large_rows, complete=False):
        out.write_text(json.dumps({"memory": memory or "ideal", "data_width": 512,
                                   "rows": with_scaling([dict(r) for r in rows]) or before.get("rows", []),
                                   "large": large_rows or before.get("large", []), "cpu_threads": 1,
                                   "seconds": time.monotonic() - started,
                                   **({} if complete else {"partial": True})}, indent=1))
    rows = []
    # (32 MiB a region holds a scale-18 graph's slice and its vertex arrays)
    with ndpkit.open(card(memory, max(counts))) as dev:
        if not os.environ.get("GRAPH_LARGE_ONLY"):
            for name, g in ((f"uniform-{scale}", generators.uniform(scale, 16, seed=scale)),
                            (f"kronecker-{scale}", generators.kronecker(scale, 16, seed=scale))):
                rows += runs(dev, name, g, counts, on_row=lambda graph_rows: save(rows + graph_rows, []))
        large_rows = large_runs(dev, large)
    save(rows, large_rows, complete=True)
    print(table(with_scaling(rows) if rows else []))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
