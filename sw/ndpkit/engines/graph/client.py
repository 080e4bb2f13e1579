"""Driver of the ``graph`` engine: one command per program run (``dev.graph.run``).
The user-level functions taking scipy/networkx graphs are in :mod:`ndpkit.graph`."""
from __future__ import annotations

import numpy as np

from ndpkit_spec.codes import ErrorCode
from ndpkit.engine import Command, EngineClient
from ndpkit.engines.graph import golden
from ndpkit.memory import address_of

__all__ = ["GraphClient"]


class GraphClient(EngineClient):
    name = "graph"

    @property
    def window_capacity(self) -> int:
        """Vertices the engine's source window holds (the build's ``window_capacity``
        register; 0: it has none)."""
        if not hasattr(self, "_window_capacity"):
            self._window_capacity = self.regs.read("window_capacity")
        return self._window_capacity

    @property
    def window_sets(self) -> int:
        """The build's source-window sets (2: the card's window exchange reaches it, so
        :meth:`run`'s ``share`` and ``take`` work; 1: they do not)."""
        if not hasattr(self, "_window_sets"):
            self._window_sets = self.regs.read("window_sets")
        return self._window_sets

    def window_for(self, n: int, window: bool | int = True) -> int:
        """The command's ``window`` for ``n`` vertices: ``True`` as many as the engine
        holds, ``False`` none, an integer that many (0 .. :attr:`window_capacity`;
        ``ValueError`` naming ``window`` otherwise)."""
        if window is True:
            return min(int(n), self.window_capacity)
        if window is False:
            return 0
        if isinstance(window, (int, np.integer)) and 0 <= window <= self.window_capacity:
            return int(window)
        raise ValueError(f"window: True, False or a vertex count from 0 to the engine's capacity "
                         f"{self.window_capacity}, not {window!r}")

    def blame_run(self, args, code):
        # (a take the host's checks pass, refused: the card's window set was not complete)
        if code == ErrorCode.BAD_FIELD and args.get("exchange_take"):
            return "exchange"
        return {ErrorCode.BAD_GRAPH: "rowptr", ErrorCode.BAD_INDEX: "col"}.get(code)

    def run(self, program: int, *, n: int, edges: int, rowptr, col, a, b, val=None, mode: int = 0,
            max_iterations: int, scratch=None, constants: "golden.PageRankConstants | None" = None,
            window: bool | int = True, first_row: int = 0, rows: int = 0, contributions: int = 0,
            dangling_term: int = 0, share: bool = False, take: bool = False, fresh: bool = False,
            round: int = 0, wait: bool = True):
        """Run ``program`` (``ndpkit.engines.graph.golden.Program``) over the pull matrix
        (``rowptr``, ``col``, ``val``) with initial values in ``a``; the Completion's
        ``aux`` is the number of iterations (the result is in ``a`` if even, ``b`` if odd).
        Buffers or card addresses; ``mode`` 0 = Piccolo row gathers, 1 = baseline, for the
        sources outside the source ``window`` (:meth:`window_for`: ``True`` as many of
        the first vertices as the engine holds (the default), an integer that many, False none).
        PageRank: ``val`` the out-degrees, ``scratch`` 2 x n words, ``constants`` a
        ``golden.PageRankConstants``; ``aux`` bit 31 (``golden.CONVERGED``) is set when it
        stopped by the tolerance.  ``first_row``, ``rows``: a row slice (the command computes
        rows ``first_row .. first_row + rows - 1`` of an ``n``-vertex graph; ``rowptr``
        is the slice's, rebased to 0; ``rows=0``: through ``n``), as
        :func:`ndpkit.engines.graph.api.run` splits a graph over instances.  PageRank's
        ``contributions`` (0 every vertex's, 1 the slice's only, 2 given in ``scratch`` with
        ``dangling_term``, fp32 bits) let instances share an iteration's vertex passes
        (the register document's ``contributions``).  The window exchange (the register
        document's ``exchange``; a build with two :attr:`window_sets`): ``share`` sends
        the command's result rows (PageRank's: the slice's contributions) to every graph
        instance's window set ``(round + 1) mod 2``, ``take`` reads set ``round mod 2`` as
        the previous round filled it instead of loading the window from memory, ``fresh``
        empties the record of set ``(round + 1) mod 2`` first (a run's first round); a
        sharing BFS, SSSP or CC command's ``aux`` has ``golden.CHANGED`` set when its
        iteration changed a value."""
        if not 0 <= int(round) <= 0xFFFF:
            raise ValueError(f"round: 0 .. 65535, not {round!r}")
        c = constants or golden.PageRankConstants(0, 0, 0, 0)
        args = {"format_program": int(program), "format_mode": int(mode), "n": int(n), "edges": int(edges),
                "rowptr": address_of(rowptr, "rowptr"), "col": address_of(col, "col") if col is not None else 0,
                "val": address_of(val, "val") if val is not None else 0, "a": address_of(a, "a"),
                "b": address_of(b, "b"),
                "max_iterations": int(max_iterations),
                "scratch": address_of(scratch, "scratch") if scratch is not None else 0,
                "damping": c.damping, "teleport": c.teleport, "inv_n": c.inv_n, "tolerance": c.tolerance,
                "source_window": self.window_for(n, window), "first_row": int(first_row), "rows": int(rows),
                "contributions": int(contributions), "dangling_term": int(dangling_term),
                "exchange_share": int(bool(share)), "exchange_take": int(bool(take)),
                "exchange_fresh": int(bool(fresh)), "exchange_round": int(round)}
        # a bound, not an estimate: every iteration may cost a 64-byte line per vertex and edge
        # (PageRank: and its vertex passes)
        per_iteration = 64 * (int(n) + int(edges) + 1) + (64 * 4 * int(n) if program == golden.Program.PAGERANK else 0)
        cmd = self.submit(args, work_bytes=int(max_iterations) * per_iteration)
        return cmd.wait() if wait else cmd
