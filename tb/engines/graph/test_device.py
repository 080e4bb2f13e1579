"""ndpkit.graph on the behavioural model and on the RTL card (sim): SpMV, BFS, SSSP and
connected components on a Graph500 Kronecker graph, a uniform random graph and
networkx's real graphs, exactly equal to scipy's answers, in both modes; bad graphs
and bad commands rejected with their codes and the argument named, nothing written,
the next command working."""
import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph

import ndpkit
from ndpkit import graph
from ndpkit_spec.codes import ErrorCode
from ndpkit.errors import DeviceError
from ndpkit.engines.graph import golden
from ndpkit.engines.graph.golden import Program
from ndpkit.engines.graph import csr, generators

TRANSPORTS = [pytest.param("model", id="model"),
              pytest.param("sim", id="sim", marks=[pytest.mark.sim, pytest.mark.xdist_group("device_sim_graph")])]
GRAPHS = {
    "kronecker": lambda: generators.kronecker(8, 8, seed=11),
    "uniform": lambda: generators.uniform(8, 4, seed=12),
    "karate": lambda: generators.real_graph("karate_club_graph"),
    "les_miserables": lambda: generators.real_graph("les_miserables_graph"),
}


# how source values are fetched: through the unit only (Piccolo row gathers, baseline
# line reads), from the on-chip window (every source fits), or both (a 100-vertex window)
FETCH = {"piccolo": ("piccolo", False), "baseline": ("baseline", False), "window": ("piccolo", True),
         "window100": ("baseline", 100)}


@pytest.fixture(scope="module", params=TRANSPORTS)
def dev(request):
    with ndpkit.open(f"{request.param}?engines=graph&mem_size={4 << 20}") as d:
        yield d


def _matrix(g):
    return csr.adjacency(g, weight="weight")[0] if isinstance(g, nx.Graph) else g


@pytest.mark.parametrize("name", GRAPHS)
@pytest.mark.parametrize("fetch", FETCH)
def test_against_scipy(dev, name, fetch):
    mode, window = FETCH[fetch]
    g = GRAPHS[name]()
    a = _matrix(g)
    hops = graph.bfs(a, 3, dev, mode=mode, window=window)
    assert np.array_equal(hops, csgraph.shortest_path(a, directed=True, unweighted=True, indices=3))
    count, labels = graph.connected_components(a, dev, mode=mode, window=window)
    want_count, want_labels = csgraph.connected_components(a, directed=True, connection="weak")
    assert count == want_count and np.array_equal(labels, want_labels)
    if isinstance(g, nx.Graph):     # networkx in, networkx's answers out
        source = list(g.nodes)[3]
        assert graph.bfs(g, source, dev, mode=mode, window=window) == nx.single_source_shortest_path_length(g, source)
        assert graph.connected_components(g, dev, mode=mode, window=window) == list(nx.connected_components(g))
    w = generators.random_weights(a, 1, 20, seed=5)
    dist = graph.sssp(w, 3, dev, mode=mode, window=window)
    assert np.array_equal(dist, csgraph.shortest_path(w, directed=True, method="D", indices=3))


@pytest.mark.parametrize("fetch", FETCH)
def test_spmv(dev, fetch):
    """y = A x: bit for bit the golden model's row sums, and A @ x in float64 to fp32
    rounding; rectangular matrices and a networkx graph's weighted adjacency too."""
    mode, window = FETCH[fetch]
    rng = np.random.default_rng(7)
    for a in (generators.kronecker(8, 8, seed=11).astype(np.float32) * rng.standard_normal(1).astype(np.float32),
              sp.random_array((300, 170), density=0.05, format="csr", dtype=np.float32, rng=rng),
              sp.random_array((90, 260), density=0.08, format="csr", dtype=np.float32, rng=rng)):
        a = sp.csr_array(a)
        a.data = rng.standard_normal(a.nnz).astype(np.float32)
        x = rng.standard_normal(a.shape[1]).astype(np.float32)
        y = graph.spmv(a, x, dev, mode=mode, window=window)
        assert y.dtype == np.float32 and y.shape == (a.shape[0],)
        a.sort_indices()
        want = golden.row_sums(a.indptr, a.data.view(np.uint32), x.view(np.uint32)[a.indices]).view(np.float32)
        assert np.array_equal(y.view(np.uint32), want.view(np.uint32))
        exact = a.astype(np.float64) @ x.astype(np.float64)
        bound = 1e-5 * (abs(a).astype(np.float64) @ np.abs(x.astype(np.float64))) + 1e-30
        assert np.all(np.abs(y - exact) <= bound)
    g = generators.real_graph("les_miserables_graph")
    x = rng.standard_normal(g.number_of_nodes()).astype(np.float32)
    want = _matrix(g).astype(np.float64) @ x.astype(np.float64)
    assert np.allclose(graph.spmv(g, x, dev, mode=mode, window=window), want, rtol=1e-5, atol=1e-4)
    with pytest.raises(ValueError, match="x: shape"):
        graph.spmv(sp.eye_array(4, format="csr"), np.ones(5), dev)


