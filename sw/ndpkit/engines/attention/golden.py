"""Decode attention, bit for bit: the ``attention`` engine's specification.

For one request and one KV head with its group of ``G`` query heads (grouped-query
attention; G = 1 is multi-head attention), context length ``L`` and head dimension
``d``.  The cache's ``K`` and ``V`` are fp16 or bf16 (the KV format); products of two
KV-format numbers are exact, and they are summed in a wide fixed-point window
(:mod:`ndpkit.arith.blockfloat`), each sum rounded once to binary32.  Everything
else is binary32 with round-to-nearest-even (:mod:`ndpkit.arith.fp`):

1. **Inputs.** ``q`` (fp32, fp16 or bf16) is rounded to the KV format (RNE): ``qk``.
2. **Scores.** ``dot[t, g] = aligned_dot(qk[g] * K[t])`` — the ``d`` exact products
   aligned to the row's largest product exponent, summed, rounded once
   (``blockfloat.aligned_dot``, ``sum_fp32``); ``s = mul(dot, scale)`` (the softmax
   scale, usually 1/sqrt(d), a float32 register).
3. **Blocks.** Tokens go in blocks of ``block`` (128) — INF²'s online-softmax
   granularity: one pass over K and V, each byte read once.  For each block, in order:

   - ``m_new = max(m, s[t])`` over the block's tokens in order (``fp.maximum``;
     ``m`` starts at -inf; a NaN score makes it NaN, and NaN then propagates);
   - ``corr = exp(sub(m, m_new))`` (0 for the first block: exp(-inf) = 0), with the
     engine's exp unit (``ndpkit.arith.exp.exp``);
   - ``p[t] = exp(sub(s[t], m_new))``, rounded to TF32 (binary32's exponent, an 11-bit
     significand: its product with an fp16 or bf16 value is exact): ``pk[t]``;
   - running sums (``blockfloat.accumulate``) of the exact products ``pk[t] * V[t][i]``
     and ``pk[t] * 1`` (the datapath's one extra lane), split
     :data:`~ndpkit.arith.blockfloat.PARTIALS` (4) ways: token ``j`` of the block
     (``j`` = 0, 1, ...) goes to partial ``j % 4``, in token order; the partials merged
     in order, ``merge(merge(merge(s0, s1), s2), s3)``, and rounded once: ``ob[i]``,
     ``lb``;
   - ``l = fma(l, corr, lb)``, ``o[i] = fma(o[i], corr, ob[i])`` (``l`` and ``o``
     start at +0).
4. **Output.** ``out[i] = div(o[i], l)``, then narrowed to the output format (fp32,
   or fp16/bf16 with round-to-nearest-even).

This is flash-decoding's online softmax (a running max and sum, the partial output
rescaled when the max grows), ordered for a pipelined datapath; the weights are the
same ``pk`` in the numerator and the denominator, so they stay normalised.
:func:`reference` (float64) and PyTorch's SDPA are the outside checks
(docs/engines/attention.md gives the measured errors).
"""
from __future__ import annotations


import numpy as np

from ndpkit_spec.codes import ErrorCode
from ndpkit.arith import blockfloat, fp
from ndpkit.transfer import check_ranges, default_window, transfer_check
from ndpkit_spec.engines.attention import (DESCRIPTOR_BYTES, DESCRIPTOR_FIELDS, FLAG_APPEND, HEAD_DIMS,
                                           MAX_GROUP, MAX_KV_HEADS, SOFTMAX_BLOCK, STATUS_DONE,
                                           KvFormat)
from ndpkit.arith.exp import exp as fp_exp

__all__ = ["KvFormat", "BLOCK", "decode", "decode_group", "reference", "widen", "narrow",
           "DESCRIPTOR_FIELDS", "DESCRIPTOR_BYTES", "FLAG_APPEND", "STATUS_DONE", "pack_descriptors",
           "unpack_descriptors", "check", "request_check", "request_ranges", "execute"]

#: tokens per online-softmax block
BLOCK = SOFTMAX_BLOCK
NEG_INF = np.uint32(0xFF80_0000)


