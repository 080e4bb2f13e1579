"""The dma_copy engine: copy and pattern fill (docs/engines/dma_copy.md)."""
from ndpkit_hw.engines.dma_copy.engine import DmaCopy

__all__ = ["DmaCopy"]