def test_bad_graphs_and_commands(dev):
    g = csr.pull(generators.uniform(5, 3, seed=2), "cc")
    keep = dev.alloc(4096)
    keep.write(bytes(range(256)) * 16)
    rowptr, col = dev.upload(g.rowptr), dev.upload(g.col)
    a, b = dev.upload(np.arange(g.n, dtype=np.uint32)), dev.alloc(4 * g.n)
    b.write(b"\xab" * b.size)
    before = (a.read(), b.read())
    args = dict(n=g.n, edges=len(g.col), rowptr=rowptr, col=col, a=a, b=b, max_iterations=100)
    try:
        bad_rowptr = g.rowptr.copy()
        bad_rowptr[7] = bad_rowptr[6] - 1 if bad_rowptr[6] else 1000
        bad_col = g.col.copy()
        bad_col[-1] = g.n
        for arrays, code, field in (({"rowptr": bad_rowptr}, ErrorCode.BAD_GRAPH, "rowptr"),
                                    ({"col": bad_col}, ErrorCode.BAD_INDEX, "col")):
            for key, arr in arrays.items():
                {"rowptr": rowptr, "col": col}[key].write(arr)
            with pytest.raises(DeviceError) as e:
                dev.graph.run(Program.CC, **args)
            assert e.value.code == code and e.value.field == field
            assert (a.read(), b.read()) == before            # nothing written
            rowptr.write(g.rowptr)
            col.write(g.col)
        for change, code, field in (({"n": 0}, ErrorCode.BAD_FIELD, "n"),
                                    ({"max_iterations": 0}, ErrorCode.BAD_FIELD, "max_iterations"),
                                    ({"b": a}, ErrorCode.OVERLAP, "b")):
            with pytest.raises(DeviceError) as e:
                dev.graph.run(Program.CC, **{**args, **change})
            assert e.value.code == code and e.value.field == field
        with pytest.raises(DeviceError) as e:
            dev.graph.run(7, **args)
        assert e.value.code == ErrorCode.BAD_FIELD and e.value.field == "program"
        # PageRank's own fields: the tolerance (negative, NaN), the scratch array
        good = golden.PageRankConstants.for_graph(g.n)
        scratch = dev.alloc(2 * b.size)
        degrees = dev.upload(golden.out_degrees(g.n, g.col))
        try:
            pr = dict(args, val=degrees, scratch=scratch, max_iterations=3)
            for change, code, field in (({"constants": golden.PageRankConstants(good.damping, good.teleport,
                                                                                good.inv_n, 0xBF80_0000)},
                                         ErrorCode.BAD_FIELD, "tolerance"),
                                        ({"constants": golden.PageRankConstants(good.damping, good.teleport,
                                                                                good.inv_n, 0x7FC0_0000)},
                                         ErrorCode.BAD_FIELD, "tolerance"),
                                        ({"constants": good, "scratch": b}, ErrorCode.OVERLAP, "scratch")):
                with pytest.raises(DeviceError) as e:
                    dev.graph.run(Program.PAGERANK, **{**pr, **change})
                assert e.value.code == code and e.value.field == field
            assert (a.read(), b.read()) == before            # nothing written
        finally:
            scratch.free()
            degrees.free()
        done = dev.graph.run(Program.CC, **args)              # the next command works
        assert done.ok and done.aux >= 1
        assert keep.read() == bytes(range(256)) * 16
    finally:
        for buf in (keep, rowptr, col, a, b):
            buf.free()


