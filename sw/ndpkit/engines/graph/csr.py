"""From a user's graph (a ``scipy.sparse`` adjacency matrix or a networkx graph) to the
pull-form CSR the graph engine walks (``ndpkit.engines.graph.golden``), and back to the
user's vertex order.

Conventions (networkx's and scipy's): ``A[u, v]`` is the edge ``u -> v``; a networkx
graph's vertices are numbered in ``G.nodes`` order.  PageRank, BFS, SSSP and
connected components pull over in-edges, so the engine walks ``A.T`` in CSR form
(connected components: ``A + A.T``, weak connectivity); SpMV walks ``A`` itself.

What counts as an edge follows the library the graph comes from:

- a **stored entry** of a sparse matrix is an edge, also when its value is zero
  (scipy.sparse.csgraph: "explicit zeros are edges"); its value is the edge's weight;
- a **networkx edge** is an edge whatever its weight; every edge of a multigraph is its
  own edge (``edges(keys=False)``), an undirected edge runs both ways (a self-loop once);
- **SSSP** keeps each ordered pair's lightest edge (the one a shortest path takes);
- **PageRank** with ``weight`` counts an edge of integer weight ``w`` as ``w`` parallel
  edges (networkx's weighted out-degree; a multigraph's parallel edges add up), which is
  what the engine's unweighted pull computes.  Weights that are not non-negative integers
  are refused; ``weight=None`` counts every edge once, as networkx does.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np


@dataclass
class PullGraph:
    n: int
    rowptr: np.ndarray          # uint32[n + 1]
    col: np.ndarray             # uint32[nnz]
    values: np.ndarray | None   # fp32 (spmv) or uint32 weights (sssp), per entry
    nodes: list | None          # networkx node labels in vertex order, else None
    integral: bool = True       # every weight was given as an integer (networkx's result type)


def _networkx():
    try:
        import networkx as nx
    except ImportError:         # pragma: no cover - networkx is in the graph extra
        return None
    return nx


def is_networkx(graph) -> bool:
    nx = _networkx()
    return nx is not None and isinstance(graph, nx.Graph)


def matrix(graph, *, square: bool = True):
    """A ``csr_array`` copy of a scipy sparse matrix, or of a dense array read as
    scipy.sparse.csgraph reads one (0, ``inf`` and NaN are no edge); ``None`` for a
    networkx graph."""
    import scipy.sparse as sp
    if sp.issparse(graph):
        # a copy: scipy's operators sort and merge a matrix's indices in place, and the
        # caller's matrix must come back as it was given
        a = sp.csr_array(graph, copy=True)
    elif isinstance(graph, (np.ndarray, list, tuple)):
        try:
            dense = np.array(graph, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError("graph: a dense adjacency matrix must hold numbers") from None
        if dense.ndim != 2:
            raise ValueError(f"graph: a dense adjacency matrix must be 2-D, got shape {dense.shape}")
        dense[~np.isfinite(dense)] = 0
        a = sp.csr_array(dense)
    elif is_networkx(graph):
        return None
    else:
        raise TypeError(f"graph: expected a scipy.sparse matrix, a dense array or a networkx graph, "
                        f"got {type(graph).__name__}")
    if square and a.shape[0] != a.shape[1]:
        raise ValueError(f"graph: adjacency matrix must be square, got shape {a.shape}")
    return a


def adjacency(graph, weight: str | None = "weight"):
    """``(csr_array, nodes)`` for a scipy sparse matrix/array, a dense array or a networkx graph."""
    import scipy.sparse as sp
    a = matrix(graph)
    if a is not None:
        return a, None
    nodes = list(graph.nodes)           # matrix() refused anything but a networkx graph
    return sp.csr_array(_networkx().to_scipy_sparse_array(graph, nodelist=nodes, weight=weight, format="csr")), nodes


def edges(graph, weight: str | None = "weight"):
    """``(n, src, dst, w, nodes, integral)``: every edge of ``graph`` as it is defined
    above (stored zeros and parallel edges included; ``w`` float64, 1 where ``weight`` is
    None or a networkx edge lacks it)."""
    a = matrix(graph)
    if a is not None:
        a = a.tocoo()
        w = np.ones(a.nnz) if weight is None else np.asarray(a.data, dtype=np.float64)
        integral = weight is None or np.issubdtype(a.data.dtype, np.integer) or a.data.dtype == bool
        return a.shape[0], np.asarray(a.row, np.int64), np.asarray(a.col, np.int64), w, None, bool(integral)
    nodes = list(graph.nodes)
    index = {v: i for i, v in enumerate(nodes)}
    listed = list(graph.edges(data=weight, default=1)) if weight is not None else \
        [(u, v, 1) for u, v in graph.edges()]
    src = np.fromiter((index[u] for u, _, _ in listed), np.int64, len(listed))
    dst = np.fromiter((index[v] for _, v, _ in listed), np.int64, len(listed))
    try:
        w = np.array([d for _, _, d in listed], dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"weight: edge attribute {weight!r} must be a number on every edge") from None
    integral = all(isinstance(d, (int, np.integer)) for _, _, d in listed)
    if not graph.is_directed():             # both ways; a self-loop once
        back = src != dst
        src, dst, w = np.concatenate([src, dst[back]]), np.concatenate([dst, src[back]]), np.concatenate([w, w[back]])
    return len(nodes), src, dst, w.reshape(-1), nodes, integral


def _pull_csr(n: int, src, dst) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row ``v`` of the pull matrix lists the sources of ``v``'s in-edges in ascending
    order: ``(rowptr, col, order)``, ``order`` the edges' permutation."""
    order = np.lexsort((src, dst))
    if len(order) >= 1 << 32:
        raise ValueError(f"graph: {len(order)} edges, more than the engine's 32-bit edge indices")
    rowptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=rowptr[1:])
    return rowptr.astype(np.uint32), src[order].astype(np.uint32), order


