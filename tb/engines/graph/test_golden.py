"""The graph golden model (ndpkit.engines.graph.golden) against outside oracles: networkx
PageRank, scipy's BFS / shortest paths / connected components and ``A @ x`` in
float64; its exact reduction order on hand cases; its validation."""
import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph

from ndpkit_spec.codes import ErrorCode
from ndpkit.arith import fp
from ndpkit.engines.graph import golden
from ndpkit_spec.engines.graph import ACC_LANES
from ndpkit.engines.graph import csr, generators

GRAPHS = {
    "kronecker8": lambda: generators.kronecker(8, 8, seed=1),
    "uniform8": lambda: generators.uniform(8, 4, seed=2),
    "karate": lambda: generators.real_graph("karate_club_graph"),
    "les_miserables": lambda: generators.real_graph("les_miserables_graph"),
}


def _adj(g):
    return csr.adjacency(g, weight=None)[0]


def test_row_sum_order_by_hand():
    """Entry k of a row goes to partial k mod ACC_LANES (128); partials combine by the
    fixed tree, adjacent pairs level by level."""
    assert ACC_LANES == 128
    values = [1e8, 1, -1e8, 1, 1, 1, 1, 1, 3] + [0.5] * 123 + [1e8, -3]      # 134 entries: lanes 0..5 twice
    terms = fp.bits(np.array(values, dtype=np.float32))
    got = golden.row_sums(np.array([0, len(values)]), terms)[0]
    p = np.zeros(ACC_LANES, dtype=np.float32)
    for k, t in enumerate(fp.floats(terms)):
        p[k % ACC_LANES] = np.float32(p[k % ACC_LANES] + t)
    level = list(p)
    while len(level) > 1:
        level = [np.float32(level[i] + level[i + 1]) for i in range(0, len(level), 2)]
    assert fp.floats(got) == level[0]
    # a sequential sum would give a different answer here: the order is part of the spec
    seq = np.float32(0)
    for t in fp.floats(terms):
        seq = np.float32(seq + t)
    assert seq != level[0]


@pytest.mark.parametrize("name", GRAPHS)
def test_spmv_against_float64(name):
    a = _adj(GRAPHS[name]()).astype(np.float32)
    rng = np.random.default_rng(3)
    a.data = rng.standard_normal(a.nnz).astype(np.float32)
    x = rng.standard_normal(a.shape[0]).astype(np.float32)
    g = csr.pull(a, "spmv")
    y = fp.floats(golden.spmv(g.rowptr, g.col, fp.bits(g.values), fp.bits(x)).values)
    exact = a.astype(np.float64) @ x.astype(np.float64)
    bound = (np.abs(a).astype(np.float64) @ np.abs(x).astype(np.float64)) * 2 ** -23 * (np.diff(a.indptr) + 3)
    assert np.all(np.abs(y - exact) <= bound + 1e-30)


@pytest.mark.parametrize("name", GRAPHS)
def test_pagerank_against_networkx(name):
    graph = GRAPHS[name]()
    nxg = graph if isinstance(graph, nx.Graph) else nx.from_scipy_sparse_array(graph, create_using=nx.DiGraph)
    want = nx.pagerank(nxg, alpha=0.85, tol=1e-6, weight=None)
    g = csr.pull(graph, "pagerank", weight=None)
    res = golden.pagerank(g.rowptr, g.col, tol=1e-6)
    assert res.converged and res.iterations < 100
    got = fp.floats(res.values)
    order = g.nodes if g.nodes is not None else range(g.n)
    ref = np.array([want[v] for v in order])
    # both stop when the L1 change is below n * tol: each is within about that of the fixed point
    assert np.abs(got - ref).sum() < 2 * g.n * 1e-6 + 1e-4
    assert abs(got.sum() - 1) < 1e-4


