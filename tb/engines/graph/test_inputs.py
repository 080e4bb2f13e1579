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


@pytest.fixture
def nothing_runs(dev, monkeypatch):
    """The card refuses any work: a refused call must fail before it uploads or runs."""
    def refuse(*args, **kwargs):
        raise AssertionError("a refused call reached the card")
    for obj, name in ((dev, "upload"), (dev, "alloc"), (dev.graph, "run")):
        monkeypatch.setattr(obj, name, refuse)
    return dev


@pytest.mark.parametrize("kernel", ["bfs", "sssp"])
@pytest.mark.parametrize("source", [1.5, 1.0, np.float64(1.0), np.float32(2.5), True, np.bool_(False), "1", None,
                                    np.array([1])], ids=repr)
def test_a_non_integer_source_is_refused(nothing_runs, kernel, source):
    """scipy truncates ``indices=1.5`` (and takes ``True`` and ``"1"``): ndpkit refuses
    every source that is not an integer, naming it, before anything runs."""
    a = _unsorted()[0]
    with pytest.raises(TypeError, match="^source: "):
        getattr(graph, kernel)(a, source, nothing_runs)


@pytest.mark.parametrize("kernel", ["bfs", "sssp"])
@pytest.mark.parametrize("source", [3, np.int64(3), np.uint8(3), np.int32(3), np.array(3)], ids=repr)
def test_an_integer_source_is_taken(dev, kernel, source):
    a = _unsorted()[0]
    assert np.array_equal(getattr(graph, kernel)(a, source, dev), getattr(graph, kernel)(a, 3, dev))


@pytest.mark.parametrize("kernel", ["bfs", "sssp"])
def test_a_source_outside_the_graph_is_refused(nothing_runs, kernel):
    a = _unsorted()[0]
    for source in (-1, a.shape[0]):
        with pytest.raises(ValueError, match="^source: "):
            getattr(graph, kernel)(a, source, nothing_runs)


@pytest.mark.parametrize("x", [
    np.linspace(-1, 1, 40) + 1j,                         # NumPy would drop the imaginary parts with a warning
    np.linspace(-1, 1, 40).astype(np.complex64),        # also with every imaginary part zero
    np.array(["1.5"] * 40),
    ["1"] * 40,
    np.array([object()] * 40),
    [1.0] * 39 + [None],
    [[1.0], [2.0, 3.0]] + [[0.0]] * 38,
], ids=["complex128", "complex64", "str-array", "str-list", "objects", "a-None", "ragged"])
def test_a_complex_or_non_numeric_x_is_refused(nothing_runs, x):
    a = _unsorted()[0]
    before = x.copy()
    with pytest.raises(TypeError, match="^x: "):
        graph.spmv(a, x, nothing_runs)
    assert len(x) == len(before) and all(u is v or np.array_equal(u, v) for u, v in zip(x, before))


@pytest.mark.parametrize("x", [np.arange(40), np.arange(40, dtype=np.uint16), np.arange(40) % 2 == 0,
                               np.arange(40, dtype=np.float16), list(range(40))],
                         ids=["int64", "uint16", "bool", "float16", "int-list"])
def test_a_real_x_of_any_dtype_is_taken(dev, x):
    a = _unsorted()[0]
    want = graph.spmv(a, np.asarray(x, dtype=np.float32), dev)
    assert np.array_equal(graph.spmv(a, x, dev), want)


@pytest.mark.parametrize("nstart", [np.full(40, 1 + 1j), ["1"] * 40, np.array([object()] * 40)],
                         ids=["complex", "str", "objects"])
def test_a_complex_or_non_numeric_nstart_is_refused(nothing_runs, nstart):
    a = _unsorted()[0]
    with pytest.raises(TypeError, match="^nstart: "):
        graph.pagerank(a, nothing_runs, nstart=nstart)
    g = nx.from_scipy_sparse_array(a, create_using=nx.DiGraph)
    with pytest.raises(TypeError, match="^nstart: "):
        graph.pagerank(g, nothing_runs, nstart=dict(zip(g.nodes, nstart)))
