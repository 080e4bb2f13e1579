"""The card side of the vLLM attention backend, free of vLLM itself (so it is tested
without a vLLM install): one paged :class:`~ndpkit.KVCache` whose block ids are vLLM's.

vLLM hands the backend, per layer and step, its KV cache as blocks, a block table per
request, each request's sequence length and each new token's slot (``block id *
block_size + offset``); it keeps no request ids.  :class:`CardAttention` mirrors vLLM's
blocks on the card with the same ids, so it needs no state of its own across steps:

- a prompt (or a chunk of one) is computed on the host by vLLM's own CPU attention, and
  its keys and values are written to the card at their slots (:meth:`prefill`);
- a decode step (every request with one new token) runs on the card: the engine reads
  each request's blocks through its block table, appends the new key and value at its
  slot and attends over them (:meth:`decode`), one engine command per layer.

A request preempted and recomputed gets fresh blocks, and its prompt is written again;
blocks vLLM shares between requests through prefix caching hold on the card what they
hold on the host, since every token reaches both (the card's keys and values are in the
cache's 16-bit format).
"""
from __future__ import annotations

import math

import numpy as np

from ndpkit.engines.attention.golden import BLOCK_SIZES, HEAD_DIMS, MAX_GROUP, MAX_KV_HEADS
from ndpkit.engines.attention.kvcache import KVCache, golden_outputs

__all__ = ["CardAttention", "blocks_that_fit", "STAGING_BYTES"]

#: card memory kept free beside the pools for each command's staging (q, outputs, block
#: tables, descriptors)
STAGING_BYTES = 1 << 20


def _kv_bytes_per_block(layers: int, kv_heads: int, head_dim: int, block_size: int) -> int:
    return 2 * layers * kv_heads * block_size * head_dim * 2        # K and V, 16-bit


def blocks_that_fit(dev, *, layers: int, kv_heads: int, head_dim: int, block_size: int) -> int:
    """How many vLLM blocks of ``block_size`` tokens one attention instance of ``dev``
    holds for a model of ``layers`` layers (K and V, 16-bit, every layer), leaving room
    for the commands' staging: the value to give vLLM as ``num_gpu_blocks_override``."""
    client = dev.attention
    _, size = dev.region(client.region)
    return max(0, (size - STAGING_BYTES) // _kv_bytes_per_block(layers, kv_heads, head_dim, block_size) - 1)


def check_shape(*, num_heads: int, kv_heads: int, head_dim: int, block_size: int) -> None:
    """A model and block size the engine runs, or ValueError naming the field."""
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"head_dim: the attention engine supports {HEAD_DIMS}, not {head_dim}")
    if not 1 <= kv_heads <= MAX_KV_HEADS:
        raise ValueError(f"num_kv_heads: the attention engine supports 1..{MAX_KV_HEADS}, not {kv_heads}")
    if num_heads % kv_heads or not 1 <= num_heads // kv_heads <= MAX_GROUP:
        raise ValueError(f"group: the attention engine takes 1..{MAX_GROUP} query heads per KV head, not "
                         f"{num_heads} query heads over {kv_heads} KV heads")
    if block_size not in BLOCK_SIZES:
        raise ValueError(f"block_size: the attention engine's paged cache takes {BLOCK_SIZES} tokens a block, "
                         f"not {block_size} (vLLM: block_size=...)")


