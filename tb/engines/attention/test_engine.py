"""Bench: the attention engine on the RTL memory model, bit-exact to ndpkit.engines.attention.golden.

Each command is a batch of requests with random shapes (group size, head dim, KV
heads, formats, lengths, windows, appends) laid out with random guard bytes between
every buffer; after the completion the whole memory must equal the golden model's
``execute`` on the same image (outputs, appended cache rows, status words,
and nothing else), and the completion's code, byte counts and failed-request count
must match.  Random stalls on every AXI channel and on cmd/cpl; the seed is printed.
"""
import cocotb
import numpy as np
import pytest

from ndpkit_spec.codes import ErrorCode
from ndpkit.engines.attention import golden
from ndpkit.arith import fp
from ndpkit_spec.engines.attention import BLOCK as ATTENTION
from ndpkit_tools.sim.bench import bench_params, engine_bench

# w128l32: two units (H = 2, passes over them); w128l16 (one unit, the sim card's) under make sim
CONFIGS = {"w128l32": {"data_width": 128, "lanes": 32, "max_burst_bytes": 1024, "stall_per_256": 40, "stall": 0.3},
           "w128l16": {"data_width": 128, "lanes": 16, "max_burst_bytes": 1024, "stall_per_256": 40, "stall": 0.3}}
MEM = 1 << 21


class Layout:
    """Bump allocation of word-aligned buffers with random guard gaps."""

    def __init__(self, rng, word: int, start: int = 0x100):
        self.rng, self.word, self.next = rng, word, start

    def take(self, nbytes: int) -> int:
        addr = self.next + int(self.rng.integers(0, 4)) * self.word
        self.next = addr + -(-nbytes // self.word) * self.word
        assert self.next < MEM, "bench layout does not fit in memory"
        return addr


def _batch(rng, word, *, group, d, kv_heads, q_fmt, kv_fmt, out_fmt, requests):
    """A command (fields) and a memory image with its table and buffers."""
    image = np.frombuffer(rng.bytes(MEM), dtype=np.uint8).copy()      # (cut to the used span at the end)
    lay = Layout(rng, word)
    row = 2 * d
    qsize = 4 if q_fmt == golden.KvFormat.FP32 else 2
    osize = 4 if out_fmt == golden.KvFormat.FP32 else 2
    heads = group * kv_heads
    table = lay.take(requests * golden.DESCRIPTOR_BYTES)
    descs = []
    for _ in range(requests):
        length = int(rng.choice([0, 1, 5, 127, 128, 129, 200, 300]))
        append = int(rng.random() < 0.6) if length else 1
        capacity = length + append + int(rng.integers(0, 3))
        window = int(rng.choice([0, 0, 0, 1, 7, 130]))
        r = {"length": length, "capacity": capacity, "window": window, "flags": append}
        for name, nbytes in (("q", heads * d * qsize), ("out", heads * d * osize), ("k", kv_heads * capacity * row),
                             ("v", kv_heads * capacity * row), ("k_new", kv_heads * row), ("v_new", kv_heads * row)):
            r[name] = lay.take(nbytes)
        # values: small normal numbers (random bit patterns would be mostly NaN-free noise
        # of huge range; stress inputs are in the golden tests)
        for name, count, fmt in (("q", heads * d, q_fmt), ("k", kv_heads * capacity * d, kv_fmt),
                                 ("v", kv_heads * capacity * d, kv_fmt), ("k_new", kv_heads * d, kv_fmt),
                                 ("v_new", kv_heads * d, kv_fmt)):
            bits = golden.narrow(fp.bits(rng.standard_normal(count).astype(np.float32)), fmt) \
                if fmt != golden.KvFormat.FP32 else fp.bits(rng.standard_normal(count).astype(np.float32))
            raw = np.asarray(bits).tobytes()
            image[r[name]:r[name] + len(raw)] = np.frombuffer(raw, np.uint8)
        descs.append(r)
    raw = golden.pack_descriptors(descs)
    image[table:table + len(raw)] = np.frombuffer(raw, np.uint8)
    fields = {"format_q": int(q_fmt), "format_kv": int(kv_fmt), "format_out": int(out_fmt), "table": table,
              "requests": requests, "shape_head_dim": d, "shape_group": group, "shape_kv_heads": kv_heads,
              "shape_block_size": 0,
              "scale": int(np.float32(1 / np.sqrt(d)).view(np.uint32))}
    return fields, image[:lay.next + 4096].copy(), descs


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
              dict(group=1, d=128, kv_heads=3, q_fmt=F.FP16, kv_fmt=F.FP16, out_fmt=F.FP32, requests=2)]
    for shape in shapes:
        fields, image, _ = _batch(rng, word, **shape)
        await _run(p, source, sink, memory, fields, image, tag)
        dut._log.info(f"{shape}: ok")
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
    # whole-command errors: nothing written, the next command works
    fields, image, _ = _batch(rng, word, group=1, d=64, kv_heads=1, q_fmt=F.FP16, kv_fmt=F.FP16,
                              out_fmt=F.FP32, requests=1)
    for change, code in (({"format_kv": 0}, ErrorCode.BAD_FIELD), ({"shape_head_dim": 96}, ErrorCode.BAD_FIELD),
                         ({"shape_group": 17}, ErrorCode.BAD_FIELD), ({"requests": 0}, ErrorCode.ZERO_LENGTH),
                         ({"table": fields["table"] + 4}, ErrorCode.UNALIGNED),
                         ({"table": MEM - 32}, ErrorCode.OUT_OF_WINDOW)):
        await _run(p, source, sink, memory, {**fields, **change}, image, tag, expect=code)
        tag += 1
    await _run(p, source, sink, memory, fields, image, tag)


@pytest.mark.sim
@pytest.mark.parametrize("config", [c if c == "w128l32" else pytest.param(c, marks=pytest.mark.long) for c in CONFIGS])
def test_attention_engine(config):
    from ndpkit_tools.sim.runner import Design, run_bench
    from ndpkit_hw.engines.attention.engine import AttentionEngine
    from ndpkit_hw.engines.harness import EngineHarness
    c = CONFIGS[config]
    engine = AttentionEngine(data_width=c["data_width"], lanes=c["lanes"], max_burst_bytes=c["max_burst_bytes"])
    run_bench(Design(EngineHarness(engine, mem_size=MEM, stall_per_256=c["stall_per_256"]), "attention_engine",
                     key=f"{c} {MEM}", quick_build=True), __name__, params=c)