def widen(x, fmt: KvFormat) -> np.ndarray:
    """Bit patterns (uint32 for fp32, uint16 otherwise) or float arrays -> fp32 bits."""
    x = np.asarray(x)
    fmt = KvFormat(fmt)
    if x.dtype.kind == "f":
        if fmt == KvFormat.FP32:
            return fp.bits(x.astype(np.float32))
        x = (x.astype(np.float16).view(np.uint16) if fmt == KvFormat.FP16
             else fp.fp32_to_bf16(fp.bits(x.astype(np.float32))))
    if fmt == KvFormat.FP32:
        return x.astype(np.uint32)
    return fp.fp16_to_fp32(x) if fmt == KvFormat.FP16 else fp.bf16_to_fp32(x)


def narrow(u, fmt: KvFormat) -> np.ndarray:
    fmt = KvFormat(fmt)
    if fmt == KvFormat.FP32:
        return np.asarray(u, dtype=np.uint32)
    return fp.fp32_to_fp16(u) if fmt == KvFormat.FP16 else fp.fp32_to_bf16(u)


def _sums_fp32(partials):
    """The block's partial running sums, merged in order (((s0, s1), s2), s3) and
    rounded once."""
    total = partials[0]
    for part in partials[1:]:
        total = blockfloat.merge(total, part)
    return blockfloat.sum_fp32(total)


def decode_group(q, k, v, scale: float, *, kv_format=KvFormat.FP16, block: int = BLOCK) -> np.ndarray:
    """One KV head and its query group.  ``q``: (G, d) fp32 bits; ``k``, ``v``: (L, d)
    uint16 patterns in ``kv_format``.  Returns (G, d) fp32 bits of the output before
    narrowing."""
    q = np.asarray(q, dtype=np.uint32)
    k = np.asarray(k, dtype=np.uint16)
    v = np.asarray(v, dtype=np.uint16)
    kv_format = KvFormat(kv_format)
    groups, d = q.shape
    length = k.shape[0]
    if length < 1 or v.shape != k.shape or k.shape[1] != d:
        raise ValueError(f"need L >= 1 and matching K/V of width {d}: K {k.shape}, V {v.shape}")
    if kv_format == KvFormat.FP32:
        raise ValueError("the KV cache is fp16 or bf16")
    qk = blockfloat.decompose(narrow(q, kv_format), kv_format)
    products = blockfloat.multiply(tuple(x[:, None, :] for x in qk),
                                   blockfloat.decompose(k, kv_format))                    # (G, L, d)
    scores = fp.mul(blockfloat.sum_fp32(blockfloat.aligned_dot(products)), fp.bits(np.float32(scale)))
    values = blockfloat.decompose(v, kv_format)
    one = blockfloat.decompose(np.uint16(0x3C00 if kv_format == KvFormat.FP16 else 0x3F80), kv_format)
    m = np.full(groups, NEG_INF, dtype=np.uint32)
    l = np.zeros(groups, dtype=np.uint32)
    o = np.zeros((groups, d), dtype=np.uint32)
    ways = blockfloat.PARTIALS
    for start in range(0, length, block):
        s = scores[:, start:start + block]
        m_new = m
        for j in range(s.shape[1]):
            m_new = fp.maximum(m_new, s[:, j])
        corr = fp_exp(fp.sub(m, m_new))
        pk = blockfloat.decompose(blockfloat.to_tf32(fp_exp(fp.sub(s, m_new[:, None]))), blockfloat.TF32)  # (G, T)
        o_parts = [blockfloat.empty((groups, d)) for _ in range(ways)]
        l_parts = [blockfloat.empty(groups) for _ in range(ways)]
        for j in range(s.shape[1]):
            r = j % ways
            weight = tuple(x[:, j] for x in pk)
            o_parts[r] = blockfloat.accumulate(o_parts[r], blockfloat.multiply(
                tuple(x[:, None] for x in weight), tuple(x[start + j][None, :] for x in values)))
            l_parts[r] = blockfloat.accumulate(l_parts[r], blockfloat.multiply(weight, one))
        l = fp.fma(l, corr, _sums_fp32(l_parts))
        o = fp.fma(o, corr[:, None], _sums_fp32(o_parts))
        m = m_new
    return fp.div(o, l[:, None])


def decode(q, k, v, *, scale: float, q_format=KvFormat.FP32, kv_format=KvFormat.FP16,
           out_format=KvFormat.FP32, block: int = BLOCK) -> np.ndarray:
    """Decode attention for one request: ``q`` (H, d) in ``q_format`` (bits or floats),
    ``k``, ``v`` (Hkv, L, d) in ``kv_format``; H = G * Hkv, query head ``h`` uses KV head
    ``h // G``.  Returns (H, d) in ``out_format`` (bit patterns)."""
    qw = widen(q, q_format)
    kv_format = KvFormat(kv_format)
    kw, vw = (narrow(widen(x, kv_format), kv_format) for x in (k, v))     # patterns in the KV format
    heads, d = qw.shape
    kv_heads = kw.shape[0]
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads do not split into groups over {kv_heads} KV heads")
    g = heads // kv_heads
    out = np.stack([decode_group(qw[h * g:(h + 1) * g], kw[h], vw[h], scale, kv_format=kv_format, block=block)
                    for h in range(kv_heads)])
    return narrow(out.reshape(heads, d), out_format)


