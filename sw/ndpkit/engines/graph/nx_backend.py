"""ndpkit as a networkx backend (networkx's dispatch, the way nx-cugraph plugs in):

>>> import networkx as nx
>>> G = nx.karate_club_graph()
>>> ranks = nx.pagerank(G, backend="ndpkit")            # PageRank on the card
>>> round(ranks[0], 4), round(nx.pagerank(G)[0], 4)
(0.0885, 0.0885)

The card is ``nx.config.backends.ndpkit.device``: an open :class:`ndpkit.Device`, or a
card address for :func:`ndpkit.open` (default ``"model"``), opened for each call.
Dispatched: ``pagerank``, ``single_source_shortest_path_length`` (BFS),
``single_source_dijkstra_path_length`` (SSSP), ``connected_components``,
``weakly_connected_components`` and their ``number_*`` counts.  Options the engine
cannot honour (``personalization``, ``dangling``, ``cutoff``) are reported by
``can_run``, so networkx names the reason (or, with ``fallback_to_nx``, runs its own).

This module imports neither networkx nor the driver at import time: networkx loads
:func:`backend_info` while it is itself being imported.
"""
from __future__ import annotations

import contextlib

__all__ = ["BackendInterface", "backend_interface", "backend_info"]

NAME = "ndpkit"


def backend_info() -> dict:
    """networkx's ``networkx.backend_info`` entry point."""
    functions = {name: {"additional_docs": f"Runs on the ndpkit graph engine ({what})."}
                 for name, what in _FUNCTIONS.items()}
    return {"backend_name": NAME, "project": "ndpkit", "package": "ndpkit",
            "short_summary": "Graph kernels on an ndpkit near-memory graph engine (FPGA card or its simulation)",
            "functions": functions, "default_config": {"device": "model"}}


_FUNCTIONS = {
    "pagerank": "fp32 power iteration, one engine command",
    "single_source_shortest_path_length": "BFS program",
    "single_source_dijkstra_path_length": "SSSP program, non-negative integer weights",
    "connected_components": "label propagation",
    "weakly_connected_components": "label propagation",
    "number_connected_components": "label propagation",
    "number_weakly_connected_components": "label propagation",
}


class DispatchedGraph:
    """A networkx graph handed to the ndpkit backend (networkx's conversion step keeps
    the graph itself: the driver reads networkx graphs directly)."""
    __networkx_backend__ = NAME

    def __init__(self, graph):
        self.graph = graph

    def is_directed(self):
        return self.graph.is_directed()

    def is_multigraph(self):
        return self.graph.is_multigraph()


@contextlib.contextmanager
def _device():
    import networkx as nx
    import ndpkit
    device = nx.config.backends[NAME].get("device", "model")
    if isinstance(device, str):
        with ndpkit.open(device) as dev:
            yield dev
    else:
        yield device


def _api():
    from ndpkit.engines.graph import api
    return api


class BackendInterface:
    """The object networkx's ``networkx.backends`` entry point loads."""

    @staticmethod
    def convert_from_nx(graph, *args, **kwargs):
        return DispatchedGraph(graph)

    @staticmethod
    def convert_to_nx(obj, *, name=None):
        return obj.graph if isinstance(obj, DispatchedGraph) else obj

    @staticmethod
    def can_run(name, args, kwargs):
        if name not in _FUNCTIONS:
            return f"{name} is not on the ndpkit graph engine"
        for option in ("personalization", "dangling", "cutoff"):
            if kwargs.get(option) is not None:
                return f"{option} is not supported by the ndpkit graph engine"
        if name in ("connected_components", "number_connected_components") and \
                args and getattr(args[0], "is_directed", lambda: False)():
            return "connected_components is for undirected graphs (networkx raises for directed ones)"
        return True

    @staticmethod
    def pagerank(G, alpha=0.85, personalization=None, max_iter=100, tol=1e-06, nstart=None, weight="weight",
                 dangling=None):
        with _device() as dev:
            return _api().pagerank(G.graph, dev, alpha=alpha, personalization=personalization, max_iter=max_iter,
                                   tol=tol, nstart=nstart, weight=weight, dangling=dangling)

    @staticmethod
    def single_source_shortest_path_length(G, source, cutoff=None):
        _no_cutoff(cutoff)
        with _device() as dev:
            return _api().bfs(G.graph, source, dev)

    @staticmethod
    def single_source_dijkstra_path_length(G, source, cutoff=None, weight="weight"):
        _no_cutoff(cutoff)
        if callable(weight):
            raise NotImplementedError("weight: a weight function is not supported by the ndpkit graph engine")
        with _device() as dev:
            return _api().sssp(G.graph, source, dev, weight=weight)

    @staticmethod
    def weakly_connected_components(G):
        with _device() as dev:      # computed before the card closes; networkx yields sets
            return iter(_api().connected_components(G.graph, dev))

    connected_components = weakly_connected_components

    @staticmethod
    def number_weakly_connected_components(G):
        with _device() as dev:
            return len(_api().connected_components(G.graph, dev))

    number_connected_components = number_weakly_connected_components


def _no_cutoff(cutoff):
    if cutoff is not None:
        raise NotImplementedError("cutoff: not supported by the ndpkit graph engine")


backend_interface = BackendInterface()
