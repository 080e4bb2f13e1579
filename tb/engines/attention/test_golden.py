"""The golden decode-attention model against outside references: float64 two-pass
softmax attention and PyTorch's scaled_dot_product_attention, within PyTorch's own
test tolerances, for contexts 1..8192, GQA groups, every format and inputs that stress
the softmax (peaked, flat, large magnitudes); plus NaN/inf propagation.  The command in
a paged KV cache against the same command in contiguous slots (bit-identical), and the
order of the paged checks."""
import numpy as np
import pytest

from ndpkit_spec.codes import ErrorCode
from ndpkit.arith import fp
from ndpkit.engines.attention import golden
from ndpkit.engines.attention.golden import KvFormat, decode, reference, widen

TOL = {KvFormat.FP16: (1e-3, 1e-3), KvFormat.BF16: (1e-3, 1.6e-2), KvFormat.FP32: (1e-5, 1.3e-6)}


def _case(rng, heads, kv_heads, length, d, kind):
    q = rng.normal(0, 1, (heads, d))
    k = rng.normal(0, 1, (kv_heads, length, d))
    v = rng.normal(0, 1, (kv_heads, length, d))
    if kind == "peaked":          # one token dominates: scores far apart
        g = heads // kv_heads
        k[:, length // 2] = 3 * q[::g]            # KV head h's key matches its first query head
        q *= 4
    elif kind == "flat":          # every score equal: uniform softmax
        k[:] = k[:, :1]
    elif kind == "large":
        q *= 30
        v *= 1000
    return q, k, v


def _quantise(x, fmt):
    return fp.floats(widen(x, fmt)).astype(np.float64)


def _within(got, want, v, fmt):
    """PyTorch's SDPA tolerances for ``fmt``, the absolute part scaled by the values'
    magnitude (the tolerances are for unit-scale data; the "large" inputs are 1000x)."""
    atol, rtol = TOL[fmt]
    bound = atol * max(1.0, np.abs(v).max()) + rtol * np.abs(want)
    return (np.abs(got - want) / bound).max()


@pytest.mark.parametrize("length", [1, 2, 127, 128, 129, 1000, 8192])
@pytest.mark.parametrize("fmt", [KvFormat.FP16, KvFormat.BF16])
@pytest.mark.parametrize("kind", ["normal", "peaked", "flat", "large"])
def test_against_float64(length, fmt, kind):
    """Inputs in the KV format (as a model's cache holds them), the output in it too."""
    rng = np.random.default_rng(length * 3 + int(fmt))
    heads, kv_heads, d = (4, 2, 128) if length < 8192 else (2, 1, 128)
    q, k, v = _case(rng, heads, kv_heads, length, d, kind)
    q16, k16, v16 = (_quantise(x, fmt) for x in (q, k, v))
    scale = 1 / np.sqrt(d)
    out = decode(q16, k16, v16, scale=scale, q_format=KvFormat.FP32, kv_format=fmt, out_format=fmt)
    got = fp.floats(widen(out, fmt)).astype(np.float64)
    want = reference(q16, k16, v16, scale=float(np.float32(scale)))
    assert _within(got, want, v16, fmt) <= 1.0


@pytest.mark.parametrize("fmt", [KvFormat.FP16, KvFormat.BF16])
def test_against_torch_sdpa(fmt):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    heads, kv_heads, length, d = 8, 2, 515, 128
    q, k, v = _case(rng, heads, kv_heads, length, d, "normal")
    dtype = {KvFormat.FP16: torch.float16, KvFormat.BF16: torch.bfloat16}[fmt]
    tq, tk, tv = (torch.tensor(x, dtype=dtype) for x in (q, k, v))
    want = torch.nn.functional.scaled_dot_product_attention(
        tq.float()[None, :, None, :], tk.float()[None], tv.float()[None], enable_gqa=True)[0, :, 0].to(dtype)
    out = decode(tq.float().numpy(), tk.view(torch.int16).numpy().view(np.uint16),
                 tv.view(torch.int16).numpy().view(np.uint16), scale=1 / np.sqrt(d), q_format=KvFormat.FP32,
                 kv_format=fmt, out_format=fmt)
    got = torch.from_numpy(fp.floats(widen(out, fmt)))
    atol, rtol = TOL[fmt]
    torch.testing.assert_close(got, want.float(), atol=atol, rtol=rtol)


def test_fp32_cache_is_refused():
    with pytest.raises(ValueError, match="fp16 or bf16"):
        decode(np.zeros((1, 64)), np.zeros((1, 3, 64)), np.zeros((1, 3, 64)), scale=0.125, kv_format=KvFormat.FP32)


def test_nonfinite_propagates():
    rng = np.random.default_rng(2)
    q = rng.normal(0, 1, (2, 64))
    k = rng.normal(0, 1, (1, 300, 64))
    v = rng.normal(0, 1, (1, 300, 64))
    v[0, 17, 3] = np.nan
    out = fp.floats(decode(q, k, v, scale=0.125, q_format=KvFormat.FP32, kv_format=KvFormat.FP16))
    assert np.isnan(out[:, 3]).all() and np.isfinite(np.delete(out, 3, axis=1)).all()
    q[1, 0] = np.inf
    out = fp.floats(decode(q, k, v, scale=0.125, q_format=KvFormat.FP32, kv_format=KvFormat.FP16))
    assert np.isnan(out[1]).all()


def test_group_mapping_and_errors():
    rng = np.random.default_rng(3)
    q = rng.normal(0, 1, (4, 64))
    k = rng.normal(0, 1, (2, 10, 64))
    v = rng.normal(0, 1, (2, 10, 64))
    out = fp.floats(decode(q, k, v, scale=0.125, q_format=KvFormat.FP32, kv_format=KvFormat.BF16))
    solo = fp.floats(decode(q[2:3], k[1:2], v[1:2], scale=0.125, q_format=KvFormat.FP32, kv_format=KvFormat.BF16))
    assert np.array_equal(out[2], solo[0])           # query head 2 reads KV head 1 (G = 2)
    with pytest.raises(ValueError, match="groups"):
        decode(q[:3], k, v, scale=0.125)


# ---- the paged KV cache: the command's execute in both layouts ----------------------------------

_WORD = 64                   # bus bytes (512 bits)
_BAD_ID = 0xFFFF_FFFF        # table entries past those a request uses: never read, never checked


class _Arena:
    """Addresses in a memory image, each range aligned."""

    def __init__(self):
        self.next = 0

    def take(self, nbytes, align=64):
        self.next = -(-self.next // align) * align
        at, self.next = self.next, self.next + nbytes
        return at


def _paged_pair(rng, *, bs, d, hkv, group, cases, spare_blocks=3):
    """One memory image holding the same requests twice — contiguous slots and paged pools
    (block ids a random permutation) — with one descriptor table for each layout.
    ``cases``: (length, append, window) per request.  Returns (image, contiguous command,
    paged command, per-request block ids, geometry)."""
    row, heads, n = d * 2, group * hkv, len(cases)
    cap = -(-max(length + append for length, append, _ in cases) // bs) * bs + bs      # whole blocks, one spare
    per = cap // bs
    nb = n * per + spare_blocks
    a = _Arena()
    tables = {"c": a.take(n * 64), "p": a.take(n * 64)}
    q, out = a.take(n * heads * d * 4), a.take(n * heads * d * 4)
    k_new, v_new = a.take(n * hkv * row), a.take(n * hkv * row)
    block_tables = a.take(n * golden.table_range_bytes(per))
    kc, vc = a.take(n * hkv * cap * row), a.take(n * hkv * cap * row)
    kp, vp = a.take(hkv * nb * bs * row, 4096), a.take(hkv * nb * bs * row, 4096)
    size = a.take(4096)
    # finite fp16 everywhere (garbage rows included), so every region decodes
    image = np.frombuffer(fp.fp32_to_fp16(fp.bits(rng.standard_normal(size // 2).astype(np.float32))).tobytes(),
                          np.uint8).copy()
    image[:2 * n * 64] = 0
    perm = rng.permutation(nb)
    ids, desc_c, desc_p = [], [], []
    for i, (length, append, window) in enumerate(cases):
        mine = perm[i * per:(i + 1) * per].astype(np.uint32)
        used = -(-(length + append) // bs)
        entries = mine.copy()
        entries[used:] = _BAD_ID
        ids.append(mine)
        at = block_tables + i * golden.table_range_bytes(per)
        image[at:at + 4 * per] = np.frombuffer(entries.tobytes(), np.uint8)
        for contiguous, pool in ((kc, kp), (vc, vp)):
            for h in range(hkv):
                for t in range(cap):        # the same token rows in both layouts
                    src = contiguous + ((i * hkv + h) * cap + t) * row
                    dst = pool + ((h * nb + int(mine[t // bs])) * bs + t % bs) * row
                    image[dst:dst + row] = image[src:src + row]
        common = {"q": q + i * heads * d * 4, "out": out + i * heads * d * 4, "k_new": k_new + i * hkv * row,
                  "v_new": v_new + i * hkv * row, "length": length, "window": window,
                  "flags": golden.FLAG_APPEND if append else 0}
        desc_c.append({**common, "k": kc + i * hkv * cap * row, "v": vc + i * hkv * cap * row, "capacity": cap})
        desc_p.append({**common, "k": kp, "v": vp, "capacity": 0, "block_table": at, "blocks": per,
                       "pool_blocks": nb})
    for name, descs in (("c", desc_c), ("p", desc_p)):
        raw = golden.pack_descriptors(descs)
        image[tables[name]:tables[name] + len(raw)] = np.frombuffer(raw, np.uint8)
    base = {"format_q": int(KvFormat.FP32), "format_kv": int(KvFormat.FP16), "format_out": int(KvFormat.FP32),
            "requests": n, "shape_head_dim": d, "shape_group": group, "shape_kv_heads": hkv,
            "scale": int(np.float32(1 / np.sqrt(d)).view(np.uint32))}
    cmd_c = {**base, "table": tables["c"], "shape_block_size": 0}
    cmd_p = {**base, "table": tables["p"], "shape_block_size": bs}
    geometry = {"cap": cap, "nb": nb, "kc": kc, "vc": vc, "kp": kp, "vp": vp, "row": row, "out": out,
                "out_bytes": n * heads * d * 4, "k_new": k_new, "v_new": v_new}
    return image, cmd_c, cmd_p, ids, geometry


def _run(image, cmd):
    mem = image.copy()
    assert golden.check(cmd, word_bytes=_WORD, window_base=0, window_size=len(mem)) == (ErrorCode.OK, None)
    return mem, golden.execute(mem, cmd, word_bytes=_WORD)


@pytest.mark.parametrize("bs", golden.BLOCK_SIZES)
def test_paged_equals_contiguous(bs):
    """The same requests in contiguous slots and in paged pools with shuffled block ids:
    the outputs bit for bit, the appended rows at the same tokens (an append on a block
    boundary takes the next block's first row), windows starting mid-block; the paged
    command reads the ids of the blocks it uses, nothing else differs."""
    rng = np.random.default_rng(bs)
    hkv, d, group = 2, 64, 2
    cases = [(bs - 1, 1, 0), (bs, 1, 0), (bs + 1, 0, 0), (2 * bs, 0, 0), (1, 0, 0), (0, 1, 0),
             (3 * bs + 5, 1, bs // 2 + 3), (2 * bs + 7, 0, bs + 1)]
    image, cmd_c, cmd_p, ids, g = _paged_pair(rng, bs=bs, d=d, hkv=hkv, group=group, cases=cases)
    mem_c, (err_c, read_c, written_c, failed_c) = _run(image, cmd_c)
    mem_p, (err_p, read_p, written_p, failed_p) = _run(image, cmd_p)
    assert (err_c, failed_c, err_p, failed_p) == (0, 0, 0, 0)
    lo, hi = g["out"], g["out"] + g["out_bytes"]
    assert np.array_equal(mem_c[lo:hi], mem_p[lo:hi])
    assert np.isfinite(mem_p[lo:hi].view(np.float32)).all()
    table_reads = sum(-(-(-(-(length + append) // bs) * 4) // _WORD) * _WORD for length, append, _ in cases)
    assert (read_p - read_c, written_p) == (table_reads, written_c)
    row, cap, nb = g["row"], g["cap"], g["nb"]
    for i, (length, append, _) in enumerate(cases):
        for h in range(hkv):
            for contiguous, pool, new in (("kc", "kp", "k_new"), ("vc", "vp", "v_new")):
                for t in range(length + append):       # every row the request holds, in both layouts
                    c = g[contiguous] + ((i * hkv + h) * cap + t) * row
                    p = g[pool] + ((h * nb + int(ids[i][t // bs])) * bs + t % bs) * row
                    assert np.array_equal(mem_c[c:c + row], mem_p[p:p + row]), (i, h, t)
                if append:                              # the new token in block ids[length // bs]
                    p = g[pool] + ((h * nb + int(ids[i][length // bs])) * bs + length % bs) * row
                    src = g[new] + (i * hkv + h) * row
                    assert np.array_equal(mem_p[p:p + row], image[src:src + row])
    # nothing else moved: the paged image differs from its start only in out, statuses and appended rows
    changed = np.flatnonzero(mem_p != image)
    allowed = np.zeros(len(image), bool)
    allowed[lo:hi] = True
    allowed[cmd_p["table"]:cmd_p["table"] + len(cases) * 64] = True
    for i, (length, append, _) in enumerate(cases):
        for h in range(hkv):
            for pool in ("kp", "vp"):
                if append:
                    p = g[pool] + ((h * nb + int(ids[i][length // bs])) * bs + length % bs) * row
                    allowed[p:p + row] = True
    assert allowed[changed].all()


def _one_paged(bs=16, d=64, hkv=2, group=2):
    """A good single paged request (length 20, append; three blocks in its table, all
    valid ids) and its command."""
    rng = np.random.default_rng(5)
    image, _, cmd, ids, g = _paged_pair(rng, bs=bs, d=d, hkv=hkv, group=group, cases=[(20, 1, 0)])
    r = golden.unpack_descriptors(image[cmd["table"]:cmd["table"] + 64].tobytes(), 1)[0]
    image[r["block_table"]:r["block_table"] + 4 * len(ids[0])] = np.frombuffer(ids[0].tobytes(), np.uint8)
    return image, cmd, r, g


def _verdict(cmd, r, image, entries=None, window_size=None):
    if entries is None:
        entries = image[r["block_table"]:r["block_table"] + 4 * r["blocks"]].view(np.uint32) \
            if r["blocks"] <= golden.MAX_TABLE_ENTRIES else np.zeros(r["blocks"], np.uint32)
    return golden.request_check(cmd, r, word_bytes=_WORD, window_base=0,
                                window_size=len(image) if window_size is None else window_size, entries=entries)


def test_paged_check_order():
    """The paged checks in the engine's order: block_size with the shape (after kv_heads,
    before requests); per request flags, nothing to attend, blocks > MAX_TABLE_ENTRIES,
    the table too short, the ranges (out, q, k, v, k_new, v_new, block_table), overlaps,
    block_table over the descriptor table, and last the ids the request uses."""
    image, cmd, r, g = _one_paged()
    where = dict(word_bytes=_WORD, window_base=0, window_size=len(image))
    assert _verdict(cmd, r, image) == (ErrorCode.OK, None)
    # the command
    for change, want in (({"shape_block_size": 8}, "block_size"), ({"shape_block_size": 200}, "block_size"),
                         ({"shape_block_size": 8, "shape_kv_heads": 0}, "kv_heads"),
                         ({"shape_block_size": 8, "requests": 0}, "block_size")):
        assert golden.check({**cmd, **change}, **where)[1] == want, change
    for bs in (0, *golden.BLOCK_SIZES):
        assert golden.check({**cmd, "shape_block_size": bs}, **where) == (ErrorCode.OK, None)
    assert golden.check({k: v for k, v in cmd.items() if k != "shape_block_size"}, **where) == (ErrorCode.OK, None)
    # the request: each rule, and the one before it winning when both fail
    far = len(image) + 4096
    big = golden.MAX_TABLE_ENTRIES + 1
    for change, want in (
            ({"flags": 2, "blocks": big}, (ErrorCode.BAD_FIELD, "flags")),
            ({"length": 0, "flags": 0, "blocks": big}, (ErrorCode.ZERO_LENGTH, "length")),
            ({"blocks": big, "out": far}, (ErrorCode.BAD_FIELD, "blocks")),
            ({"blocks": 0, "out": far}, (ErrorCode.OUT_OF_WINDOW, "length")),
            ({"length": 3 * 16, "out": far}, (ErrorCode.OUT_OF_WINDOW, "length")),      # 49 tokens > 3 blocks
            ({"length": 3 * 16 - 1}, (ErrorCode.OK, None)),                              # 48: exactly 3 blocks
            ({"out": far, "block_table": far}, (ErrorCode.OUT_OF_WINDOW, "out")),
            ({"pool_blocks": 1000}, (ErrorCode.OUT_OF_WINDOW, "k")),                     # a pool past the window
            ({"pool_blocks": 1 << 20}, (ErrorCode.OUT_OF_WINDOW, "k")),                  # 4 GiB: past 32 bits
            ({"v": far}, (ErrorCode.OUT_OF_WINDOW, "v")),
            ({"pool_blocks": 0}, (ErrorCode.ZERO_LENGTH, "k")),
            ({"k_new": far, "block_table": far}, (ErrorCode.OUT_OF_WINDOW, "k_new")),
            ({"block_table": far}, (ErrorCode.OUT_OF_WINDOW, "block_table")),
            ({"block_table": r["block_table"] + 4}, (ErrorCode.UNALIGNED, "block_table")),
            ({"block_table": r["out"]}, (ErrorCode.OVERLAP, "block_table")),
            ({"block_table": r["k"] + 64}, (ErrorCode.OVERLAP, "block_table")),
            ({"out": r["k"]}, (ErrorCode.OVERLAP, "k")),
            ({"block_table": cmd["table"]}, (ErrorCode.OVERLAP, "block_table")),          # over the descriptors
            ({"capacity": 0}, (ErrorCode.OK, None)),                                       # (ignored when paged)
    ):
        assert _verdict(cmd, {**r, **change}, image) == want, change
    # the ids: the first ceil((length + append) / bs) entries, each < pool_blocks; the rest unread
    ids = image[r["block_table"]:r["block_table"] + 4 * r["blocks"]].view(np.uint32).copy()
    used = -(-(r["length"] + 1) // 16)
    for j, (value, want) in enumerate(((r["pool_blocks"], ErrorCode.BAD_INDEX),
                                       (r["pool_blocks"] - 1, ErrorCode.OK))):
        bad = ids.copy()
        bad[used - 1] = value
        assert _verdict(cmd, r, image, entries=bad)[0] == want
    bad = ids.copy()
    bad[used - 1] = r["pool_blocks"]
    assert _verdict(cmd, r, image, entries=bad) == (ErrorCode.BAD_INDEX, "block_table")
    at_boundary = {**r, "length": 16}                  # 16 tokens use one block; appending, two
    assert _verdict(cmd, at_boundary, image, entries=bad) == (ErrorCode.BAD_INDEX, "block_table")
    assert _verdict(cmd, {**at_boundary, "flags": 0}, image, entries=bad) == (ErrorCode.OK, None)
    assert _verdict(cmd, {**r, "v": far}, image, entries=bad) == (ErrorCode.OUT_OF_WINDOW, "v")  # ranges first
    with pytest.raises(ValueError, match="entries"):
        golden.request_check(cmd, r, **where)
    # a contiguous command ignores the paged fields
    assert golden.request_check({**cmd, "shape_block_size": 0}, {**r, "k": r["k"], "capacity": 64, "blocks": big,
                                                                 "block_table": far}, **where)[0] == ErrorCode.OK


def test_paged_bad_request_in_a_batch():
    """A request whose ids fail (BAD_INDEX) among good ones: its table bytes are read
    (counted), nothing of it is written but its status; the others run as alone.  A
    request failing its ranges reads no ids."""
    bs, hkv = 16, 2
    rng = np.random.default_rng(9)
    cases = [(20, 1, 0), (33, 1, 0), (5, 0, 0), (7, 1, 0)]
    image, _, cmd, ids, g = _paged_pair(rng, bs=bs, d=64, hkv=hkv, group=1, cases=cases)
    descs = golden.unpack_descriptors(image[cmd["table"]:cmd["table"] + 4 * 64].tobytes(), 4)
    good = image.copy()
    at = descs[1]["block_table"] + 4 * (33 // bs)              # request 1 appends into its third block
    image[at:at + 4] = np.frombuffer(np.uint32(g["nb"]).tobytes(), np.uint8)
    descs[3]["block_table"] = len(image) + 64                  # request 3: its table outside
    raw = golden.pack_descriptors(descs)
    image[cmd["table"]:cmd["table"] + len(raw)] = np.frombuffer(raw, np.uint8)
    good[cmd["table"]:cmd["table"] + len(raw)] = np.frombuffer(raw, np.uint8)
    mem, (err, read, written, failed) = _run(image, cmd)
    assert (err, failed) == (0, 2)
    statuses = [d["status"] for d in golden.unpack_descriptors(mem[cmd["table"]:cmd["table"] + 256].tobytes(), 4)]
    assert statuses == [golden.STATUS_DONE, golden.STATUS_DONE | ErrorCode.BAD_INDEX, golden.STATUS_DONE,
                        golden.STATUS_DONE | ErrorCode.OUT_OF_WINDOW]
    # the requests alone: 0 and 2 the same bytes, 1 and 3 nothing but statuses
    alone = {}
    for i in (0, 2):
        one = {**cmd, "table": cmd["table"] + 64 * i, "requests": 1}
        m, alone[i] = _run(good, one)
        row_bytes = g["out_bytes"] // 4
        o = g["out"] + i * row_bytes
        assert np.array_equal(m[o:o + row_bytes], mem[o:o + row_bytes])
    # read: the 4 descriptors, requests 0 and 2 as alone (less their descriptor), request 1's
    # ids (one bus word: it failed on them), nothing of request 3 (it failed before its ids)
    assert read == 4 * 64 + sum(x[1] - 64 for x in alone.values()) + _WORD
    assert written == sum(x[2] - 4 for x in alone.values()) + 4 * 4
    o = g["out"] + 1 * (g["out_bytes"] // 4)
    assert np.array_equal(mem[o:o + g["out_bytes"] // 4], image[o:o + g["out_bytes"] // 4])
    for pool in ("kp", "vp"):
        lo, hi = g[pool], g[pool] + hkv * g["nb"] * bs * g["row"]
        changed = np.flatnonzero(mem[lo:hi] != image[lo:hi]) + lo
        rows = {(int(c) - g[pool]) // g["row"] for c in changed}
        want = {h * g["nb"] * bs + int(ids[i][n // bs]) * bs + n % bs for i, n in ((0, 20),) for h in range(hkv)}
        assert rows == want, (pool, rows, want)
