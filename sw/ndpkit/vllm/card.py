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

from ndpkit.engines.attention.golden import BLOCK_SIZES
from ndpkit.engines.attention.kvcache import KVCache, check_model_shape, golden_outputs

__all__ = ["CardAttention", "blocks_that_fit", "STAGING_BYTES"]

#: card memory kept free beside the pools for each command's staging (q, outputs, block
#: tables, descriptors)
STAGING_BYTES = 1 << 20


def _kv_bytes_per_block(layers: int, kv_heads: int, head_dim: int, block_size: int) -> int:
    return 2 * layers * kv_heads * block_size * head_dim * 2        # K and V, 16-bit


def _instances(devices) -> list[tuple[object, int, object]]:
    """(device, instance index, client) of every attention instance of ``devices``."""
    devices = list(devices) if isinstance(devices, (list, tuple)) else [devices]
    out = []
    for dev in devices:
        clients = dev.instances.get("attention")
        if not clients:
            dev.engine("attention")                  # raises, naming what the card has
        out += [(dev, i, c) for i, c in enumerate(clients)]
    return out


def blocks_that_fit(devices, *, layers: int, kv_heads: int, head_dim: int, block_size: int) -> int:
    """How many vLLM blocks of ``block_size`` tokens every attention instance of
    ``devices`` (one card or a list) holds for a model of ``layers`` layers (K and V,
    16-bit, every layer), leaving room for the commands' staging: the value to give vLLM
    as ``num_gpu_blocks_override`` (each instance holds the whole pool: any block may
    belong to a request it serves)."""
    per_block = _kv_bytes_per_block(layers, kv_heads, head_dim, block_size)
    return min(max(0, (dev.region(client.region)[1] - STAGING_BYTES) // per_block - 1)
               for dev, _, client in _instances(devices))


def check_shape(*, num_heads: int, kv_heads: int, head_dim: int, block_size: int) -> None:
    """A model and block size the engine runs, or ValueError naming the field."""
    check_model_shape(heads=num_heads, kv_heads=kv_heads, head_dim=head_dim,
                      names=("head_dim", "num_kv_heads", "group (num_heads / num_kv_heads)"))
    if block_size not in BLOCK_SIZES:
        raise ValueError(f"block_size: the attention engine's paged cache takes {BLOCK_SIZES} tokens a block, "
                         f"not {block_size} (vLLM: block_size=...)")


class CardAttention:
    """Decode attention on the attention instances of ``devices`` (one card or a list of
    cards) over paged KV caches mirroring vLLM's ``num_blocks`` blocks of ``block_size``
    tokens for ``layers`` layers; ``max_requests`` decode requests a step at most,
    ``max_model_len`` tokens a request at most.

    With several instances each request is served by one of them, chosen by its first
    block id (vLLM keeps a running request's blocks, and requests sharing a prefix share
    its first block), so its prompt, its appended tokens and its decode steps all land
    there; the instances of a step run at the same time.  ``verify``: every output is
    checked bit for bit against the golden model on the cache read back (``mismatches``
    counts those that differ).  Counters: ``decode_steps`` (decode steps a layer),
    ``decode_tokens`` (request-layers run on the card), ``prefill_tokens`` (token-layers
    written to the card), ``cycles`` (each step's engine cycles, the slowest instance's)."""

    def __init__(self, devices, *, layers: int, num_heads: int, kv_heads: int, head_dim: int, block_size: int,
                 num_blocks: int, max_requests: int, max_model_len: int, fmt: str = "fp16", verify: bool = False):
        check_shape(num_heads=num_heads, kv_heads=kv_heads, head_dim=head_dim, block_size=block_size)
        instances = _instances(devices)
        fit = blocks_that_fit(devices, layers=layers, kv_heads=kv_heads, head_dim=head_dim, block_size=block_size)
        if num_blocks > fit:
            need = num_blocks * _kv_bytes_per_block(layers, kv_heads, head_dim, block_size)
            raise ValueError(f"num_blocks: vLLM's KV cache has {num_blocks} blocks of {block_size} tokens "
                             f"({need / 2**20:.1f} MiB on the card for {layers} layers); an attention instance "
                             f"holds {fit}: start vLLM with num_gpu_blocks_override={fit} or fewer")
        self.layers, self.block_size, self.verify = layers, block_size, verify
        self.num_heads, self.kv_heads, self.head_dim = num_heads, kv_heads, head_dim
        self.max_requests = max_requests
        self.shards = []             # (cache, its slots: slot i = the i-th request of a step it serves)
        try:
            for dev, index, _ in instances:
                kv = KVCache(dev, layers=layers, slots=max_requests, kv_heads=kv_heads, head_dim=head_dim,
                             capacity=max_model_len, fmt=fmt, block_size=block_size, num_blocks=num_blocks,
                             manage_blocks=False, instance=index if len(dev.instances["attention"]) > 1 else None)
                self.shards.append((kv, [kv.new_request() for _ in range(max_requests)]))
        except BaseException:
            self.close()
            raise
        self.decode_steps = self.decode_tokens = self.prefill_tokens = self.mismatches = 0
        self.cycles: list[int] = []

    def shard_of(self, first_block) -> np.ndarray:
        """The instance (index into ``shards``) serving the requests whose first block ids
        are ``first_block``."""
        return np.asarray(first_block, dtype=np.int64) % len(self.shards)

    def prefill(self, layer: int, slot_mapping, k, v, first_block=None) -> None:
        """Write ``k``, ``v`` (T, kv_heads, head_dim) of T prompt tokens to the card at
        vLLM's ``slot_mapping`` (T slots; negative: padding, skipped); ``first_block``
        (T): the first block id of each token's request (needed with several instances)."""
        slot_mapping = np.asarray(slot_mapping)
        if len(self.shards) == 1:
            self.shards[0][0].write_slots(layer, slot_mapping, k, v)
        else:
            if first_block is None or np.shape(first_block) != slot_mapping.shape:
                raise ValueError(f"first_block: one block id a token ({slot_mapping.shape[0]}) with "
                                 f"{len(self.shards)} attention instances")
            owner = self.shard_of(first_block)
            k, v = np.asarray(k), np.asarray(v)
            for s, (kv, _) in enumerate(self.shards):
                mine = np.flatnonzero(owner == s)
                if mine.size:
                    kv.write_slots(layer, slot_mapping[mine], k[mine], v[mine])
        self.prefill_tokens += int((slot_mapping >= 0).sum())

    def decode(self, layer: int, q, k_new, v_new, block_tables, seq_lens, slot_mapping, *, scale: float):
        """One decode step of B requests: ``q`` (B, heads, d), ``k_new`` and ``v_new``
        (B, kv_heads, d) the new token's (appended by the engine at ``slot_mapping``),
        ``block_tables`` (B, ≥ blocks) vLLM's block ids, ``seq_lens`` (B) each request's
        tokens with the new one.  Returns (B, heads, d) float32."""
        from ndpkit.engines.attention.client import start_decode
        seq_lens = np.asarray(seq_lens, dtype=np.int64)
        block_tables = np.asarray(block_tables)
        q, k_new, v_new = (np.asarray(x, dtype=np.float32) for x in (q, k_new, v_new))
        slot_mapping = np.asarray(slot_mapping, dtype=np.int64)
        batch = len(seq_lens)
        owner = self.shard_of(block_tables[:, 0]) if batch else np.zeros(0, np.int64)
        bs = self.block_size
        parts = []
        for s, (kv, slots) in enumerate(self.shards):
            mine = np.flatnonzero(owner == s)
            if not mine.size:
                continue
            if mine.size > self.max_requests:
                raise ValueError(f"a decode step of {mine.size} requests on one instance; the card cache was made "
                                 f"for max_requests={self.max_requests}")
            for i, b in enumerate(mine):
                kv.set_block_table(slots[i], block_tables[b, :math.ceil(int(seq_lens[b]) / bs)])
                kv.set_length(layer, slots[i], int(seq_lens[b]) - 1)
            parts.append((kv, slots[:mine.size], mine,
                          start_decode(q[mine], k_new[mine], v_new[mine], kv, layer, slots[:mine.size], scale=scale,
                                       slot_mapping=slot_mapping[mine])))
        out = np.empty(q.shape, np.float32)
        spent = 0
        for kv, slots, mine, pending in parts:
            out[mine] = pending.finish()
            last = (kv.client or kv.dev.attention).last
            spent = max(spent, (last.cycles or 0) if last is not None else 0)
            if self.verify:
                want = golden_outputs(kv, layer, slots, q[mine], scale)
                self.mismatches += int((want.view(np.uint32) != out[mine].view(np.uint32))
                                       .reshape(mine.size, -1).any(axis=1).sum())
        self.cycles.append(spent)
        self.decode_steps += 1
        self.decode_tokens += batch
        return out

    def close(self) -> None:
        for kv, _ in self.shards:
            kv.close()
