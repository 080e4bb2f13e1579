"""Graph kernels on the card's graph engine, taking a ``scipy.sparse`` adjacency matrix
or a networkx graph (``A[u, v]`` = edge ``u -> v``, networkx's convention) and an open
device, returning NumPy arrays in scipy's conventions:

- :func:`bfs`: hop counts from ``source`` as float64, ``inf`` where unreachable
  (``scipy.sparse.csgraph.shortest_path(..., unweighted=True, indices=source)``);
- :func:`sssp`: distances with non-negative integer weights (edge values; 1 where a
  networkx edge has no ``weight``), ``inf`` where unreachable (scipy's Dijkstra);
- :func:`connected_components`: ``(count, labels)`` of the weakly connected components,
  labels numbered in order of each component's smallest vertex, as
  ``scipy.sparse.csgraph.connected_components(..., directed=True, connection="weak")``;
- :func:`pagerank`: networkx's PageRank (uniform teleport, dangling rank spread
  uniformly, stop when the L1 change is below ``n * tol``) in fp32, as a float32
  array in vertex order; raises :class:`ConvergenceError` like networkx.  One engine
  command runs every iteration (contributions, pull sums, update, L1 change and the
  tolerance test), equal to ``ndpkit.engines.graph.golden.pagerank`` bit for bit; the host
  only counts the out-degrees and rounds the four constants;
- :func:`spmv`: ``A @ x`` in fp32 (float32 out) for any sparse matrix, rectangular too
  (a networkx graph: its weighted adjacency matrix).  Each row sums in the engine's
  order (eight FMA partial sums, then a tree: :mod:`ndpkit.engines.graph.golden`), so results
  equal the golden model bit for bit and ``A @ x`` in float64 to within fp32 rounding.

Vertices of a networkx graph are numbered in ``G.nodes`` order; ``source`` is a node
label then.  ``mode="piccolo"`` fetches source values with row gathers,
``"baseline"`` with 64-byte line reads (the same answers; see docs/engines/graph.md for the
traffic).
"""
from __future__ import annotations

import numpy as np

from ndpkit.engines.graph import golden
from ndpkit.engines.graph.golden import Program
from ndpkit.engines.graph import csr, generators

__all__ = ["bfs", "sssp", "connected_components", "spmv", "pagerank", "ConvergenceError", "run", "CardGraph", "csr", "generators", "MODES"]

MODES = {"piccolo": golden.MODE_PICCOLO, "baseline": golden.MODE_BASELINE}


