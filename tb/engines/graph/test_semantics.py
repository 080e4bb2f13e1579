"""ndpkit.graph follows the libraries it stands in for (model card): scipy.sparse.csgraph
for matrices (explicit zeros are edges, ``directed``, ``connection``, ``return_labels``,
dense input), networkx for graphs (dicts keyed by node, multigraph rules, PageRank's
arguments and exception), and networkx's dispatch (``backend="ndpkit"``).

Cases marked *networkx* are networkx 3.6's ``algorithms/link_analysis/tests/
test_pagerank.py`` (class ``TestPageRank``); *scipy* are scipy 1.17's
``sparse/csgraph/tests/test_shortest_path.py`` and ``test_connected_components.py``.
Each is reproduced with its data and expected answers."""
import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph

import ndpkit
from ndpkit import graph
from ndpkit.engines.graph import csr, golden


@pytest.fixture(scope="module")
def dev():
    with ndpkit.open("model", engines=("graph",), mem_size=4 << 20) as d:
        yield d


# -- networkx test_pagerank.py ------------------------------------------------------

def _langville_meyer():
    """networkx TestPageRank.setup_class: A. Langville and C. Meyer's example."""
    G = nx.DiGraph()
    G.add_edges_from([(1, 2), (1, 3), (3, 1), (3, 2), (3, 5), (4, 5), (4, 6), (5, 4), (5, 6), (6, 4)])
    answer = dict(zip(sorted(G), [0.03721197, 0.05395735, 0.04150565, 0.37508082, 0.20599833, 0.28624589]))
    return G, answer


def test_networkx_pagerank(dev):
    """networkx test_pagerank (alpha=0.9; the same result from a random nstart)."""
    G, answer = _langville_meyer()
    p = graph.pagerank(G, dev, alpha=0.9, tol=1e-6)
    assert isinstance(p, dict) and list(p) == list(G)
    for n in G:
        assert p[n] == pytest.approx(answer[n], abs=1e-4)
    rng = np.random.default_rng(1)
    nstart = {n: float(rng.random()) for n in G}
    p = graph.pagerank(G, dev, alpha=0.9, tol=1e-6, nstart=nstart)
    for n in G:
        assert p[n] == pytest.approx(answer[n], abs=1e-4)


def test_networkx_pagerank_nstart_is_the_golden_start(dev):
    """nstart is normalised as networkx does and is the iteration's start, bit for bit."""
    G, _ = _langville_meyer()
    nstart = {n: i + 1.0 for i, n in enumerate(G)}
    stats = {}
    p = graph.pagerank(G, dev, nstart=nstart, stats=stats)
    start = np.array([nstart[n] for n in G])
    pull = csr.pull(G, "pagerank")
    want = golden.pagerank(pull.rowptr, pull.col, start=(start / start.sum()).astype(np.float32).view(np.uint32))
    assert np.array_equal(np.array(list(p.values()), np.float32).view(np.uint32), want.values)
    assert stats["iterations"] == want.iterations


def test_networkx_pagerank_max_iter(dev):
    """networkx test_pagerank_max_iter: max_iter=0 raises PowerIterationFailedConvergence."""
    G, _ = _langville_meyer()
    with pytest.raises(nx.PowerIterationFailedConvergence):
        graph.pagerank(G, dev, max_iter=0)
    with pytest.raises(nx.PowerIterationFailedConvergence) as e:
        graph.pagerank(G, dev, max_iter=2, tol=1e-9)
    assert isinstance(e.value, graph.ConvergenceError) and isinstance(e.value, RuntimeError)
    assert set(e.value.ranks) == set(G)


def test_networkx_pagerank_multigraph(dev):
    """networkx test_multigraph: every parallel edge counts."""
    G = nx.MultiGraph()
    G.add_edges_from([(1, 2), (1, 2), (1, 2), (2, 3), (2, 3), ("3", 3), ("3", 3)])
    answer = {1: 0.21066048614468322, 2: 0.3395308825985378, 3: 0.28933951385531687, "3": 0.16046911740146227}
    p = graph.pagerank(G, dev)
    for n in G:
        assert p[n] == pytest.approx(answer[n], abs=1e-4)


def test_networkx_pagerank_empty(dev):
    """networkx test_empty: an empty graph ranks to {}."""
    assert graph.pagerank(nx.Graph(), dev) == {}


