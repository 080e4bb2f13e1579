"""Graph kernels on the card's graph engine, taking a ``scipy.sparse`` adjacency matrix
or a networkx graph (``A[u, v]`` = edge ``u -> v``) and an open device.  Each function
answers in the conventions of the library its input comes from:

===========================  =====================================  ==========================================
function                     scipy.sparse matrix in                 networkx graph in
===========================  =====================================  ==========================================
:func:`bfs`                  ``csgraph.shortest_path(A,             ``{node: hops}``, reachable nodes
                             unweighted=True, indices=s)``          (``single_source_shortest_path_length``)
:func:`sssp`                 ``csgraph.dijkstra(A, indices=s)``     ``{node: distance}``
                                                                    (``single_source_dijkstra_path_length``)
:func:`connected_components` ``(count, labels)``, weak              list of node sets
                                                                    (``weakly_connected_components``)
:func:`pagerank`             float32 array in vertex order          ``{node: rank}`` (``networkx.pagerank``)
:func:`spmv`                 ``A @ x`` as float32                   ``A @ x`` over the weighted adjacency
===========================  =====================================  ==========================================

What counts as an edge (stored zeros, parallel edges, undirected edges, weights) is set
out in :mod:`ndpkit.engines.graph.csr`: as scipy and networkx define it, with the
host transforming what the engine cannot take directly (PageRank's integer weights become
parallel edges; SSSP keeps a pair's lightest edge) and refusing what it cannot transform
(non-integer weights, PageRank's ``personalization``/``dangling``, strong components).

PageRank is networkx's iteration (uniform teleport, dangling rank spread uniformly, stop
when the L1 change is below ``n * tol``) in fp32: one engine command runs every
iteration, equal to ``ndpkit.engines.graph.golden.pagerank`` bit for bit.  SpMV rows sum
in the engine's order (16 FMA partial sums, then a tree), equal to the golden model
bit for bit and to ``A @ x`` in float64 within fp32 rounding.

Vertices of a networkx graph are numbered in ``G.nodes`` order; ``source`` is a node
label then.  ``window=True`` (the default) holds the values of the first vertices, as
many as the engine's source window takes, on chip for every pass, read with full bursts
(``False``: none; an integer: that many); for a graph with more vertices than that, BFS,
SSSP, components and SpMV number the most-pulled sources first on the host
(:func:`ndpkit.engines.graph.csr.hot_first`; the answers do not change); ``mode="piccolo"`` fetches the other sources'
values with row gathers, ``"baseline"`` with 64-byte line reads (the same answers; see
docs/engines/graph.md for the traffic).  On a card with several graph instances (each on
its own memory channel) every function splits the graph by rows over all of them
(``instances=k``: the first ``k``; :func:`run`), with the same answers.  The same functions serve networkx's dispatch as the ``ndpkit`` backend
(:mod:`ndpkit.engines.graph.nx_backend`).
"""
from __future__ import annotations

import itertools

import numpy as np

from ndpkit.engine import CommandGroup, Completion, span
from ndpkit.engines.graph import golden
from ndpkit.engines.graph.golden import Program
from ndpkit.engines.graph import csr, generators

__all__ = ["bfs", "sssp", "connected_components", "spmv", "pagerank", "ConvergenceError", "run", "CardGraph",
           "SlicedGraph", "instances_for", "row_slices", "csr", "generators", "MODES"]

MODES = {"piccolo": golden.MODE_PICCOLO, "baseline": golden.MODE_BASELINE}


def instances_for(device, instances: int | None = None) -> list:
    """The graph engine instances a run uses: all of the card's (``None``), or its first
    ``instances`` (1 .. how many it has; ``ValueError`` naming ``instances`` otherwise)."""
    clients = getattr(device, "instances", {}).get("graph") or [device.graph]
    if instances is None:
        return clients
    if isinstance(instances, (bool, np.bool_)) or not isinstance(instances, (int, np.integer)) \
            or not 1 <= instances <= len(clients):
        raise ValueError(f"instances: 1 .. {len(clients)} (this card's graph engine instances) or None "
                         f"(all), not {instances!r}")
    return clients[:int(instances)]