@pytest.mark.parametrize("name", GRAPHS)
def test_bfs_and_sssp_exact(name):
    graph = GRAPHS[name]()
    a = _adj(graph)
    g = csr.pull(graph, "bfs")
    levels = golden.bfs(g.rowptr, g.col, 0).values
    hops = csgraph.shortest_path(a, directed=True, unweighted=True, indices=0)
    want = np.where(np.isinf(hops), golden.INF, hops).astype(np.uint32)
    assert np.array_equal(levels, want)
    w = generators.random_weights(a, 1, 50, seed=4)
    gw = csr.pull(w, "sssp")
    dist = golden.sssp(gw.rowptr, gw.col, gw.values, 0).values
    d = csgraph.shortest_path(w, directed=True, method="D", indices=0)
    assert np.array_equal(dist, np.where(np.isinf(d), golden.INF, d).astype(np.uint32))


@pytest.mark.parametrize("name", GRAPHS)
def test_connected_components_exact(name):
    graph = GRAPHS[name]()
    g = csr.pull(graph, "cc")
    labels = golden.cc(g.rowptr, g.col).values
    count, comp = csgraph.connected_components(_adj(graph), directed=True, connection="weak")
    # our label is the smallest vertex id of its component: the same partition as scipy's
    smallest = {c: np.flatnonzero(comp == c).min() for c in range(count)}
    assert np.array_equal(labels, np.array([smallest[c] for c in comp], dtype=np.uint32))


def test_small_corner_graphs():
    # one vertex, no edges
    r = golden.pagerank(np.array([0, 0]), np.array([], dtype=np.uint32))
    assert fp.floats(r.values)[0] == 1.0 and r.converged
    assert golden.bfs(np.array([0, 0]), np.array([], dtype=np.uint32), 0).values.tolist() == [0]
    # self-loops, a multi-edge, an isolated vertex (3), a vertex with high in-degree (0)
    src = np.array([1, 1, 2, 0, 4, 5, 6, 7, 1])
    dst = np.array([1, 0, 0, 0, 0, 0, 0, 0, 0])
    a = sp.csr_array((np.ones(9), (src, dst)), shape=(8, 8))
    g = csr.pull(a, "bfs")
    levels = golden.bfs(g.rowptr, g.col, 1).values
    assert levels.tolist() == [1, 0] + [int(golden.INF)] * 6
    gc = csr.pull(a, "cc")
    labels = golden.cc(gc.rowptr, gc.col).values
    assert labels.tolist() == [0, 0, 0, 3, 0, 0, 0, 0]


@pytest.mark.parametrize("args, code, field", [
    ((0, [0], []), ErrorCode.BAD_FIELD, "n"),
    ((2, [0, 1], [0]), ErrorCode.BAD_FIELD, "rowptr"),
    ((2, [1, 1, 1], [0]), ErrorCode.BAD_GRAPH, "rowptr"),
    ((2, [0, 2, 1], [0]), ErrorCode.BAD_GRAPH, "rowptr"),
    ((2, [0, 1, 3], [0, 1]), ErrorCode.BAD_GRAPH, "rowptr"),
    ((2, [0, 1, 2], [0, 2]), ErrorCode.BAD_INDEX, "col"),
])
def test_validation(args, code, field):
    with pytest.raises(golden.GraphError) as e:
        golden.validate(*args)
    assert e.value.code == code and e.value.field == field


def test_bad_source():
    with pytest.raises(golden.GraphError) as e:
        golden.bfs(np.array([0, 0, 0]), np.array([], dtype=np.uint32), 2)
    assert e.value.code == ErrorCode.BAD_INDEX and e.value.field == "source"


def test_generators():
    k = generators.kronecker(10, 16, seed=5)
    u = generators.uniform(10, 16, seed=5)
    assert k.shape == u.shape == (1024, 1024)
    assert 0.5 * 16 * 1024 < k.nnz <= 16 * 1024 and 0.9 * 16 * 1024 < u.nnz <= 16 * 1024
    # R-MAT is skewed: its largest in-degree is far above the uniform graph's
    assert np.bincount(k.indices).max() > 3 * np.bincount(u.indices).max()
    assert np.array_equal(generators.kronecker(10, 16, seed=5).indices, k.indices)      # reproducible
    with pytest.raises(ValueError, match="unknown graph"):
        generators.real_graph("nope")