class CardAttention:
    """Decode attention on ``dev`` over a paged KV cache mirroring vLLM's ``num_blocks``
    blocks of ``block_size`` tokens for ``layers`` layers; ``max_requests`` decode
    requests a step at most, ``max_model_len`` tokens a request at most.  ``verify``:
    every card output is checked bit for bit against the golden model on the cache read
    back (``mismatches`` counts those that differ).  Counters: ``decode_steps`` (engine
    commands), ``decode_tokens`` (request-layers run on the card), ``prefill_tokens``
    (token-layers written to the card), ``cycles`` (each command's engine cycles)."""

    def __init__(self, dev, *, layers: int, num_heads: int, kv_heads: int, head_dim: int, block_size: int,
                 num_blocks: int, max_requests: int, max_model_len: int, fmt: str = "fp16", verify: bool = False):
        check_shape(num_heads=num_heads, kv_heads=kv_heads, head_dim=head_dim, block_size=block_size)
        fit = blocks_that_fit(dev, layers=layers, kv_heads=kv_heads, head_dim=head_dim, block_size=block_size)
        if num_blocks > fit:
            need = num_blocks * _kv_bytes_per_block(layers, kv_heads, head_dim, block_size)
            raise ValueError(f"num_blocks: vLLM's KV cache has {num_blocks} blocks of {block_size} tokens "
                             f"({need / 2**20:.1f} MiB on the card for {layers} layers); the card's attention "
                             f"instance holds {fit} (region of {dev.region(dev.attention.region)[1] / 2**20:.1f} "
                             f"MiB): start vLLM with num_gpu_blocks_override={fit} or fewer")
        self.dev, self.layers, self.block_size, self.verify = dev, layers, block_size, verify
        self.num_heads, self.kv_heads, self.head_dim = num_heads, kv_heads, head_dim
        self.kv = KVCache(dev, layers=layers, slots=max_requests, kv_heads=kv_heads, head_dim=head_dim,
                          capacity=max_model_len, fmt=fmt, block_size=block_size, num_blocks=num_blocks,
                          manage_blocks=False)
        # slot i: the i-th decode request of a step (its table and length set each step)
        self.slots = [self.kv.new_request() for _ in range(max_requests)]
        self.decode_steps = self.decode_tokens = self.prefill_tokens = self.mismatches = 0
        self.cycles: list[int] = []

    def prefill(self, layer: int, slot_mapping, k, v) -> None:
        """Write ``k``, ``v`` (T, kv_heads, head_dim) of T prompt tokens to the card at
        vLLM's ``slot_mapping`` (T slots; negative: padding, skipped)."""
        slot_mapping = np.asarray(slot_mapping)
        self.kv.write_slots(layer, slot_mapping, k, v)
        self.prefill_tokens += int((slot_mapping >= 0).sum())

    def decode(self, layer: int, q, k_new, v_new, block_tables, seq_lens, slot_mapping, *, scale: float):
        """One decode step of B requests on the card: ``q`` (B, heads, d), ``k_new`` and
        ``v_new`` (B, kv_heads, d) the new token's (appended by the engine at
        ``slot_mapping``), ``block_tables`` (B, ≥ blocks) vLLM's block ids,
        ``seq_lens`` (B) each request's tokens with the new one.  Returns (B, heads, d)
        float32."""
        seq_lens = np.asarray(seq_lens, dtype=np.int64)
        block_tables = np.asarray(block_tables)
        batch = len(seq_lens)
        if batch > self.kv.slots:
            raise ValueError(f"a decode step of {batch} requests; the card cache was made for "
                             f"max_requests={self.kv.slots}")
        bs = self.block_size
        for i, n in enumerate(seq_lens):
            self.kv.set_block_table(self.slots[i], block_tables[i, :math.ceil(int(n) / bs)])
            self.kv.set_length(layer, self.slots[i], int(n) - 1)
        out = self.dev.attention.decode(q, k_new, v_new, self.kv, layer, self.slots[:batch], scale=scale,
                                        slot_mapping=np.asarray(slot_mapping, dtype=np.int64))
        last = self.dev.attention.last
        self.cycles.append((last.cycles or 0) if last is not None else 0)
        self.decode_steps += 1
        self.decode_tokens += batch
        if self.verify:
            want = golden_outputs(self.kv, layer, self.slots[:batch], np.asarray(q, dtype=np.float32), scale)
            self.mismatches += int((want.view(np.uint32) != out.astype(np.float32).view(np.uint32))
                                   .reshape(batch, -1).any(axis=1).sum())
        return out

    def close(self) -> None:
        self.kv.close()
