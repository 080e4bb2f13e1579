"""Graph kernels on the card's graph engine, taking a ``scipy.sparse`` adjacency matrix
or a networkx graph (``A[u, v]`` = edge ``u -> v``, networkx's convention) and an open
device, returning NumPy arrays in scipy's conventions:

- :func:`bfs`: hop counts from ``source`` as float64, ``inf`` where unreachable
  (``scipy.sparse.csgraph.shortest_path(..., unweighted=True, indices=source)``);
- :func:`sssp`: distances with non-negative integer weights (edge values; 1 where a
  networkx edge has no ``weight``), ``inf`` where unreachable (scipy's Dijkstra);
- :func:`connected_components`: ``(count, labels)`` of the weakly connected components,
  labels numbered in order of each component's smallest vertex, as
  ``scipy.sparse.csgraph.connected_components(..., directed=True, connection="weak")``.

Vertices of a networkx graph are numbered in ``G.nodes`` order; ``source`` is a node
label then.  ``mode="piccolo"`` fetches source values with row gathers,
``"baseline"`` with 64-byte line reads (the same answers; see docs/graph.md for the
traffic).  PageRank and SpMV run on the golden model (:mod:`ndpkit.golden.graph`)
but not yet on the engine.
"""
from __future__ import annotations

import numpy as np

from ..golden import graph as golden
from ..golden.graph import Program
from . import csr, generators

__all__ = ["bfs", "sssp", "connected_components", "run", "csr", "generators", "MODES"]

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
        val = upload(g.values) if program == Program.SSSP and len(g.col) else None
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
