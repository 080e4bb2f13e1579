"""The memory-side scatter-gather unit (``unit.SgUnit``), its engine and its bench harness."""
from ndpkit_hw.engines.sg.engine import SgEngine

__all__ = ["SgEngine"]