def test_api_argument_checks(dev):
    g = generators.uniform(4, 2, seed=1)
    with pytest.raises(ValueError, match="mode"):
        graph.bfs(g, 0, dev, mode="fast")
    with pytest.raises(ValueError, match="source"):
        graph.bfs(g, 16, dev)
    with pytest.raises(ValueError, match="graph: adjacency matrix must be square"):
        graph.bfs([[0, 1]], 0, dev)
    with pytest.raises(TypeError, match="graph: expected a scipy.sparse matrix"):
        graph.bfs("0 1", 0, dev)
    with pytest.raises(ValueError, match="source"):
        graph.bfs(generators.real_graph("karate_club_graph"), "nobody", dev)
    with pytest.raises(ValueError, match="program: PageRank"):
        graph.run(dev, csr.pull(g, "pagerank"), Program.PAGERANK, np.zeros(16, np.uint32))
    # the source window: at most what the engine holds (its register says how many)
    assert dev.graph.window_capacity == golden.WINDOW_VERTICES
    free = dev.allocator.free_bytes
    for bad in (golden.WINDOW_VERTICES + 1, -1, 2.5, "all", None):
        with pytest.raises(ValueError, match="window"):
            graph.bfs(g, 0, dev, window=bad)
    assert dev.allocator.free_bytes == free


def test_card_graph_frees_its_buffers(dev):
    """Every buffer a graph command makes is freed, also when the engine rejects it."""
    free = dev.allocator.free_bytes
    g = csr.pull(generators.uniform(5, 3, seed=4), "cc")
    bad = csr.PullGraph(g.n, g.rowptr, np.where(np.arange(len(g.col)) == 3, g.n + 7, g.col).astype(np.uint32),
                        None, None)
    with pytest.raises(DeviceError) as e:
        graph.run(dev, bad, Program.CC, np.arange(g.n, dtype=np.uint32))
    assert e.value.code == ErrorCode.BAD_INDEX and e.value.field == "col"
    assert dev.allocator.free_bytes == free
    with graph.CardGraph(dev, g) as card:
        card.vector()
        assert dev.allocator.free_bytes < free
    assert dev.allocator.free_bytes == free
    with pytest.raises(graph.ConvergenceError):
        graph.pagerank(generators.uniform(6, 4, seed=5), dev, tol=1e-12, max_iter=1)
    assert dev.allocator.free_bytes == free
    with pytest.raises(ValueError, match="mode"):
        graph.CardGraph(dev, g, mode="fast")


@pytest.mark.long
@pytest.mark.parametrize("fetch", FETCH)
def test_larger_graphs_on_sim(fetch):
    """`make sim`: Kronecker scale 11 and uniform scale 11 (edge factor 8) on the RTL card,
    all three programs, against scipy."""
    mode, window = FETCH[fetch]
    with ndpkit.open(f"sim?engines=graph&mem_size={16 << 20}&mem_queue=256") as dev:
        for a in (generators.kronecker(11, 8, seed=21), generators.uniform(11, 8, seed=22)):
            assert np.array_equal(graph.bfs(a, 5, dev, mode=mode, window=window),
                                  csgraph.shortest_path(a, unweighted=True, indices=5))
            w = generators.random_weights(a, 1, 100, seed=23)
            assert np.array_equal(graph.sssp(w, 5, dev, mode=mode, window=window), csgraph.shortest_path(w, method="D", indices=5))
            count, labels = graph.connected_components(a, dev, mode=mode, window=window)
            want = csgraph.connected_components(a, directed=True, connection="weak")
            assert count == want[0] and np.array_equal(labels, want[1])


