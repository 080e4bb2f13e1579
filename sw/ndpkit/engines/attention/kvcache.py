"""A KV cache in card memory for the ``attention`` engine.

Layout (docs/engines/attention.md): per layer one K buffer and one V buffer; inside each,
request slots one after another, inside a slot the KV heads one after another, inside
a head ``capacity`` token rows of ``head_dim`` 16-bit elements (fp16 or bf16), each
row contiguous (128 or 256 bytes: whole 64-byte bus words).  The row of token ``t`` of
head ``h`` of slot ``s`` in layer ``l`` is at

    k_buffer[l] + ((s * kv_heads + h) * capacity + t) * head_dim * 2

so one head's tokens are one contiguous run (the engine streams it in long bursts),
and a slot's region (``kv_heads * capacity`` rows) is what a descriptor points at.
Slots are handed out by :meth:`KVCache.new_request` and reused after :meth:`free`.
"""
from __future__ import annotations

import numpy as np

from ndpkit.errors import NdpkitError
from ndpkit.engines.attention.golden import HEAD_DIMS, MAX_KV_HEADS, KvFormat, widen

__all__ = ["ShardedKVCache", "KVCache", "to_bits16"]


def to_bits16(x, fmt: KvFormat) -> np.ndarray:
    """Floats (or 16-bit patterns) -> uint16 bit patterns in ``fmt`` (RNE)."""
    x = np.asarray(x)
    if x.dtype == np.uint16:
        return x
    bits = widen(x.astype(np.float32), KvFormat.FP32)
    from ndpkit.arith import fp
    return fp.fp32_to_fp16(bits) if KvFormat(fmt) == KvFormat.FP16 else fp.fp32_to_bf16(bits)