#: what a row costs beside its entries when slices are balanced, in entries: a least-squares
#: fit of the slices' cycles (``cycles = fixed + entries + ROW_COST x rows``) on the
#: ``hbm2_pc`` preset, the Kronecker scale-14 graph's slices at 4 and 8 instances (its rows'
#: degrees vary; a uniform graph's slices are balanced at any cost): CC 8.3, SSSP 8.2, SpMV
#: 10.4 (on the edge lanes an entry is about an eighth of a cycle and a row about a cycle
#: more: its last bundle, its pointer and result words); PageRank's, its sums' rows and
#: its two vertex passes, 12.5
ROW_COST = 9
PAGERANK_ROW_COST = 12.5


def row_slices(g: csr.PullGraph, parts: int, lanes: int, row_cost: float = ROW_COST) -> list[tuple[int, int]]:
    """(first row, rows) of up to ``parts`` row slices of ``g`` of about equal cost
    (entries + ``row_cost`` x rows), every slice starting at a multiple of ``lanes``
    rows (the engine's ``first_row`` rule); fewer slices where the graph has fewer
    such rows."""
    cost = g.rowptr.astype(np.float64) + row_cost * np.arange(g.n + 1)
    starts = {0}
    for i in range(1, parts):
        row = int(np.searchsorted(cost, i * cost[-1] / parts, side="left"))
        row = int(round(row / lanes)) * lanes
        if 0 < row < g.n:
            starts.add(row)
    bounds = sorted(starts) + [g.n]
    return [(lo, hi - lo) for lo, hi in zip(bounds, bounds[1:])]


def slice_of(g: csr.PullGraph, first: int, rows: int, values=None):
    """The row slice's pull graph (row pointers rebased to 0, its entries; ``n`` stays
    the vertex count) and its entries' ``values``."""
    lo, hi = int(g.rowptr[first]), int(g.rowptr[first + rows])
    part = csr.PullGraph(g.n, (g.rowptr[first:first + rows + 1] - lo).astype(np.uint32), g.col[lo:hi],
                         None if g.values is None else g.values[lo:hi], g.nodes, g.integral)
    return part, (None if values is None else values[lo:hi])


