"""Driver of the ``attention`` engine: ``dev.attention.decode(q, k_new, v_new, cache, layer)``."""
from __future__ import annotations

import math

import numpy as np

from ..codes import ErrorCode
from ..engine import EngineClient
from ..errors import DeviceError
from ..golden import attention as golden
from ..golden import fp
from ..golden.attention import KvFormat
from ..kvcache import KVCache, to_bits16

__all__ = ["AttentionClient", "RequestError"]

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

    def blame(self, args, code):
        d = self.device
        return golden.command_check(args, word_bytes=d.word_bytes, window_base=d.mem_base,
                                    window_size=d.mem_size)[1]

    def decode(self, q, k_new, v_new, cache: KVCache, layer: int, slots, *, scale: float | None = None,
               q_format: str = "fp32", out_format: str = "fp32", window: int = 0):
        """One decode step for a batch: ``q`` (B, H, d) floats; ``k_new``, ``v_new``
        (B, Hkv, d) floats to append at each request's current length (or None: attend
        over the cache as it is); ``slots`` the B cache slots.  Returns (B, H, d)
        float32 (``out_format`` 'fp16'/'bf16': rounded there, returned as float32).
        ``scale`` defaults to 1/sqrt(d); ``window`` > 0 attends over the last ``window``
        tokens only (sliding-window attention)."""
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
        qf, of = _fmt(q_format, "q_format"), _fmt(out_format, "out_format")
        append = k_new is not None
        if append != (v_new is not None):
            raise ValueError("k_new and v_new go together")
        if window < 0:
            raise ValueError(f"window must be >= 0, not {window}")
        scale = 1 / math.sqrt(d) if scale is None else scale
        qbytes = heads * d * (4 if qf == KvFormat.FP32 else 2)
        obytes = heads * d * (4 if of == KvFormat.FP32 else 2)
        row = d * 2
        q_bits = fp.bits(q) if qf == KvFormat.FP32 else to_bits16(q, qf)
        staging = [dev.alloc(batch * golden.DESCRIPTOR_BYTES), dev.alloc(batch * qbytes), dev.alloc(batch * obytes)]
        table, qbuf, obuf = staging
        try:
            if append:
                kn, vn = (to_bits16(np.asarray(x, dtype=np.float32), cache.format) for x in (k_new, v_new))
                if kn.shape != (batch, hkv, d) or vn.shape != kn.shape:
                    raise ValueError(f"k_new and v_new must be (batch={batch}, kv_heads={hkv}, head_dim={d})")
                knbuf, vnbuf = dev.upload(kn), dev.upload(vn)
                staging += [knbuf, vnbuf]
            qbuf.write(q_bits)
            requests = []
            for i, s in enumerate(slots):
                requests.append({
                    "q": qbuf.address + i * qbytes, "out": obuf.address + i * obytes,
                    "k": cache.k_addr(layer, s), "v": cache.v_addr(layer, s),
                    "k_new": knbuf.address + i * hkv * row if append else 0,
                    "v_new": vnbuf.address + i * hkv * row if append else 0,
                    "length": int(cache.lengths[layer, s]), "capacity": cache.capacity, "window": window,
                    "flags": golden.FLAG_APPEND if append else 0})
            table.write(golden.pack_descriptors(requests))
            args = {"format_q": int(qf), "format_kv": int(cache.format), "format_out": int(of),
                    "table": table.address, "requests": batch, "shape_head_dim": d, "shape_group": group,
                    "shape_kv_heads": hkv, "scale": int(np.float32(scale).view(np.uint32))}
            tokens = sum(int(cache.lengths[layer, s]) + append for s in slots)
            self.submit(args, work_bytes=2 * tokens * hkv * row + batch * (qbytes + obytes)).wait()
            statuses = golden.unpack_descriptors(table.read(batch * golden.DESCRIPTOR_BYTES), batch)
            raw = np.frombuffer(obuf.read(batch * obytes), np.uint32 if of == KvFormat.FP32 else np.uint16)
            out = fp.floats(golden.widen(raw, of)).reshape(batch, heads, d).copy()
            failures = {}
            for i, (s, r) in enumerate(zip(slots, statuses)):
                code = ErrorCode(r["status"] & 0xFF)
                if code:
                    dev_args = dict(requests[i])
                    _, field = golden.request_check(args, dev_args, word_bytes=dev.word_bytes,
                                                    window_base=dev.mem_base, window_size=dev.mem_size)
                    failures[i] = (code, field)
                    out[i] = np.nan
                elif append:
                    cache.lengths[layer, s] += 1
            if failures:
                raise RequestError(failures, out)
            return out
        finally:
            for b in staging:
                b.free()
