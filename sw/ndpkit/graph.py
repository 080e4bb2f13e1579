"""Graph kernels on the card (the graph engine's entry points, :mod:`ndpkit.engines.graph.api`):
``ndpkit.graph.bfs/sssp/connected_components/pagerank/spmv`` take scipy or networkx
graphs; ``csr`` and ``generators`` build pull graphs and Graph500 inputs."""
from ndpkit.engines.graph.api import *  # noqa: F401,F403 (the public API is the engine module's)
from ndpkit.engines.graph.api import __all__  # noqa: F401
