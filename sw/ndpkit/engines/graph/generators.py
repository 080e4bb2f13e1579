"""Graph workloads: Graph500 Kronecker (R-MAT), uniform random, and the real graphs
that ship with networkx.  Every generator returns a ``scipy.sparse.csr_array``
adjacency matrix ``A`` (``A[u, v] != 0`` for an edge ``u -> v``; networkx's
convention) of a simple directed graph: duplicate edges are merged (value 1) and
self-loops are kept.  Seeds make every graph reproducible.
"""
from __future__ import annotations

import numpy as np

GRAPH500 = (0.57, 0.19, 0.19)          # R-MAT a, b, c (d = 1 - a - b - c)


def _simple(n: int, src, dst):
    import scipy.sparse as sp
    a = sp.coo_array((np.ones(len(src), dtype=np.float32), (src, dst)), shape=(n, n)).tocsr()
    a.sum_duplicates()
    a.data[:] = 1
    a.sort_indices()
    return a


def kronecker(scale: int, edge_factor: int = 16, *, abc=GRAPH500, seed: int = 0):
    """Graph500's Kronecker generator: ``2**scale`` vertices, ``edge_factor * 2**scale``
    edges drawn bit by bit into the R-MAT quadrants (a, b, c, d), then vertex labels
    randomly permuted (as Graph500 does, so high-degree vertices are not clustered
    at low ids)."""
    if scale < 0 or edge_factor < 0:
        raise ValueError("scale and edge_factor: must be non-negative")
    a, b, c = abc
    n, m = 1 << scale, edge_factor << scale
    rng = np.random.default_rng(seed)
    src = np.zeros(m, dtype=np.int64)
    dst = np.zeros(m, dtype=np.int64)
    for bit in range(scale):
        r = rng.random(m)
        down = r >= a + b                          # quadrants c and d: the source bit is 1
        right = np.where(down, r >= a + b + c, (r >= a) & (r < a + b))
        src |= down.astype(np.int64) << bit
        dst |= right.astype(np.int64) << bit
    perm = rng.permutation(n)
    return _simple(n, perm[src], perm[dst])


def uniform(scale: int, edge_factor: int = 16, *, seed: int = 0):
    """``2**scale`` vertices and ``edge_factor * 2**scale`` edges with uniformly random
    endpoints (the same size as :func:`kronecker`, without its skew)."""
    if scale < 0 or edge_factor < 0:
        raise ValueError("scale and edge_factor: must be non-negative")
    n, m = 1 << scale, edge_factor << scale
    rng = np.random.default_rng(seed)
    return _simple(n, rng.integers(0, n, m), rng.integers(0, n, m))


REAL_GRAPHS = ("karate_club_graph", "davis_southern_women_graph", "florentine_families_graph",
               "les_miserables_graph")


def real_graph(name: str):
    """One of networkx's bundled real graphs (undirected: both directions of every
    edge), as a networkx graph."""
    import networkx as nx
    if name not in REAL_GRAPHS:
        raise ValueError(f"name: unknown graph {name!r}; known: {', '.join(REAL_GRAPHS)}")
    return getattr(nx, name)()


def random_weights(adjacency, low: int = 1, high: int = 100, *, seed: int = 0):
    """The same pattern with integer weights in [low, high] (for SSSP)."""
    a = adjacency.copy().astype(np.float64)
    a.data = np.random.default_rng(seed).integers(low, high + 1, a.nnz).astype(np.float64)
    return a
