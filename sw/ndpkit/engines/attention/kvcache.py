"""A KV cache in card memory for the ``attention`` engine.

**Contiguous slots** (``block_size=None``, the default; docs/engines/attention.md): per
layer one K buffer and one V buffer; inside each, request slots one after another,
inside a slot the KV heads one after another, inside a head ``capacity`` token rows of
``head_dim`` 16-bit elements (fp16 or bf16), each row contiguous (128 or 256 bytes:
whole 64-byte bus words).  The row of token ``t`` of head ``h`` of slot ``s`` in layer
``l`` is at

    k_buffer[l] + ((s * kv_heads + h) * capacity + t) * head_dim * 2

so one head's tokens are one contiguous run (the engine streams it in long bursts),
and a slot's region (``kv_heads * capacity`` rows) is what a descriptor points at.
Slots are handed out by :meth:`KVCache.new_request` and reused after :meth:`free`.

**Paged** (``block_size`` 16, 32, 64 or 128, vLLM's blocks and block tables): per layer
one K pool and one V pool of ``num_blocks`` blocks, each ``[kv_heads, num_blocks,
block_size, head_dim]``, so a request's token ``t`` of head ``h`` is at

    pool[l] + (h * num_blocks * block_size + slot_number) * head_dim * 2,
    slot_number = table[t // block_size] * block_size + t % block_size

(vLLM's slot numbers; ``pool.reshape(kv_heads, num_blocks, block_size, d).transpose(1, 2,
0, 3)`` is vLLM's ``[num_blocks, block_size, kv_heads, head_dim]``).  One table a
request, shared by every layer.  The ids are the driver's (``manage_blocks=True``:
:meth:`KVCache.reserve` / :meth:`KVCache.free`, and ``prefill`` and decode steps reserve
what they need) or handed in by a serving engine (``manage_blocks=False``:
:meth:`KVCache.set_block_table`, :meth:`KVCache.write_slots` as vLLM's
``reshape_and_cache``, :meth:`KVCache.set_length`).

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
from ndpkit.engines.attention.golden import (BLOCK_SIZES, HEAD_DIMS, MAX_GROUP, MAX_KV_HEADS, MAX_TABLE_ENTRIES,
                                             KvFormat, widen)

__all__ = ["ShardedKVCache", "KVCache", "to_bits16", "golden_outputs", "check_model_shape"]

#: pools start on a 4 KiB boundary: one block of one head is then one burst (<= 4 KiB at
#: block_size 16) that never crosses a 4 KiB boundary
POOL_ALIGN = 4096


def to_bits16(x, fmt: KvFormat) -> np.ndarray:
    """Floats (or 16-bit patterns) -> uint16 bit patterns in ``fmt`` (RNE)."""
    x = np.asarray(x)
    if x.dtype == np.uint16:
        return x
    bits = widen(x.astype(np.float32), KvFormat.FP32)
    from ndpkit.arith import fp
    return fp.fp32_to_fp16(bits) if KvFormat(fmt) == KvFormat.FP16 else fp.fp32_to_bf16(bits)


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")
    return int(value)


def _runs(values) -> list[tuple[int, int, int]]:
    """(index, first value, count) of each run of consecutive values (v, v + 1, ...)."""
    runs = []
    for i, x in enumerate(values):
        x = int(x)
        if runs and x == runs[-1][1] + runs[-1][2]:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((i, x, 1))
    return runs


class KVCache:
    """The KV cache of ``slots`` requests on one attention instance (``instance``; by
    default the card's only one).  On a card with several instances and no
    ``instance`` given, the constructor returns a :class:`ShardedKVCache` over them.
    After :meth:`close` (which may be called again) every method raises
    :class:`~ndpkit.errors.CacheClosed`.

    ``block_size`` (16, 32, 64 or 128) makes it paged (see the module): ``num_blocks``
    blocks in each layer's K and V pools (default ``slots * ceil(capacity /
    block_size)``), a request holding at most ``capacity`` tokens (rounded up to whole
    blocks: :attr:`max_blocks` table entries); ``manage_blocks=False`` leaves the block
    ids to the caller (a serving engine's block manager)."""

    #: True after :meth:`close`
    closed = False

    def __new__(cls, dev=None, *args, instance: int | None = None, **kwargs):
        instances = getattr(dev, "instances", {}).get("attention", [])
        if cls is KVCache and instance is None and len(instances) > 1:
            return ShardedKVCache.over_instances(dev, *args, **kwargs)
        return super().__new__(cls)

    def __init__(self, dev, *, layers: int, slots: int, kv_heads: int, head_dim: int, capacity: int,
                 fmt: str = "fp16", instance: int | None = None, block_size: int | None = None,
                 num_blocks: int | None = None, manage_blocks: bool = True):
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
        self.row_bytes = head_dim * 2
        #: tokens per block (None: contiguous slots), blocks in each pool, table entries a request
        self.block_size, self.num_blocks, self.max_blocks = None, None, None
        #: whether the driver hands out the block ids (a paged cache)
        self.manage_blocks = bool(manage_blocks)
        if block_size is None:
            if num_blocks is not None:
                raise ValueError("num_blocks is for a paged cache: give block_size too")
            if manage_blocks is not True:
                raise ValueError("manage_blocks=False is for a paged cache: give block_size too")
            self.slot_bytes = kv_heads * capacity * self.row_bytes
            buffer_bytes = slots * self.slot_bytes
        else:
            if isinstance(block_size, bool) or block_size not in BLOCK_SIZES:
                raise ValueError(f"block_size must be one of {BLOCK_SIZES} (or None: contiguous slots), "
                                 f"not {block_size!r}")
            if not isinstance(manage_blocks, bool):
                raise ValueError(f"manage_blocks must be True or False, not {manage_blocks!r}")
            self.block_size = int(block_size)
            self.max_blocks = -(-capacity // self.block_size)
            if self.max_blocks > MAX_TABLE_ENTRIES:
                raise ValueError(f"capacity: {capacity} tokens are {self.max_blocks} blocks of {block_size}, more "
                                 f"than a request's table may hold ({MAX_TABLE_ENTRIES} entries)")
            capacity = self.max_blocks * self.block_size          # whole blocks
            self.num_blocks = slots * self.max_blocks if num_blocks is None else _positive_int("num_blocks",
                                                                                                num_blocks)
            self.slot_bytes = None
            buffer_bytes = kv_heads * self.num_blocks * self.block_size * self.row_bytes
            if buffer_bytes >= 1 << 32:
                raise ValueError(f"num_blocks: a pool of {self.num_blocks} blocks is {buffer_bytes} bytes, more "
                                 f"than the engine's 32-bit addresses reach")
        self.dev, self.layers, self.slots = dev, layers, slots
        self.kv_heads, self.head_dim, self.capacity = kv_heads, head_dim, capacity
        instances = getattr(dev, "instances", {}).get("attention", [])
        if instance is None and len(instances) == 1:
            instance = 0
        #: the attention instance the cache belongs to (None: a card without one), and its region
        self.client = dev.instance("attention", instance) if instance is not None else None
        self.instance = instance
        self.region = self.client.region if self.client is not None else None
        align = POOL_ALIGN if self.block_size else None
        self.k, self.v = [], []
        try:
            for _ in range(layers):
                self.k.append(dev.alloc(buffer_bytes, align, region=self.region))
                self.v.append(dev.alloc(buffer_bytes, align, region=self.region))
        except BaseException:
            self.close()
            raise
        self.lengths = np.zeros((layers, slots), dtype=np.int64)
        self._free = list(range(slots))
        self._used: set[int] = set()
        #: each slot's block ids (paged), one table for every layer
        self._tables: list[list[int]] = [[] for _ in range(slots)]
        self._free_blocks = list(range(self.num_blocks)) if self.block_size and self.manage_blocks else None

    def _check_open(self, what: str) -> None:
        if self.closed:
            raise CacheClosed(f"{what}: the KV cache is closed (its card memory was freed by close())")

    def _check_paged(self, what: str, *, managed: bool | None = None) -> None:
        self._check_open(what)
        if not self.block_size:
            raise ValueError(f"{what}: the KV cache is contiguous (block_size=None), not paged")
        if managed is not None and managed != self.manage_blocks:
            raise ValueError(f"{what}: the cache's block ids are "
                             + ("the driver's (manage_blocks=True): reserve() and free() hand them out"
                                if self.manage_blocks else
                                "handed in (manage_blocks=False): set_block_table() names them"))

    def _check_layer(self, layer) -> None:
        if not isinstance(layer, (int, np.integer)) or not 0 <= layer < self.layers:
            raise ValueError(f"layer must be in 0..{self.layers - 1}, not {layer!r}")

    # -- slots ------------------------------------------------------------------------
    def new_request(self) -> int:
        """A free slot (its lengths reset to 0; paged: its block table empty)."""
        self._check_open("new_request")
        if not self._free:
            raise NdpkitError(f"the KV cache's {self.slots} slots are all in use; free one first")
        slot = self._free.pop(0)
        self._used.add(slot)
        self.lengths[:, slot] = 0
        self._tables[slot] = []
        return slot

    def free(self, slot: int) -> None:
        """End a request: its slot (and, with driver-managed blocks, its blocks) can be
        reused."""
        self._check_slot(slot, "free")
        if self._free_blocks is not None:
            self._free_blocks = sorted(self._free_blocks + self._tables[slot])
        self._tables[slot] = []
        self._used.discard(slot)
        self._free.append(slot)
        self._free.sort()

    def length(self, layer: int, slot: int) -> int:
        """The tokens ``slot`` holds in ``layer``."""
        self._check_open("length")
        return int(self.lengths[layer, slot])

    def set_length(self, layer: int, slot: int, length: int) -> None:
        """Say ``slot`` holds ``length`` tokens in ``layer`` (after :meth:`write_slots`
        put them there, as a serving engine's sequence lengths say).  Paged: the block
        table must cover them."""
        self._check_slot(slot, "set_length")
        self._check_layer(layer)
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or not 0 <= length <= self.capacity:
            raise ValueError(f"length must be in 0..{self.capacity} (the capacity), not {length!r}")
        if self.block_size and length > len(self._tables[slot]) * self.block_size:
            raise ValueError(f"length: {length} tokens need {-(-length // self.block_size)} blocks, slot {slot}'s "
                             f"block table has {len(self._tables[slot])}")
        self.lengths[layer, slot] = length

    def _check_slot(self, slot, what: str = "slot"):
        self._check_open(what)
        if slot not in self._used:
            raise ValueError(f"slot {slot} is not an active request of this cache")

    # -- blocks (paged) -------------------------------------------------------------------
    @property
    def free_blocks(self) -> int:
        """Blocks not in any request's table (driver-managed blocks)."""
        self._check_paged("free_blocks", managed=True)
        return len(self._free_blocks)

    def block_table(self, slot: int) -> np.ndarray:
        """``slot``'s block ids (uint32, a copy): its token ``t`` is in block
        ``table[t // block_size]``."""
        self._check_slot(slot, "block_table")
        self._check_paged("block_table")
        return np.array(self._tables[slot], dtype=np.uint32)

    def blocks_needed(self, slot: int, tokens: int) -> int:
        """The blocks :meth:`reserve` would add for ``slot`` to hold ``tokens``."""
        self._check_slot(slot, "blocks_needed")
        self._check_paged("blocks_needed")
        return max(0, -(-int(tokens) // self.block_size) - len(self._tables[slot]))

    def reserve(self, slot: int, tokens: int) -> None:
        """Give ``slot`` blocks enough for ``tokens`` tokens (driver-managed blocks; a
        run of consecutive ids after its last one where free, else the lowest free run,
        else the lowest free ids).  Nothing changes when there are not enough free blocks
        (:class:`~ndpkit.errors.NdpkitError`)."""
        self._check_slot(slot, "reserve")
        self._check_paged("reserve", managed=True)
        if isinstance(tokens, bool) or not isinstance(tokens, (int, np.integer)) or not 0 <= tokens <= self.capacity:
            raise ValueError(f"tokens must be in 0..{self.capacity} (the capacity), not {tokens!r}")
        need = self.blocks_needed(slot, tokens)
        if need > len(self._free_blocks):
            raise NdpkitError(f"the KV cache's {self.num_blocks} blocks: slot {slot} needs {need} more, "
                              f"{len(self._free_blocks)} are free; free a request first")
        table = self._tables[slot]
        self._tables[slot] = table + self._take_blocks(need, table[-1] if table else None)

    def _take_blocks(self, n: int, after: int | None) -> list[int]:
        if n == 0:
            return []
        free = self._free_blocks
        free_set = set(free)
        if after is not None and all(after + 1 + i in free_set for i in range(n)):
            ids = list(range(after + 1, after + 1 + n))
        else:
            ids = free[:n]
            for i, first, count in _runs(free):
                if count >= n:
                    ids = list(range(first, first + n))
                    break
        taken = set(ids)
        self._free_blocks = [b for b in free if b not in taken]
        return ids

    def set_block_table(self, slot: int, ids) -> None:
        """``slot``'s block ids, handed in (``manage_blocks=False``): a sequence of at most
        :attr:`max_blocks` non-negative integers (copied).  Ids past ``num_blocks`` are
        the engine's to refuse (BAD_INDEX "block_table")."""
        self._check_slot(slot, "set_block_table")
        self._check_paged("set_block_table", managed=False)
        table = np.asarray(ids)
        if table.ndim != 1 or (table.size and table.dtype.kind not in "iu"):
            raise ValueError(f"ids must be a 1-D sequence of integers, not {table.dtype} {table.shape}")
        if table.size > self.max_blocks:
            raise ValueError(f"ids: {table.size} blocks, a request of this cache holds at most {self.max_blocks}")
        if table.size and (table.min() < 0 or table.max() >= 1 << 32):
            raise ValueError("ids must be uint32 block numbers (0 <= id < 2**32)")
        self._tables[slot] = [int(x) for x in table]

    def write_slots(self, layer: int, slot_mapping, k, v) -> None:
        """vLLM's ``reshape_and_cache``: token ``i``'s ``k[i]`` and ``v[i]`` (``k``, ``v``:
        (T, kv_heads, head_dim) floats or 16-bit patterns) into slot number
        ``slot_mapping[i]`` = block id x block_size + offset of ``layer``'s pools; a
        negative slot number is a padding token and skipped.  Lengths do not change
        (:meth:`set_length`).  Handed-in blocks only (``manage_blocks=False``)."""
        self._check_paged("write_slots", managed=False)
        self._check_layer(layer)
        k16, v16 = to_bits16(k, self.format), to_bits16(v, self.format)
        if k16.ndim != 3 or k16.shape != v16.shape or k16.shape[1:] != (self.kv_heads, self.head_dim):
            raise ValueError(f"k and v must both be (T, kv_heads={self.kv_heads}, head_dim={self.head_dim}), not "
                             f"{k16.shape} and {v16.shape}")
        mapping = np.asarray(slot_mapping)
        if mapping.shape != (k16.shape[0],) or (mapping.size and mapping.dtype.kind not in "iu"):
            raise ValueError(f"slot_mapping must be {k16.shape[0]} integers (one a token), not "
                             f"{mapping.dtype} {mapping.shape}")
        pool_rows = self.num_blocks * self.block_size
        if mapping.size and mapping.max() >= pool_rows:
            raise ValueError(f"slot_mapping: slot number {int(mapping.max())} is outside the pools' "
                             f"{self.num_blocks} blocks x {self.block_size} tokens")
        keep = np.flatnonzero(mapping >= 0)
        for start, first, count in _runs(mapping[keep]):
            tokens = keep[start:start + count]
            for h in range(self.kv_heads):
                offset = (h * pool_rows + first) * self.row_bytes
                self.k[layer].write(np.ascontiguousarray(k16[tokens, h]), offset)
                self.v[layer].write(np.ascontiguousarray(v16[tokens, h]), offset)

    def _pieces(self, slot: int, first: int, count: int, what: str) -> list[tuple[int, int, int]]:
        """(token, pool row, rows) of each contiguous piece of tokens ``[first, first +
        count)`` of ``slot`` (paged: through its block table; one piece when contiguous)."""
        if not self.block_size:
            return [(first, first, count)] if count else []
        bs, table = self.block_size, self._tables[slot]
        end = first + count
        if end > len(table) * bs:
            raise ValueError(f"{what}: {end} tokens need {-(-end // bs)} blocks, slot {slot}'s block table has "
                             f"{len(table)}")
        pieces, t = [], first
        while t < end:
            block = table[t // bs]
            if block >= self.num_blocks:
                raise ValueError(f"{what}: slot {slot}'s block table names block {block}, the pools hold "
                                 f"{self.num_blocks}")
            n = min(bs - t % bs, end - t)
            row = block * bs + t % bs
            if pieces and pieces[-1][1] + pieces[-1][2] == row:
                pieces[-1] = (pieces[-1][0], pieces[-1][1], pieces[-1][2] + n)
            else:
                pieces.append((t, row, n))
            t += n
        return pieces

    # -- addresses --------------------------------------------------------------------
    def k_addr(self, layer: int, slot: int) -> int:
        """What a descriptor's ``k`` holds: the slot's region (paged: the layer's K pool)."""
        self._check_open("k_addr")
        return self.k[layer].address + (slot * self.slot_bytes if not self.block_size else 0)

    def v_addr(self, layer: int, slot: int) -> int:
        self._check_open("v_addr")
        return self.v[layer].address + (slot * self.slot_bytes if not self.block_size else 0)

    def row_offset(self, slot: int, head: int, token: int) -> int:
        """The byte offset of a row in its layer's K (or V) buffer (paged: through the
        slot's block table, which must cover ``token``)."""
        self._check_open("row_offset")
        if not self.block_size:
            return ((slot * self.kv_heads + head) * self.capacity + token) * self.row_bytes
        self._check_slot(slot, "row_offset")
        (_, row, _), = self._pieces(slot, token, 1, "row_offset")
        return self._row_offset(slot, head, row)

    def _row_offset(self, slot: int, head: int, row: int) -> int:
        """The byte offset of ``head``'s row ``row`` (contiguous: of the slot's rows; paged:
        of the pool's, a slot number) in its buffer."""
        if not self.block_size:
            return ((slot * self.kv_heads + head) * self.capacity + row) * self.row_bytes
        return (head * self.num_blocks * self.block_size + row) * self.row_bytes

    # -- host access ----------------------------------------------------------------------
    def prefill(self, layer: int, slot: int, k, v) -> None:
        """Write a prompt's keys and values, (kv_heads, L, head_dim) floats or 16-bit
        patterns, into tokens 0..L-1 of ``slot`` and set its length to L (paged with
        driver-managed blocks: reserving them first; handed-in blocks: the table must
        cover them)."""
        self._check_slot(slot, "prefill")
        self._check_layer(layer)
        k16, v16 = to_bits16(k, self.format), to_bits16(v, self.format)
        if k16.ndim != 3 or k16.shape != v16.shape or k16.shape[0] != self.kv_heads or k16.shape[2] != self.head_dim:
            raise ValueError(f"k and v must both be (kv_heads={self.kv_heads}, L, head_dim={self.head_dim}), not "
                             f"{k16.shape} and {v16.shape}")
        length = k16.shape[1]
        if length > self.capacity:
            raise ValueError(f"{length} tokens exceed the capacity of {self.capacity}")
        if self.block_size and self.manage_blocks:
            self.reserve(slot, length)
        for token, row, n in self._pieces(slot, 0, length, "prefill"):
            for h in range(self.kv_heads):
                offset = self._row_offset(slot, h, row)
                self.k[layer].write(np.ascontiguousarray(k16[h, token:token + n]), offset)
                self.v[layer].write(np.ascontiguousarray(v16[h, token:token + n]), offset)
        self.lengths[layer, slot] = length

    def read(self, layer: int, slot: int) -> tuple[np.ndarray, np.ndarray]:
        """(K, V) of a slot as uint16 patterns, (kv_heads, length, head_dim)."""
        self._check_slot(slot, "read")
        self._check_layer(layer)
        length = int(self.lengths[layer, slot])
        pieces = self._pieces(slot, 0, length, "read")
        out = []
        for buf in (self.k[layer], self.v[layer]):
            heads = [np.concatenate([np.frombuffer(buf.read(n * self.row_bytes, self._row_offset(slot, h, row)),
                                                   np.uint16) for _, row, n in pieces] or [np.zeros(0, np.uint16)])
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
        paged = (f", paged: {self.num_blocks} blocks of {self.block_size}"
                 f"{'' if self.manage_blocks else ' (ids handed in)'}" if self.block_size else "")
        return (f"<KVCache {self.layers} layers x {self.slots} slots x {self.kv_heads} kv heads x {self.capacity} "
                f"tokens x d={self.head_dim} {self.format.name.lower()}{paged}, {state}>")


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


def check_model_shape(*, heads: int, kv_heads: int, head_dim: int,
                      names: tuple[str, str, str] = ("head_dim", "kv_heads", "group")) -> None:
    """``ValueError`` when the engine cannot run a model's attention shape, naming the
    field as the caller's framework does (``names``: head dim, KV heads, the group)."""
    head_name, kv_name, group_name = names
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"{head_name}: the model's is {head_dim}; the attention engine supports "
                         f"{', '.join(map(str, HEAD_DIMS))}")
    if not 1 <= kv_heads <= MAX_KV_HEADS:
        raise ValueError(f"{kv_name}: the model's is {kv_heads}; the attention engine supports 1..{MAX_KV_HEADS}")
    if heads % kv_heads or not 1 <= heads // kv_heads <= MAX_GROUP:
        raise ValueError(f"{group_name}: the model groups {heads} query heads over {kv_heads} KV heads; the "
                         f"attention engine supports whole groups of 1..{MAX_GROUP}")


def golden_outputs(cache, layer: int, slots, q, scale: float) -> np.ndarray:
    """What the golden model answers for a decode of ``q`` (B, heads, d) float32 over
    ``slots`` of ``cache`` as read back from the card (after the step: the new token's
    key and value in place), (B, heads, d) float32: the reference a card's outputs must
    equal bit for bit."""
    from ndpkit.arith import fp
    from ndpkit.engines.attention.golden import decode
    out = []
    for b, slot in enumerate(slots):
        k, v = cache.read(layer, slot)
        out.append(fp.floats(decode(q[b], k, v, scale=scale, q_format=KvFormat.FP32, kv_format=cache.format)))
    return np.stack(out).astype(np.float32)


class ShardedKVCache:
    """A KV cache made of several, whole requests per shard (batch-parallel, as the HPU
    prototype splits a decode batch): over several cards (``slots_per_device`` slots
    on each) or over one card's attention instances (:meth:`over_instances`, what
    ``KVCache(dev, ...)`` returns on a card with several).  Global slot ``s`` lives in
    the shard whose range holds it; ``new_request`` puts a request in the shard with
    the most free slots.  :func:`ndpkit.engines.attention.client.decode` (and
    ``ndpkit.torch.decode_attention``) split a batch by shard, run the shards at the
    same time and put the outputs back in batch order.  After :meth:`close` every
    method raises :class:`~ndpkit.errors.CacheClosed`.

    Paged (``block_size=``): every shard has its own pools (``num_blocks`` each over
    several cards, as ``slots_per_device``; over instances the total, split as the slots
    are) and hands out its own block ids; ids handed in (``manage_blocks=False``) are
    not supported (NotImplementedError)."""

    #: True after :meth:`close`
    closed = False

    def __init__(self, devices, *, slots_per_device: int, **cache_args):
        devices = list(devices)
        if not devices:
            raise ValueError("a sharded cache needs at least one device")
        _refuse_handed_in(cache_args)
        self._build([(lambda dev=dev: KVCache(dev, slots=slots_per_device, **cache_args)) for dev in devices])

    @classmethod
    def over_instances(cls, dev, *, slots: int, num_blocks: int | None = None, **cache_args) -> "ShardedKVCache":
        """``slots`` requests over the card's attention instances, as evenly as whole
        requests go (instance ``i`` holds ``slots // n`` or one more; a paged cache's
        ``num_blocks`` split the same way)."""
        if not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots must be a positive integer, not {slots!r}")
        _refuse_handed_in(cache_args)
        n = len(dev.instances["attention"])
        counts = [slots // n + (i < slots % n) for i in range(n)]
        blocks = [None] * n
        if num_blocks is not None:
            num_blocks = _positive_int("num_blocks", num_blocks)
            if num_blocks < sum(1 for c in counts if c):
                raise ValueError(f"num_blocks: {num_blocks} blocks do not give each of the "
                                 f"{sum(1 for c in counts if c)} instances one")
            blocks = [num_blocks // n + (i < num_blocks % n) for i in range(n)]
        self = cls.__new__(cls)
        self._build([(lambda i=i, c=c: KVCache(dev, slots=c, instance=i, num_blocks=blocks[i], **cache_args))
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
        self.block_size, self.max_blocks, self.manage_blocks = first.block_size, first.max_blocks, first.manage_blocks
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

    def set_length(self, layer: int, slot: int, length: int) -> None:
        self._check_open("set_length")
        shard, local = self.locate(slot)
        shard.set_length(layer, local, length)

    # -- blocks (paged): each shard's own ids -----------------------------------------------
    @property
    def free_blocks(self) -> int:
        """Free blocks in all shards (a request takes its blocks from its own shard)."""
        self._check_open("free_blocks")
        return sum(shard.free_blocks for shard in self.shards)

    def reserve(self, slot: int, tokens: int) -> None:
        self._check_open("reserve")
        shard, local = self.locate(slot)
        shard.reserve(local, tokens)

    def block_table(self, slot: int) -> np.ndarray:
        """The slot's block ids in its shard's pools."""
        self._check_open("block_table")
        shard, local = self.locate(slot)
        return shard.block_table(local)

    def set_block_table(self, slot, ids) -> None:
        self._check_open("set_block_table")
        raise NotImplementedError(_HANDED_IN)

    def write_slots(self, layer, slot_mapping, k, v) -> None:
        self._check_open("write_slots")
        raise NotImplementedError(_HANDED_IN)

    def close(self) -> None:
        """Free every shard's card memory; any later use raises
        :class:`~ndpkit.errors.CacheClosed` (closing again does nothing)."""
        self.closed = True
        for shard in self.shards:
            shard.close()

    def __repr__(self):
        return f"<ShardedKVCache over {len(self.shards)} shards{', closed' if self.closed else ''}: {self.shards!r}>"


_HANDED_IN = ("a ShardedKVCache with block ids handed in (manage_blocks=False) is not supported yet: a slot "
              "number would have to name a shard; use one paged KVCache per card or instance "
              "(KVCache(dev, instance=i, ...)), or let the driver hand out the ids")


def _refuse_handed_in(cache_args: dict) -> None:
    if cache_args.get("block_size") is not None and cache_args.get("manage_blocks", True) is False:
        raise NotImplementedError(_HANDED_IN)
