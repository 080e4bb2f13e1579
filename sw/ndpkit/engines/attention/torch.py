"""PyTorch glue of the attention engine: :func:`decode_attention` over a card-resident
KV cache and :func:`scaled_dot_product_attention` with SDPA's meaning for decode shapes.

Both check their tensors as ``torch.nn.functional.scaled_dot_product_attention`` does
— floating point, one dtype for q, k and v, one device, 4-D, matching batch (a batch
of 1 broadcasts) and head sizes, key/value heads dividing the query heads — and raise
:class:`AttentionInputError` (a ``RuntimeError`` like torch's, and a ``ValueError``)
with torch's wording; what SDPA offers beyond decode (a mask, dropout, ``is_causal``,
several query tokens) is refused by name, never ignored."""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["decode_attention", "scaled_dot_product_attention", "AttentionInputError"]

_FORMAT_OF_DTYPE = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
_FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


class AttentionInputError(RuntimeError, ValueError):
    """Tensors SDPA would refuse (torch raises RuntimeError for them)."""


def _check_tensors(named: dict, *, query_tokens: bool = True, unbatched_ok: bool = False) -> None:
    """SDPA's checks over the tensors given (``None`` entries skipped)."""
    tensors = {k: t for k, t in named.items() if t is not None}
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in _FLOATS:
            raise AttentionInputError(f"Expected {name} to be a floating point tensor (float32, float16, bfloat16 "
                                      f"or float64), but got {name}.dtype: {t.dtype}")
        if t.dim() != 4:
            shapes = "3- or 4-dimensional ([batch,] heads, tokens, head_dim" if unbatched_ok else \
                "4-dimensional (batch, heads, tokens, head_dim"
            raise AttentionInputError(f"Expected {name} to be {shapes}), but got {name}.dim() = {t.dim()}")
    q = tensors["query"]
    dtypes = {name: t.dtype for name, t in tensors.items()}
    if len(set(dtypes.values())) > 1:
        raise AttentionInputError("Expected query, key, and value to have the same dtype, but got "
                                  + " ".join(f"{n}.dtype: {d}" for n, d in dtypes.items()) + " instead.")
    devices = {name: t.device.type for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        raise AttentionInputError("Expected query, key, and value to have the same device type, but got "
                                  + " ".join(f"{n}.device: {d}" for n, d in devices.items()) + " instead.")
    if query_tokens and q.shape[2] != 1:
        raise AttentionInputError(f"query: the attention engine runs decode, one query token per request: "
                                  f"query.shape[2] must be 1, not {q.shape[2]} (use torch's SDPA for prefill)")
    kv = {n: t for n, t in tensors.items() if n != "query"}
    for name, t in kv.items():
        if t.shape[0] not in (1, q.shape[0]):
            raise AttentionInputError(f"Expected query, key and value batch sizes to match (or broadcast), but got "
                                      f"query.size(0) = {q.shape[0]} and {name}.size(0) = {t.shape[0]}")
        if t.shape[3] != q.shape[3]:
            raise AttentionInputError(f"Expected {name}.size(-1) == query.size(-1) (the engine's head_dim), but got "
                                      f"{t.shape[3]} and {q.shape[3]}")
        if q.shape[1] % t.shape[1]:
            raise AttentionInputError(f"Number of heads in key and value must divide the number of heads in query "
                                      f"({name}.size(1) = {t.shape[1]}, query.size(1) = {q.shape[1]})")
    if len(kv) == 2:
        (n1, a), (n2, b) = kv.items()
        if a.shape[1:3] != b.shape[1:3]:
            raise AttentionInputError(f"Expected {n1} and {n2} to have the same heads and length, but got "
                                      f"{tuple(a.shape)} and {tuple(b.shape)}")


def decode_attention(dev, q, k_new, v_new, cache, layer: int, slots, *, scale: float | None = None,
                     window: int = 0) -> torch.Tensor:
    """``dev.attention.decode`` with tensors: ``q`` (B, H, 1, d) as
    ``scaled_dot_product_attention`` takes it for one query token per request,
    ``k_new``/``v_new`` (B, Hkv, 1, d) appended to the cache first (or None).  Returns
    (B, H, 1, d) in q's dtype.  ``cache`` may be a ``ShardedKVCache`` over several cards
    (the batch is split by card); ``dev`` is then unused and may be None."""
    from ndpkit.engines.attention.client import decode
    _check_tensors({"query": q, "key": k_new, "value": v_new})
    if (k_new is None) != (v_new is None):
        raise ValueError("k_new and v_new go together (both tensors, or both None)")
    batch = len(np.atleast_1d(slots))
    for name, t in (("query", q), ("key", k_new), ("value", v_new)):
        if t is not None and (t.shape[0] != batch or t.shape[2] != 1):
            raise AttentionInputError(f"Expected {name} to be (batch={batch}, heads, 1, head_dim) for the "
                                      f"{batch} slots, but got {tuple(t.shape)}")
    if dev is not None and getattr(cache, "dev", dev) is not dev:
        raise ValueError("the cache lives on another device than dev")
    out = decode(_as_float32(q)[:, :, 0], None if k_new is None else _as_float32(k_new)[:, :, 0],
                 None if v_new is None else _as_float32(v_new)[:, :, 0], cache, layer, slots,
                 scale=scale, window=window, out_format=_FORMAT_OF_DTYPE.get(q.dtype, "fp32"))
    return torch.from_numpy(out)[:, :, None, :].to(q.dtype)


def scaled_dot_product_attention(dev, q, k, v, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
                                 *, scale: float | None = None, enable_gqa: bool = False,
                                 kv_format: str | None = None) -> torch.Tensor:
    """``torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale,
    enable_gqa=enable_gqa)`` for decode shapes — q (B, H, 1, d), k and v (B, Hkv, L, d)
    — computed on the card: k and v go into a temporary KV cache in ``kv_format`` (default:
    k's own format for fp16/bf16, fp16 for fp32/fp64 tensors), then one decode command
    runs the batch.  A batch of 1 in k/v broadcasts, as in torch.  ``attn_mask``,
    ``dropout_p`` and ``is_causal`` are refused unless left at their defaults."""
    from ndpkit.engines.attention.kvcache import KVCache
    for name, value, default in (("attn_mask", attn_mask, None), ("dropout_p", dropout_p, 0.0),
                                 ("is_causal", is_causal, False)):
        if value is not default and value != default:
            raise NotImplementedError(f"{name}: not supported by the attention engine (decode attends over the "
                                      f"whole cache); leave it at {default!r}")
    if all(isinstance(t, torch.Tensor) and t.dim() == 3 for t in (q, k, v)):     # unbatched, as torch takes it
        return scaled_dot_product_attention(dev, q[None], k[None], v[None], scale=scale, enable_gqa=enable_gqa,
                                            kv_format=kv_format)[0]
    _check_tensors({"query": q, "key": k, "value": v}, unbatched_ok=True)
    batch, heads, _, d = q.shape
    _, kv_heads, length, _ = k.shape
    if heads != kv_heads and not enable_gqa:
        raise AttentionInputError(f"query has {heads} heads and key/value {kv_heads}: pass enable_gqa=True for "
                                  "grouped-query attention (as torch requires)")
    if length == 0:
        raise AttentionInputError("key: no tokens to attend over (key.size(2) == 0)")
    if kv_format is None:
        kv_format = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(k.dtype, "fp16")
    k, v = k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1)
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
