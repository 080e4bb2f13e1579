"""From a user's graph (a ``scipy.sparse`` adjacency matrix or a networkx graph) to the
pull-form CSR the graph engine walks (``ndpkit.engines.graph.golden``), and back to the
user's vertex order.

Conventions (networkx's and scipy's): ``A[u, v]`` is the edge ``u -> v``; a networkx
graph's vertices are numbered in ``G.nodes`` order.  PageRank, BFS, SSSP and
connected components pull over in-edges, so the engine walks ``A.T`` in CSR form
(connected components: ``A + A.T``, weak connectivity); SpMV walks ``A`` itself.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class PullGraph:
    n: int
    rowptr: np.ndarray          # uint32[n + 1]
    col: np.ndarray             # uint32[nnz]
    values: np.ndarray | None   # fp32 (spmv) or uint32 weights (sssp), per entry
    nodes: list | None          # networkx node labels in vertex order, else None


def adjacency(graph, weight: str | None = "weight"):
    """``(csr_array, nodes)`` for a scipy sparse matrix/array or a networkx graph."""
    import scipy.sparse as sp
    if sp.issparse(graph):
        # a copy: scipy's operators sort and merge a matrix's indices in place, and the
        # caller's matrix must come back as it was given
        a = sp.csr_array(graph, copy=True)
        if a.shape[0] != a.shape[1]:
            raise ValueError(f"graph: adjacency matrix must be square, got shape {a.shape}")
        return a, None
    try:
        import networkx as nx
    except ImportError:         # pragma: no cover - networkx is a dependency
        nx = None
    if nx is not None and isinstance(graph, nx.Graph):
        nodes = list(graph.nodes)
        return sp.csr_array(nx.to_scipy_sparse_array(graph, nodelist=nodes, weight=weight, format="csr")), nodes
    raise TypeError(f"graph: expected a scipy.sparse matrix or a networkx graph, got {type(graph).__name__}")


def _csr(a, values_dtype=None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    a = a.tocsr()
    if not a.has_sorted_indices:
        a = a.sorted_indices()        # a sorted copy: the caller's matrix is never changed
    if a.nnz >= 1 << 32:
        raise ValueError(f"graph: {a.nnz} edges, more than the engine's 32-bit edge indices")
    vals = None if values_dtype is None else a.data
    return a.indptr.astype(np.uint32), a.indices.astype(np.uint32), vals


def pull(graph, program: str) -> PullGraph:
    """The pull-form CSR for ``program`` (``spmv``, ``pagerank``, ``bfs``, ``sssp``, ``cc``)."""
    a, nodes = adjacency(graph, weight=None if program in ("pagerank", "bfs", "cc") else "weight")
    n = a.shape[0]
    if program == "spmv":
        rowptr, col, vals = _csr(a, np.float32)
        return PullGraph(n, rowptr, col, vals.astype(np.float32), nodes)
    if program == "cc":
        pattern = (a != 0).astype(np.int8)
        rowptr, col, _ = _csr(pattern + pattern.T)
        return PullGraph(n, rowptr, col, None, nodes)
    at = a.T.tocsr()
    if program == "sssp":
        rowptr, col, vals = _csr(at, np.float64)
        w = np.asarray(vals, dtype=np.float64)
        if np.any(w < 0) or np.any(w != np.floor(w)) or np.any(w > 0xFFFF_FFFE):
            raise ValueError("graph: SSSP weights must be non-negative integers below 2**32 - 1")
        return PullGraph(n, rowptr, col, w.astype(np.uint32), nodes)
    if program in ("pagerank", "bfs"):
        pattern = (at != 0).astype(np.int8)
        rowptr, col, _ = _csr(pattern)
        return PullGraph(n, rowptr, col, None, nodes)
    raise ValueError(f"program: unknown {program!r}")


def vertex_index(g: PullGraph, vertex) -> int:
    """A source vertex given as a networkx label (or an integer for a matrix)."""
    if g.nodes is None:
        return int(vertex)
    try:
        return g.nodes.index(vertex)
    except ValueError:
        raise ValueError(f"source: vertex {vertex!r} is not in the graph") from None