def _unique_pairs(src, dst, w=None):
    """One edge per ordered pair (the lightest, when weights are given)."""
    if len(src) == 0:
        return src, dst, w
    order = np.lexsort((w if w is not None else src, src, dst))
    src, dst = src[order], dst[order]
    first = np.ones(len(src), bool)
    first[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    return src[first], dst[first], (w[order][first] if w is not None else None)


def _csr(a) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a = a.tocsr()
    if not a.has_sorted_indices:
        a = a.sorted_indices()        # a sorted copy: the caller's matrix is never changed
    if a.nnz >= 1 << 32:
        raise ValueError(f"graph: {a.nnz} edges, more than the engine's 32-bit edge indices")
    return a.indptr.astype(np.uint32), a.indices.astype(np.uint32), a.data


def pull(graph, program: str, *, weight: str | None = "weight", directed: bool = True) -> PullGraph:
    """The pull-form CSR for ``program`` (``spmv``, ``pagerank``, ``bfs``, ``sssp``, ``cc``).
    ``weight``: the networkx edge attribute holding weights (``None``: every edge
    weighs 1); for a matrix, ``None`` ignores its values.  ``directed=False`` adds every
    edge's reverse (scipy's ``directed=False``)."""
    if program == "spmv":
        a, nodes = adjacency(graph, weight=weight)
        rowptr, col, vals = _csr(a)
        return PullGraph(a.shape[0], rowptr, col, np.asarray(vals).astype(np.float32), nodes)
    if program not in ("pagerank", "bfs", "sssp", "cc"):
        raise ValueError(f"program: unknown {program!r}")
    n, src, dst, w, nodes, integral = edges(graph, weight if program in ("pagerank", "sssp") else None)
    if not directed or program == "cc":
        src, dst, w = np.concatenate([src, dst]), np.concatenate([dst, src]), np.concatenate([w, w])
    if program == "sssp":
        if np.any(np.isnan(w)) or np.any(w < 0) or np.any(w != np.floor(w)) or np.any(w > 0xFFFF_FFFE):
            raise ValueError("weight: SSSP weights must be non-negative integers below 2**32 - 1 "
                             "(the engine adds 32-bit integers)")
        src, dst, w = _unique_pairs(src, dst, w)
        rowptr, col, order = _pull_csr(n, src, dst)
        return PullGraph(n, rowptr, col, w[order].astype(np.uint32), nodes, integral)
    if program == "pagerank" and weight is not None:
        if np.any(np.isnan(w)) or np.any(w < 0) or np.any(w != np.floor(w)):
            bad = w[np.isnan(w) | (w < 0) | (w != np.floor(w))][0]
            raise ValueError(f"weight: the card's PageRank counts an edge of weight w as w parallel edges, so "
                             f"weights must be non-negative integers (found {bad}); pass weight=None to "
                             "count every edge once")
        if w.sum() >= 1 << 32:
            raise ValueError(f"weight: the weights add up to {int(w.sum())} parallel edges, more than the "
                             "engine's 32-bit edge indices")
        counts = w.astype(np.int64)
        src, dst = np.repeat(src, counts), np.repeat(dst, counts)
    elif program != "pagerank":
        src, dst, _ = _unique_pairs(src, dst)      # min-programs: a repeated edge changes nothing
    rowptr, col, _ = _pull_csr(n, src, dst)
    return PullGraph(n, rowptr, col, None, nodes, integral)


def vertex_index(g: PullGraph, vertex, name: str = "source") -> int:
    """A source vertex given as a networkx label (or an integer for a matrix: a Python or
    NumPy integer; a float, a bool or a string is refused naming ``name``, as scipy would
    silently truncate or convert it)."""
    if g.nodes is None:
        return integer_vertex(vertex, name)
    try:
        return g.nodes.index(vertex)
    except ValueError:
        raise ValueError(f"{name}: vertex {vertex!r} is not in the graph") from None


def integer_vertex(vertex, name: str = "source") -> int:
    """A matrix vertex index: a Python or NumPy integer (or a 0-d integer array), never a
    bool, a float (also an integral one: ``1.0``), a string or anything else."""
    if isinstance(vertex, (bool, np.bool_)):
        raise TypeError(f"{name}: a vertex index is an integer, not a bool ({vertex!r})")
    try:
        return operator.index(vertex)
    except TypeError:
        raise TypeError(f"{name}: a vertex index is an integer, not {type(vertex).__name__} ({vertex!r})") from None


def hot_first(g: PullGraph, *, rows: bool = True) -> tuple[PullGraph, np.ndarray]:
    """``g`` with its vertices renumbered so that the sources most edges pull come first
    (descending by how often they appear in ``col``, ties in vertex order): the engine's
    source window holds the first vertices, so it then serves the most edges.  Returns
    the renumbered graph and ``order`` (new number ``i`` is old vertex ``order[i]``).

    Every row keeps its entries in their order (only the numbers change), so a row's
    sum and min are the same operations on the same values.  ``rows=True`` renumbers
    the rows too (the iterating programs: a row and a source are the same vertex);
    ``rows=False`` only the columns (SpMV: the vector ``x`` is reordered, ``y`` is not).
    """
    counts = np.bincount(g.col.astype(np.int64), minlength=g.n)
    order = np.argsort(-counts, kind="stable")
    new = np.empty(g.n, np.int64)
    new[order] = np.arange(g.n)
    col = new[g.col.astype(np.int64)].astype(np.uint32)
    if not rows:
        return PullGraph(g.n, g.rowptr, col, g.values, g.nodes, g.integral), order
    rowptr = g.rowptr.astype(np.int64)
    lengths = np.diff(rowptr)[order]
    new_rowptr = np.concatenate([[0], np.cumsum(lengths)])
    # the entries of old row order[i], in their order, become new row i
    take = np.repeat(rowptr[order] - new_rowptr[:-1], lengths) + np.arange(new_rowptr[-1])
    values = None if g.values is None else g.values[take]
    return PullGraph(g.n, new_rowptr.astype(np.uint32), col[take], values, g.nodes, g.integral), order
