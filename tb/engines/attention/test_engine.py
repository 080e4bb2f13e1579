"""Bench: the attention engine on the RTL memory model, bit-exact to ndpkit.engines.attention.golden.

Each command is a batch of requests with random shapes (group size, head dim, KV
heads, formats, lengths, windows, appends) laid out with random guard bytes between
every buffer; after the completion the whole memory must equal the golden model's
``execute`` on the same image (outputs, appended cache rows, status words,
and nothing else), and the completion's code, byte counts and failed-request count
must match.  Paged batches too: block sizes 16 and 128 at lengths around block
boundaries, bad paged requests, random paged batches with a random fault a request.
Random stalls on every AXI channel and on cmd/cpl; the seed is printed.
"""
import cocotb
import numpy as np
import pytest

from ndpkit_spec.codes import ErrorCode
from ndpkit.engines.attention import golden
from ndpkit.arith import fp
from ndpkit_spec.engines.attention import BLOCK as ATTENTION
from ndpkit_tools.sim.bench import bench_params, engine_bench

# w128l32pairs (make test): two units (H = 2) built with pair_words, odd groups' rows in pairs of
# words, even ones in passes over the units; under make sim, w128l32 (the same without
# pair_words: an odd group's last pass half empty), w128l16 (one unit, the sim card's) and w512l32
CONFIGS = {"w128l32": {"data_width": 128, "lanes": 32, "max_burst_bytes": 1024, "stall_per_256": 40, "stall": 0.3},
           "w128l32pairs": {"data_width": 128, "lanes": 32, "max_burst_bytes": 1024, "stall_per_256": 40,
                            "stall": 0.3, "pair_words": True},
           "w128l16": {"data_width": 128, "lanes": 16, "max_burst_bytes": 1024, "stall_per_256": 40, "stall": 0.3},
           # the card build: a d = 64 row is two bus words here
           "w512l32": {"data_width": 512, "lanes": 32, "max_burst_bytes": 4096, "stall_per_256": 40, "stall": 0.3},
           # gqa_pairs: a d = 64 row is one pair of words (G = 3 and 5 at d = 64 among the shapes)
           "w512l128pairs": {"data_width": 512, "lanes": 128, "max_burst_bytes": 4096, "stall_per_256": 40,
                             "stall": 0.3, "pair_words": True}}
MEM = 1 << 21


def _past_end(word: int) -> int:
    """A word-aligned address whose 64 bytes (a descriptor, a block table's unit) run past
    the memory's end (at 64-byte words: the end itself)."""
    return MEM - 32 if word <= 32 else MEM