class CardGraph:
    """A pull graph's arrays in card memory for the length of a ``with`` block: ``rowptr``,
    ``col`` and (when given) edge ``values`` uploaded on entry, every buffer made
    through it freed on exit (also when a command fails), so one graph serves many
    commands (PageRank's iterations) without the upload and free bookkeeping twice."""

    def __init__(self, device, g: csr.PullGraph, *, mode: str = "piccolo", values: np.ndarray | None = None):
        if mode not in MODES:
            raise ValueError(f"mode: {mode!r}, not one of {', '.join(MODES)}")
        if g.n == 0:
            raise ValueError("graph: no vertices")
        self.device, self.g, self.mode, self._values = device, g, mode, values
        self._buffers = []

    def upload(self, arr):
        """A card buffer holding ``arr`` as 32-bit words (freed with the graph)."""
        self._buffers.append(self.device.upload(np.ascontiguousarray(arr, dtype=np.uint32)))
        return self._buffers[-1]

    def vector(self, arrays: int = 1):
        """An uninitialised card buffer of ``arrays`` vertex arrays (one 32-bit word per
        vertex, each rounded up to whole bus words), freed with the graph."""
        word = self.device.word_bytes
        self._buffers.append(self.device.alloc(arrays * (-(-4 * self.g.n // word) * word)))
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

    def command(self, program: Program, a, b, max_iterations: int, **pagerank):
        """One engine command over the graph (``a`` the input vector, ``b`` the other one;
        PageRank's ``scratch`` and ``constants`` as keywords)."""
        return self.device.graph.run(program, n=self.g.n, edges=len(self.g.col), rowptr=self.rowptr, col=self.col,
                                     val=self.val, a=a, b=b, mode=MODES[self.mode], max_iterations=max_iterations,
                                     **pagerank)


def run(device, g: csr.PullGraph, program: Program, init: np.ndarray, *, mode: str = "piccolo",
        max_iterations: int | None = None):
    """One engine command over a prepared pull graph: (values, iterations, completion).
    For SpMV, BFS, SSSP and CC; PageRank takes more (:func:`pagerank`)."""
    if program == Program.PAGERANK:
        raise ValueError("program: PageRank needs out-degrees, a scratch array and its constants: "
                         "use ndpkit.graph.pagerank")
    max_iterations = g.n + 1 if max_iterations is None else int(max_iterations)
    if max_iterations < 1:
        raise ValueError(f"max_iterations: must be at least 1, not {max_iterations}")
    values = None
    if program in (Program.SSSP, Program.SPMV) and g.values is not None:
        values = g.values if g.values.dtype == np.uint32 else g.values.astype(np.float32).view(np.uint32)
    with CardGraph(device, g, mode=mode, values=values) as card:
        a, b = card.upload(init), card.vector()
        done = card.command(program, a, b, max_iterations)
        result = (a if done.aux % 2 == 0 else b).download(np.uint32, g.n)
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


def spmv(matrix, x, device, *, mode: str = "piccolo") -> np.ndarray:
    """``y = A @ x`` in fp32 (a float32 array of A's row count).  ``matrix``: a
    ``scipy.sparse`` matrix of any shape (entries rounded to fp32; stored zeros are
    ordinary entries) or a networkx graph (its weighted adjacency matrix)."""
    import scipy.sparse as sp
    a = sp.csr_array(matrix) if sp.issparse(matrix) else csr.adjacency(matrix)[0]
    rows, cols = a.shape
    x = np.asarray(x)
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
    y = run(device, csr.pull(square, "spmv"), Program.SPMV, vector.view(np.uint32), mode=mode)[0]
    return y.view(np.float32)[:rows].copy()


class ConvergenceError(RuntimeError):
    """PageRank did not reach its tolerance within ``max_iterations`` (networkx's
    ``PowerIterationFailedConvergence``); ``ranks`` holds the last iteration's."""

    def __init__(self, iterations: int, ranks: np.ndarray):
        super().__init__(f"pagerank: not converged after {iterations} iterations")
        self.iterations, self.ranks = iterations, ranks


def pagerank(graph, device, *, alpha: float = 0.85, tol: float = 1e-6, max_iterations: int = 100,
             mode: str = "piccolo", stats: dict | None = None) -> np.ndarray:
    """PageRank of every vertex (float32, vertex order): networkx's ``pagerank(G, alpha,
    tol=tol, weight=None)`` in fp32 (edge weights ignored, multi-edges counted once).
    ``stats``, if given, receives ``iterations`` and the engine ``cycles`` they took."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: must be between 0 and 1, not {alpha}")
    if not tol > 0:
        raise ValueError(f"tol: must be positive, not {tol}")
    if int(max_iterations) < 1:
        raise ValueError(f"max_iterations: must be at least 1, not {max_iterations}")
    g = csr.pull(graph, "pagerank")
    if g.n == 0:
        raise ValueError("graph: no vertices")
    c = golden.PageRankConstants.for_graph(g.n, alpha, tol)
    with CardGraph(device, g, mode=mode, values=golden.out_degrees(g.n, g.col)) as card:
        ranks = card.upload(np.full(g.n, c.inv_n, dtype=np.uint32))
        other, scratch = card.vector(), card.vector(arrays=2)
        done = card.command(Program.PAGERANK, ranks, other, int(max_iterations), scratch=scratch, constants=c)
        iterations = done.aux & ~golden.CONVERGED
        rank = (ranks if iterations % 2 == 0 else other).download(np.uint32, g.n).view(np.float32)
    if stats is not None:
        stats.update(iterations=iterations, cycles=done.cycles or 0)
    if done.aux & golden.CONVERGED:
        return rank
    raise ConvergenceError(int(max_iterations), rank)
