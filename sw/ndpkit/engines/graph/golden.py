"""The graph engine's vertex programs, bit for bit: the specification the RTL
(``ndpkit_hw.engines.graph``) and the model transport follow.

**Graph form.**  Every program pulls: it walks a matrix in CSR form whose row ``v``
lists the *sources* ``u`` of ``v``'s in-edges (for SpMV, row ``i`` of ``A`` and its
column indices).  ``rowptr`` is ``uint32[n + 1]`` with ``rowptr[0] == 0``,
non-decreasing, ``rowptr[n] == nnz``; ``col`` is ``uint32[nnz]``; the entries of a
row are processed in array order (duplicates and self-loops are ordinary entries).
Edge values: fp32 bit patterns (SpMV) or ``uint32`` weights (SSSP).

**Reductions.**  A floating-point row sum accumulates into ``ACC_LANES`` partial sums
starting at +0.0: the row's ``k``-th entry goes to partial ``k mod ACC_LANES``; the
partials are then combined by :func:`ndpkit.arith.fp.reduce_tree`
(adjacent pairs level by level: ((p0+p1)+(p2+p3))+... over the 128 partials).  This is
the order eight pipelined FMAs of up to 16 stages, each owning 16 partials, keep busy at
eight entries a cycle.  Integer programs use exact
``min`` (order does not matter) and saturating addition (``INF + w == INF``).

**Iterations.**  Jacobi style: an iteration reads only the previous iteration's
values and writes a new array, so the result and the iteration count do not depend
on the order vertices are processed in.  BFS, SSSP and connected components stop after
the first iteration that changes nothing (that iteration is counted); PageRank stops
when the L1 change falls below the tolerance or at the iteration limit; every
program stops at ``max_iterations``.

**Programs.**

- ``spmv``: ``y[i] = sum_k fma(val[k], x[col[k]], partial)`` per row (one rounding
  per entry).
- ``pagerank`` (pull, fp32): ``rank0 = 1/n``; per iteration ``contrib[u] =
  rank[u] / outdeg[u]`` (0 for a vertex with no out-edges), ``dangling = sum of rank
  over vertices with no out-edges`` (vertex order, the same partial-sum rule),
  ``new[v] = fma(d, row_sum(contrib) + dangling * (1/n), (1-d)/n)``; ``err = sum |new
  - rank|`` (vertex order, partial-sum rule); converged when ``err < n * tol``.  The
  constants ``d``, ``(1-d)/n``, ``1/n`` and ``n * tol`` are rounded to fp32 once on the
  host.  This is networkx's iteration (uniform teleport, dangling rank spread
  uniformly, the same stopping rule) in fp32.
- ``bfs``: ``level[source] = 0``, others ``INF``; ``new[v] = min(level[v], min_u
  level[u] + 1)``.
- ``sssp``: ``dist[source] = 0``, others ``INF``; ``new[v] = min(dist[v], min_u dist[u]
  + w)``, weights ``uint32``.
- ``cc``: ``label[v] = v``; ``new[v] = min(label[v], min_u label[u])`` over a
  symmetric matrix (the host adds the reverse edges): each label converges to the
  smallest vertex id of its weakly connected component.

**Bad input** (checked before anything is written): see :func:`validate`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ndpkit_spec.codes import ErrorCode
from ndpkit.arith import fp
from ndpkit.transfer import check_ranges
from ndpkit_spec.engines.graph import (ACC_LANES, CONVERGED, MAX_VERTICES, MODE_BASELINE, MODE_PICCOLO, WINDOW_VERTICES,
                                      EDGE_LANES, Program)

INF = np.uint32(0xFFFF_FFFF)



class GraphError(ValueError):
    """A graph command the engine rejects: ``code`` is what the hardware reports,
    ``field`` names the bad command field or array."""

    def __init__(self, code: ErrorCode, field: str, detail: str):
        super().__init__(f"{field}: {detail} ({code.name})")
        self.code, self.field, self.detail = code, field, detail


@dataclass
class Result:
    values: np.ndarray          # uint32: fp32 bits (spmv, pagerank) or integers (bfs, sssp, cc)
    iterations: int
    converged: bool


def validate(n: int, rowptr, col, *, source: int | None = None, rows: int | None = None) -> None:
    """The engine's checks, in the order it makes them (the first failure is reported):
    ``n`` in 1..2**24; ``rowptr[0] == 0``, non-decreasing, ``rowptr[rows] == len(col)``;
    every ``col`` entry below ``n``; ``source`` below ``n``.  ``rows``: the rows of a
    row slice (``rowptr`` has ``rows + 1`` entries; default ``n``, the whole matrix)."""
    rowptr = np.asarray(rowptr, dtype=np.uint64)
    col = np.asarray(col, dtype=np.uint64)
    rows = n if rows is None else rows
    if not 1 <= n <= MAX_VERTICES:
        raise GraphError(ErrorCode.BAD_FIELD, "n", f"vertex count {n} outside 1..{MAX_VERTICES}")
    if len(rowptr) != rows + 1:
        raise GraphError(ErrorCode.BAD_FIELD, "rowptr", f"{len(rowptr)} entries for {rows} rows (need rows + 1)")
    if rowptr[0] != 0:
        raise GraphError(ErrorCode.BAD_GRAPH, "rowptr", f"rowptr[0] is {int(rowptr[0])}, not 0")
    drops = np.flatnonzero(np.diff(rowptr.astype(np.int64)) < 0)
    if drops.size:
        v = int(drops[0])
        raise GraphError(ErrorCode.BAD_GRAPH, "rowptr",
                         f"not monotone: rowptr[{v + 1}] = {int(rowptr[v + 1])} < rowptr[{v}] = {int(rowptr[v])}")
    if rowptr[rows] != len(col):
        raise GraphError(ErrorCode.BAD_GRAPH, "rowptr",
                         f"rowptr[{rows}] = {int(rowptr[rows])} but the edge array has {len(col)} entries")
    bad = np.flatnonzero(col >= n)
    if bad.size:
        raise GraphError(ErrorCode.BAD_INDEX, "col", f"col[{int(bad[0])}] = {int(col[bad[0]])} >= n = {n}")
    if source is not None and not 0 <= source < n:
        raise GraphError(ErrorCode.BAD_INDEX, "source", f"source vertex {source} >= n = {n}")


def _row_of_entry(rowptr) -> tuple[np.ndarray, np.ndarray]:
    """Each entry's row and its position within the row."""
    rowptr = np.asarray(rowptr, dtype=np.int64)
    counts = np.diff(rowptr)
    row = np.repeat(np.arange(len(counts)), counts)
    pos = np.arange(rowptr[-1]) - rowptr[row]
    return row, pos


