"""Decode attention, bit for bit: the ``attention`` engine's specification.

For one request and one KV head with its group of ``G`` query heads (grouped-query
attention; G = 1 is multi-head attention), context length ``L`` and head dimension
``d``.  The cache's ``K`` and ``V`` are fp16 or bf16 (the KV format); the scores are
block-fixed dot products, the weighted values sums of block-fixed V rows times
aligned weights (:mod:`ndpkit.arith.blockfloat`), each sum rounded once to
binary32.  Everything else is binary32 with round-to-nearest-even
(:mod:`ndpkit.arith.fp`):

1. **Inputs.** ``q`` (fp32, fp16 or bf16) is rounded to the KV format (RNE): ``qk``.
2. **Scores.** ``dot[t, g] = fixed_dot(qk[g], K[t])`` — the q row as integers of 19
   bits sharing its largest exponent, the K row as integers of 17 bits sharing its
   own, their exact products less 12 low bits each (floor), summed, rounded once
   (``blockfloat.fixed_dot``, ``sum_fp32``); ``s = mul(dot, scale)`` (the softmax
   scale, usually 1/sqrt(d), a float32 register).
3. **Blocks.** Tokens go in blocks of ``block`` (128) — INF²'s online-softmax
   granularity: one pass over K and V, each byte read once.  For each block, in order:

   - ``m_new = max(m, s[t])`` over the block's tokens in order (``fp.maximum``;
     ``m`` starts at -inf; a NaN score makes it NaN, and NaN then propagates);
   - ``corr = exp(sub(m, m_new))`` (0 for the first block: exp(-inf) = 0), with the
     engine's exp unit (``ndpkit.arith.exp.exp``);
   - ``p[t] = exp(sub(s[t], m_new))``, rounded to TF32 (binary32's exponent, an 11-bit
     significand: its product with an fp16 or bf16 value is exact): ``pk[t]``;
   - weighted sums (``blockfloat.weigh``): V row ``t`` as integers of 25 bits sharing
     its largest exponent (magnitudes truncated), ``pk[t]``'s significand aligned to the
     sum's exponent in 17 bits (the exponent a multiple of 4 that grows with the terms,
     the sum floored down when it does), their exact products added; and the weights' own sum in fixed point
     (``blockfloat.weigh_total``, 41 fraction bits), each split
     :data:`~ndpkit.arith.blockfloat.PARTIALS` (4) ways: token ``j`` of the block
     (``j`` = 0, 1, ...) goes to partial ``j % 4``, in token order; the partials merged
     in order, ``merge(merge(merge(s0, s1), s2), s3)``, and rounded once: ``ob[i]``,
     ``lb``;
   - ``l = fma(l, corr, lb)``, ``o[i] = fma(o[i], corr, ob[i])`` (``l`` and ``o``
     start at +0).
4. **Output.** ``out[i] = mul(o[i], div(1, l))`` (:func:`output`: the reciprocal once a
   query head, then a product an element), then narrowed to the output format (fp32,
   or fp16/bf16 with round-to-nearest-even).

This is flash-decoding's online softmax (a running max and sum, the partial output
rescaled when the max grows), ordered for a pipelined datapath; the weights are the
same ``pk`` in the numerator and the denominator, so they stay normalised.
:func:`reference` (float64) and PyTorch's SDPA are the outside checks
(docs/engines/attention.md gives the measured errors).

**The command** (:func:`check`, :func:`request_check`, :func:`execute`) names a table of
64-byte request descriptors.  The KV cache a request reads is either a contiguous slot
(``shape_block_size`` 0: ``kv_heads x capacity`` rows from the descriptor's ``k``/``v``)
or **paged** (``shape_block_size`` ``bs`` in :data:`BLOCK_SIZES`): ``k`` and ``v`` are the
layer's block pools, ``[kv_heads, pool_blocks, bs, head_dim]`` 16-bit elements, and the
request's ``blocks`` uint32 block ids at ``block_table`` map its token ``t`` to

    row(h, t) = pool + ((h * pool_blocks + table[t // bs]) * bs + t % bs) * head_dim * 2

(:func:`cache_row`; ``table[t // bs] * bs + t % bs`` is vLLM's slot number).  The data
the arithmetic sees, and so the output, is the same bit for bit in both layouts.
"""
from __future__ import annotations


import numpy as np

from ndpkit_spec.codes import ErrorCode
from ndpkit.arith import blockfloat, fp
from ndpkit.transfer import check_ranges, default_window, transfer_check
from ndpkit_spec.engines.attention import (BLOCK_SIZES, DESCRIPTOR_BYTES, DESCRIPTOR_FIELDS, FLAG_APPEND,
                                           HEAD_DIMS, MAX_GROUP, MAX_KV_HEADS, MAX_TABLE_ENTRIES, SOFTMAX_BLOCK,
                                           STATUS_DONE, KvFormat)
