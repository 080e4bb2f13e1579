"""The graph part of `make demo`: BFS and connected components on a Graph500 Kronecker
graph (scale 10, edge factor 16) on the simulated card, in Piccolo mode (source
values fetched by row gathers through the memory-side scatter-gather unit) and in
baseline mode (64-byte line reads) — the same answers, checked against scipy, and
the cycles each mode took.
"""
from __future__ import annotations

import time

import numpy as np

# a memory controller queue as deep as the graph benchmark's: with the default 16 entries the
# memory's request rate, not the link, bounds both modes (every column read is one request)
GRAPH_URI = "sim?engines=graph&mem_size=16M&mem_queue=256"


def graph_session(dev) -> dict:
    import scipy.sparse.csgraph as csgraph

    from ..golden import graph as golden
    from ..graph import csr, generators, run
    adj = generators.kronecker(10, 16, seed=2026)
    rows = []
    ok = True
    for program, kind in ((golden.Program.BFS, "bfs"), (golden.Program.CC, "cc")):
        g = csr.pull(adj, kind)
        init = np.arange(g.n, dtype=np.uint32)
        if program == golden.Program.BFS:
            init = np.full(g.n, golden.INF, np.uint32)
            init[0] = 0
        want = (csgraph.shortest_path(adj, unweighted=True, indices=0) if kind == "bfs" else
                csgraph.connected_components(adj, directed=True, connection="weak")[1])
        for mode in ("piccolo", "baseline"):
            t0 = time.perf_counter()
            values, iterations, done = run(dev, g, program, init, mode=mode)
            if kind == "bfs":
                got = np.where(values == golden.INF, np.inf, values.astype(np.float64))
                match = np.array_equal(got, want)
            else:
                match = np.array_equal(np.unique(values, return_inverse=True)[1], want)
            ok &= match
            rows.append({"program": kind, "mode": mode, "iterations": iterations, "cycles": done.cycles,
                         "match": match, "seconds": time.perf_counter() - t0})
    return {"vertices": adj.shape[0], "edges": adj.nnz, "rows": rows, "ok": ok}


def print_graph(result) -> bool:
    print(f"\nKronecker graph: {result['vertices']} vertices, {result['edges']} edges (Graph500 R-MAT, scale 10)")
    print(f"{'program':<9}{'mode':<10}{'iterations':>11}{'cycles':>11}{'vs baseline':>13}{'matches scipy':>15}")
    for r in result["rows"]:
        base = next(x for x in result["rows"] if x["program"] == r["program"] and x["mode"] == "baseline")
        speed = f"{base['cycles'] / r['cycles']:.2f}x" if r["cycles"] else "-"
        print(f"{r['program']:<9}{r['mode']:<10}{r['iterations']:>11}{r['cycles']:>11}{speed:>13}"
              f"{'yes' if r['match'] else 'NO':>15}")
    return result["ok"]


def run(device: str) -> bool:
    from .demo import run_part
    return run_part(device, GRAPH_URI, "graph", "a few minutes", graph_session, print_graph)