class Layout:
    """Bump allocation of word-aligned buffers with random guard gaps."""

    def __init__(self, rng, word: int, start: int = 0x100):
        self.rng, self.word, self.next = rng, word, start

    def take(self, nbytes: int) -> int:
        addr = self.next + int(self.rng.integers(0, 4)) * self.word
        self.next = addr + -(-nbytes // self.word) * self.word
        assert self.next < MEM, "bench layout does not fit in memory"
        return addr


def _values(rng, image, addr, count, fmt):
    """``count`` small normal numbers in ``fmt`` at ``addr`` (random bit patterns would be
    mostly NaN-free noise of huge range; stress inputs are in the golden tests)."""
    bits = golden.narrow(fp.bits(rng.standard_normal(count).astype(np.float32)), fmt) \
        if fmt != golden.KvFormat.FP32 else fp.bits(rng.standard_normal(count).astype(np.float32))
    raw = np.asarray(bits).tobytes()
    image[addr:addr + len(raw)] = np.frombuffer(raw, np.uint8)


def _batch(rng, word, *, group, d, kv_heads, q_fmt, kv_fmt, out_fmt, requests, block_size=0, lengths=None,
           windows=(0, 0, 0, 1, 7, 130), append=None):
    """A command (fields) and a memory image with its table and buffers.  ``block_size``:
    a paged command, the requests' blocks a random permutation of one K and one V pool
    (a few spare blocks), each table a few entries longer than the request uses (those
    past the used ones hold ids past the pool: never read as ids, never checked)."""
    image = np.frombuffer(rng.bytes(MEM), dtype=np.uint8).copy()      # (cut to the used span at the end)
    lay = Layout(rng, word)
    row = 2 * d
    qsize = 4 if q_fmt == golden.KvFormat.FP32 else 2
    osize = 4 if out_fmt == golden.KvFormat.FP32 else 2
    heads = group * kv_heads
    table = lay.take(requests * golden.DESCRIPTOR_BYTES)
    descs = []
    for i in range(requests):
        length = int(lengths[i]) if lengths is not None else int(rng.choice([0, 1, 5, 127, 128, 129, 200, 300]))
        flags = int(rng.random() < 0.6) if append is None else int(append)
        flags = flags if length else 1
        window = int(rng.choice(windows))
        r = {"length": length, "window": window, "flags": flags}
        if block_size:
            r["used"] = -(-(length + flags) // block_size)
            r["blocks"] = r["used"] + int(rng.integers(0, 3))
            r["capacity"] = 0
        else:
            r["capacity"] = length + flags + int(rng.integers(0, 3))
        names = [("q", heads * d * qsize), ("out", heads * d * osize), ("k_new", kv_heads * row),
                 ("v_new", kv_heads * row)]
        if not block_size:
            names += [("k", kv_heads * r["capacity"] * row), ("v", kv_heads * r["capacity"] * row)]
        for name, nbytes in names:
            r[name] = lay.take(nbytes)
        for name, count, fmt in (("q", heads * d, q_fmt), ("k_new", kv_heads * d, kv_fmt),
                                 ("v_new", kv_heads * d, kv_fmt)):
            _values(rng, image, r[name], count, fmt)
        if not block_size:
            for name in ("k", "v"):
                _values(rng, image, r[name], kv_heads * r["capacity"] * d, kv_fmt)
        descs.append(r)
    if block_size:
        pool_blocks = sum(r["used"] for r in descs) + int(rng.integers(0, 3))
        ids = rng.permutation(pool_blocks)
        pools = {name: lay.take(kv_heads * pool_blocks * block_size * row) for name in ("k", "v")}
        for name, addr in pools.items():
            _values(rng, image, addr, kv_heads * pool_blocks * block_size * d, kv_fmt)
        taken = 0
        for r in descs:
            used = r.pop("used")
            entries = np.concatenate([ids[taken:taken + used],
                                      rng.integers(pool_blocks, 1 << 32, r["blocks"] - used)]).astype(np.uint32)
            taken += used
            r.update(k=pools["k"], v=pools["v"], pool_blocks=pool_blocks,
                     block_table=lay.take(golden.table_range_bytes(r["blocks"])))
            image[r["block_table"]:r["block_table"] + 4 * r["blocks"]] = np.frombuffer(entries.tobytes(), np.uint8)
    raw = golden.pack_descriptors(descs)
    image[table:table + len(raw)] = np.frombuffer(raw, np.uint8)
    fields = {"format_q": int(q_fmt), "format_kv": int(kv_fmt), "format_out": int(out_fmt), "table": table,
              "requests": requests, "shape_head_dim": d, "shape_group": group, "shape_kv_heads": kv_heads,
              "shape_block_size": block_size,
              "scale": int(np.float32(1 / np.sqrt(d)).view(np.uint32))}
    return fields, image[:lay.next + 4096].copy(), descs


PAGED_FAULTS = ("bad_id", "late_id", "unaligned", "blocks0", "blocks_big", "pool0", "pool_huge", "short",
                "out_on_table_ids", "ids_on_descriptors", "flags", "ids_past_end")


def _faulty_paged_batch(rng, word):
    """A paged batch of 1-4 requests of random shape, each with one of PAGED_FAULTS or none:
    an id past the pool among the used ones (BAD_INDEX) or after them (not read), the ids
    unaligned, 0 or too many blocks, an empty or a 2^32-byte pool, too few blocks, the
    output over the ids, the ids over the descriptors, a bad flag, the ids past the window."""
    F = golden.KvFormat
    bs = int(rng.choice(golden.BLOCK_SIZES))
    n = int(rng.integers(1, 5))
    lengths = [int(rng.choice([0, 1, bs - 1, bs, bs + 1, 2 * bs, 3 * bs - 1, 70])) for _ in range(n)]
    fields, image, descs = _batch(rng, word, group=int(rng.choice([1, 2, 3])), d=int(rng.choice([64, 128])),
                                  kv_heads=int(rng.integers(1, 3)), q_fmt=F.FP16, kv_fmt=F.FP16, out_fmt=F.FP32,
                                  requests=n, block_size=bs, lengths=lengths, windows=(0, 0, 1, 5, 17, 40))
    for r in descs:
        fault = rng.choice(["none"] * 5 + list(PAGED_FAULTS))
        used = -(-(r["length"] + (r["flags"] & 1)) // bs)
        if fault in ("bad_id", "late_id") and (fault == "bad_id" or r["blocks"] > used):
            at = r["block_table"] + 4 * (int(rng.integers(0, used)) if fault == "bad_id" else used)
            image[at:at + 4] = np.frombuffer(np.uint32(r["pool_blocks"] + int(rng.integers(0, 9))).tobytes(), np.uint8)
        elif fault == "unaligned":
            r["block_table"] += 4
        elif fault == "blocks0":
            r["blocks"] = 0
        elif fault == "blocks_big":
            r["blocks"] = int(rng.choice([1025, 1 << 31]))
        elif fault == "pool0":
            r["pool_blocks"] = 0
        elif fault == "pool_huge":
            r["pool_blocks"] = int(rng.choice([1 << 26, (1 << 32) - 1]))
        elif fault == "short":
            r["blocks"] = used - 1
        elif fault == "out_on_table_ids":
            r["out"] = r["block_table"]
        elif fault == "ids_on_descriptors":
            r["block_table"] = fields["table"]
        elif fault == "flags":
            r["flags"] |= 4
        elif fault == "ids_past_end":
            r["block_table"] = MEM - 32 * int(rng.integers(0, 2))
    raw = golden.pack_descriptors(descs)
    image[fields["table"]:fields["table"] + len(raw)] = np.frombuffer(raw, np.uint8)
    return fields, image


async def _run(p, source, sink, memory, fields, image, tag, expect=ErrorCode.OK, expect_failed=None):
    """``image``: the start of memory the command may touch (and a guard after it)."""
    word = p["data_width"] // 8
    memory.write(0, image.tobytes())
    want = image.copy()
    error, _ = golden.check(fields, word_bytes=word, window_base=0, window_size=MEM)
    read = written = failed = 0
    if not error:
        error, read, written, failed = golden.execute(want, fields, word_bytes=word, window_base=0,
                                                              window_size=MEM)
    assert error == expect, f"golden says {ErrorCode(error).name}, the case expects {expect.name}"
    if expect_failed is not None:
        assert failed == expect_failed, (failed, expect_failed)
    source.send({**fields, "tag": tag})
    cpl = await sink.receive(timeout_cycles=2_000_000)
    table = memory.read(fields["table"], max(0, fields["requests"]) * golden.DESCRIPTOR_BYTES) \
        if not error and fields["requests"] else b""
    if table:
        n = len(table) // golden.DESCRIPTOR_BYTES
        statuses = [hex(d["status"]) for d in golden.unpack_descriptors(table, n)]
        want_statuses = [hex(d["status"]) for d in golden.unpack_descriptors(
            want[fields["table"]:fields["table"] + len(table)].tobytes(), n)]
        assert statuses == want_statuses, (statuses, want_statuses)
    assert cpl["tag"] == tag and (cpl["error"], cpl["aux"]) == (error, failed), (cpl, error, failed)
    assert (cpl["bytes_read"], cpl["bytes_written"]) == (read, written), (cpl, read, written)
    got = np.frombuffer(memory.read(0, want.size), dtype=np.uint8)
    bad = np.flatnonzero(got != want)
    if bad.size:
        where = _locate(fields, int(bad[0]), want)
        raise AssertionError(f"{fields}: memory differs at {bad.size} bytes, first {int(bad[0]):#x} ({where}): "
                             f"got {got[bad[0]:bad[0] + 16].tobytes().hex()} want {want[bad[0]:bad[0] + 16].tobytes().hex()}")
    return cpl


def _locate(fields, addr, image):
    """Which request's which buffer holds ``addr`` (for failure messages)."""
    n = fields["requests"]
    table = image[fields["table"]:fields["table"] + n * golden.DESCRIPTOR_BYTES].tobytes()
    cmd = dict(fields)
    for i, r in enumerate(golden.unpack_descriptors(table, n)):
        for name, (a, length) in golden.request_ranges(cmd, r).items():
            if a <= addr < a + length:
                return f"request {i} {name} + {addr - a:#x}, {r}"
    return "outside every buffer"


@cocotb.test(timeout_time=3600, timeout_unit="sec")
async def attention_engine(dut):
    p = bench_params()
    rng = np.random.default_rng(cocotb.RANDOM_SEED)
    from ndpkit_hw.shell.engine_frontend import command_layout
    source, sink, memory = await engine_bench(dut, command_layout(ATTENTION), stall=p["stall"])
    word = p["data_width"] // 8
    F = golden.KvFormat
    tag = 0
    shapes = [dict(group=1, d=64, kv_heads=1, q_fmt=F.FP16, kv_fmt=F.FP16, out_fmt=F.FP32, requests=1),
              dict(group=4, d=128, kv_heads=2, q_fmt=F.FP32, kv_fmt=F.BF16, out_fmt=F.FP16, requests=3),
              dict(group=3, d=64, kv_heads=1, q_fmt=F.BF16, kv_fmt=F.FP16, out_fmt=F.BF16, requests=2),
              dict(group=1, d=128, kv_heads=3, q_fmt=F.FP16, kv_fmt=F.FP16, out_fmt=F.FP32, requests=2),
              # odd groups of up to seven: a pass a head on a pair_words build
              dict(group=7, d=128, kv_heads=1, q_fmt=F.FP16, kv_fmt=F.BF16, out_fmt=F.FP32, requests=1),
              dict(group=5, d=64, kv_heads=2, q_fmt=F.FP32, kv_fmt=F.FP16, out_fmt=F.FP16, requests=1)]
    for shape in shapes:
        fields, image, _ = _batch(rng, word, **shape)
        await _run(p, source, sink, memory, fields, image, tag)
        dut._log.info(f"{shape}: ok")
        tag += 1
    # paged: block sizes 16 and 128, lengths at and around block boundaries (appends into a
    # block's last and first rows), windows starting mid-block
    lengths = [15, 16, 17, 127, 128, 300]
    for shape in (dict(group=2, d=128, kv_heads=2, q_fmt=F.FP16, kv_fmt=F.FP16, out_fmt=F.FP32, block_size=16),
                  dict(group=1, d=64, kv_heads=1, q_fmt=F.FP32, kv_fmt=F.BF16, out_fmt=F.BF16, block_size=128),
                  dict(group=3, d=64, kv_heads=2, q_fmt=F.BF16, kv_fmt=F.FP16, out_fmt=F.FP16, block_size=16)):
        order = [int(x) for x in rng.permutation(lengths)]
        fields, image, _ = _batch(rng, word, **shape, requests=len(order), lengths=order,
                                  windows=(0, 0, 1, 20, 33, 130))
        await _run(p, source, sink, memory, fields, image, tag)
        dut._log.info(f"paged {shape} lengths {order}: ok")
        tag += 1
    # bad requests inside a batch: the others run
    fields, image, descs = _batch(rng, word, group=2, d=64, kv_heads=1, q_fmt=F.FP16, kv_fmt=F.FP16,
                                  out_fmt=F.FP32, requests=4)
    bad = {1: {"flags": 2}, 2: {"length": descs[2]["capacity"] + 1}, 3: {"out": descs[3]["q"]}}
    for i, change in bad.items():
        descs[i].update(change)
    raw = golden.pack_descriptors(descs)
    image[fields["table"]:fields["table"] + len(raw)] = np.frombuffer(raw, np.uint8)
    await _run(p, source, sink, memory, fields, image, tag, expect_failed=3)
    tag += 1
    # paged bad requests among good ones (appending, so a skipped one would show): an id past the
    # pool (BAD_INDEX), the table outside the window, more than 1024 blocks, out on a pool
    fields, image, descs = _batch(rng, word, group=2, d=64, kv_heads=2, q_fmt=F.FP16, kv_fmt=F.FP16,
                                  out_fmt=F.FP32, requests=6, block_size=16, lengths=[40, 17, 16, 5, 33, 15],
                                  append=True)
    entry = descs[1]["block_table"] + 4 * 1                   # request 1's second block: the one it appends to
    image[entry:entry + 4] = np.frombuffer(np.uint32(descs[1]["pool_blocks"] + 5).tobytes(), np.uint8)
    descs[2]["block_table"] = _past_end(word)
    descs[3]["blocks"] = 1025
    descs[4]["out"] = descs[4]["v"] + 256
    raw = golden.pack_descriptors(descs)
    image[fields["table"]:fields["table"] + len(raw)] = np.frombuffer(raw, np.uint8)
    entries = [np.frombuffer(image[r["block_table"]:r["block_table"] + 4 * min(r["blocks"], 8)].tobytes(), np.uint32)
               for r in descs]
    want = [golden.request_check(fields, r, word_bytes=word, window_base=0, window_size=MEM, entries=e)[0]
            for r, e in zip(descs, entries)]
    assert want == [0, ErrorCode.BAD_INDEX, ErrorCode.OUT_OF_WINDOW, ErrorCode.BAD_FIELD, ErrorCode.OVERLAP, 0], want
    await _run(p, source, sink, memory, fields, image, tag, expect_failed=4)
    tag += 1
    # random paged batches, each request with a random fault or none (block sizes 16..128)
    for _ in range(10):
        fields, image = _faulty_paged_batch(rng, word)
        await _run(p, source, sink, memory, fields, image, tag)
        tag += 1
    # whole-command errors: nothing written, the next command works
    fields, image, _ = _batch(rng, word, group=1, d=64, kv_heads=1, q_fmt=F.FP16, kv_fmt=F.FP16,
                              out_fmt=F.FP32, requests=1)
    for change, code in (({"format_kv": 0}, ErrorCode.BAD_FIELD), ({"shape_head_dim": 96}, ErrorCode.BAD_FIELD),
                         ({"shape_group": 17}, ErrorCode.BAD_FIELD), ({"requests": 0}, ErrorCode.ZERO_LENGTH),
                         ({"table": fields["table"] + 4}, ErrorCode.UNALIGNED),
                         ({"table": _past_end(word)}, ErrorCode.OUT_OF_WINDOW)):
        await _run(p, source, sink, memory, {**fields, **change}, image, tag, expect=code)
        tag += 1
    await _run(p, source, sink, memory, fields, image, tag)
    tag += 1
    # a paged command's block size outside (0,) 16, 32, 64, 128: BAD_FIELD; then a good paged one
    fields, image, _ = _batch(rng, word, group=1, d=64, kv_heads=1, q_fmt=F.FP16, kv_fmt=F.FP16,
                              out_fmt=F.FP32, requests=2, block_size=32, lengths=[31, 70])
    for size in (8, 200):
        await _run(p, source, sink, memory, {**fields, "shape_block_size": size}, image, tag,
                   expect=ErrorCode.BAD_FIELD)
        tag += 1
    await _run(p, source, sink, memory, fields, image, tag)


@pytest.mark.sim
@pytest.mark.parametrize("config", [c if c == "w128l32pairs" else pytest.param(c, marks=pytest.mark.long)
                                    for c in CONFIGS])
def test_attention_engine(config):
    from ndpkit_tools.sim.runner import Design, run_bench
    from ndpkit_hw.engines.attention.engine import AttentionEngine
    from ndpkit_hw.engines.harness import EngineHarness
    c = CONFIGS[config]
    engine = AttentionEngine(data_width=c["data_width"], lanes=c["lanes"], max_burst_bytes=c["max_burst_bytes"],
                             pair_words=c.get("pair_words", False))
    run_bench(Design(EngineHarness(engine, mem_size=MEM, stall_per_256=c["stall_per_256"]), "attention_engine",
                     key=f"{c} {MEM}", quick_build=True), __name__, params=c)
