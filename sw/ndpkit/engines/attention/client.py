"""Driver of the ``attention`` engine: ``dev.attention.decode(q, k_new, v_new, cache, layer)``."""
from __future__ import annotations

import math

import numpy as np

from ndpkit_spec.codes import ErrorCode
from ndpkit.engine import EngineClient
from ndpkit.errors import DeviceError, NdpkitError
from ndpkit.engines.attention import golden
from ndpkit.arith import fp
from ndpkit.engines.attention.golden import KvFormat
from ndpkit.engines.attention.kvcache import KVCache, ShardedKVCache, to_bits16

__all__ = ["AttentionClient", "RequestError", "PendingDecode", "decode", "start_decode"]

_FORMATS = {"fp32": KvFormat.FP32, "fp16": KvFormat.FP16, "bf16": KvFormat.BF16}


class RequestError(DeviceError):
    """Some requests of a decode batch failed (the others completed): ``failures`` maps
    the batch index to (ErrorCode, argument); ``outputs`` holds every output (the failed
    requests' rows are NaN)."""

    def __init__(self, failures: dict, outputs):
        self.failures, self.outputs = failures, outputs
        first = min(failures)
        code, field = failures[first]
        super().__init__("attention", code, field=field,
                         detail=f"requests {sorted(failures)} failed ({', '.join(f'{i}: {c.name}' for i, (c, _) in sorted(failures.items()))}); the rest completed")


def _fmt(value, name, allowed=("fp32", "fp16", "bf16")) -> KvFormat:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, not {value!r}")
    return _FORMATS[value]