def test_networkx_pagerank_refuses_what_the_engine_cannot_do(dev):
    """networkx test_personalization / test_dangling_pagerank: the engine teleports and
    spreads dangling rank uniformly, so these are refused by name, never ignored."""
    G, _ = _langville_meyer()
    with pytest.raises(NotImplementedError, match="personalization"):
        graph.pagerank(G, dev, personalization={1: 1.0})
    with pytest.raises(NotImplementedError, match="dangling"):
        graph.pagerank(G, dev, dangling={1: 2, 2: 3, 3: 0, 4: 0, 5: 0, 6: 0})


def test_pagerank_weights_follow_networkx(dev):
    """Integer weights count as parallel edges (networkx's weighted out-degree),
    ``weight=None`` ignores them, non-integer weights are refused by name."""
    G = nx.DiGraph()
    G.add_weighted_edges_from([(0, 1, 3), (0, 2, 1), (1, 2, 2), (2, 0, 1), (2, 3, 0), (3, 0, 5)])
    for weight in ("weight", None):
        got, want = graph.pagerank(G, dev, weight=weight), nx.pagerank(G, weight=weight)
        assert all(got[n] == pytest.approx(want[n], abs=1e-5) for n in G)
    G[0][1]["weight"] = 0.5
    with pytest.raises(ValueError, match="weight: .*non-negative integers"):
        graph.pagerank(G, dev)


# -- scipy csgraph/tests ------------------------------------------------------------

directed_G = np.array([[0, 3, 3, 0, 0], [0, 0, 0, 2, 4], [0, 0, 0, 0, 0], [1, 0, 0, 0, 0], [2, 0, 0, 2, 0]], float)
directed_SP = [[0, 3, 3, 5, 7], [3, 0, 6, 2, 4], [np.inf, np.inf, 0, np.inf, np.inf], [1, 4, 4, 0, 8],
               [2, 5, 5, 2, 0]]
undirected_SP = [[0, 3, 3, 1, 2], [3, 0, 6, 2, 4], [3, 6, 0, 4, 5], [1, 2, 4, 0, 2], [2, 4, 5, 2, 0]]
directed_sparse_zero_G = sp.csr_array(([0, 1, 2, 3, 1], ([0, 1, 2, 3, 4], [1, 2, 0, 4, 3])), shape=(5, 5))
directed_sparse_zero_SP = [[0, 0, 1, np.inf, np.inf], [3, 0, 1, np.inf, np.inf], [2, 2, 0, np.inf, np.inf],
                           [np.inf, np.inf, np.inf, 0, 3], [np.inf, np.inf, np.inf, 1, 0]]
undirected_sparse_zero_SP = [[0, 0, 1, np.inf, np.inf], [0, 0, 1, np.inf, np.inf], [1, 1, 0, np.inf, np.inf],
                             [np.inf, np.inf, np.inf, 0, 1], [np.inf, np.inf, np.inf, 1, 0]]


@pytest.mark.parametrize("directed, want", [(True, directed_SP), (False, undirected_SP)])
@pytest.mark.parametrize("form", ["dense", "sparse"])
def test_scipy_shortest_path(dev, directed, want, form):
    """scipy test_shortest_path (directed_G / undirected_SP), dense and sparse input."""
    g = directed_G if form == "dense" else csgraph.csgraph_from_dense(directed_G, null_value=0)
    for source in range(5):
        assert np.array_equal(graph.sssp(g, source, dev, directed=directed), want[source])


def test_scipy_directed_sparse_zero(dev):
    """scipy test_directed_sparse_zero / test_undirected_sparse_zero: a stored zero is a
    zero-weight edge."""
    for source in range(5):
        assert np.array_equal(graph.sssp(directed_sparse_zero_G, source, dev), directed_sparse_zero_SP[source])
        assert np.array_equal(graph.sssp(directed_sparse_zero_G, source, dev, directed=False),
                              undirected_sparse_zero_SP[source])


