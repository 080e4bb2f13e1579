"""The graph part of `make demo`: PageRank and BFS on a Graph500 Kronecker graph
(scale 12, edge factor 16: four times the vertices the engine's source-value cache
holds) on the simulated card, in window mode (every source value in the engine's
on-chip source window, loaded with full bursts), in Piccolo mode (source values
fetched by row gathers through the memory-side scatter-gather unit) and in baseline
mode (64-byte line reads) — the same answers, checked against networkx (PageRank, within its tolerance)
and scipy (BFS, exactly), and the engine cycles each mode took.
"""
from __future__ import annotations

import time

import numpy as np

# a memory controller queue as deep as the graph benchmark's: with the default 16 entries the
# memory's request rate, not the link, bounds both modes (every column read is one request)
GRAPH_URI = "sim?engines=graph&mem_size=16M&mem_queue=256"
#: (name, mode, window): every source in the on-chip window; every source through the unit
MODES = (("window", "piccolo", True), ("piccolo", "piccolo", False), ("baseline", "baseline", False))


def graph_session(dev) -> dict:
    import networkx as nx
    import scipy.sparse.csgraph as csgraph

    from ndpkit.engines.graph import golden
    from ndpkit.graph import csr, generators, pagerank, run
    adj = generators.kronecker(12, 16, seed=2026)   # 4,096 vertices: four times what the cache holds
    rows = []
    ok = True
    ranks = nx.pagerank(nx.from_scipy_sparse_array(adj, create_using=nx.DiGraph), alpha=0.85, tol=1e-6, weight=None)
    ranks = np.array([ranks[v] for v in range(adj.shape[0])])
    for name, mode, window in MODES:
        t0 = time.perf_counter()
        stats = {}
        got = pagerank(adj, dev, mode=mode, window=window, stats=stats)
        # both stop once the L1 change is below n * tol: each is within about that of the fixed point
        match = bool(np.abs(got - ranks).sum() < 2 * adj.shape[0] * 1e-6 + 1e-4)
        ok &= match
        rows.append({"program": "pagerank", "mode": name, "iterations": stats["iterations"], "cycles": stats["cycles"],
                     "match": match, "seconds": time.perf_counter() - t0})
    g = csr.pull(adj, "bfs")
    init = np.full(g.n, golden.INF, np.uint32)
    init[0] = 0
    want = csgraph.shortest_path(adj, unweighted=True, indices=0)
    for name, mode, window in MODES:
        t0 = time.perf_counter()
        values, iterations, done = run(dev, g, golden.Program.BFS, init, mode=mode, window=window)
        match = np.array_equal(np.where(values == golden.INF, np.inf, values.astype(np.float64)), want)
        ok &= match
        rows.append({"program": "bfs", "mode": name, "iterations": iterations, "cycles": done.cycles,
                     "match": match, "seconds": time.perf_counter() - t0})
    return {"vertices": adj.shape[0], "edges": adj.nnz, "rows": rows, "ok": ok}


def print_graph(result) -> bool:
    print(f"\nKronecker graph: {result['vertices']} vertices, {result['edges']} edges (Graph500 R-MAT, scale 12)")
    print(f"{'program':<9}{'mode':<10}{'iterations':>11}{'cycles':>11}{'vs baseline':>13}{'matches':>15}")
    for r in result["rows"]:      # matches: networkx (PageRank, within tolerance), scipy (BFS, exactly)
        base = next(x for x in result["rows"] if x["program"] == r["program"] and x["mode"] == "baseline")
        speed = f"{base['cycles'] / r['cycles']:.2f}x" if r["cycles"] else "-"
        print(f"{r['program']:<9}{r['mode']:<10}{r['iterations']:>11}{r['cycles']:>11}{speed:>13}"
              f"{'yes' if r['match'] else 'NO':>15}")
    return result["ok"]


def run(device: str) -> bool:
    from examples.demo import run_part
    return run_part(device, GRAPH_URI, "graph", "a few minutes", graph_session, print_graph)