@pytest.mark.parametrize("fetch", FETCH)
def test_pagerank(dev, fetch):
    """One engine command: bit for bit the golden PageRank (same iteration count), and
    within the stopping tolerance of networkx; no convergence within the limit raises."""
    mode, window = FETCH[fetch]
    for g in (GRAPHS["kronecker"](), GRAPHS["karate"]()):
        stats = {}
        ranks = graph.pagerank(g, dev, mode=mode, window=window, stats=stats)
        p = csr.pull(g, "pagerank")
        if p.nodes is not None:             # networkx in: a dict keyed by node
            assert list(ranks) == p.nodes
            ranks = np.array([ranks[v] for v in p.nodes], dtype=np.float32)
        want = golden.pagerank(p.rowptr, p.col, tol=1e-6)
        assert np.array_equal(ranks.view(np.uint32), want.values) and stats["iterations"] == want.iterations
        nxg = g if isinstance(g, nx.Graph) else nx.from_scipy_sparse_array(g, create_using=nx.DiGraph)
        ref = nx.pagerank(nxg, alpha=0.85, tol=1e-6)       # weights as networkx reads them
        ref = np.array([ref[v] for v in (p.nodes if p.nodes is not None else range(p.n))])
        assert np.abs(ranks - ref).sum() < 2 * p.n * 1e-6 + 1e-4
    with pytest.raises(graph.ConvergenceError) as info:
        graph.pagerank(GRAPHS["uniform"](), dev, mode=mode, window=window, tol=1e-12, max_iter=2)
    assert info.value.iterations == 2 and info.value.ranks.shape == (GRAPHS["uniform"]().shape[0],)
    with pytest.raises(ValueError, match="alpha"):
        graph.pagerank(GRAPHS["karate"](), dev, alpha=1.5)