def test_stored_zeros_are_edges_in_every_program(dev):
    """BFS, components and PageRank count a stored zero as an edge, as scipy (and networkx
    after ``from_scipy_sparse_array``) do."""
    a = directed_sparse_zero_G
    for source in range(5):
        assert np.array_equal(graph.bfs(a, source, dev),
                              csgraph.shortest_path(a, unweighted=True, indices=source))
    count, labels = graph.connected_components(a, dev)
    want = csgraph.connected_components(a, directed=True, connection="weak")
    assert count == want[0] == 2 and np.array_equal(labels, want[1])
    ranks = graph.pagerank(a, dev, weight=None)
    ref = nx.pagerank(nx.from_scipy_sparse_array(a, create_using=nx.DiGraph), weight=None)
    assert np.allclose(ranks, [ref[v] for v in range(5)], atol=1e-5)


def test_scipy_weak_connections(dev):
    """scipy test_weak_connections (dense and csgraph_from_dense input), and
    ``return_labels=False``."""
    Xde = np.array([[0, 1, 0], [0, 0, 0], [0, 0, 0]])
    for X in (csgraph.csgraph_from_dense(Xde, null_value=0), Xde):
        n_components, labels = graph.connected_components(X, dev, directed=True, connection="weak")
        assert n_components == 2 and list(labels) == [0, 0, 1]
        assert graph.connected_components(X, dev, return_labels=False) == 2


def test_scipy_strong_connections_refused(dev):
    """scipy test_strong_connections: strong components are not the engine's; refused,
    never answered with weak ones (undirected, the two are the same and it runs)."""
    Xde = np.array([[0, 1, 0], [0, 0, 0], [0, 0, 0]])
    with pytest.raises(NotImplementedError, match="strong"):
        graph.connected_components(Xde, dev, directed=True, connection="strong")
    n, labels = graph.connected_components(Xde, dev, directed=False, connection="strong")
    assert (n, list(labels)) == (2, [0, 0, 1])
    with pytest.raises(ValueError, match="connection"):
        graph.connected_components(Xde, dev, connection="medium")


# -- networkx graphs: networkx's answers --------------------------------------------

def test_multigraph_shortest_path_takes_the_lightest_edge(dev):
    G = nx.MultiDiGraph()
    G.add_edge("a", "b", weight=5)
    G.add_edge("a", "b", weight=2)
    G.add_edge("b", "c")                      # no weight: 1
    G.add_edge("c", "a", weight=7)
    G.add_node("alone")
    assert graph.sssp(G, "a", dev) == nx.single_source_dijkstra_path_length(G, "a") == {"a": 0, "b": 2, "c": 3}
    assert graph.bfs(G, "a", dev) == nx.single_source_shortest_path_length(G, "a")
    assert graph.connected_components(G, dev) == list(nx.weakly_connected_components(G))


def test_undirected_graph_and_float_weights(dev):
    G = nx.Graph()
    G.add_weighted_edges_from([(0, 1, 2.0), (1, 2, 3.0), (2, 0, 9.0), (3, 3, 1.0)])
    got = graph.sssp(G, 0, dev)
    assert got == nx.single_source_dijkstra_path_length(G, 0) and all(type(d) is float for d in got.values())
    G[0][1]["weight"] = 2.5
    with pytest.raises(ValueError, match="weight: SSSP weights"):
        graph.sssp(G, 0, dev)
    assert graph.connected_components(G, dev) == list(nx.connected_components(G))


# -- networkx dispatch --------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:Note. conversions to backend graphs are saved")
def test_networkx_backend(dev):
    """``backend="ndpkit"`` runs networkx's functions on the card named by
    ``nx.config.backends.ndpkit.device`` (here the open model card)."""
    saved = nx.config.backends.ndpkit.device
    nx.config.backends.ndpkit.device = dev
    try:
        G, answer = _langville_meyer()
        p = nx.pagerank(G, alpha=0.9, backend="ndpkit")
        assert all(p[n] == pytest.approx(answer[n], abs=1e-4) for n in G)
        assert nx.single_source_shortest_path_length(G, 1, backend="ndpkit") == \
            nx.single_source_shortest_path_length(G, 1)
        assert list(nx.weakly_connected_components(G, backend="ndpkit")) == list(nx.weakly_connected_components(G))
        assert nx.number_weakly_connected_components(G, backend="ndpkit") == 1
        with pytest.raises(NotImplementedError) as e:    # refused, never ignored
            nx.pagerank(G, personalization={1: 1}, backend="ndpkit")
        assert "personalization" in str(e.value) + str(e.value.__cause__)
    finally:
        nx.config.backends.ndpkit.device = saved