class CardGraph:
    """A pull graph's arrays in card memory for the length of a ``with`` block: ``rowptr``,
    ``col`` and (when given) edge ``values`` uploaded on entry, every buffer made
    through it freed on exit (also when a command fails), so one graph serves many
    commands (PageRank's iterations) without the upload and free bookkeeping twice.
    ``client``: the graph engine instance whose memory region holds the arrays and
    which runs the commands (default: the card's first); ``first_row``: ``g`` is the
    row slice from that row (:func:`slice_of`)."""

    def __init__(self, device, g: csr.PullGraph, *, mode: str = "piccolo", values: np.ndarray | None = None,
                 window: bool | int = True, client=None, first_row: int = 0):
        if mode not in MODES:
            raise ValueError(f"mode: {mode!r}, not one of {', '.join(MODES)}")
        if g.n == 0:
            raise ValueError("graph: no vertices")
        self.client = client or instances_for(device)[0]
        self.window = self.client.window_for(g.n, window)
        self.device, self.g, self.mode, self._values = device, g, mode, values
        self.first_row, self.rows = first_row, len(g.rowptr) - 1
        self._buffers = []
        # the instance's memory region: its commands work there
        self.region = self.client.region if getattr(device, "instances", {}).get("graph") else None

    def upload(self, arr):
        """A card buffer holding ``arr`` as 32-bit words (freed with the graph)."""
        self._buffers.append(self.device.upload(np.ascontiguousarray(arr, dtype=np.uint32), region=self.region))
        return self._buffers[-1]

    def vector(self, arrays: int = 1):
        """An uninitialised card buffer of ``arrays`` vertex arrays (one 32-bit word per
        vertex, each rounded up to whole bus words), freed with the graph."""
        word = self.device.word_bytes
        self._buffers.append(self.device.alloc(arrays * (-(-4 * self.g.n // word) * word), region=self.region))
        return self._buffers[-1]

    def __enter__(self):
        try:
            edges = len(self.g.col) > 0
            self.rowptr = self.upload(self.g.rowptr)
            self.col = self.upload(self.g.col) if edges else None
            self.val = self.upload(self._values) if self._values is not None and len(self._values) else None
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        while self._buffers:
            self._buffers.pop().free()

    def command(self, program: Program, a, b, max_iterations: int, *, wait: bool = True, **pagerank):
        """One engine command over the graph (``a`` the input vector, ``b`` the other one;
        PageRank's ``scratch`` and ``constants`` as keywords); ``wait=False``: the
        submitted command."""
        return self.client.run(program, n=self.g.n, edges=len(self.g.col), rowptr=self.rowptr, col=self.col,
                               val=self.val, a=a, b=b, mode=MODES[self.mode], max_iterations=max_iterations,
                               window=self.window, first_row=self.first_row,
                               rows=0 if self.rows == self.g.n else self.rows, wait=wait, **pagerank)

    def rows_of(self, buffer) -> np.ndarray:
        """The slice's rows of a vertex array on the card."""
        return np.frombuffer(buffer.read(4 * self.rows, offset=4 * self.first_row), dtype=np.uint32).copy()


class SlicedGraph:
    """A pull graph split by rows over several graph engine instances (one slice each,
    :func:`row_slices`), each slice's arrays in its instance's memory region, with a
    whole vertex array and its partner per instance: the engines pull every source from
    their own region, so a step writes the current values into every region, runs
    every slice at once, and gathers each slice's rows; or (:meth:`rounds`, where the
    card's window exchange reaches every instance and ``exchange`` allows it) rounds
    whose results go straight into every instance's window for the next."""

    def __init__(self, device, g: csr.PullGraph, clients: list, *, mode: str, values=None, window=True,
                 degrees=None, exchange: bool = True):
        lanes = device.word_bytes // 4
        self.g, self.device = g, device
        self.slices = row_slices(g, len(clients), lanes,
                                 PAGERANK_ROW_COST if degrees is not None else ROW_COST)
        self.cards = []
        for client, (first, rows) in zip(clients, self.slices):
            part, part_values = slice_of(g, first, rows, values)
            self.cards.append(CardGraph(device, part, mode=mode, window=window, client=client, first_row=first,
                                        values=degrees if degrees is not None else part_values))
        self.degrees = degrees                       # PageRank: the out-degrees (and a scratch array each)
        self.exchange = exchange                     # False: never over the window exchange
        # each instance's first slice: a run's first round starts its window set afresh there
        self._first_slice = {id(card.client): card for card in reversed(self.cards)}

    def __enter__(self):
        try:
            for card in self.cards:
                card.__enter__()
                card.arrays = [card.vector(), card.vector()] + ([card.vector(arrays=2)] if self.degrees is not None else [])
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        for card in self.cards:
            card.__exit__(None, None, None)

    def step(self, values: np.ndarray, program: Program, max_iterations: int, **pagerank):
        """Every slice's command over ``values`` (written into its instance's vertex array,
        and into the other one where the command may iterate: the slice's other rows
        read the same in every iteration), run at once: (each slice's result rows
        concatenated, each slice's completion)."""
        values = np.ascontiguousarray(values, dtype=np.uint32)
        for card in self.cards:
            card.arrays[0].write(values)
            if max_iterations > 1:
                card.arrays[1].write(values)
        done = self.run_each(lambda card: card.command(
            program, *card.arrays[:2], max_iterations, wait=False,
            **({"scratch": card.arrays[2], **pagerank} if program == Program.PAGERANK else {})))
        rows = [card.rows_of(card.arrays[0] if (d.aux & ~golden.CONVERGED) % 2 == 0 else card.arrays[1])
                for card, d in zip(self.cards, done)]
        return np.concatenate(rows), done

    @property
    def exchanges(self) -> bool:
        """Whether the rounds go over the card's window exchange: allowed (``exchange``), every
        instance built with two window sets and holding every source in its window."""
        return self.exchange and all(card.client.window_sets == 2 and card.window >= self.g.n for card in self.cards)

    def _exchange(self, card, i: int) -> dict:
        """Round ``i``'s exchange fields for ``card``'s command: shared; taken after the
        first round; the first round's first slice of each instance fresh."""
        return {"share": True, "take": i > 0, "round": i & 0xFFFF,
                "fresh": i == 0 and self._first_slice[id(card.client)] is card}

    def rounds(self, values: np.ndarray, program: Program):
        """Jacobi rounds of one iteration each over the window exchange (:attr:`exchanges`):
        ``values`` written once into every instance's first vertex array (the first
        round loads its window from there), then every round shares its rows with every
        instance's window and the next takes its sources from it, nothing crossing the
        host link between rounds.  A generator of each round's completions; ``gather()``
        the last round's rows.  (SpMV: each product over the one before.)"""
        values = np.ascontiguousarray(values, dtype=np.uint32)
        for card in self.cards:
            card.arrays[0].write(values)
        self.current = 0
        for i in itertools.count():
            done = self.run_each(lambda card: card.command(
                program, card.arrays[self.current], card.arrays[1 - self.current], 1, wait=False,
                **self._exchange(card, i)))
            self.current = 1 - self.current
            yield done

    def gather(self) -> np.ndarray:
        """Every slice's rows of the last round (:meth:`rounds`)."""
        return np.concatenate([card.rows_of(card.arrays[self.current]) for card in self.cards])

    def run_each(self, submit) -> list:
        """``submit(card)`` (a command submitted without waiting) for every slice, started
        together; each slice's completion."""
        with self.device.batch():
            commands = [submit(card) for card in self.cards]
        # (every slice waited for before an error is raised: the others still use their buffers)
        return CommandGroup(commands).wait_parts()

    def pagerank_rounds(self, rank: np.ndarray, c: golden.PageRankConstants):
        """PageRank's iterations with every instance passing over its own rows only
        (the command's ``contributions`` 1, then 2): a generator of (new ranks, each
        slice's completion) per iteration, the first item the contributions round's
        (``None``, its completions).  The host gathers each slice's contributions, writes
        them all into every region's scratch, and computes the dangling term (the same
        fp32 sum in vertex order), so every iteration equals one instance's bit for bit."""
        for card in self.cards:                  # each slice's ranks, where its commands read them
            rows = slice(card.first_row, card.first_row + card.rows)
            card.arrays[0].write(np.ascontiguousarray(rank[rows], dtype=np.uint32), offset=4 * card.first_row)
        # over the window exchange: the slices' contributions shared, each iteration's pull
        # taking them (the host only sums the dangling rank); else gathered and written
        # into every region's scratch
        exchanges = self.exchanges

        def exchange(card, i):
            return self._exchange(card, i) if exchanges else {}
        done = self.run_each(lambda card: card.command(Program.PAGERANK, *card.arrays[:2], 1, wait=False,
                                                       scratch=card.arrays[2], constants=c, contributions=1,
                                                       **exchange(card, 0)))
        yield None, done
        current = 0                              # the array each slice's ranks are in
        for i in itertools.count(1):
            dterm = int(golden.dangling_term(rank, self.degrees, c))
            if not exchanges:
                contrib = np.concatenate([card.rows_of(card.arrays[2]) for card in self.cards])
                for card in self.cards:
                    card.arrays[2].write(contrib)
            done = self.run_each(lambda card: card.command(
                Program.PAGERANK, card.arrays[current], card.arrays[1 - current], 1, wait=False,
                scratch=card.arrays[2], constants=c, contributions=2, dangling_term=dterm, **exchange(card, i)))
            current = 1 - current
            rank = np.concatenate([card.rows_of(card.arrays[current]) for card in self.cards])
            yield rank, done


def run(device, g: csr.PullGraph, program: Program, init: np.ndarray, *, mode: str = "piccolo",
        max_iterations: int | None = None, window: bool | int = True, instances: int | None = None):
    """A program over a prepared pull graph: (values, iterations, completion).  For
    SpMV, BFS, SSSP and CC; PageRank takes more (:func:`pagerank`).

    On one instance (``instances=1``, or a card with one) this is one engine command.
    On several (``None``: every graph instance the card has), each instance computes a
    row slice of about equal entries from its own memory region (:class:`SlicedGraph`),
    all at once: SpMV in one step; BFS, SSSP and CC in rounds.  Where the instances
    reach each other over the card's window exchange and the window holds every
    source (:attr:`SlicedGraph.exchanges`), a round is one iteration whose rows go
    straight into every instance's window for the next (:meth:`SlicedGraph.rounds`),
    until a round changes nothing: one instance's iterations exactly, ``iterations``
    its count.  Otherwise each slice iterates over the values of the round's start
    until its rows stop changing, the host then gathering every slice's rows and
    writing them into every region, until a round in which no slice changed anything:
    the same fixed point, bit for bit, ``iterations`` the engine iterations of the
    rounds (each round's longest), and a run stopped by ``max_iterations`` before that
    point may differ from one instance's.  The completion's ``cycles`` is the rounds'
    spans summed and its bytes every command's."""
    if program == Program.PAGERANK:
        raise ValueError("program: PageRank needs out-degrees, a scratch array and its constants: "
                         "use ndpkit.graph.pagerank")
    max_iterations = g.n + 1 if max_iterations is None else int(max_iterations)
    if max_iterations < 1:
        raise ValueError(f"max_iterations: must be at least 1, not {max_iterations}")
    clients = instances_for(device, instances)
    order = None
    if window is not False and g.n > clients[0].window_for(g.n, window):
        # a graph larger than the window: number the most-pulled sources first, so the
        # window serves the most edges (results unchanged: every row keeps its entries' order)
        g, order = csr.hot_first(g, rows=program != Program.SPMV)
        init = np.asarray(init)[order]
    values = None
    if program in (Program.SSSP, Program.SPMV) and g.values is not None:
        values = g.values if g.values.dtype == np.uint32 else g.values.astype(np.float32).view(np.uint32)
    if _split(device, clients, g):
        result, iterations, done = _run_sliced(device, g, program, init, clients, mode=mode, values=values,
                                               window=window, max_iterations=max_iterations)
    else:
        with CardGraph(device, g, mode=mode, values=values, window=window, client=clients[0]) as card:
            a, b = card.upload(init), card.vector()
            done = card.command(program, a, b, max_iterations)
            result, iterations = (a if done.aux % 2 == 0 else b).download(np.uint32, g.n), done.aux
    if order is not None and program != Program.SPMV:
        result = result[np.argsort(order)]
    return result, iterations, done


def _split(device, clients: list, g: csr.PullGraph) -> bool:
    """Whether a run goes over row slices: several instances, and more rows than the one
    word a slice starts at (a smaller graph runs on the first instance)."""
    return len(clients) > 1 and g.n > device.word_bytes // 4


def _rounds(dones: list[list]):
    """One completion for rounds of slice commands: the rounds' spans summed, bytes summed,
    ``aux`` the rounds' longest iteration counts summed."""
    spans = [span(done, aux=lambda counts: max(a & ~(golden.CONVERGED | golden.CHANGED) for a in counts))
             for done in dones]
    return Completion(spans[0].engine, spans[-1].tag, spans[-1].error, sum(c.cycles for c in spans),
                      sum(c.bytes_read for c in spans), sum(c.bytes_written for c in spans), spans[0].start,
                      sum(c.aux for c in spans))


def _run_sliced(device, g, program, init, clients, *, mode, values, window, max_iterations):
    """:func:`run` over row slices on several instances: (values, iterations, completion)."""
    rounds = []
    with SlicedGraph(device, g, clients, mode=mode, values=values, window=window) as sliced:
        if sliced.exchanges and program != Program.SPMV:
            # rounds of one iteration over the window exchange: one instance's iterations
            for done in sliced.rounds(init, program):
                rounds.append(done)
                if not any(d.aux & golden.CHANGED for d in done) or len(rounds) >= max_iterations:
                    break
            done = _rounds(rounds)
            return sliced.gather(), len(rounds), done
        current, iterations = np.asarray(init, dtype=np.uint32), 0
        while True:
            current, done = sliced.step(current, program, 1 if program == Program.SPMV else max_iterations - iterations)
            rounds.append(done)
            iterations += max(d.aux for d in done)
            # a round in which no slice changed a value: the fixed point (SpMV: one pass)
            if program == Program.SPMV or all(d.aux == 1 for d in done) or iterations >= max_iterations:
                break
    done = _rounds(rounds)
    return current, done.aux, done


def _real_vector(name: str, x) -> np.ndarray:
    """``x`` as an array of real numbers (bool, integer or floating point; never copied
    or changed): complex values (NumPy would drop their imaginary parts with only a
    warning) and non-numeric ones (strings, objects) are refused naming ``name``."""
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as e:        # ragged nesting and the like
        raise TypeError(f"{name}: not an array of real numbers ({e})") from None
    if arr.dtype.kind == "c":
        raise TypeError(f"{name}: complex values ({arr.dtype}) are not taken; the engine computes in fp32 "
                        f"(pass {name}.real to drop the imaginary parts)")
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name}: an array of real numbers, not of dtype {arr.dtype}")
    return arr


def _distances(values) -> np.ndarray:
    out = values.astype(np.float64)
    out[values == golden.INF] = np.inf
    return out


def _by_node(g: csr.PullGraph, dist: np.ndarray, integral: bool) -> dict:
    """networkx's ``{node: distance}`` for the reachable nodes, nearest first."""
    reached = np.flatnonzero(np.isfinite(dist))
    reached = reached[np.argsort(dist[reached], kind="stable")]
    kind = int if integral else float
    return {g.nodes[i]: kind(dist[i]) for i in reached}


def _from_source(graph, source, device, mode: str, window, instances, kind: str, program: Program,
                 **pull) -> np.ndarray | dict:
    g = csr.pull(graph, kind, **pull)
    s = csr.vertex_index(g, source)
    if not 0 <= s < g.n:
        raise ValueError(f"source: vertex {source} is not in the {g.n}-vertex graph")
    init = np.full(g.n, golden.INF, np.uint32)
    init[s] = 0
    dist = _distances(run(device, g, program, init, mode=mode, window=window, instances=instances)[0])
    return dist if g.nodes is None else _by_node(g, dist, g.integral)


def bfs(graph, source, device, *, directed: bool = True, mode: str = "piccolo",
        window: bool | int = True, instances: int | None = None) -> np.ndarray | dict:
    """Hop counts from ``source``.  A matrix: float64 array, ``inf`` where unreachable
    (``scipy.sparse.csgraph.shortest_path(A, directed=directed, unweighted=True,
    indices=source)``; stored zeros are edges).  A networkx graph: ``{node: hops}`` for
    the reachable nodes (``networkx.single_source_shortest_path_length``)."""
    return _from_source(graph, source, device, mode, window, instances, "bfs", Program.BFS, directed=directed)


def sssp(graph, source, device, *, directed: bool = True, weight: str = "weight",
         mode: str = "piccolo", window: bool | int = True, instances: int | None = None) -> np.ndarray | dict:
    """Shortest-path distances from ``source`` over non-negative integer weights (a
    parallel edge: the lightest).  A matrix: float64 array, ``inf`` where unreachable
    (``scipy.sparse.csgraph.dijkstra(A, directed=directed, indices=source)``; a stored
    zero is a zero-weight edge).  A networkx graph: ``{node: distance}`` for the
    reachable nodes (``networkx.single_source_dijkstra_path_length(G, source,
    weight=weight)``; an edge without ``weight`` weighs 1)."""
    return _from_source(graph, source, device, mode, window, instances, "sssp", Program.SSSP, directed=directed,
                        weight=weight)


def connected_components(graph, device, *, directed: bool = True, connection: str = "weak",
                         return_labels: bool = True, mode: str = "piccolo", window: bool | int = True,
                         instances: int | None = None):
    """Weakly connected components.  A matrix: ``(count, labels)`` (``count`` alone when
    ``return_labels=False``), labels numbered in order of each component's smallest
    vertex, as ``scipy.sparse.csgraph.connected_components(A, directed, connection="weak")``
    (stored zeros are edges).  A networkx graph: a list of node sets in order of their
    first node, as ``networkx.weakly_connected_components`` (``connected_components``
    for an undirected graph).  ``connection="strong"`` is refused: the engine's label
    propagation finds weak components only."""
    if connection not in ("weak", "strong"):
        raise ValueError(f"connection: {connection!r}, not one of 'weak', 'strong'")
    if connection == "strong" and directed:
        raise NotImplementedError("connection: 'strong' components are not computed by the graph engine "
                                  "(label propagation finds weak ones); use scipy.sparse.csgraph")
    g = csr.pull(graph, "cc")
    if g.n == 0:
        return [] if g.nodes is not None else ((0, np.zeros(0, np.int32)) if return_labels else 0)
    smallest = run(device, g, Program.CC, np.arange(g.n, dtype=np.uint32), mode=mode, window=window,
                   instances=instances)[0]
    roots, labels = np.unique(smallest, return_inverse=True)
    if g.nodes is not None:
        sets = [set() for _ in roots]
        for node, label in zip(g.nodes, labels):
            sets[label].add(node)
        return sets
    return (len(roots), labels.astype(np.int32)) if return_labels else len(roots)


def spmv(matrix, x, device, *, mode: str = "piccolo", window: bool | int = True,
         instances: int | None = None) -> np.ndarray:
    """``y = A @ x`` in fp32 (a float32 array of A's row count).  ``matrix``: a
    ``scipy.sparse`` matrix of any shape (entries rounded to fp32; stored zeros are
    ordinary entries), a dense array, or a networkx graph (its weighted adjacency matrix).
    Neither ``matrix`` nor ``x`` is changed."""
    import scipy.sparse as sp
    a = csr.matrix(matrix, square=False)
    if a is None:                   # a networkx graph: its weighted adjacency matrix
        a = csr.adjacency(matrix)[0]
    rows, cols = a.shape
    x = _real_vector("x", x)
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
    y = run(device, csr.pull(square, "spmv"), Program.SPMV, vector.view(np.uint32), mode=mode, window=window,
            instances=instances)[0]
    return y.view(np.float32)[:rows].copy()


try:                        # a networkx user catches networkx's own exception
    from networkx import PowerIterationFailedConvergence as _NetworkXFailure
    _FAILURE_BASES: tuple = (_NetworkXFailure, RuntimeError)
except ImportError:         # pragma: no cover - networkx is in the graph extra
    _FAILURE_BASES = (RuntimeError,)


class ConvergenceError(*_FAILURE_BASES):
    """PageRank did not reach its tolerance within ``max_iter`` iterations; a
    ``networkx.PowerIterationFailedConvergence`` (when networkx is installed) and a
    ``RuntimeError``.  ``ranks`` holds the last iteration's."""

    def __init__(self, iterations: int, ranks):
        Exception.__init__(self, f"pagerank: power iteration failed to converge within {iterations} iterations")
        self.iterations, self.ranks = iterations, ranks


def _initial_ranks(g: csr.PullGraph, nstart, inv_n: int) -> np.ndarray:
    if nstart is None:
        return np.full(g.n, inv_n, dtype=np.uint32)
    if g.nodes is not None:
        if not isinstance(nstart, dict):
            raise TypeError(f"nstart: a dict keyed by node for a networkx graph, not {type(nstart).__name__}")
        start = _real_vector("nstart", [nstart.get(v, 0) for v in g.nodes]).astype(np.float64)
    else:
        start = _real_vector("nstart", nstart).astype(np.float64)
        if start.shape != (g.n,):
            raise ValueError(f"nstart: shape {start.shape}, but the graph has {g.n} vertices")
    total = start.sum()
    if not np.all(np.isfinite(start)) or np.any(start < 0) or total <= 0:
        raise ValueError("nstart: values must be finite, non-negative and not all zero")
    return (start / total).astype(np.float32).view(np.uint32)     # networkx normalises it


def pagerank(graph, device, *, alpha: float = 0.85, personalization=None, max_iter: int = 100,
             tol: float = 1e-6, nstart=None, weight: str | None = "weight", dangling=None,
             mode: str = "piccolo", window: bool | int = True, stats: dict | None = None,
             instances: int | None = None):
    """PageRank of every vertex: networkx's ``pagerank(G, alpha, max_iter=max_iter,
    tol=tol, nstart=nstart, weight=weight)`` in fp32.  A networkx graph: a ``{node:
    rank}`` dict (``{}`` for an empty graph); a matrix: a float32 array in vertex order,
    its values the edge weights.  Weights must be non-negative integers (an edge of weight
    ``w`` counts as ``w`` parallel edges; a multigraph's parallel edges each count):
    ``weight=None`` counts every edge once.  ``personalization`` and ``dangling`` are
    refused (the engine teleports and spreads dangling rank uniformly).  Raises
    :class:`ConvergenceError` (a ``networkx.PowerIterationFailedConvergence``) without
    convergence in ``max_iter`` iterations.  ``stats``, if given, receives
    ``iterations`` and the engine ``cycles`` they took.  ``instances``: as for
    :func:`run`; on several, every iteration runs the slices at once, each instance
    passing over its own rows only, and the host exchanges the slices' contributions,
    computes the dangling term and judges the L1 change (the same fp32 sums in vertex
    order, :meth:`SlicedGraph.pagerank_rounds`), so the ranks and the iteration count
    equal one instance's bit for bit."""
    for name, value in (("personalization", personalization), ("dangling", dangling)):
        if value is not None:
            raise NotImplementedError(f"{name}: the graph engine teleports and spreads dangling rank uniformly; "
                                      f"use networkx.pagerank for a {name} vector")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: must be between 0 and 1, not {alpha}")
    if not tol > 0:
        raise ValueError(f"tol: must be positive, not {tol}")
    if int(max_iter) != max_iter or max_iter < 0:
        raise ValueError(f"max_iter: must be a non-negative integer, not {max_iter}")
    g = csr.pull(graph, "pagerank", weight=weight)
    if g.n == 0:
        if g.nodes is not None:
            return {}
        raise ValueError("graph: no vertices")
    c = golden.PageRankConstants.for_graph(g.n, alpha, tol)
    start = _initial_ranks(g, nstart, c.inv_n)
    if max_iter == 0:           # networkx: no iteration is no convergence
        raise ConvergenceError(0, _ranks_out(g, start.view(np.float32)))
    clients = instances_for(device, instances)
    degrees = golden.out_degrees(g.n, g.col)
    if _split(device, clients, g):
        rank, iterations, done, ok = _pagerank_sliced(device, g, clients, start, c, int(max_iter), mode=mode,
                                                      window=window, degrees=degrees)
    else:
        with CardGraph(device, g, mode=mode, values=degrees, window=window, client=clients[0]) as card:
            ranks = card.upload(start)
            other, scratch = card.vector(), card.vector(arrays=2)
            done = card.command(Program.PAGERANK, ranks, other, int(max_iter), scratch=scratch, constants=c)
            iterations, ok = done.aux & ~golden.CONVERGED, bool(done.aux & golden.CONVERGED)
            rank = (ranks if iterations % 2 == 0 else other).download(np.uint32, g.n)
    rank = rank.view(np.float32)
    if stats is not None:
        stats.update(iterations=iterations, cycles=done.cycles or 0)
    if ok:
        return _ranks_out(g, rank)
    raise ConvergenceError(int(max_iter), _ranks_out(g, rank))


def _pagerank_sliced(device, g, clients, rank, c, max_iter, *, mode, window, degrees):
    """PageRank over row slices on several instances, an iteration a step: (ranks,
    iterations, completion, converged)."""
    rounds = []
    with SlicedGraph(device, g, clients, mode=mode, window=window, degrees=degrees) as sliced:
        iterations = sliced.pagerank_rounds(rank, c)
        rounds.append(next(iterations)[1])                # the first contributions
        for it in range(1, max_iter + 1):
            new, done = next(iterations)
            rounds.append(done)
            err, rank = golden.l1_change(new, rank), new
            if golden.converged(err, c.tolerance):
                return rank, it, _rounds(rounds), True
    return rank, max_iter, _rounds(rounds), False


def _ranks_out(g: csr.PullGraph, rank: np.ndarray):
    return rank if g.nodes is None else {v: float(r) for v, r in zip(g.nodes, rank)}