class AttentionClient(EngineClient):
    name = "attention"
    #: the Completion of the last decode command that finished
    last = None

    def decode(self, q, k_new, v_new, cache: KVCache, layer: int, slots, *, scale: float | None = None,
               q_format: str = "fp32", out_format: str = "fp32", window: int = 0, slot_mapping=None):
        """One decode step for a batch (:meth:`start_decode` then ``finish()``)."""
        return self.start_decode(q, k_new, v_new, cache, layer, slots, scale=scale, q_format=q_format,
                                 out_format=out_format, window=window, slot_mapping=slot_mapping).finish()

    def start_decode(self, q, k_new, v_new, cache: KVCache, layer: int, slots, **options):
        """:meth:`decode` in two halves: this one checks, stages and submits the
        command(s) and returns at once; ``.finish()`` waits and returns the outputs (so
        several cards, or a card's instances, run their parts of a batch at the same
        time).  A :class:`ShardedKVCache` (several cards, or several instances of this
        card) splits the batch by shard."""
        if isinstance(cache, KVCache) and cache.dev is self.device:
            client = cache.client if cache.client is not None else self
            return client._start(q, k_new, v_new, cache, layer, slots, **options)
        return start_decode(q, k_new, v_new, cache, layer, slots, **options)

    def _start(self, q, k_new, v_new, cache: KVCache, layer: int, slots, *, scale: float | None = None,
               q_format: str = "fp32", out_format: str = "fp32", window: int = 0,
               slot_mapping=None) -> "PendingDecode":
        """One decode step for a batch: ``q`` (B, H, d) floats; ``k_new``, ``v_new``
        (B, Hkv, d) floats to append at each request's current length (or None: attend
        over the cache as it is); ``slots`` the B cache slots.  Returns (B, H, d)
        float32 (``out_format`` 'fp16'/'bf16': rounded there, returned as float32).
        ``scale`` defaults to 1/sqrt(d); ``window`` > 0 attends over the last ``window``
        tokens only (sliding-window attention).

        A paged cache: with driver-managed blocks an append first reserves the block its
        token goes to (:class:`~ndpkit.errors.NdpkitError`, nothing changed, when too few
        are free); ``slot_mapping`` (B slot numbers, a serving engine's) is checked
        against where each new token goes (``table[length // bs] * bs + length % bs``).
        A block a request appends to must not be in another request's table of the
        batch (ValueError)."""
        dev = self.device
        slots = [int(s) for s in np.atleast_1d(slots)]
        q = np.asarray(q, dtype=np.float32)
        batch = len(slots)
        hkv, d = cache.kv_heads, cache.head_dim
        if q.ndim != 3 or q.shape[0] != batch or q.shape[2] != d or q.shape[1] % hkv:
            raise ValueError(f"q must be (batch={batch}, heads = group x {hkv}, head_dim={d}), not {q.shape}")
        if not 0 <= layer < cache.layers:
            raise ValueError(f"layer must be in 0..{cache.layers - 1}, not {layer}")
        for s in slots:
            cache._check_slot(s)
        if len(set(slots)) != batch:
            raise ValueError("slots must be distinct within a batch")
        heads = q.shape[1]
        group = heads // hkv
        if not 1 <= group <= golden.MAX_GROUP:
            raise ValueError(f"group must be 1..{golden.MAX_GROUP} (query heads per KV head: {heads} query heads "
                             f"over {hkv} KV heads), not {group}")
        qf, of = _fmt(q_format, "q_format"), _fmt(out_format, "out_format")
        append = k_new is not None
        if append != (v_new is not None):
            raise ValueError("k_new and v_new go together")
        if window < 0:
            raise ValueError(f"window must be >= 0, not {window}")
        bs = cache.block_size or 0
        lengths = [int(cache.lengths[layer, s]) for s in slots]
        if append:
            kn, vn = (to_bits16(np.asarray(x, dtype=np.float32), cache.format) for x in (k_new, v_new))
            if kn.shape != (batch, hkv, d) or vn.shape != kn.shape:
                raise ValueError(f"k_new and v_new must be (batch={batch}, kv_heads={hkv}, head_dim={d})")
        if slot_mapping is not None:
            slot_mapping = np.asarray(slot_mapping)
            if not (bs and append):
                raise ValueError("slot_mapping is for an append to a paged cache (block_size, k_new and v_new)")
            if slot_mapping.shape != (batch,) or slot_mapping.dtype.kind not in "iu":
                raise ValueError(f"slot_mapping must be {batch} integers (one a request), not "
                                 f"{slot_mapping.dtype} {slot_mapping.shape}")
        if bs and append and cache.manage_blocks:    # the blocks the new tokens go to (nothing changed on refusal)
            grow = [(s, n + 1) for s, n in zip(slots, lengths) if n + 1 <= cache.capacity]   # (beyond: the engine's)
            need = sum(cache.blocks_needed(s, n) for s, n in grow)
            if need > cache.free_blocks:
                raise NdpkitError(f"the KV cache's {cache.num_blocks} blocks: this step needs {need} more, "
                                  f"{cache.free_blocks} are free; free a request first")
            for s, n in grow:
                cache.reserve(s, n)
        tables = [cache.block_table(s) for s in slots] if bs else [None] * batch
        if bs and append:
            _check_append_blocks(tables, lengths, bs, slot_mapping)
        scale = 1 / math.sqrt(d) if scale is None else scale
        qbytes = heads * d * (4 if qf == KvFormat.FP32 else 2)
        obytes = heads * d * (4 if of == KvFormat.FP32 else 2)
        row = d * 2
        q_bits = fp.bits(q) if qf == KvFormat.FP32 else to_bits16(q, qf)
        region = cache.region             # the staging sits where the instance works, beside the cache
        staging = []                      # (each allocation joins it at once: freed on any error)
        submitted = False
        try:
            for nbytes in (batch * golden.DESCRIPTOR_BYTES, batch * qbytes, batch * obytes):
                staging.append(dev.alloc(nbytes, region=region))
            table, qbuf, obuf = staging
            if append:
                for x in (kn, vn):
                    staging.append(dev.upload(x, region=region))
                knbuf, vnbuf = staging[3:5]
            if bs:                        # the block tables, each in whole 64-byte units from a 64-byte boundary
                spans = [golden.table_range_bytes(max(1, len(t))) for t in tables]
                staging.append(dev.alloc(sum(spans), 64, region=region))
                tbuf = staging[-1]
                starts = np.cumsum([0] + spans[:-1])
                image = np.zeros(sum(spans) // 4, dtype=np.uint32)
                for t, at in zip(tables, starts):
                    image[at // 4:at // 4 + len(t)] = t
                tbuf.write(image)
            qbuf.write(q_bits)
            requests = []
            for i, s in enumerate(slots):
                r = {"q": qbuf.address + i * qbytes, "out": obuf.address + i * obytes,
                     "k": cache.k_addr(layer, s), "v": cache.v_addr(layer, s),
                     "k_new": knbuf.address + i * hkv * row if append else 0,
                     "v_new": vnbuf.address + i * hkv * row if append else 0,
                     "length": lengths[i], "capacity": 0 if bs else cache.capacity, "window": window,
                     "flags": golden.FLAG_APPEND if append else 0}
                if bs:
                    r.update(block_table=tbuf.address + int(starts[i]), blocks=len(tables[i]),
                             pool_blocks=cache.num_blocks)
                requests.append(r)
            if cache.region is not None:        # the addresses as the instance names them (a card > 4 GiB)
                view = lambda a: dev.engine_address(a, cache.region) if a else 0
                requests = [dict(r, **{f: view(r[f]) for f in _ADDRESSES if f in r}) for r in requests]
            table.write(golden.pack_descriptors(requests))
            args = {"format_q": int(qf), "format_kv": int(cache.format), "format_out": int(of),
                    "table": table.address, "requests": batch, "shape_head_dim": d, "shape_group": group,
                    "shape_kv_heads": hkv, "shape_block_size": bs, "scale": int(np.float32(scale).view(np.uint32))}
            tokens = sum(n + append for n in lengths)
            command = self.submit(args, work_bytes=2 * tokens * hkv * row + batch * (qbytes + obytes))
            submitted = True
            return PendingDecode(self, command, cache, layer, slots, requests, args, staging, (batch, heads, d), of,
                                 append, tables)
        finally:
            if not submitted:
                for b in staging:
                    b.free()


#: the descriptor fields that hold card addresses
_ADDRESSES = ("q", "out", "k", "v", "k_new", "v_new", "block_table")


def _check_append_blocks(tables, lengths, bs, slot_mapping) -> None:
    """A paged batch's appends: each new token's block written by one request only (the
    engine overlaps a batch's requests), and where a serving engine's ``slot_mapping``
    says it goes."""
    owner = {}
    for i, (t, n) in enumerate(zip(tables, lengths)):
        for block in t[:-(-(n + 1) // bs)]:
            owner.setdefault(int(block), set()).add(i)
    for i, (t, n) in enumerate(zip(tables, lengths)):
        target = int(t[n // bs]) * bs + n % bs if n // bs < len(t) else None
        if slot_mapping is not None and target != int(slot_mapping[i]):
            where = f"slot {target}" if target is not None else "no block (its table is too short)"
            raise ValueError(f"slot_mapping: request {i}'s new token goes to {where} by its block table, not "
                             f"{int(slot_mapping[i])}")
        if target is not None and owner[target // bs] != {i}:
            others = sorted(owner[target // bs] - {i})
            raise ValueError(f"block_table: request {i} appends to block {target // bs}, which request(s) {others} "
                             f"of the batch also use; a block written in a step must be one request's")


class PendingDecode:
    """A submitted decode batch; :meth:`finish` waits for it and returns the outputs."""

    def __init__(self, client, command, cache, layer, slots, requests, args, staging, shape, out_format, append,
                 tables=None):
        self.client, self.command, self.cache, self.layer, self.slots = client, command, cache, layer, slots
        self.requests, self.args, self.staging, self.shape = requests, args, staging, shape
        self.out_format, self.append = out_format, append
        self.tables = tables if tables is not None else [None] * len(slots)     # (paged: the ids uploaded)

    def finish(self):
        dev, cache, layer, of = self.client.device, self.cache, self.layer, self.out_format
        batch, heads, d = self.shape
        table, _, obuf = self.staging[:3]
        obytes = heads * d * (4 if of == KvFormat.FP32 else 2)
        try:
            self.client.last = self.command.wait()      # the Completion: the engine's own cycles
            statuses = golden.unpack_descriptors(table.read(batch * golden.DESCRIPTOR_BYTES), batch)
            raw = np.frombuffer(obuf.read(batch * obytes), np.uint32 if of == KvFormat.FP32 else np.uint16)
            out = fp.floats(golden.widen(raw, of)).reshape(batch, heads, d).copy()
            failures = {}
            window = self.client.window
            for i, (s, r) in enumerate(zip(self.slots, statuses)):
                code = ErrorCode(r["status"] & 0xFF)
                if code:
                    _, field = golden.request_check(self.args, dict(self.requests[i]), word_bytes=dev.word_bytes,
                                                    window_base=window[0], window_size=window[1],
                                                    entries=self.tables[i])
                    failures[i] = (code, field)
                    out[i] = np.nan
                elif self.append:
                    cache.lengths[layer, s] += 1
            if failures:
                raise RequestError(failures, out)
            return out
        finally:
            for b in self.staging:
                b.free()


def decode(q, k_new, v_new, cache, layer: int, slots, **options):
    """One decode step on a :class:`~ndpkit.engines.attention.kvcache.KVCache` (its
    instance) or a :class:`~ndpkit.engines.attention.kvcache.ShardedKVCache` (the batch
    split by shard: cards, or one card's instances, every shard's command submitted
    before any is waited for).  Same arguments and result as
    :meth:`AttentionClient.decode`; a :class:`RequestError` carries batch indices."""
    return start_decode(q, k_new, v_new, cache, layer, slots, **options).finish()


class _ShardedPending:
    """The parts of a decode batch split by shard; :meth:`finish` waits for each and
    puts the outputs back in batch order."""

    def __init__(self, shape, parts):
        self.shape, self.parts = shape, parts

    def finish(self):
        out = np.empty(self.shape, dtype=np.float32)
        failures = {}
        for members, pending in self.parts:
            try:
                out[members] = pending.finish()
            except RequestError as e:
                out[members] = e.outputs
                failures.update({members[i]: f for i, f in e.failures.items()})
        if failures:
            raise RequestError(failures, out)
        return out


def start_decode(q, k_new, v_new, cache, layer: int, slots, **options):
    """:func:`decode` in two halves: submit now, ``.finish()`` for the outputs."""
    if isinstance(cache, KVCache):
        client = cache.client if cache.client is not None else cache.dev.attention
        return client._start(q, k_new, v_new, cache, layer, slots, **options)
    if not isinstance(cache, ShardedKVCache):
        raise TypeError(f"cache must be a KVCache or a ShardedKVCache, not {type(cache).__name__}")
    slots = [int(s) for s in np.atleast_1d(slots)]
    q = np.asarray(q, dtype=np.float32)
    if q.ndim != 3 or q.shape[0] != len(slots):
        raise ValueError(f"q must be (batch={len(slots)}, heads, head_dim), not {q.shape}")
    if len(set(slots)) != len(slots):
        raise ValueError("slots must be distinct within a batch")
    parts: dict[int, list[int]] = {}
    for i, s in enumerate(slots):
        shard, _ = cache.locate(s)
        parts.setdefault(cache.shards.index(shard), []).append(i)
    pending = []
    try:
        for index, members in parts.items():
            shard = cache.shards[index]
            local = [cache.locate(slots[i])[1] for i in members]
            pick = (lambda x: None if x is None else np.asarray(x, dtype=np.float32)[members])
            part = dict(options)
            if part.get("slot_mapping") is not None:        # (slot numbers in the request's shard's pools)
                part["slot_mapping"] = np.asarray(part["slot_mapping"])[members]
            pending.append((members, start_decode(q[members], pick(k_new), pick(v_new), shard, layer, local,
                                                  **part)))
    except BaseException:
        for _, p in pending:
            try:
                p.finish()
            except Exception:
                pass
        raise
    return _ShardedPending(q.shape, pending)