def row_sums(rowptr, terms, addends=None):
    """Per row, the partial-sum rule over ``terms`` (fp32 bits in entry order), or with
    ``addends``: ``partial = fma(terms, addends, partial)``.  Returns uint32[n]."""
    rowptr = np.asarray(rowptr, dtype=np.int64)
    n = len(rowptr) - 1
    row, pos = _row_of_entry(rowptr)
    partial = np.zeros((n, ACC_LANES), dtype=np.uint32)
    lane = pos % ACC_LANES
    step = pos // ACC_LANES
    terms = np.asarray(terms, dtype=np.uint32)
    addends = None if addends is None else np.asarray(addends, dtype=np.uint32)
    # step s of every row at once: entries s*8 .. s*8+7 of each row go to distinct lanes
    for s in range(int(step.max()) + 1 if step.size else 0):
        sel = step == s
        r, ln = row[sel], lane[sel]
        old = partial[r, ln]
        partial[r, ln] = fp.add(old, terms[sel]) if addends is None else fp.fma(terms[sel], addends[sel], old)
    return fp.reduce_tree(partial, "sum")


def vector_sum(values) -> np.uint32:
    """A vector's sum under the partial-sum rule (one row holding every element)."""
    values = np.asarray(values, dtype=np.uint32)
    return row_sums(np.array([0, len(values)]), values)[0]


def spmv(rowptr, col, val, x, *, n: int | None = None) -> Result:
    """``y = A x`` (fp32 bit patterns in and out)."""
    n = len(rowptr) - 1 if n is None else n
    validate(n, rowptr, col)
    col = np.asarray(col, dtype=np.int64)
    y = row_sums(rowptr, np.asarray(val, dtype=np.uint32), np.asarray(x, dtype=np.uint32)[col])
    return Result(y, 1, True)


@dataclass(frozen=True)
class PageRankConstants:
    """The four fp32 constants the host computes once (bit patterns)."""
    damping: int
    teleport: int
    inv_n: int
    tolerance: int

    @classmethod
    def for_graph(cls, n: int, damping: float = 0.85, tol: float = 1e-6) -> "PageRankConstants":
        def b(x):
            return int(np.float32(x).view(np.uint32))
        return cls(b(damping), b((1.0 - damping) / n), b(1.0 / n), b(n * tol))