class KVCache:
    def __init__(self, dev, *, layers: int, slots: int, kv_heads: int, head_dim: int, capacity: int,
                 fmt: str = "fp16"):
        if head_dim not in HEAD_DIMS:
            raise ValueError(f"head_dim must be one of {HEAD_DIMS}, not {head_dim}")
        if not 1 <= kv_heads <= MAX_KV_HEADS:
            raise ValueError(f"kv_heads must be 1..{MAX_KV_HEADS}, not {kv_heads}")
        for name, value in (("layers", layers), ("slots", slots), ("capacity", capacity)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        try:
            self.format = {"fp16": KvFormat.FP16, "bf16": KvFormat.BF16}[fmt]
        except KeyError:
            raise ValueError(f"fmt must be 'fp16' or 'bf16', not {fmt!r}") from None
        self.dev, self.layers, self.slots = dev, layers, slots
        self.kv_heads, self.head_dim, self.capacity = kv_heads, head_dim, capacity
        self.row_bytes = head_dim * 2
        self.slot_bytes = kv_heads * capacity * self.row_bytes
        self.k, self.v = [], []
        try:
            for _ in range(layers):
                self.k.append(dev.alloc(slots * self.slot_bytes))
                self.v.append(dev.alloc(slots * self.slot_bytes))
        except BaseException:
            self.close()
            raise
        self.lengths = np.zeros((layers, slots), dtype=np.int64)
        self._free = list(range(slots))
        self._used: set[int] = set()

    # -- slots ------------------------------------------------------------------------
    def new_request(self) -> int:
        """A free slot (its lengths reset to 0)."""
        if not self._free:
            raise NdpkitError(f"the KV cache's {self.slots} slots are all in use; free one first")
        slot = self._free.pop(0)
        self._used.add(slot)
        self.lengths[:, slot] = 0
        return slot

    def free(self, slot: int) -> None:
        self._check_slot(slot)
        self._used.discard(slot)
        self._free.append(slot)
        self._free.sort()

    def length(self, layer: int, slot: int) -> int:
        """The tokens ``slot`` holds in ``layer``."""
        return int(self.lengths[layer, slot])

    def _check_slot(self, slot):
        if slot not in self._used:
            raise ValueError(f"slot {slot} is not an active request of this cache")

    # -- addresses --------------------------------------------------------------------
    def k_addr(self, layer: int, slot: int) -> int:
        return self.k[layer].address + slot * self.slot_bytes

    def v_addr(self, layer: int, slot: int) -> int:
        return self.v[layer].address + slot * self.slot_bytes

    def row_offset(self, slot: int, head: int, token: int) -> int:
        return ((slot * self.kv_heads + head) * self.capacity + token) * self.row_bytes

    # -- host access ----------------------------------------------------------------------
    def prefill(self, layer: int, slot: int, k, v) -> None:
        """Write a prompt's keys and values, (kv_heads, L, head_dim) floats or 16-bit
        patterns, into rows 0..L-1 of ``slot`` and set its length to L."""
        self._check_slot(slot)
        k16, v16 = to_bits16(k, self.format), to_bits16(v, self.format)
        shape = (self.kv_heads, k16.shape[1] if k16.ndim == 3 else -1, self.head_dim)
        if k16.ndim != 3 or k16.shape != v16.shape or k16.shape[0] != self.kv_heads or k16.shape[2] != self.head_dim:
            raise ValueError(f"k and v must both be (kv_heads={self.kv_heads}, L, head_dim={self.head_dim}), not "
                             f"{k16.shape} and {v16.shape}")
        length = shape[1]
        if length > self.capacity:
            raise ValueError(f"{length} tokens exceed the capacity of {self.capacity}")
        for h in range(self.kv_heads):
            offset = self.row_offset(slot, h, 0)
            self.k[layer].write(k16[h], offset)
            self.v[layer].write(v16[h], offset)
        self.lengths[layer, slot] = length

    def read(self, layer: int, slot: int) -> tuple[np.ndarray, np.ndarray]:
        """(K, V) of a slot as uint16 patterns, (kv_heads, length, head_dim)."""
        self._check_slot(slot)
        length = int(self.lengths[layer, slot])
        out = []
        for buf in (self.k[layer], self.v[layer]):
            heads = [np.frombuffer(buf.read(length * self.row_bytes, self.row_offset(slot, h, 0)), np.uint16)
                     for h in range(self.kv_heads)]
            out.append(np.stack(heads).reshape(self.kv_heads, length, self.head_dim))
        return out[0], out[1]

    def close(self) -> None:
        for b in self.k + self.v:
            b.free()
        self.k, self.v = [], []

    def __repr__(self):
        return (f"<KVCache {self.layers} layers x {self.slots} slots x {self.kv_heads} kv heads x {self.capacity} "
                f"tokens x d={self.head_dim} {self.format.name.lower()}, {len(self._used)} in use>")


class ShardedKVCache:
    """A KV cache over several cards, whole requests per card (batch-parallel, as the
    HPU prototype splits a decode batch): ``slots_per_device`` slots on each device;
    global slot ``s`` lives on device ``s // slots_per_device``.  ``new_request`` puts a
    request on the card with the most free slots.  :func:`ndpkit.engines.attention.client.decode`
    (and ``ndpkit.torch.decode_attention``) split a batch by card, run the cards at the
    same time and put the outputs back in batch order."""

    def __init__(self, devices, *, slots_per_device: int, **cache_args):
        devices = list(devices)
        if not devices:
            raise ValueError("a sharded cache needs at least one device")
        self.slots_per_device = slots_per_device
        self.shards = []
        try:
            for dev in devices:
                self.shards.append(KVCache(dev, slots=slots_per_device, **cache_args))
        except BaseException:
            self.close()
            raise
        first = self.shards[0]
        self.layers, self.kv_heads, self.head_dim = first.layers, first.kv_heads, first.head_dim
        self.capacity, self.format = first.capacity, first.format
        self.slots = slots_per_device * len(devices)

    def locate(self, slot: int) -> tuple[KVCache, int]:
        """(the card's cache, the slot there) of a global slot."""
        if not isinstance(slot, (int, np.integer)) or not 0 <= slot < self.slots:
            raise ValueError(f"slot must be in 0..{self.slots - 1}, not {slot!r}")
        return self.shards[slot // self.slots_per_device], int(slot) % self.slots_per_device

    def new_request(self) -> int:
        index = max(range(len(self.shards)), key=lambda i: (len(self.shards[i]._free), -i))
        return index * self.slots_per_device + self.shards[index].new_request()

    def free(self, slot: int) -> None:
        shard, local = self.locate(slot)
        shard.free(local)

    def length(self, layer: int, slot: int) -> int:
        shard, local = self.locate(slot)
        return int(shard.lengths[layer, local])

    def prefill(self, layer: int, slot: int, k, v) -> None:
        shard, local = self.locate(slot)
        shard.prefill(layer, local, k, v)

    def read(self, layer: int, slot: int):
        shard, local = self.locate(slot)
        return shard.read(layer, local)

    def close(self) -> None:
        for shard in self.shards:
            shard.close()

    def __repr__(self):
        return f"<ShardedKVCache over {len(self.shards)} devices: {self.shards!r}>"
