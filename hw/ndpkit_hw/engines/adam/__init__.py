"""The near-storage Adam/AdamW engine (Smart-Infinity): ``updater`` is the
bit-exact update datapath (golden: ``ndpkit.engines.adam.golden``),
``stream_decompressor`` the fused top-k gradient decompression."""
from ndpkit_hw.engines.adam.engine import AdamEngine

__all__ = ["AdamEngine"]