def out_degrees(n: int, col) -> np.ndarray:
    """Out-degree of every vertex of the pulled graph: how often it appears as a source."""
    return np.bincount(np.asarray(col, dtype=np.int64), minlength=n).astype(np.uint32)


def contributions(rank, degree) -> np.ndarray:
    """``rank / out-degree`` per vertex (+0 without out-edges), fp32 bits: what each
    vertex pushes along each of its out-edges."""
    degree = np.asarray(degree, dtype=np.uint32)
    rank = np.asarray(rank, dtype=np.uint32)
    return np.where(degree > 0, fp.div(rank, fp.int32_to_fp32(degree.astype(np.int32))), np.uint32(0)).astype(np.uint32)


def dangling_term(rank, degree, c: PageRankConstants) -> np.uint32:
    """The dangling rank (the ranks of the vertices without out-edges, summed in vertex
    order by the partial-sum rule) times ``1/n``, fp32 bits."""
    dangling = vector_sum(np.where(np.asarray(degree, dtype=np.uint32) > 0, np.uint32(0), rank))
    return np.uint32(np.ravel(fp.mul(dangling, np.uint32(c.inv_n)))[0])


def pagerank_update(rowptr, col, contrib, dterm, rank, c: PageRankConstants, first: int = 0):
    """The pull sums of the contributions ``contrib`` (every vertex) over the rows, and
    the rows' new ranks ``fma(d, sum + dterm, (1-d)/n)`` with their L1 change against
    ``rank`` (every vertex's; the rows are ``first ..``): (new, L1 change, sums)."""
    s = row_sums(rowptr, np.asarray(contrib, dtype=np.uint32)[np.asarray(col, dtype=np.int64)])
    new = fp.fma(np.uint32(c.damping), fp.add(s, np.uint32(dterm)), np.uint32(c.teleport)).astype(np.uint32)
    err = l1_change(new, np.asarray(rank, dtype=np.uint32)[first:first + len(rowptr) - 1])
    return new, err, np.asarray(s, dtype=np.uint32)


def pagerank_iteration(rowptr, col, degree, rank, c: PageRankConstants, first: int = 0):
    """One iteration: (new ranks, L1 change), both fp32 bits: the contributions and
    dangling term of every vertex (:func:`contributions`, :func:`dangling_term`), then
    :func:`pagerank_update` of the rows (a row slice: ``rowptr`` of rows ``first ..``)."""
    new, err, _ = pagerank_update(rowptr, col, contributions(rank, degree), dangling_term(rank, degree, c), rank,
                                  c, first)
    return new, err


def l1_change(new, old) -> np.uint32:
    """PageRank's ``err``: ``sum |new - old|`` in fp32 (vertex order, the partial-sum rule)."""
    return vector_sum(fp.bits(np.abs(fp.floats(fp.sub(new, old)))))


def converged(err, tolerance) -> bool:
    """The stopping rule ``err < tolerance`` as fp32 (False for a NaN ``err``)."""
    return bool(fp.floats(np.uint32(err)) < fp.floats(np.uint32(tolerance)))


def pagerank(rowptr, col, *, n: int | None = None, damping: float = 0.85, tol: float = 1e-6,
             max_iterations: int = 100, start=None) -> Result:
    """``start``: the initial ranks as fp32 bits (default ``1/n`` each, rounded)."""
    n = len(rowptr) - 1 if n is None else n
    validate(n, rowptr, col)
    c = PageRankConstants.for_graph(n, damping, tol)
    degree = out_degrees(n, col)
    rank = np.full(n, c.inv_n, dtype=np.uint32) if start is None else np.asarray(start, dtype=np.uint32)
    for it in range(1, max_iterations + 1):
        rank, err = pagerank_iteration(rowptr, col, degree, rank, c)
        if converged(err, c.tolerance):
            return Result(rank, it, True)
    return Result(rank, max_iterations, False)


def _saturating_add(a, b):
    s = a.astype(np.uint64) + b.astype(np.uint64)
    return np.where((a == INF) | (s >= INF), INF, s).astype(np.uint32)


def min_iteration(rowptr, col, values, weights=None, first: int = 0, own=None):
    """One Jacobi iteration of ``new[v] = min(values[v], min_u values[u] + w)`` (of a
    row slice: rows ``first ..``, ``len(rowptr) - 1`` of them); ``own``: the rows' own
    values where they are not ``values``' (a command taking its sources from the
    exchange's window set, its own rows from memory)."""
    rowptr = np.asarray(rowptr, dtype=np.int64)
    col = np.asarray(col, dtype=np.int64)
    cand = values[col] if weights is None else _saturating_add(values[col], np.asarray(weights, dtype=np.uint32))
    new = (values[first:first + len(rowptr) - 1] if own is None else np.asarray(own, dtype=np.uint32)).copy()
    row, _ = _row_of_entry(rowptr)
    np.minimum.at(new, row, cand)
    return new