def test_window_loads_count_in_the_completion(dev):
    """The same command with and without the source window: the same iterations and
    answer, and the completion's bytes read differ by exactly the window's loads (the
    first min(window, n) values, whole bus words, once per iteration), less the columns
    when every source is in the window (the first edge pass judges them as it streams
    them: the validation pass reads the row pointers only) — on the model and on the
    RTL alike."""
    g = csr.pull(generators.uniform(6, 3, seed=9), "cc")
    word = dev.word_bytes
    runs = {}
    for window in (False, 40, True):
        values, iterations, done = graph.run(dev, g, Program.CC, np.arange(g.n, dtype=np.uint32), window=window)
        runs[window] = (values, iterations, done.bytes_read)
    base = runs[False]
    for window, count in ((40, 40), (True, g.n)):
        values, iterations, read = runs[window]
        assert np.array_equal(values, base[0]) and iterations == base[1]
        columns = -(-4 * len(g.col) // word) * word if count == g.n else 0
        assert read - base[2] == iterations * -(-4 * count // word) * word - columns, window


SLICED = [pytest.param("model", id="model"),
          pytest.param("sim", id="sim", marks=[pytest.mark.sim, pytest.mark.long])]


@pytest.mark.parametrize("transport", SLICED)
def test_graphs_split_over_instances(transport):
    """A card with three graph instances, each on its own memory region: every program
    splits the graph into row slices over them (``instances=None``) or their first
    ``k``, with scipy's answers, SpMV and PageRank bit for bit one instance's (PageRank
    with its iteration count), the slices covering every row once; every buffer freed;
    a bad ``instances`` refused naming it, before anything is allocated.  (The RTL card's
    run is in `make sim`: three 512-bit engines make a long Verilator build.)"""
    url = f"{transport}?engines=graph*3&memory_ports=3&mem_size={24 << 20}"
    with ndpkit.open(url) as dev:
        free = dev.allocator.free_bytes
        rng = np.random.default_rng(3)
        for a in (generators.kronecker(9, 8, seed=31), generators.uniform(9, 4, seed=32),
                  _matrix(generators.real_graph("les_miserables_graph"))):
            p = csr.pull(a, "bfs")
            slices = graph.row_slices(p, 3, dev.word_bytes // 4)
            assert [s[0] for s in slices] == sorted({s[0] for s in slices}) and slices[0][0] == 0
            assert sum(rows for _, rows in slices) == p.n and all(first % 16 == 0 for first, _ in slices)
            for k in (None, 2):
                assert np.array_equal(graph.bfs(a, 2, dev, instances=k),
                                      csgraph.shortest_path(a, unweighted=True, indices=2))
                w = generators.random_weights(a, 1, 20, seed=6)
                assert np.array_equal(graph.sssp(w, 2, dev, instances=k),
                                      csgraph.shortest_path(w, method="D", indices=2))
                count, labels = graph.connected_components(a, dev, instances=k)
                want = csgraph.connected_components(a, directed=True, connection="weak")
                assert count == want[0] and np.array_equal(labels, want[1])
                m = sp.csr_array(a, dtype=np.float32)
                m.data = rng.standard_normal(m.nnz).astype(np.float32)
                x = rng.standard_normal(m.shape[1]).astype(np.float32)
                assert np.array_equal(graph.spmv(m, x, dev, instances=k), graph.spmv(m, x, dev, instances=1))
                split, whole = {}, {}
                ranks = graph.pagerank(a, dev, instances=k, stats=split)
                assert np.array_equal(ranks, graph.pagerank(a, dev, instances=1, stats=whole))
                assert split["iterations"] == whole["iterations"]
        with pytest.raises(graph.ConvergenceError) as info:
            graph.pagerank(generators.uniform(9, 4, seed=32), dev, tol=1e-12, max_iter=2)
        assert info.value.iterations == 2
        assert dev.allocator.free_bytes == free
        # one slice's command refused (a column out of range in the last slice): the error
        # names the array, every slice was waited for and every buffer is freed
        g = csr.pull(generators.uniform(9, 4, seed=33), "cc")
        bad = csr.PullGraph(g.n, g.rowptr, np.where(np.arange(len(g.col)) == len(g.col) - 1, g.n + 3, g.col)
                            .astype(np.uint32), None, None)
        with pytest.raises(DeviceError) as e:
            graph.run(dev, bad, Program.CC, np.arange(g.n, dtype=np.uint32))
        assert e.value.code == ErrorCode.BAD_INDEX and e.value.field == "col"
        assert dev.allocator.free_bytes == free
        for bad in (0, 4, 1.5, True, "all"):
            with pytest.raises(ValueError, match="instances"):
                graph.bfs(generators.uniform(6, 3, seed=1), 0, dev, instances=bad)
        assert dev.allocator.free_bytes == free


def _exchange_rounds(dev, p, program, values, x, rounds, first_round):
    """``rounds`` rounds of ``program`` over two row slices of ``p`` on the card's first
    instance, sharing every round's rows over the window exchange and, after the first,
    taking the sources from it: each round's rows and completions."""
    client = graph.instances_for(dev)[0]
    out = []
    with graph.SlicedGraph(dev, p, [client, client], mode="piccolo", window=True, values=values) as sliced:
        for card in sliced.cards:
            card.arrays[0].write(x)
        cur = 0
        for i in range(rounds):
            done = sliced.run_each(lambda card: card.command(
                program, card.arrays[cur], card.arrays[1 - cur], 1, wait=False, share=True, take=i > 0,
                round=(first_round + i) & 0xFFFF))
            cur = 1 - cur
            out.append((np.concatenate([card.rows_of(card.arrays[cur]) for card in sliced.cards]), done))
    return out


@pytest.mark.parametrize("program", [Program.CC, Program.SSSP, Program.SPMV])
def test_window_exchange(dev, program):
    """Rounds of a graph split in two row slices, their results shared over the window
    exchange (the card's one instance takes both slices' words) and the next round's
    sources taken from it, no window read from memory: every round equals the golden
    model's iteration of the whole graph bit for bit (SpMV: the next product over the
    last), through the 16-bit round's wrap; each take reads the window's bytes fewer."""
    a = generators.kronecker(8, 8, seed=11)
    if program == Program.SSSP:
        a = generators.random_weights(a, 1, 50, seed=4)
    p = csr.pull(a, {Program.CC: "cc", Program.SSSP: "sssp", Program.SPMV: "spmv"}[program])
    rng = np.random.default_rng(21)
    values = None
    if program == Program.SSSP:
        values = p.values.astype(np.uint32)
        x = np.full(p.n, golden.INF, np.uint32)
        x[3] = 0
    elif program == Program.SPMV:
        values = rng.standard_normal(len(p.col)).astype(np.float32).view(np.uint32)
        x = rng.standard_normal(p.n).astype(np.float32).view(np.uint32)
    else:
        x = np.arange(p.n, dtype=np.uint32)
    rounds = _exchange_rounds(dev, p, program, values, x, 4, 0xFFFE)
    want = x
    for i, (got, done) in enumerate(rounds):
        if program == Program.SPMV:
            want = golden.spmv(p.rowptr, p.col, values, want).values
        else:
            want = golden.min_iteration(p.rowptr, p.col, want, values if program == Program.SSSP else None)
        assert np.array_equal(got, want), f"round {i}"
        if i:
            window = golden._words(4 * p.n, dev.word_bytes)
            assert [d.bytes_read for d in done] == [d.bytes_read - window for d in rounds[0][1]]


def test_window_exchange_pagerank(dev):
    """PageRank over two slices on one instance: the slices' contributions shared (the
    command's ``contributions`` 1, then 2), each iteration's pull taking them from the
    window: every iteration's ranks equal the golden model's whole-graph iteration."""
    a = generators.uniform(8, 4, seed=12)
    p = csr.pull(a, "pagerank")
    c = golden.PageRankConstants.for_graph(p.n)
    degrees = golden.out_degrees(p.n, p.col)
    rank = np.full(p.n, np.float32(1 / p.n)).view(np.uint32)
    client = graph.instances_for(dev)[0]
    with graph.SlicedGraph(dev, p, [client, client], mode="piccolo", window=True, degrees=degrees) as sliced:
        for card in sliced.cards:
            card.arrays[0].write(rank)
        sliced.run_each(lambda card: card.command(Program.PAGERANK, *card.arrays[:2], 1, wait=False,
                                                  scratch=card.arrays[2], constants=c, contributions=1,
                                                  share=True, round=7))
        cur = 0
        for it in range(3):
            dterm = int(golden.dangling_term(rank, degrees, c))
            sliced.run_each(lambda card: card.command(
                Program.PAGERANK, card.arrays[cur], card.arrays[1 - cur], 1, wait=False, scratch=card.arrays[2],
                constants=c, contributions=2, dangling_term=dterm, share=True, take=True, round=8 + it))
            cur = 1 - cur
            want, _ = golden.pagerank_iteration(p.rowptr, p.col, degrees, rank, c)
            rank = np.concatenate([card.rows_of(card.arrays[cur]) for card in sliced.cards])
            assert np.array_equal(rank, want), f"iteration {it}"


def test_window_exchange_refusals(dev):
    """A take refused (BAD_FIELD naming ``exchange``, nothing written, the next command
    working) when its set lacks a slice's words, is of another round, or was poisoned
    by a sharing command that failed (a bad column), and share or take with more than
    one iteration or PageRank's every-vertex contributions."""
    g = csr.pull(generators.uniform(8, 4, seed=13), "cc")
    x = np.arange(g.n, dtype=np.uint32)
    client = graph.instances_for(dev)[0]
    bad = csr.PullGraph(g.n, g.rowptr, np.where(np.arange(len(g.col)) == 5, g.n + 1, g.col).astype(np.uint32),
                        None, None)
    with graph.CardGraph(dev, g, client=client) as whole, graph.CardGraph(dev, bad, client=client) as broken:
        a, b = whole.upload(x), whole.upload(np.full(g.n, 7, np.uint32))

        def refused(card, **exchange):
            b.write(np.full(g.n, 7, np.uint32))
            with pytest.raises(DeviceError) as e:
                card.command(Program.CC, a, b, exchange.pop("max_iterations", 1), **exchange)
            assert e.value.code == ErrorCode.BAD_FIELD and e.value.field == "exchange"
            assert np.array_equal(b.download(np.uint32, g.n), np.full(g.n, 7, np.uint32))

        refused(whole, take=True, round=100)                  # nothing shared for round 99
        refused(whole, share=True, max_iterations=2)
        refused(whole, take=True, round=101, max_iterations=2)
        whole.command(Program.CC, a, b, 1, share=True, round=40)
        refused(whole, take=True, round=42)                   # the set holds round 40's, not 41's
        with pytest.raises(DeviceError) as e:                 # round 40 again, failing: poisoned
            broken.command(Program.CC, a, b, 1, share=True, round=40)
        assert e.value.code == ErrorCode.BAD_INDEX
        refused(whole, take=True, round=41)
        whole.command(Program.CC, a, b, 1, share=True, round=42)       # a newer round, whole: taken
        done = whole.command(Program.CC, b, a, 1, take=True, round=43)
        assert done.error == 0
        assert np.array_equal(a.download(np.uint32, g.n),
                              golden.min_iteration(g.rowptr, g.col, golden.min_iteration(g.rowptr, g.col, x)))
        pr = csr.pull(generators.uniform(8, 4, seed=13), "pagerank")
        with graph.CardGraph(dev, pr, client=client, values=golden.out_degrees(pr.n, pr.col)) as card:
            with pytest.raises(DeviceError) as e:
                card.command(Program.PAGERANK, a, b, 1, scratch=card.vector(arrays=2),
                             constants=golden.PageRankConstants.for_graph(pr.n), share=True)
            assert e.value.code == ErrorCode.BAD_FIELD and e.value.field == "exchange"
