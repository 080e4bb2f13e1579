"""PyTorch glue, one import for every engine's: ``ndpkit.torch.NearStorageAdam`` (the adam
engine, :mod:`ndpkit.engines.adam.torch`) and ``decode_attention`` /
``scaled_dot_product_attention`` (the attention engine, :mod:`ndpkit.engines.attention.torch`).
Needs PyTorch (the ``torch`` extra)."""
from ndpkit.engines.adam.torch import NearStorageAdam
from ndpkit.engines.attention.torch import decode_attention, scaled_dot_product_attention

__all__ = ["NearStorageAdam", "decode_attention", "scaled_dot_product_attention"]