def _until_stable(rowptr, col, values, weights, max_iterations):
    for it in range(1, max_iterations + 1):
        new = min_iteration(rowptr, col, values, weights)
        if np.array_equal(new, values):
            return Result(new, it, True)
        values = new
    return Result(values, max_iterations, False)


def bfs(rowptr, col, source: int, *, n: int | None = None, max_iterations: int = 1 << 24) -> Result:
    n = len(rowptr) - 1 if n is None else n
    validate(n, rowptr, col, source=source)
    level = np.full(n, INF, dtype=np.uint32)
    level[source] = 0
    return _until_stable(rowptr, col, level, np.ones(len(col), dtype=np.uint32), max_iterations)


def sssp(rowptr, col, weights, source: int, *, n: int | None = None, max_iterations: int = 1 << 24) -> Result:
    n = len(rowptr) - 1 if n is None else n
    validate(n, rowptr, col, source=source)
    dist = np.full(n, INF, dtype=np.uint32)
    dist[source] = 0
    return _until_stable(rowptr, col, dist, weights, max_iterations)


def cc(rowptr, col, *, n: int | None = None, max_iterations: int = 1 << 24) -> Result:
    n = len(rowptr) - 1 if n is None else n
    validate(n, rowptr, col)
    return _until_stable(rowptr, col, np.arange(n, dtype=np.uint32), None, max_iterations)


# ---- the graph engine's command (ndpkit_hw.engines.graph) ---------------------------------

ENGINE_PROGRAMS = (Program.SPMV, Program.PAGERANK, Program.BFS, Program.SSSP, Program.CC)


