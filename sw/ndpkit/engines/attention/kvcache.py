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

A card with several attention instances (each in its own memory region, an HBM
pseudo-channel) gets one cache per instance: ``KVCache(dev, slots=S, ...)`` there
returns a :class:`ShardedKVCache` whose shards are ``KVCache(dev, instance=i)``, each
holding about ``S / instances`` whole requests in instance ``i``'s region, so a decode
batch splits over the instances and they all stream their own channel at once.
"""
from __future__ import annotations

import bisect

import numpy as np

from ndpkit.errors import CacheClosed, NdpkitError
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
    """The KV cache of ``slots`` requests on one attention instance (``instance``; by
    default the card's only one).  On a card with several instances and no
    ``instance`` given, the constructor returns a :class:`ShardedKVCache` over them.
    After :meth:`close` (which may be called again) every method raises
    :class:`~ndpkit.errors.CacheClosed`."""

    #: True after :meth:`close`
    closed = False

    def __new__(cls, dev=None, *args, instance: int | None = None, **kwargs):
        instances = getattr(dev, "instances", {}).get("attention", [])
        if cls is KVCache and instance is None and len(instances) > 1:
            return ShardedKVCache.over_instances(dev, *args, **kwargs)
        return super().__new__(cls)

    def __init__(self, dev, *, layers: int, slots: int, kv_heads: int, head_dim: int, capacity: int,
                 fmt: str = "fp16", instance: int | None = None):
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
        instances = getattr(dev, "instances", {}).get("attention", [])
        if instance is None and len(instances) == 1:
            instance = 0
        #: the attention instance the cache belongs to (None: a card without one), and its region
        self.client = dev.instance("attention", instance) if instance is not None else None
        self.instance = instance
        self.region = self.client.region if self.client is not None else None
        self.k, self.v = [], []
        try:
            for _ in range(layers):
                self.k.append(dev.alloc(slots * self.slot_bytes, region=self.region))
                self.v.append(dev.alloc(slots * self.slot_bytes, region=self.region))
        except BaseException:
            self.close()
            raise
        self.lengths = np.zeros((layers, slots), dtype=np.int64)
        self._free = list(range(slots))
        self._used: set[int] = set()

    def _check_open(self, what: str) -> None:
        if self.closed:
            raise CacheClosed(f"{what}: the KV cache is closed (its card memory was freed by close())")

    # -- slots ------------------------------------------------------------------------
    def new_request(self) -> int:
        """A free slot (its lengths reset to 0)."""
        self._check_open("new_request")
        if not self._free:
            raise NdpkitError(f"the KV cache's {self.slots} slots are all in use; free one first")
        slot = self._free.pop(0)
        self._used.add(slot)
        self.lengths[:, slot] = 0
        return slot

    def free(self, slot: int) -> None:
        self._check_slot(slot, "free")
        self._used.discard(slot)
        self._free.append(slot)
        self._free.sort()

    def length(self, layer: int, slot: int) -> int:
        """The tokens ``slot`` holds in ``layer``."""
        self._check_open("length")
        return int(self.lengths[layer, slot])

    def _check_slot(self, slot, what: str = "slot"):
        self._check_open(what)
        if slot not in self._used:
            raise ValueError(f"slot {slot} is not an active request of this cache")

    # -- addresses --------------------------------------------------------------------
    def k_addr(self, layer: int, slot: int) -> int:
        self._check_open("k_addr")
        return self.k[layer].address + slot * self.slot_bytes

    def v_addr(self, layer: int, slot: int) -> int:
        self._check_open("v_addr")
        return self.v[layer].address + slot * self.slot_bytes

    def row_offset(self, slot: int, head: int, token: int) -> int:
        self._check_open("row_offset")
        return ((slot * self.kv_heads + head) * self.capacity + token) * self.row_bytes

    # -- host access ----------------------------------------------------------------------
    def prefill(self, layer: int, slot: int, k, v) -> None:
        """Write a prompt's keys and values, (kv_heads, L, head_dim) floats or 16-bit
        patterns, into rows 0..L-1 of ``slot`` and set its length to L."""
        self._check_slot(slot, "prefill")
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
        self._check_slot(slot, "read")
        length = int(self.lengths[layer, slot])
        out = []
        for buf in (self.k[layer], self.v[layer]):
            heads = [np.frombuffer(buf.read(length * self.row_bytes, self.row_offset(slot, h, 0)), np.uint16)
                     for h in range(self.kv_heads)]
            out.append(np.stack(heads).reshape(self.kv_heads, length, self.head_dim))
        return out[0], out[1]

    def close(self) -> None:
        """Free the cache's card memory; any later use raises
        :class:`~ndpkit.errors.CacheClosed` (closing again does nothing)."""
        self.closed = True
        for b in self.k + self.v:
            b.free()
        self.k, self.v = [], []

    @property
    def free_slots(self) -> int:
        self._check_open("free_slots")
        return len(self._free)

    def __repr__(self):
        state = "closed" if self.closed else f"{len(self._used)} in use"
        return (f"<KVCache {self.layers} layers x {self.slots} slots x {self.kv_heads} kv heads x {self.capacity} "
                f"tokens x d={self.head_dim} {self.format.name.lower()}, {state}>")


class _Lengths:
    """``cache.lengths[layer, slot]`` of a sharded cache, read and written through to
    the shard holding the slot (``slot`` may be a list: an array comes back)."""

    def __init__(self, cache):
        self.cache = cache

    def __getitem__(self, key):
        layer, slot = key
        if isinstance(slot, (int, np.integer)):
            shard, local = self.cache.locate(slot)
            return shard.lengths[layer, local]
        return np.array([self[layer, s] for s in slot], dtype=np.int64)

    def __setitem__(self, key, value):
        layer, slot = key
        shard, local = self.cache.locate(slot)
        shard.lengths[layer, local] = value


class ShardedKVCache:
    """A KV cache made of several, whole requests per shard (batch-parallel, as the HPU
    prototype splits a decode batch): over several cards (``slots_per_device`` slots
    on each) or over one card's attention instances (:meth:`over_instances`, what
    ``KVCache(dev, ...)`` returns on a card with several).  Global slot ``s`` lives in
    the shard whose range holds it; ``new_request`` puts a request in the shard with
    the most free slots.  :func:`ndpkit.engines.attention.client.decode` (and
    ``ndpkit.torch.decode_attention``) split a batch by shard, run the shards at the
    same time and put the outputs back in batch order.  After :meth:`close` every
    method raises :class:`~ndpkit.errors.CacheClosed`."""

    #: True after :meth:`close`
    closed = False

    def __init__(self, devices, *, slots_per_device: int, **cache_args):
        devices = list(devices)
        if not devices:
            raise ValueError("a sharded cache needs at least one device")
        self._build([(lambda dev=dev: KVCache(dev, slots=slots_per_device, **cache_args)) for dev in devices])

    @classmethod
    def over_instances(cls, dev, *, slots: int, **cache_args) -> "ShardedKVCache":
        """``slots`` requests over the card's attention instances, as evenly as whole
        requests go (instance ``i`` holds ``slots // n`` or one more)."""
        if not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots must be a positive integer, not {slots!r}")
        n = len(dev.instances["attention"])
        counts = [slots // n + (i < slots % n) for i in range(n)]
        self = cls.__new__(cls)
        self._build([(lambda i=i, c=c: KVCache(dev, slots=c, instance=i, **cache_args))
                     for i, c in enumerate(counts) if c])
        return self

    def _build(self, makers) -> None:
        self.shards = []
        try:
            for make in makers:
                self.shards.append(make())
        except BaseException:
            self.close()
            raise
        first = self.shards[0]
        self.layers, self.kv_heads, self.head_dim = first.layers, first.kv_heads, first.head_dim
        self.capacity, self.format = first.capacity, first.format
        self.offsets = list(np.cumsum([0] + [shard.slots for shard in self.shards]))
        self.slots = int(self.offsets[-1])
        self.lengths = _Lengths(self)

    def _check_open(self, what: str) -> None:
        if self.closed:
            raise CacheClosed(f"{what}: the KV cache is closed (its card memory was freed by close())")

    def locate(self, slot: int):
        """(the shard, the slot there) of a global slot."""
        self._check_open("slot")
        if not isinstance(slot, (int, np.integer)) or not 0 <= slot < self.slots:
            raise ValueError(f"slot must be in 0..{self.slots - 1}, not {slot!r}")
        index = bisect.bisect_right(self.offsets, int(slot)) - 1
        return self.shards[index], int(slot) - int(self.offsets[index])

    @property
    def free_slots(self) -> int:
        self._check_open("free_slots")
        return sum(shard.free_slots for shard in self.shards)

    def new_request(self) -> int:
        self._check_open("new_request")
        index = max(range(len(self.shards)), key=lambda i: (self.shards[i].free_slots, -i))
        if not self.shards[index].free_slots:
            raise NdpkitError(f"the KV cache's {self.slots} slots are all in use; free one first")
        return int(self.offsets[index]) + self.shards[index].new_request()

    def _check_slot(self, slot, what: str = "slot") -> None:
        self._check_open(what)
        shard, local = self.locate(slot)
        shard._check_slot(local, what)

    def free(self, slot: int) -> None:
        self._check_open("free")
        shard, local = self.locate(slot)
        shard.free(local)

    def length(self, layer: int, slot: int) -> int:
        self._check_open("length")
        shard, local = self.locate(slot)
        return shard.length(layer, local)

    def prefill(self, layer: int, slot: int, k, v) -> None:
        self._check_open("prefill")
        shard, local = self.locate(slot)
        shard.prefill(layer, local, k, v)

    def read(self, layer: int, slot: int):
        self._check_open("read")
        shard, local = self.locate(slot)
        return shard.read(layer, local)

    def close(self) -> None:
        """Free every shard's card memory; any later use raises
        :class:`~ndpkit.errors.CacheClosed` (closing again does nothing)."""
        self.closed = True
        for shard in self.shards:
            shard.close()

    def __repr__(self):
        return f"<ShardedKVCache over {len(self.shards)} shards{', closed' if self.closed else ''}: {self.shards!r}>"
