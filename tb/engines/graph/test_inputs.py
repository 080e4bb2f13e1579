"""No graph entry point changes its inputs: a CSR matrix with unsorted column indices
(which ndpkit must sort for the engine) and the vector ``x`` come back exactly as
given, and the answers equal those for the same matrix with sorted indices (model
card)."""
import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

import ndpkit
from ndpkit import graph


@pytest.fixture(scope="module")
def dev():
    with ndpkit.open("model", engines=("graph",), mem_size=4 << 20) as d:
        yield d


def _unsorted(n=40, seed=3):
    rng = np.random.default_rng(seed)
    rows, cols = rng.integers(0, n, 300), rng.integers(0, n, 300)
    a = sp.csr_array((rng.integers(1, 9, 300).astype(np.float64), (rows, cols)), shape=(n, n))
    a.sum_duplicates()
    # reverse each row's entries: the same matrix, column indices unsorted
    indices, data = a.indices.copy(), a.data.copy()
    for r in range(n):
        lo, hi = a.indptr[r], a.indptr[r + 1]
        indices[lo:hi], data[lo:hi] = indices[lo:hi][::-1].copy(), data[lo:hi][::-1].copy()
    b = sp.csr_array((data, indices, a.indptr.copy()), shape=(n, n))
    assert not b.has_sorted_indices
    return a, b


def _snapshot(m):
    return m.indptr.copy(), m.indices.copy(), m.data.copy()


def _same(m, snap):
    return all(np.array_equal(x, y) for x, y in zip((m.indptr, m.indices, m.data), snap))


@pytest.mark.parametrize("kernel", ["spmv", "pagerank", "bfs", "sssp", "connected_components"])
def test_entry_points_leave_the_callers_matrix_unchanged(dev, kernel):
    sorted_a, unsorted_a = _unsorted()
    snap = _snapshot(unsorted_a)
    x = np.linspace(-1, 1, unsorted_a.shape[1]).astype(np.float32)
    x_copy = x.copy()
    calls = {"spmv": lambda a: graph.spmv(a, x, dev), "pagerank": lambda a: graph.pagerank(a, dev),
             "bfs": lambda a: graph.bfs(a, 0, dev), "sssp": lambda a: graph.sssp(a, 0, dev),
             "connected_components": lambda a: graph.connected_components(a, dev)[1]}
    got = calls[kernel](unsorted_a)
    assert _same(unsorted_a, snap)
    assert np.array_equal(x, x_copy)
    assert np.array_equal(np.asarray(got), np.asarray(calls[kernel](sorted_a)))


def test_networkx_graph_is_unchanged(dev):
    g = nx.gnm_random_graph(30, 90, seed=1, directed=True)
    for u, v in g.edges:
        g[u][v]["weight"] = (u + v) % 5 + 1
    before = nx.to_dict_of_dicts(g)
    graph.sssp(g, 0, dev)
    graph.pagerank(g, dev)
    assert nx.to_dict_of_dicts(g) == before