def test_unit_entry_fma_is_addition():
    """PageRank's row sums run on the engine as SpMV with entries 1.0: fma(1, x, p) must
    equal add(x, p) bit for bit, specials included."""
    rng = np.random.default_rng(4)
    specials = np.array([0.0, -0.0, 1e-40, -1e-45, 3.4e38, -3.4e38, np.inf, -np.inf], np.float32)
    terms = np.concatenate([rng.standard_normal(4000).astype(np.float32) * np.float32(1e3),
                            rng.choice(specials, 800)]).view(np.uint32)
    rowptr = np.concatenate([[0], np.sort(rng.integers(0, len(terms), 150)), [len(terms)]])
    ones = np.full(len(terms), 0x3F80_0000, np.uint32)
    plain, fused = golden.row_sums(rowptr, terms), golden.row_sums(rowptr, ones, terms)
    same = (plain == fused) | (np.isnan(fp.floats(plain)) & np.isnan(fp.floats(fused)))
    assert same.all()


@pytest.mark.parametrize("name", GRAPHS)
def test_hot_first_numbering_changes_no_answer(name):
    """csr.hot_first: the most-pulled sources first (counts non-increasing), every row's
    entries in their order, so SpMV's row sums are bit for bit the same (columns
    renumbered, x reordered) and BFS/SSSP/components the same after numbering back."""
    a = _adj(GRAPHS[name]())
    g = csr.pull(generators.random_weights(a, 1, 9, seed=4), "sssp")
    h, order = csr.hot_first(g)
    counts = np.bincount(h.col, minlength=h.n)
    assert np.all(np.diff(counts) <= 0) and sorted(order) == list(range(g.n))
    back = np.argsort(order)
    for source in (0, g.n // 2):
        want = golden.sssp(g.rowptr, g.col, g.values, source).values
        got = golden.sssp(h.rowptr, h.col, h.values, int(back[source])).values[back]
        assert np.array_equal(got, want)
    c = csr.pull(a, "cc")
    hc, order = csr.hot_first(c)
    want = golden.cc(c.rowptr, c.col).values
    got = golden.min_iteration(hc.rowptr, hc.col, order.astype(np.uint32))      # values: the old ids
    for _ in range(c.n):
        nxt = golden.min_iteration(hc.rowptr, hc.col, got)
        if np.array_equal(nxt, got):
            break
        got = nxt
    assert np.array_equal(got[np.argsort(order)], want)
    s = csr.pull(a.astype(np.float32), "spmv")
    rng = np.random.default_rng(3)
    vals = rng.standard_normal(len(s.col)).astype(np.float32).view(np.uint32)
    x = rng.standard_normal(s.n).astype(np.float32).view(np.uint32)
    hs, order = csr.hot_first(s, rows=False)
    assert np.array_equal(hs.rowptr, s.rowptr)
    assert np.array_equal(golden.row_sums(hs.rowptr, vals, x[order][hs.col]), golden.row_sums(s.rowptr, vals, x[s.col]))


def _pagerank_command(g, layout, **fields):
    c = golden.PageRankConstants.for_graph(g.n)
    return {"format_program": int(golden.Program.PAGERANK), "format_mode": 0, "n": g.n, "edges": len(g.col),
            "max_iterations": 100, "damping": c.damping, "teleport": c.teleport, "inv_n": c.inv_n,
            "tolerance": c.tolerance, "source_window": 0, **layout, **fields}


def test_pagerank_contribution_modes():
    """The command's ``contributions``: 1 writes the slice's contributions into its rows
    of scratch and nothing else; 2 over the whole graph from the contributions of the
    starting ranks iterates to the ranks, iteration count and stop of 0 (every vertex's
    contributions each iteration), bit for bit; over a slice, one iteration's rows equal
    that iteration's rows of the whole graph.  The rules: 0 .. 2, PageRank only, 2
    iterating more than once only over the whole graph."""
    g = csr.pull(_adj(GRAPHS["kronecker8"]()), "pagerank")
    n, word = g.n, 64
    c = golden.PageRankConstants.for_graph(n)
    degree = golden.out_degrees(n, g.col)
    vertices = -(-4 * n // word) * word
    layout, addr = {}, 0
    for name, size in (("rowptr", 4 * (n + 1)), ("col", 4 * len(g.col)), ("val", vertices), ("a", vertices),
                       ("b", vertices), ("scratch", 2 * vertices)):
        layout[name] = addr
        addr += -(-size // word) * word
    rank = np.full(n, c.inv_n, np.uint32)

    def memory(rowptr=g.rowptr, col=g.col):
        mem = np.zeros(addr, np.uint8)
        for name, arr in (("rowptr", rowptr), ("col", col), ("val", degree), ("a", rank), ("b", rank)):
            mem[layout[name]:layout[name] + 4 * len(arr)] = np.asarray(arr, np.uint32).view(np.uint8)
        return mem

    def words(mem, name, count, offset=0):
        return mem[layout[name] + offset:layout[name] + offset + 4 * count].view(np.uint32)

    whole = memory()
    error, *_, aux = golden.execute(whole, _pagerank_command(g, layout), word_bytes=word)
    assert error == 0 and aux & golden.CONVERGED
    given = memory()
    words(given, "scratch", n)[:] = golden.contributions(rank, degree)
    error, *_, aux2 = golden.execute(given, _pagerank_command(g, layout, contributions=2,
                                     dangling_term=int(golden.dangling_term(rank, degree, c))), word_bytes=word)
    assert error == 0 and aux2 == aux
    result = "a" if (aux & ~golden.CONVERGED) % 2 == 0 else "b"
    assert np.array_equal(words(given, result, n), words(whole, result, n))
    # a slice: contributions 1 writes only the slice's rows of scratch
    first, rows = 64, 128
    lo, hi = int(g.rowptr[first]), int(g.rowptr[first + rows])
    part = memory(g.rowptr[first:first + rows + 1] - lo, g.col[lo:hi])
    before = part.copy()
    cmd = _pagerank_command(g, layout, edges=hi - lo, first_row=first, rows=rows, contributions=1)
    assert golden.check(cmd, word_bytes=word, window_base=0, window_size=addr) == (0, None)
    assert golden.execute(part, cmd, word_bytes=word)[3] == 0
    changed = np.flatnonzero(part != before)
    assert changed.min() >= layout["scratch"] + 4 * first and changed.max() < layout["scratch"] + 4 * (first + rows)
    assert np.array_equal(words(part, "scratch", rows, 4 * first), golden.contributions(rank, degree)[first:first + rows])
    # contributions 2 over the slice: one iteration's rows, and the slice's next contributions
    words(part, "scratch", n)[:] = golden.contributions(rank, degree)
    cmd.update(contributions=2, max_iterations=1, dangling_term=int(golden.dangling_term(rank, degree, c)))
    assert golden.execute(part, cmd, word_bytes=word)[3] & ~golden.CONVERGED == 1
    new, _ = golden.pagerank_iteration(g.rowptr, g.col, degree, rank, c)
    assert np.array_equal(words(part, "b", rows, 4 * first), new[first:first + rows])
    assert np.array_equal(words(part, "scratch", rows, 4 * first),
                          golden.contributions(new, degree)[first:first + rows])
    for change, field in (({"contributions": 3}, "contributions"), ({"max_iterations": 2}, "max_iterations"),
                          ({"contributions": 1, "format_program": int(golden.Program.CC)}, "contributions")):
        assert golden.check({**cmd, **change}, word_bytes=word, window_base=0, window_size=addr) == \
            (ErrorCode.BAD_FIELD, field)