from ndpkit.arith.exp import exp as fp_exp

__all__ = ["KvFormat", "BLOCK", "decode", "decode_group", "reference", "widen", "narrow",
           "DESCRIPTOR_FIELDS", "DESCRIPTOR_BYTES", "FLAG_APPEND", "STATUS_DONE", "pack_descriptors",
           "unpack_descriptors", "check", "request_check", "request_ranges", "execute", "BLOCK_SIZES",
           "MAX_TABLE_ENTRIES", "table_range_bytes", "table_read_bytes", "cache_row"]

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
    dots = blockfloat.fixed_dot(narrow(q, kv_format)[:, None, :], k, kv_format)            # (G, L)
    scores = fp.mul(blockfloat.sum_fp32(dots), fp.bits(np.float32(scale)))
    rows = blockfloat.value_rows(v, kv_format)
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
        o_parts = [blockfloat.weighted_empty((groups,), d) for _ in range(ways)]
        l_parts = [(np.zeros(groups, np.int64), np.zeros(groups, np.int64)) for _ in range(ways)]
        for j in range(s.shape[1]):
            r = j % ways
            weight = tuple(x[:, j] for x in pk)
            o_parts[r] = blockfloat.weigh(o_parts[r], weight, (rows[0][start + j], rows[1][start + j],
                                                               tuple(x[start + j] for x in rows[2])))
            l_parts[r] = blockfloat.weigh_total(l_parts[r], weight)
        l = fp.fma(l, corr, _sums_fp32([blockfloat.total_sum(x) for x in l_parts]))
        o = fp.fma(o, corr[:, None], _sums_fp32([blockfloat.weighted_sum(x, kv_format) for x in o_parts]))
        m = m_new
    return output(o, l)


def output(o: np.ndarray, l: np.ndarray) -> np.ndarray:
    """The outputs from the running sums (binary32 bits): ``o[g, i] * (1 / l[g])``, the
    reciprocal rounded, then the product (the engine: one reciprocal unit, the fold's fma
    with a -0 addend)."""
    return fp.mul(o, fp.div(np.full(l.shape, 0x3F80_0000, np.uint32), l)[:, None])


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
    if _block_size(cmd) not in (0, *BLOCK_SIZES):
        return ErrorCode.BAD_FIELD, "block_size"
    if cmd["requests"] == 0:
        return ErrorCode.ZERO_LENGTH, "requests"
    code = transfer_check(*command_ranges(cmd, word_bytes)["table"], word_bytes, window_base, window_size)
    return (code, "table") if code else (ErrorCode.OK, None)


