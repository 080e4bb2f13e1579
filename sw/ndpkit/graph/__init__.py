"""Graph kernels on the card's graph engine, taking a ``scipy.sparse`` adjacency matrix
or a networkx graph (``A[u, v]`` = edge ``u -> v``, networkx's convention) and an open
device, returning NumPy arrays in scipy's conventions:

- :func:`bfs`: hop counts from ``source`` as float64, ``inf`` where unreachable
  (``scipy.sparse.csgraph.shortest_path(..., unweighted=True, indices=source)``);
- :func:`sssp`: distances with non-negative integer weights (edge values; 1 where a
  networkx edge has no ``weight``), ``inf`` where unreachable (scipy's Dijkstra);
- :func:`connected_components`: ``(count, labels)`` of the weakly connected components,
  labels numbered in order of each component's smallest vertex, as
  ``scipy.sparse.csgraph.connected_components(..., directed=True, connection="weak")``;
- :func:`pagerank`: networkx's PageRank (uniform teleport, dangling rank spread
  uniformly, stop when the L1 change is below ``n * tol``) in fp32, as a float32
  array in vertex order; raises :class:`ConvergenceError` like networkx.  Each
  iteration's pull row sums (all the edge traffic) run on the engine as an SpMV command
  with unit entries (``fma(1, x, p)`` is ``x + p`` exactly); the O(n) per-vertex steps
  (division by the out-degree, dangling sum, teleport, L1 change) run on the host with
  the golden model's fp32 operations, so the ranks equal ``ndpkit.golden.graph.pagerank``
  bit for bit;
- :func:`spmv`: ``A @ x`` in fp32 (float32 out) for any sparse matrix, rectangular too
  (a networkx graph: its weighted adjacency matrix).  Each row sums in the engine's
  order (eight FMA partial sums, then a tree: :mod:`ndpkit.golden.graph`), so results
  equal the golden model bit for bit and ``A @ x`` in float64 to within fp32 rounding.

Vertices of a networkx graph are numbered in ``G.nodes`` order; ``source`` is a node
label then.  ``mode="piccolo"`` fetches source values with row gathers,
``"baseline"`` with 64-byte line reads (the same answers; see docs/graph.md for the
traffic).
"""
from __future__ import annotations

import numpy as np

from ..golden import graph as golden
from ..golden.graph import Program
from . import csr, generators

__all__ = ["bfs", "sssp", "connected_components", "spmv", "pagerank", "ConvergenceError", "run", "csr", "generators", "MODES"]

MODES = {"piccolo": golden.MODE_PICCOLO, "baseline": golden.MODE_BASELINE}


def run(device, g: csr.PullGraph, program: Program, init: np.ndarray, *, mode: str = "piccolo",
        max_iterations: int | None = None):
    """One engine command over a prepared pull graph: (values, iterations, completion)."""
    if mode not in MODES:
        raise ValueError(f"mode: {mode!r}, not one of {', '.join(MODES)}")
    if g.n == 0:
        raise ValueError("graph: no vertices")
    max_iterations = g.n + 1 if max_iterations is None else int(max_iterations)
    if max_iterations < 1:
        raise ValueError(f"max_iterations: must be at least 1, not {max_iterations}")
    buffers = []

    def upload(arr):
        buf = device.upload(np.ascontiguousarray(arr, dtype=np.uint32))
        buffers.append(buf)
        return buf
    try:
        rowptr, a = upload(g.rowptr), upload(init)
        col = upload(g.col) if len(g.col) else None
        values = None if g.values is None else \
            g.values if g.values.dtype == np.uint32 else g.values.astype(np.float32).view(np.uint32)
        val = upload(values) if program in (Program.SSSP, Program.SPMV) and len(g.col) else None
        b = device.alloc(4 * g.n)
        buffers.append(b)
        done = device.graph.run(program, n=g.n, edges=len(g.col), rowptr=rowptr, col=col, val=val, a=a, b=b,
                                mode=MODES[mode], max_iterations=max_iterations)
        result = (a if done.aux % 2 == 0 else b).download(np.uint32, g.n)
    finally:
        for buf in buffers:
            buf.free()
    return result, done.aux, done


def _distances(values) -> np.ndarray:
    out = values.astype(np.float64)
    out[values == golden.INF] = np.inf
    return out


def _from_source(graph, source, device, mode: str, kind: str, program: Program) -> np.ndarray:
    g = csr.pull(graph, kind)
    s = csr.vertex_index(g, source)
    if not 0 <= s < g.n:
        raise ValueError(f"source: vertex {source} is not in the {g.n}-vertex graph")
    init = np.full(g.n, golden.INF, np.uint32)
    init[s] = 0
    return _distances(run(device, g, program, init, mode=mode)[0])


def bfs(graph, source, device, *, mode: str = "piccolo") -> np.ndarray:
    """Hop counts from ``source`` (float64, inf where unreachable)."""
    return _from_source(graph, source, device, mode, "bfs", Program.BFS)


