"""Decode attention engine (see docs/engines/attention.md)."""
from ndpkit_hw.engines.attention.engine import AttentionEngine

__all__ = ["AttentionEngine"]