def command_ranges(cmd: dict, word_bytes: int) -> dict[str, tuple[int, int]]:
    """(address, bytes, whole words) of the descriptor table; each request's own
    ranges are :func:`request_ranges`."""
    return {"table": (cmd["table"], -(-cmd["requests"] * DESCRIPTOR_BYTES // word_bytes) * word_bytes)}


def _block_size(cmd: dict) -> int:
    """The command's tokens per block (0: contiguous slots)."""
    return cmd.get("shape_block_size", 0)


def table_range_bytes(blocks: int) -> int:
    """The bytes a paged request's ``block_table`` range covers: its ``blocks`` uint32
    entries in whole 64-byte units (one range whatever the bus width up to 512 bits)."""
    return -(-blocks * 4 // 64) * 64


def table_read_bytes(cmd: dict, r: dict, word_bytes: int) -> int:
    """The bytes of ``block_table`` the engine reads for a paged request that passed its
    range checks: the entries of the first ``ceil(needed / bs)`` blocks (from entry 0,
    whole bus words); 0 in a contiguous command."""
    bs = _block_size(cmd)
    if not bs:
        return 0
    entries = -(-(r["length"] + (r["flags"] & FLAG_APPEND)) // bs)
    return -(-entries * 4 // word_bytes) * word_bytes


def cache_row(cmd: dict, r: dict, head: int, token: int, table=None) -> int:
    """The card address of row ``token`` of KV head ``head`` in request ``r``'s K cache
    (``r["v"] - r["k"]`` more for V): contiguous, ``k + (head * capacity + token) * row``;
    paged (``table``: the request's block ids), ``k + ((head * pool_blocks +
    table[token // bs]) * bs + token % bs) * row``."""
    row = cmd["shape_head_dim"] * 2
    bs = _block_size(cmd)
    if not bs:
        return r["k"] + (head * r["capacity"] + token) * row
    return r["k"] + ((head * r.get("pool_blocks", 0) + int(table[token // bs])) * bs + token % bs) * row


def request_ranges(cmd: dict, r: dict) -> dict[str, tuple[int, int]]:
    """(address, bytes) of everything request ``r`` reads or writes, in the order the
    engine checks them (whole rows; a contiguous cache region is kv_heads x capacity
    rows, a paged pool kv_heads x pool_blocks x block_size rows; a paged request's
    ``block_table`` is :func:`table_range_bytes`)."""
    d, g, hkv = cmd["shape_head_dim"], cmd["shape_group"], cmd["shape_kv_heads"]
    heads = g * hkv
    row = d * 2
    bs = _block_size(cmd)
    rows = r.get("pool_blocks", 0) * bs if bs else r["capacity"]      # rows a head, in the region or pool
    ranges = {"q": (r["q"], heads * d * _size(cmd["format_q"])), "out": (r["out"], heads * d * _size(cmd["format_out"])),
              "k": (r["k"], hkv * rows * row), "v": (r["v"], hkv * rows * row)}
    if r["flags"] & FLAG_APPEND:
        ranges["k_new"] = (r["k_new"], hkv * row)
        ranges["v_new"] = (r["v_new"], hkv * row)
    if bs:
        ranges["block_table"] = (r.get("block_table", 0), table_range_bytes(r.get("blocks", 0)))
    return ranges


def request_check(cmd: dict, r: dict, *, word_bytes: int, window_base: int, window_size: int,
                  entries=None) -> tuple[int, str | None]:
    """One request's checks, in the engine's order: a failing request is skipped (its
    status word says why), the rest of the batch runs.

    In order: flags (BAD_FIELD); nothing to attend over (ZERO_LENGTH "length"); paged:
    ``blocks`` > :data:`MAX_TABLE_ENTRIES` (BAD_FIELD "blocks"); the cache too small,
    ``length + append`` > capacity (contiguous: or capacity 0) or > ``blocks *
    block_size`` (paged: or blocks 0) (OUT_OF_WINDOW "length"); the ranges of
    :func:`request_ranges` (out first, then q, k, v, k_new, v_new, block_table) by the
    transfer rule, then any two of them overlapping (OVERLAP); out over the
    descriptor table (OVERLAP "out"); paged: block_table over the descriptor table
    (OVERLAP "block_table"); last, paged only, the block ids the engine reads — any of
    the first ``ceil((length + append) / block_size)`` ``entries`` >= ``pool_blocks``
    (BAD_INDEX "block_table").  ``entries``: the request's block ids (at least that
    many), needed for a paged request that reaches the last check (ValueError
    otherwise)."""
    code, name = _request_fields_and_ranges(cmd, r, word_bytes, window_base, window_size)
    if code or not _block_size(cmd):
        return code, name
    if entries is None:
        raise ValueError("a paged request's check needs its block table: pass entries=")
    return _request_entries(cmd, r, entries)


def _request_fields_and_ranges(cmd, r, word_bytes, window_base, window_size):
    """:func:`request_check` up to the block ids (what the engine knows from the
    descriptor alone)."""
    append = r["flags"] & FLAG_APPEND
    bs = _block_size(cmd)
    if r["flags"] & ~FLAG_APPEND:
        return ErrorCode.BAD_FIELD, "flags"
    needed = r["length"] + append
    if needed == 0:
        return ErrorCode.ZERO_LENGTH, "length"
    if bs:
        blocks = r.get("blocks", 0)
        if blocks > MAX_TABLE_ENTRIES:
            return ErrorCode.BAD_FIELD, "blocks"
        if blocks == 0 or needed > blocks * bs:
            return ErrorCode.OUT_OF_WINDOW, "length"
    elif r["capacity"] == 0 or needed > r["capacity"]:
        return ErrorCode.OUT_OF_WINDOW, "length"
    ranges = request_ranges(cmd, r)
    ranges = {"out": ranges.pop("out"), **ranges}          # the output's problems are reported first
    code, name = check_ranges(ranges, word_bytes, window_base, window_size)
    if code:
        return code, name
    xt, lt = cmd["table"], cmd["requests"] * DESCRIPTOR_BYTES
    for name in ("out", "block_table") if bs else ("out",):
        xo, lo = ranges[name]
        if xo < xt + lt and xt < xo + lo:
            return ErrorCode.OVERLAP, name
    return ErrorCode.OK, None


def _request_entries(cmd, r, entries):
    """:func:`request_check`'s last check: the block ids a paged request uses."""
    bs = _block_size(cmd)
    count = -(-(r["length"] + (r["flags"] & FLAG_APPEND)) // bs)
    used = np.asarray(entries, dtype=np.int64).reshape(-1)[:count]
    if len(used) < count:
        raise ValueError(f"entries: {len(used)} block ids given, the request uses {count}")
    if (used >= r.get("pool_blocks", 0)).any():
        return ErrorCode.BAD_INDEX, "block_table"
    return ErrorCode.OK, None


def execute(memory: np.ndarray, cmd: dict, *, word_bytes: int, base: int = 0, window_base: int | None = None,
            window_size: int | None = None) -> tuple[int, int, int, int]:
    """Run an accepted command on ``memory`` (uint8 from card address ``base``): for each
    request in order, its checks (a paged request's block ids are read once its ranges
    pass: :func:`table_read_bytes`, counted as read whether its ids pass or not), then
    (append) k_new/v_new into row ``length`` of the cache, attention over the last
    ``window`` (0: all) of the ``length + append`` tokens, the output, and the status
    word.  Rows are :func:`cache_row`'s.  Returns (error, bytes read, bytes written,
    failed requests)."""
    window_base, window_size = default_window(memory, base, window_base, window_size)
    def at(addr, nbytes):
        return memory[addr - base:addr - base + nbytes]

    d, g, hkv = cmd["shape_head_dim"], cmd["shape_group"], cmd["shape_kv_heads"]
    kv_fmt, q_fmt, out_fmt = KvFormat(cmd["format_kv"]), KvFormat(cmd["format_q"]), KvFormat(cmd["format_out"])
    scale = float(np.uint32(cmd["scale"]).view(np.float32))
    n = cmd["requests"]
    bs = _block_size(cmd)
    table_bytes = -(-n * DESCRIPTOR_BYTES // word_bytes) * word_bytes
    read, written, failed = table_bytes, 0, 0
    row = d * 2
    for i, r in enumerate(unpack_descriptors(at(cmd["table"], n * DESCRIPTOR_BYTES).tobytes(), n)):
        ids = None
        code, _ = _request_fields_and_ranges(cmd, r, word_bytes, window_base, window_size)
        if bs and not code:                     # the ranges passed: the engine reads the ids
            nbytes = table_read_bytes(cmd, r, word_bytes)
            ids = at(r["block_table"], nbytes).view(np.uint32).copy()
            read += nbytes
            code, _ = _request_entries(cmd, r, ids)
        status_addr = cmd["table"] + i * DESCRIPTOR_BYTES + 4 * DESCRIPTOR_FIELDS.index("status")
        if code:
            failed += 1
        else:
            length = r["length"]
            rows = {name: (lambda h, t, name=name: cache_row(cmd, {**r, "k": r[name]}, h, t, ids))
                    for name in ("k", "v")}
            if r["flags"] & FLAG_APPEND:
                for h in range(hkv):
                    for name, new in (("k", "k_new"), ("v", "v_new")):
                        at(rows[name](h, length), row)[:] = at(r[new] + h * row, row)
                written += 2 * hkv * row      # (the new rows are read once, as the last rows attended)
                length += 1
            first = max(0, length - r["window"]) if r["window"] else 0
            tokens = length - first
            q = at(r["q"], g * hkv * d * _size(q_fmt)).view(np.uint32 if q_fmt == KvFormat.FP32 else np.uint16)
            k, v = (np.stack([_gather(at, rows[name], h, first, length, bs, row) for h in range(hkv)])
                    .reshape(hkv, tokens, d) for name in ("k", "v"))
            out = decode(q.reshape(g * hkv, d), k, v, scale=scale, q_format=q_fmt, kv_format=kv_fmt,
                         out_format=out_fmt)
            raw = out.tobytes()
            at(r["out"], len(raw))[:] = np.frombuffer(raw, np.uint8)
            read += q.nbytes + 2 * hkv * tokens * row
            written += len(raw)
        at(status_addr, 4)[:] = np.frombuffer(np.uint32(STATUS_DONE | int(code)).tobytes(), np.uint8)
        written += 4
    return 0, read, written, failed


def _gather(at, row_of, head: int, first: int, last: int, bs: int, row: int) -> np.ndarray:
    """Rows ``[first, last)`` of one head as uint16 patterns: one run contiguous, paged
    one run per block (the pieces the engine's transfers read)."""
    if not bs:
        return at(row_of(head, first), (last - first) * row).view(np.uint16)
    parts, t = [], first
    while t < last:
        n = min(bs - t % bs, last - t)
        parts.append(at(row_of(head, t), n * row).view(np.uint16))
        t += n
    return np.concatenate(parts) if parts else np.zeros(0, np.uint16)