def reference(q, k, v, *, scale: float) -> np.ndarray:
    """Float64 two-pass softmax attention (the outside check): q (H, d), k/v
    (Hkv, L, d) as floats."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    g = q.shape[0] // k.shape[0]
    kk = np.repeat(k, g, axis=0)
    vv = np.repeat(v, g, axis=0)
    s = np.einsum("hd,hld->hl", q, kk) * scale
    s = s - s.max(axis=1, keepdims=True)
    p = np.exp(s)
    return np.einsum("hl,hld->hd", p, vv) / p.sum(axis=1, keepdims=True)


# ---- the engine's command: a batch of requests described by a table in card memory ----



def _size(fmt) -> int:
    return 4 if KvFormat(fmt) == KvFormat.FP32 else 2


def pack_descriptors(requests: list[dict]) -> bytes:
    """The table bytes for a list of request dicts (missing fields are 0)."""
    words = np.zeros((len(requests), DESCRIPTOR_BYTES // 4), dtype=np.uint32)
    for i, r in enumerate(requests):
        for j, name in enumerate(DESCRIPTOR_FIELDS):
            words[i, j] = r.get(name, 0)
    return words.tobytes()


def unpack_descriptors(raw: bytes, count: int) -> list[dict]:
    words = np.frombuffer(raw[:count * DESCRIPTOR_BYTES], dtype=np.uint32).reshape(count, -1)
    return [{name: int(w[j]) for j, name in enumerate(DESCRIPTOR_FIELDS)} for w in words]


def check(cmd: dict, *, word_bytes: int, window_base: int, window_size: int) -> tuple[int, str | None]:
    """Checks on the whole command (failing: nothing is read past them, nothing written)."""
    if cmd["format_q"] > 2:
        return ErrorCode.BAD_FIELD, "q_format"
    if cmd["format_kv"] not in (KvFormat.FP16, KvFormat.BF16):
        return ErrorCode.BAD_FIELD, "kv_format"
    if cmd["format_out"] > 2:
        return ErrorCode.BAD_FIELD, "out_format"
    if cmd["shape_head_dim"] not in HEAD_DIMS:
        return ErrorCode.BAD_FIELD, "head_dim"
    if not 1 <= cmd["shape_group"] <= MAX_GROUP:
        return ErrorCode.BAD_FIELD, "group"
    if not 1 <= cmd["shape_kv_heads"] <= MAX_KV_HEADS:
        return ErrorCode.BAD_FIELD, "kv_heads"
    if cmd["requests"] == 0:
        return ErrorCode.ZERO_LENGTH, "requests"
    code = transfer_check(*command_ranges(cmd, word_bytes)["table"], word_bytes, window_base, window_size)
    return (code, "table") if code else (ErrorCode.OK, None)


def command_ranges(cmd: dict, word_bytes: int) -> dict[str, tuple[int, int]]:
    """(address, bytes, whole words) of the descriptor table; each request's own
    ranges are :func:`request_ranges`."""
    return {"table": (cmd["table"], -(-cmd["requests"] * DESCRIPTOR_BYTES // word_bytes) * word_bytes)}


def request_ranges(cmd: dict, r: dict) -> dict[str, tuple[int, int]]:
    """(address, bytes) of everything request ``r`` reads or writes (whole rows; the
    cache regions are kv_heads x capacity rows each)."""
    d, g, hkv = cmd["shape_head_dim"], cmd["shape_group"], cmd["shape_kv_heads"]
    heads = g * hkv
    row = d * 2
    ranges = {"q": (r["q"], heads * d * _size(cmd["format_q"])), "out": (r["out"], heads * d * _size(cmd["format_out"])),
              "k": (r["k"], hkv * r["capacity"] * row), "v": (r["v"], hkv * r["capacity"] * row)}
    if r["flags"] & FLAG_APPEND:
        ranges["k_new"] = (r["k_new"], hkv * row)
        ranges["v_new"] = (r["v_new"], hkv * row)
    return ranges


def request_check(cmd: dict, r: dict, *, word_bytes: int, window_base: int, window_size: int) -> tuple[int, str | None]:
    """One request's checks, in the engine's order: a failing request is skipped (its
    status word says why), the rest of the batch runs."""
    append = r["flags"] & FLAG_APPEND
    if r["flags"] & ~FLAG_APPEND:
        return ErrorCode.BAD_FIELD, "flags"
    if r["length"] + append == 0:
        return ErrorCode.ZERO_LENGTH, "length"
    if r["capacity"] == 0 or r["length"] + append > r["capacity"]:
        return ErrorCode.OUT_OF_WINDOW, "length"
    ranges = request_ranges(cmd, r)
    ranges = {"out": ranges.pop("out"), **ranges}          # the output's problems are reported first
    code, name = check_ranges(ranges, word_bytes, window_base, window_size)
    if code:
        return code, name
    (xo, lo), xt, lt = ranges["out"], cmd["table"], cmd["requests"] * DESCRIPTOR_BYTES
    if xo < xt + lt and xt < xo + lo:
        return ErrorCode.OVERLAP, "out"
    return ErrorCode.OK, None


def execute(memory: np.ndarray, cmd: dict, *, word_bytes: int, base: int = 0, window_base: int | None = None,
            window_size: int | None = None) -> tuple[int, int, int, int]:
    """Run an accepted command on ``memory`` (uint8 from card address ``base``): for each
    request in order, its checks, then (append) k_new/v_new into row ``length`` of the
    cache, attention over the last ``window`` (0: all) of the ``length + append``
    tokens, the output, and the status word.  Returns (error, bytes read, bytes
    written, failed requests)."""
    window_base, window_size = default_window(memory, base, window_base, window_size)
    def at(addr, nbytes):
        return memory[addr - base:addr - base + nbytes]

    d, g, hkv = cmd["shape_head_dim"], cmd["shape_group"], cmd["shape_kv_heads"]
    kv_fmt, q_fmt, out_fmt = KvFormat(cmd["format_kv"]), KvFormat(cmd["format_q"]), KvFormat(cmd["format_out"])
    scale = float(np.uint32(cmd["scale"]).view(np.float32))
    n = cmd["requests"]
    table_bytes = -(-n * DESCRIPTOR_BYTES // word_bytes) * word_bytes
    read, written, failed = table_bytes, 0, 0
    row = d * 2
    for i, r in enumerate(unpack_descriptors(at(cmd["table"], n * DESCRIPTOR_BYTES).tobytes(), n)):
        code, _ = request_check(cmd, r, word_bytes=word_bytes, window_base=window_base, window_size=window_size)
        status_addr = cmd["table"] + i * DESCRIPTOR_BYTES + 4 * DESCRIPTOR_FIELDS.index("status")
        if code:
            failed += 1
        else:
            length = r["length"]
            if r["flags"] & FLAG_APPEND:
                for h in range(hkv):
                    for name, new in (("k", "k_new"), ("v", "v_new")):
                        at(r[name] + (h * r["capacity"] + length) * row, row)[:] = at(r[new] + h * row, row)
                written += 2 * hkv * row      # (the new rows are read once, as the last rows attended)
                length += 1
            first = max(0, length - r["window"]) if r["window"] else 0
            tokens = length - first
            q = at(r["q"], g * hkv * d * _size(q_fmt)).view(np.uint32 if q_fmt == KvFormat.FP32 else np.uint16)
            k = np.stack([at(r["k"] + (h * r["capacity"] + first) * row, tokens * row).view(np.uint16)
                          for h in range(hkv)]).reshape(hkv, tokens, d)
            v = np.stack([at(r["v"] + (h * r["capacity"] + first) * row, tokens * row).view(np.uint16)
                          for h in range(hkv)]).reshape(hkv, tokens, d)
            out = decode(q.reshape(g * hkv, d), k, v, scale=scale, q_format=q_fmt, kv_format=kv_fmt,
                         out_format=out_fmt)
            raw = out.tobytes()
            at(r["out"], len(raw))[:] = np.frombuffer(raw, np.uint8)
            read += q.nbytes + 2 * hkv * tokens * row
            written += len(raw)
        at(status_addr, 4)[:] = np.frombuffer(np.uint32(STATUS_DONE | int(code)).tobytes(), np.uint8)
        written += 4
    return 0, read, written, failed
