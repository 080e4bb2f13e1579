"""PyTorch glue of the attention engine: :func:`decode_attention` over a card-resident
KV cache and :func:`scaled_dot_product_attention` with SDPA's meaning for decode shapes."""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["decode_attention", "scaled_dot_product_attention"]

_FORMAT_OF_DTYPE = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def decode_attention(dev, q, k_new, v_new, cache, layer: int, slots, *, scale: float | None = None,
                     window: int = 0) -> torch.Tensor:
    """``dev.attention.decode`` with tensors: ``q`` (B, H, 1, d) as
    ``scaled_dot_product_attention`` takes it for one query token per request,
    ``k_new``/``v_new`` (B, Hkv, 1, d) appended to the cache first (or None).  Returns
    (B, H, 1, d) in q's dtype.  ``cache`` may be a ``ShardedKVCache`` over several cards
    (the batch is split by card); ``dev`` is then unused and may be None."""
    from ndpkit.engines.attention.client import decode
    if dev is not None and getattr(cache, "dev", dev) is not dev:
        raise ValueError("the cache lives on another device than dev")
    out = decode(_as_float32(q)[:, :, 0], None if k_new is None else _as_float32(k_new)[:, :, 0],
                               None if v_new is None else _as_float32(v_new)[:, :, 0], cache, layer, slots,
                               scale=scale, window=window,
                               out_format=_FORMAT_OF_DTYPE.get(q.dtype, "fp32"))
    return torch.from_numpy(out)[:, :, None, :].to(q.dtype)


def scaled_dot_product_attention(dev, q, k, v, *, scale: float | None = None, enable_gqa: bool = True,
                                 kv_format: str = "fp16") -> torch.Tensor:
    """The meaning of ``torch.nn.functional.scaled_dot_product_attention(q, k, v,
    scale=scale, enable_gqa=True)`` for decode shapes — q (B, H, 1, d), k and v
    (B, Hkv, L, d) — computed on the card: k and v go into a temporary KV cache (in
    ``kv_format``; 'fp16' or 'bf16'), then one decode command runs the batch."""
    from ndpkit.engines.attention.kvcache import KVCache
    if q.dim() != 4 or q.shape[2] != 1:
        raise ValueError(f"q must be (batch, heads, 1, head_dim), not {tuple(q.shape)}")
    batch, heads, _, d = q.shape
    _, kv_heads, length, _ = k.shape
    if heads != kv_heads and not enable_gqa:
        raise ValueError("q and k/v head counts differ: pass enable_gqa=True (as torch requires)")
    cache = KVCache(dev, layers=1, slots=batch, kv_heads=kv_heads, head_dim=d, capacity=length, fmt=kv_format)
    try:
        slots = [cache.new_request() for _ in range(batch)]
        for b, s in enumerate(slots):
            cache.prefill(0, s, _as_float32(k[b]), _as_float32(v[b]))
        return decode_attention(dev, q, None, None, cache, 0, slots, scale=scale)
    finally:
        cache.close()


def _as_float32(t) -> np.ndarray:
    return t.detach().to(torch.float32).cpu().numpy()
