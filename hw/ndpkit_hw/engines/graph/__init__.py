"""The graph engine (docs/engines/graph.md)."""
from ndpkit_hw.engines.graph.engine import GraphEngine

__all__ = ["GraphEngine"]
