"""Driver of the ``graph`` engine: one command per program run (``dev.graph.run``).
The user-level functions taking scipy/networkx graphs are in :mod:`ndpkit.graph`."""
from __future__ import annotations

from ndpkit_spec.codes import ErrorCode
from ndpkit.engine import Command, EngineClient
from ndpkit.engines.graph import golden
from ndpkit.memory import address_of

__all__ = ["GraphClient"]


class GraphClient(EngineClient):
    name = "graph"

    def blame_run(self, args, code):
        return {ErrorCode.BAD_GRAPH: "rowptr", ErrorCode.BAD_INDEX: "col"}.get(code)

    def run(self, program: int, *, n: int, edges: int, rowptr, col, a, b, val=None, mode: int = 0,
            max_iterations: int, scratch=None, constants: "golden.PageRankConstants | None" = None,
            wait: bool = True):
        """Run ``program`` (``ndpkit.engines.graph.golden.Program``) over the pull matrix
        (``rowptr``, ``col``, ``val``) with initial values in ``a``; the Completion's
        ``aux`` is the number of iterations (the result is in ``a`` if even, ``b`` if odd).
        Buffers or card addresses; ``mode`` 0 = Piccolo row gathers, 1 = baseline.
        PageRank: ``val`` the out-degrees, ``scratch`` 2 x n words, ``constants`` a
        ``golden.PageRankConstants``; ``aux`` bit 31 (``golden.CONVERGED``) is set when it
        stopped by the tolerance."""
        c = constants or golden.PageRankConstants(0, 0, 0, 0)
        args = {"format_program": int(program), "format_mode": int(mode), "n": int(n), "edges": int(edges),
                "rowptr": address_of(rowptr, "rowptr"), "col": address_of(col, "col") if col is not None else 0,
                "val": address_of(val, "val") if val is not None else 0, "a": address_of(a, "a"),
                "b": address_of(b, "b"),
                "max_iterations": int(max_iterations),
                "scratch": address_of(scratch, "scratch") if scratch is not None else 0,
                "damping": c.damping, "teleport": c.teleport, "inv_n": c.inv_n, "tolerance": c.tolerance}
        # a bound, not an estimate: every iteration may cost a 64-byte line per vertex and edge
        # (PageRank: and its vertex passes)
        per_iteration = 64 * (int(n) + int(edges) + 1) + (64 * 4 * int(n) if program == golden.Program.PAGERANK else 0)
        cmd = self.submit(args, work_bytes=int(max_iterations) * per_iteration)
        return cmd.wait() if wait else cmd
