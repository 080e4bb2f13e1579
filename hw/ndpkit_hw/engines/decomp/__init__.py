"""The decomp engine: scatter-mode gradient decompression (docs/engines/decomp.md);
``pairs`` unpacks (index, value) pairs for it and for the adam engine's fused
stream-mode decompressor."""
from ndpkit_hw.engines.decomp.engine import DecompEngine

__all__ = ["DecompEngine"]