def sssp(graph, source, device, *, mode: str = "piccolo") -> np.ndarray:
    """Shortest-path distances from ``source`` over non-negative integer weights."""
    return _from_source(graph, source, device, mode, "sssp", Program.SSSP)


def connected_components(graph, device, *, mode: str = "piccolo") -> tuple[int, np.ndarray]:
    """``(count, labels)`` of the weakly connected components, scipy's numbering."""
    g = csr.pull(graph, "cc")
    smallest = run(device, g, Program.CC, np.arange(g.n, dtype=np.uint32), mode=mode)[0]
    roots, labels = np.unique(smallest, return_inverse=True)
    return len(roots), labels.astype(np.int32)


def spmv(matrix, x, device, *, mode: str = "piccolo") -> np.ndarray:
    """``y = A @ x`` in fp32 (a float32 array of A's row count).  ``matrix``: a
    ``scipy.sparse`` matrix of any shape (entries rounded to fp32; stored zeros are
    ordinary entries) or a networkx graph (its weighted adjacency matrix)."""
    import scipy.sparse as sp
    a = sp.csr_array(matrix) if sp.issparse(matrix) else csr.adjacency(matrix)[0]
    rows, cols = a.shape
    x = np.asarray(x)
    if x.ndim != 1 or x.shape[0] != cols:
        raise ValueError(f"x: shape {x.shape}, but the matrix has {cols} columns")
    n = max(rows, cols)
    if n == 0:
        raise ValueError("matrix: no rows and no columns")
    # the engine's matrices are square: pad with empty rows or unused columns
    square = sp.csr_array((a.data.astype(np.float32), a.indices, a.indptr), shape=(rows, cols))
    square.resize((n, n))
    vector = np.zeros(n, np.float32)
    vector[:cols] = x.astype(np.float32)
    y = run(device, csr.pull(square, "spmv"), Program.SPMV, vector.view(np.uint32), mode=mode)[0]
    return y.view(np.float32)[:rows].copy()


class ConvergenceError(RuntimeError):
    """PageRank did not reach its tolerance within ``max_iterations`` (networkx's
    ``PowerIterationFailedConvergence``); ``ranks`` holds the last iteration's."""

    def __init__(self, iterations: int, ranks: np.ndarray):
        super().__init__(f"pagerank: not converged after {iterations} iterations")
        self.iterations, self.ranks = iterations, ranks


def pagerank(graph, device, *, alpha: float = 0.85, tol: float = 1e-6, max_iterations: int = 100,
             mode: str = "piccolo", stats: dict | None = None) -> np.ndarray:
    """PageRank of every vertex (float32, vertex order): networkx's ``pagerank(G, alpha,
    tol=tol, weight=None)`` in fp32 (edge weights ignored, multi-edges counted once).
    ``stats``, if given, receives ``iterations`` and the engine ``cycles`` they took."""
    from ..golden import fp
    if mode not in MODES:
        raise ValueError(f"mode: {mode!r}, not one of {', '.join(MODES)}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: must be between 0 and 1, not {alpha}")
    if not tol > 0:
        raise ValueError(f"tol: must be positive, not {tol}")
    if int(max_iterations) < 1:
        raise ValueError(f"max_iterations: must be at least 1, not {max_iterations}")
    g = csr.pull(graph, "pagerank")
    if g.n == 0:
        raise ValueError("graph: no vertices")
    c = golden.PageRankConstants.for_graph(g.n, alpha, tol)
    degree = golden.out_degrees(g.n, g.col)
    buffers = []

    def upload(arr):
        buffers.append(device.upload(np.ascontiguousarray(arr, dtype=np.uint32)))
        return buffers[-1]
    try:
        rowptr = upload(g.rowptr)
        col = upload(g.col) if len(g.col) else None
        ones = upload(np.full(len(g.col), 0x3F80_0000, np.uint32)) if len(g.col) else None   # fp32 1.0
        x, y = upload(np.zeros(g.n, np.uint32)), upload(np.zeros(g.n, np.uint32))

        def pull_sums(contrib):          # the engine's row sums of contrib over the in-edges
            x.write(np.ascontiguousarray(contrib, dtype=np.uint32).tobytes())
            done = device.graph.run(Program.SPMV, n=g.n, edges=len(g.col), rowptr=rowptr, col=col, val=ones, a=x,
                                    b=y, mode=MODES[mode], max_iterations=1)
            counts["cycles"] += done.cycles or 0
            return y.download(np.uint32, g.n)
        rank = np.full(g.n, c.inv_n, dtype=np.uint32)
        counts = stats if stats is not None else {}
        counts.update(iterations=0, cycles=0)
        for _ in range(int(max_iterations)):
            counts["iterations"] += 1
            rank, err = golden.pagerank_iteration(g.rowptr, g.col, degree, rank, c, pull_sums)
            if fp.floats(err) < fp.floats(np.uint32(c.tolerance)):
                return rank.view(np.float32)
    finally:
        for buf in buffers:
            buf.free()
    raise ConvergenceError(int(max_iterations), rank.view(np.float32))