def _words(nbytes: int, word_bytes: int) -> int:
    return -(-nbytes // word_bytes) * word_bytes


def row_slice(cmd: dict) -> tuple[int, int]:
    """(first row, rows) of the command's row slice: ``first_row`` and ``rows``, 0 rows
    meaning through ``n`` (a command without them computes every row)."""
    first = cmd.get("first_row", 0)
    return first, cmd.get("rows", 0) or max(cmd["n"] - first, 0)


def command_ranges(cmd: dict, word_bytes: int) -> dict[str, tuple[int, int]]:
    """Every array a command names, (address, bytes rounded up to whole bus words)."""
    n, e = cmd["n"], cmd["edges"]
    pagerank = cmd["format_program"] == Program.PAGERANK
    vertices = _words(4 * n, word_bytes)
    ranges = {"rowptr": (cmd["rowptr"], _words(4 * (row_slice(cmd)[1] + 1), word_bytes))}
    if e:
        ranges["col"] = (cmd["col"], _words(4 * e, word_bytes))
        if cmd["format_program"] in (Program.SSSP, Program.SPMV):
            ranges["val"] = (cmd["val"], _words(4 * e, word_bytes))
    if pagerank:
        ranges["val"] = (cmd["val"], vertices)            # the out-degrees
    ranges["a"] = (cmd["a"], vertices)
    ranges["b"] = (cmd["b"], vertices)
    if pagerank:
        ranges["scratch"] = (cmd["scratch"], 2 * vertices)
    return ranges


def window_bytes(cmd: dict, word_bytes: int) -> int:
    """Bytes an edge pass reads into the source window: the values of vertices 0 ..
    min(source_window, n) - 1, whole bus words (0 without a window)."""
    return _words(4 * min(cmd.get("source_window", 0), cmd["n"]), word_bytes)


def columns_judged_in_first_pass(cmd: dict) -> bool:
    """Whether the first edge pass judges the columns (the validation pass reading the
    row pointers only): it runs on the edge lanes — every source in the window
    (``source_window >= n``), and some edges; PageRank's pull sums unless the command
    computes the slice's contributions only (``contributions`` 1: no edge pass) — on a
    build with lanes (``cmd["edge_lanes"]`` where the caller gives the build's, else the
    default build's)."""
    on_lanes = cmd.get("source_window", 0) >= cmd["n"] and cmd["edges"] != 0 and \
        (cmd["format_program"] != Program.PAGERANK or cmd.get("contributions", 0) != 1)
    return on_lanes and cmd.get("edge_lanes", EDGE_LANES) > 1


def contributions_in_window(cmd: dict) -> bool:
    """Whether PageRank's contributions pass writes every vertex's contributions straight
    into the source window (``contributions`` 0 with its pull sums on the edge lanes:
    :func:`columns_judged_in_first_pass`): then no pass loads the window from memory and
    ``scratch``'s contributions half is not written."""
    return (cmd["format_program"] == Program.PAGERANK and cmd.get("contributions", 0) == 0
            and columns_judged_in_first_pass(cmd))


class WindowSets:
    """An instance's two source-window sets as the card's window exchange fills them (the
    register document's ``exchange``): a command of round ``r`` reads set ``r mod 2``
    (loaded from memory, or taken as the exchange filled it) and shares its results,
    bus words tagged ``r``, into set ``(r + 1) mod 2`` of every instance.  A set keeps
    the round of the last word it took and how many words of that round it took (a
    word of a newer round starts the count again); a take of round ``r`` needs every
    word of the window from round ``r - 1``.  (The card drops words into the set a
    running command reads; the model runs a command at once, so it never has to.)"""

    def __init__(self, capacity: int = WINDOW_VERTICES, word_bytes: int = 64):
        self.per_word = word_bytes // 4
        self.values = [np.zeros(capacity, np.uint32), np.zeros(capacity, np.uint32)]
        self.tag, self.count, self.bad = [None, None], [0, 0], [False, False]

    def _of_round(self, round_: int) -> int:
        """The set round ``round_`` fills, its record started afresh by a newer round."""
        s = (round_ + 1) & 1
        if self.tag[s] != round_:
            self.tag[s], self.count[s], self.bad[s] = round_, 0, False
        return s

    def receive(self, round_: int, word: int, values: np.ndarray) -> None:
        """Shared bus words from word ``word`` of the vertex array on (``values``: whole
        words, ``per_word`` values each); words past the window are not taken."""
        s = self._of_round(round_)
        at = word * self.per_word
        taken = values[:max(0, len(self.values[s]) - at)]
        self.values[s][at:at + len(taken)] = taken
        self.count[s] += len(taken) // self.per_word

    def reset(self) -> None:
        """A soft reset: neither set holds a round (their values stay, as block RAM's do)."""
        for s in (0, 1):
            self.invalidate(s)

    def invalidate(self, s: int) -> None:
        """Set ``s`` loaded from memory: none of the exchange's words is left in it."""
        self.tag[s], self.count[s], self.bad[s] = None, 0, False

    def poison(self, round_: int) -> None:
        """A sharing command of ``round_`` ended with an error: its set is incomplete
        until a newer round's words arrive."""
        self.bad[self._of_round(round_)] = True

    def complete(self, round_: int, n: int) -> bool:
        """Whether set ``round_ mod 2`` holds every word of an ``n``-vertex window, each
        from round ``round_ - 1``."""
        s = round_ & 1
        return self.tag[s] == (round_ - 1) & 0xFFFF and not self.bad[s] and self.count[s] == -(-n // self.per_word)


def model_state(card: dict, constants, word_bytes: int) -> dict:
    """The model card's state of one graph instance beyond memory: its
    :class:`WindowSets` and the card's exchange (``card["exchange"]``: every graph
    instance's sets), as keywords of :func:`check` and :func:`execute`."""
    sets = WindowSets(constants.get("window_capacity", WINDOW_VERTICES), word_bytes)
    exchange = card.setdefault("exchange", [])
    exchange.append(sets)
    return {"window_sets": sets, "exchange": exchange}


def share(exchange, round_: int, first: int, values) -> None:
    """Every instance's :class:`WindowSets` (``exchange``) takes the rows ``first ..``
    with ``values`` as whole bus words tagged ``round_`` (the last padded with 0, as the
    command writes them)."""
    if not exchange:
        return
    per_word = exchange[0].per_word
    words = np.zeros(-(-len(values) // per_word) * per_word, np.uint32)
    words[:len(values)] = values
    for sets in exchange:
        sets.receive(round_, first // per_word, words)


#: cpl_aux of a sharing BFS, SSSP or CC command: its iteration changed a value
CHANGED = 1 << 30


def exchange_fields(cmd: dict) -> tuple[int, int, int]:
    """(share, take, round) of the command's ``exchange`` register (0s without one)."""
    return cmd.get("exchange_share", 0), cmd.get("exchange_take", 0), cmd.get("exchange_round", 0)


def _exchange_error(cmd: dict, window_sets: "WindowSets | None") -> bool:
    """Whether the command's ``exchange`` is refused (BAD_FIELD, ``exchange``)."""
    shares, takes, round_ = exchange_fields(cmd)
    if not (shares or takes):
        return False
    pagerank = cmd["format_program"] == Program.PAGERANK
    given = cmd.get("contributions", 0)
    if cmd.get("window_sets", 2) != 2 or cmd["max_iterations"] != 1 or shares and pagerank and given == 0:
        return True
    if takes:
        if cmd.get("source_window", 0) < cmd["n"] or cmd.get("edge_lanes", EDGE_LANES) == 1 \
                or pagerank and given != 2:
            return True
        # (the sets' record is the card's: without it, as the host checks, a take is not refused)
        return window_sets is not None and not window_sets.complete(round_, cmd["n"])
    return False


def check(cmd: dict, *, word_bytes: int, window_base: int, window_size: int,
          window_sets: "WindowSets | None" = None, exchange=None) -> tuple[int, str | None]:
    """(ErrorCode, argument) of the whole command in the hardware's order: program,
    mode, n (1..2**24), max_iterations (>= 1), PageRank's tolerance (not negative, not
    NaN), the source window (at most the build's ``window_capacity``: the command's
    ``cmd["window_capacity"]`` where the caller gives the build's register, else the
    default build's), the row slice (``first_row`` a multiple of the word's elements
    below n; ``rows`` within n, a multiple of the word's elements unless the slice
    ends at n), ``contributions`` (0 .. 2, PageRank's only; 2 iterating more than once
    only over the whole graph: else ``max_iterations``), the window exchange (its
    ``exchange`` fields: share or take with one iteration on a build with two window
    sets, share not with PageRank's every-vertex contributions, take with every source
    in the window on the edge lanes, PageRank's given contributions, and
    ``window_sets`` holding the previous round's every word), then every array by the
    transfer rule and no two overlapping."""
    if cmd["format_program"] not in [int(p) for p in ENGINE_PROGRAMS]:
        return ErrorCode.BAD_FIELD, "program"
    if cmd["format_mode"] > MODE_BASELINE:
        return ErrorCode.BAD_FIELD, "mode"
    if not 1 <= cmd["n"] <= MAX_VERTICES:
        return ErrorCode.BAD_FIELD, "n"
    if cmd["max_iterations"] == 0:
        return ErrorCode.BAD_FIELD, "max_iterations"
    if cmd["format_program"] == Program.PAGERANK:
        tol = cmd.get("tolerance", 0)
        if tol >> 31 or (tol >> 23 & 0xFF) == 0xFF and tol & 0x7F_FFFF:
            return ErrorCode.BAD_FIELD, "tolerance"
    if cmd.get("source_window", 0) > cmd.get("window_capacity", WINDOW_VERTICES):
        return ErrorCode.BAD_FIELD, "source_window"
    lanes = word_bytes // 4
    first, rows = row_slice(cmd)
    if first % lanes or first >= cmd["n"]:
        return ErrorCode.BAD_FIELD, "first_row"
    if first + rows > cmd["n"] or rows % lanes and first + rows != cmd["n"]:
        return ErrorCode.BAD_FIELD, "rows"
    given = cmd.get("contributions", 0)
    if given > 2 or given and cmd["format_program"] != Program.PAGERANK:
        return ErrorCode.BAD_FIELD, "contributions"
    if given == 2 and cmd["max_iterations"] != 1 and (first, rows) != (0, cmd["n"]):
        return ErrorCode.BAD_FIELD, "max_iterations"
    if _exchange_error(cmd, window_sets):
        return ErrorCode.BAD_FIELD, "exchange"
    return check_ranges(command_ranges(cmd, word_bytes), word_bytes, window_base, window_size)


def started(cmd: dict, *, word_bytes: int, window_base: int, window_size: int,
            window_sets: "WindowSets | None" = None, exchange=None) -> None:
    """A command starts (the model card's hook; before any command started with it
    runs): an accepted one empties the record of the window set it loads from memory,
    and with ``fresh`` of the set its round fills."""
    if window_sets is None or check(cmd, word_bytes=word_bytes, window_base=window_base, window_size=window_size,
                                    window_sets=window_sets)[0]:
        return
    _, takes, round_ = exchange_fields(cmd)
    if not takes and cmd.get("source_window", 0) and not (
            cmd["format_program"] == Program.PAGERANK and cmd.get("contributions", 0) == 1):
        window_sets.invalidate(round_ & 1)          # a load from memory overwrites the set
    if cmd.get("exchange_fresh", 0):
        window_sets.invalidate((round_ + 1) & 1)    # the round fills its set afresh


def execute(memory: np.ndarray, cmd: dict, *, word_bytes: int, base: int = 0, window_base: int | None = None,
            window_size: int | None = None, window_sets: "WindowSets | None" = None,
            exchange=None) -> tuple[int, int, int, int]:
    """:func:`_execute` with the window exchange: ``window_sets`` the instance's
    :class:`WindowSets`, ``exchange`` every instance's (a sharing command's results go to
    them; one that ends with an error poisons the round's set instead)."""
    shares, takes, round_ = exchange_fields(cmd)
    out = _execute(memory, cmd, word_bytes=word_bytes, base=base,
                   window=window_sets.values[round_ & 1] if takes else None,
                   shared=(lambda first, values: share(exchange, round_, first, values)) if shares else None)
    if shares and out[0]:
        for sets in exchange or ():
            sets.poison(round_)
    return out


def _execute(memory: np.ndarray, cmd: dict, *, word_bytes: int, base: int = 0, window=None,
             shared=None) -> tuple[int, int, int, int]:
    """Run an accepted command on card memory.  First a validation pass reads the whole
    row-pointer and column arrays (BAD_GRAPH / BAD_INDEX end the command there, nothing
    written; when the first edge pass judges the columns,
    :func:`columns_judged_in_first_pass`, the row pointers only, and a bad column ends
    the command after that pass with the same verdict and figures: nothing written).  SpMV: one pass, ``b = A a`` (``val`` the matrix entries, ``a`` the vector,
    fetched through the unit only), one iteration.  The min programs iterate: iteration ``i`` reads ``a`` (odd ``i``) or ``b`` and
    writes the other, whole bus words (elements past ``n`` in the last word written 0),
    until an iteration changes nothing or ``max_iterations``; the result is in ``a``
    after an even count, ``b`` after an odd one.  Returns (error, bytes read, bytes
    written, iterations).  Bytes count the streamed arrays; the random property reads go
    through the scatter-gather unit and are counted by its link counters; every edge
    pass first reads the source window (:func:`window_bytes`), which changes no value.
    A row slice (:func:`row_slice`) computes its rows only: its results land at their
    rows' place in the output array (whole bus words from ``first_row``) and the rest
    of that array is not written.  ``window``: the source values a command
    taking the exchange's window set reads instead of memory's (its rows' own values
    still come from memory); ``shared(first, values)``: where a sharing command's
    results (PageRank's: the slice's contributions) go besides memory."""
    n, e, prog = cmd["n"], cmd["edges"], cmd["format_program"]
    first, rows = row_slice(cmd)
    ranges = command_ranges(cmd, word_bytes)
    loaded = 0 if window is not None else window_bytes(cmd, word_bytes)
    row_bytes = _words(4 * rows, word_bytes)        # a slice's values, whole words

    def array(name, count):
        a = cmd[name] - base
        return memory[a:a + 4 * count].view(np.uint32)

    def put(name, values, offset=4 * first):          # whole words from the slice's first row
        at = cmd[name] - base + offset if isinstance(name, str) else name
        memory[at:at + _words(4 * len(values), word_bytes)] = 0
        memory[at:at + 4 * len(values)] = np.asarray(values, dtype=np.uint32).view(np.uint8)

    rowptr, col = array("rowptr", rows + 1).copy(), array("col", e).copy() if e else np.zeros(0, np.uint32)
    # the validation pass's bytes (also a rejected graph's figure): the row pointers, and
    # the columns unless the first edge pass judges them as it streams them
    scanned = ranges["rowptr"][1] + (ranges["col"][1] if e and not columns_judged_in_first_pass(cmd) else 0)
    try:
        validate(n, rowptr, col, rows=rows)
    except GraphError as err:
        return int(err.code), scanned, 0, 0
    if prog == Program.PAGERANK:
        return _pagerank_command(cmd, ranges, array, put, rowptr, col, scanned, loaded, row_bytes, window, shared)
    if prog == Program.SPMV:
        x = array("a", n).copy() if window is None else window[:n]
        y = row_sums(rowptr, array("val", e).copy(), x[col.astype(np.int64)])
        put("b", y)
        if shared:
            shared(first, y)
        streamed = ranges["rowptr"][1] + (2 * ranges["col"][1] if e else 0) + loaded
        return 0, scanned + streamed, row_bytes, 1
    weights = (array("val", e).copy() if prog == Program.SSSP else
               np.ones(e, np.uint32) if prog == Program.BFS else None)
    # the row pointers, columns (weights), the rows' own values, the window
    per_read = sum(length for name, (_, length) in ranges.items() if name in ("rowptr", "col", "val")) + row_bytes \
        + loaded
    # each iteration reads the whole array it writes the slice of: the other rows keep
    # whatever the host put in both arrays
    arrays = {"a": array("a", n).copy(), "b": array("b", n).copy()}
    read = written = 0
    names = ("a", "b")
    for it in range(1, cmd["max_iterations"] + 1):
        source, target = names[(it - 1) % 2], names[it % 2]
        values = arrays[source]
        if window is None:
            new = min_iteration(rowptr, col, values, weights, first)
        else:                           # (one iteration: the exchange's rules)
            new = min_iteration(rowptr, col, window[:n], weights, first, own=values[first:first + rows])
        put(target, new)
        if shared:
            shared(first, new)
        arrays[target][first:first + rows] = new
        read += per_read
        written += row_bytes
        if np.array_equal(new, values[first:first + rows]):
            return 0, scanned + read, written, it
        if shared:                      # (one iteration: it changed a value)
            return 0, scanned + read, written, it | CHANGED
    return 0, scanned + read, written, cmd["max_iterations"]


def _pagerank_command(cmd, ranges, array, put, rowptr, col, scanned, loaded, row_bytes, window=None, shared=None):
    """PageRank on the engine (a -> b -> a ...), by the command's ``contributions``:

    - 0: every iteration writes the contributions of every vertex to ``scratch`` (or,
      :func:`contributions_in_window`, into the source window only), the slice's pull
      sums after them (``scratch + n`` words), then its new ranks;
    - 1: the slice's contributions of ``a`` into its rows of ``scratch``, nothing else;
    - 2: every iteration pulls the contributions in ``scratch`` with ``dangling_term``,
      writes the slice's sums and new ranks, then the slice's contributions of the new
      ranks (the next iteration's dangling term: the slice's own).

    Each array is read whole: the other rows keep what the host put in both."""
    n = cmd["n"]
    first, rows = row_slice(cmd)
    given = cmd.get("contributions", 0)
    c = PageRankConstants(cmd["damping"], cmd["teleport"], cmd["inv_n"], cmd["tolerance"])
    degree = array("val", n).copy()
    arrays = {"a": array("a", n).copy(), "b": array("b", n).copy()}
    own_degree = degree[first:first + rows]
    if given == 1:
        own = contributions(arrays["a"][first:first + rows], own_degree)
        put("scratch", own)
        if shared:
            shared(first, own)
        return 0, scanned + 2 * row_bytes, row_bytes, 0
    vertices = ranges["a"][1]
    in_window = contributions_in_window(cmd)
    edge_pass = ranges["rowptr"][1] + (ranges["col"][1] if "col" in ranges else 0) + (0 if in_window else loaded)
    # per iteration: the contributions pass (0: ranks + degrees of every vertex; 2: of the
    # slice's rows, after the update), the window and rowptr + col, the slice's sums +
    # ranks; writes: the contributions, the slice's sums and ranks
    contribution_bytes = 2 * vertices if given == 0 else 2 * row_bytes
    per_read = contribution_bytes + edge_pass + 2 * row_bytes
    per_write = (0 if in_window else vertices if given == 0 else row_bytes) + 2 * row_bytes
    contrib = array("scratch", n).copy() if window is None else window[:n].copy()
    dterm = np.uint32(cmd.get("dangling_term", 0))
    read = written = 0
    names = ("a", "b")
    for it in range(1, cmd["max_iterations"] + 1):
        source, target = names[(it - 1) % 2], names[it % 2]
        rank = arrays[source]
        if given == 0:
            contrib, dterm = contributions(rank, degree), dangling_term(rank, degree, c)
            if not in_window:
                put("scratch", contrib, 0)
        new, err, sums = pagerank_update(rowptr, col, contrib, dterm, rank, c, first)
        put("scratch", sums, vertices + 4 * first)
        put(target, new)
        arrays[target][first:first + rows] = new
        if given == 2:
            contrib[first:first + rows] = contributions(new, own_degree)
            put("scratch", contrib[first:first + rows])
            if shared:
                shared(first, contrib[first:first + rows])
            dterm = dangling_term(new, own_degree, c)
        read += per_read
        written += per_write
        if converged(err, c.tolerance):
            return 0, scanned + read, written, it | CONVERGED
    return 0, scanned + read, written, cmd["max_iterations"]
