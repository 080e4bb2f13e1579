"""Bench: the decomp engine (scatter-mode decompression) on the RTL memory model.

Every command's effect on the whole of three regions (destination, indices, values,
random guard bytes around each array) must equal ndpkit.engines.decomp.golden's
check/execute: zero fill, pairs in array order (repeats: last wins),
sentinels skipped, an index >= n stopping the command after the pairs before it.
Random stalls on every AXI channel and on cmd/cpl.
"""
import cocotb
import numpy as np
import pytest

from ndpkit_spec.codes import ErrorCode
from ndpkit.engines.decomp import golden
from ndpkit.engines.adam.golden import Format
from ndpkit_spec.engines.decomp import BLOCK as DECOMP
from ndpkit_tools.sim.bench import bench_params, engine_bench

CONFIGS = {"w64": {"data_width": 64, "max_burst_bytes": 1024, "stall_per_256": 40, "stall": 0.3}}
REGION = 0x4000
BASES = {"dst": 0x0000, "idx": 0x4000, "val": 0x8000}
OFFSET = 0x100
MEM = 1 << 20


def _pairs(rng, n, k, fmt, *, order="random", repeats=False, sentinels=0.0):
    if order == "ascending":
        idx = np.sort(rng.choice(n, size=min(k, n), replace=False))
    else:
        idx = rng.integers(0, n, k) if repeats else rng.permutation(n)[:k]
    idx = idx.astype(np.uint32)
    idx[rng.random(idx.size) < sentinels] = golden.SENTINEL
    vals = rng.integers(0, 1 << (32 if fmt == Format.FP32 else 16), idx.size, dtype=np.uint64)
    return idx, vals.astype(np.uint32 if fmt == Format.FP32 else np.uint16)


async def _run(p, source, sink, memory, rng, n, idx, vals, fmt, tag, change=None, expect=ErrorCode.OK):
    word = p["data_width"] // 8
    image = bytearray(rng.bytes(3 * REGION))
    for name, arr in (("idx", idx), ("val", vals)):
        raw = np.asarray(arr).tobytes()
        image[BASES[name] + OFFSET:BASES[name] + OFFSET + len(raw)] = raw
    fields = {"format": int(fmt), "count": n, "pairs": len(idx), "tag": tag,
              **{k: BASES[k] + OFFSET for k in BASES}}
    fields.update(change or {})
    memory.write(0, bytes(image))
    want = np.frombuffer(bytes(image), dtype=np.uint8).copy()
    error, _ = golden.check(fields, word_bytes=word, window_base=0, window_size=MEM)
    read = written = aux = 0
    if not error:
        error, read, written, aux = golden.execute(want, fields, word_bytes=word)
    assert error == expect, f"golden says {ErrorCode(error).name}, the case expects {expect.name}"
    source.send(fields)
    cpl = await sink.receive(timeout_cycles=200_000)
    assert cpl["tag"] == tag and (cpl["error"], cpl["aux"]) == (error, aux), (cpl, error, aux)
    assert (cpl["bytes_read"], cpl["bytes_written"]) == (read, written), (cpl, read, written)
    got = np.frombuffer(memory.read(0, 3 * REGION), dtype=np.uint8)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"n={n} k={len(idx)} {fmt.name} {change}: memory differs first at byte {int(bad[0]):#x}"


@cocotb.test(timeout_time=900, timeout_unit="sec")
async def decomp_engine(dut):
    p = bench_params()
    rng = np.random.default_rng(cocotb.RANDOM_SEED)
    from ndpkit_hw.shell.engine_frontend import command_layout
    source, sink, memory = await engine_bench(dut, command_layout(DECOMP), stall=p["stall"])
    tag = 0
    for n, k, fmt, kw in ((300, 30, Format.FP32, {"order": "ascending"}),
                          (301, 40, Format.FP16, {}),
                          (77, 200, Format.BF16, {"repeats": True, "sentinels": 0.2}),   # k > n: padding
                          (1, 1, Format.FP32, {}),
                          (1001, 100, Format.FP16, {"repeats": True}),
                          (33, 12, Format.FP32, {"repeats": True, "sentinels": 0.5})):
        idx, vals = _pairs(rng, n, k, fmt, **kw)
        await _run(p, source, sink, memory, rng, n, idx, vals, fmt, tag)
        tag += 1
    # an index >= n (not the sentinel) part way: the pairs before it are written
    idx, vals = _pairs(rng, 100, 20, Format.FP16)
    idx[13] = 100
    await _run(p, source, sink, memory, rng, 100, idx, vals, Format.FP16, tag, expect=ErrorCode.OUT_OF_WINDOW)
    tag += 1
    idx, vals = _pairs(rng, 100, 10, Format.FP32)
    for change, code in (({"format": 3}, ErrorCode.BAD_FIELD), ({"count": 0}, ErrorCode.ZERO_LENGTH),
                         ({"pairs": 0}, ErrorCode.ZERO_LENGTH), ({"dst": BASES["dst"] + OFFSET + 4}, ErrorCode.UNALIGNED),
                         ({"val": MEM - 8}, ErrorCode.OUT_OF_WINDOW),
                         ({"dst": BASES["idx"] + OFFSET - 64}, ErrorCode.OVERLAP),
                         ({"count": 0x4000_0000}, ErrorCode.OUT_OF_WINDOW)):
        await _run(p, source, sink, memory, rng, 100, idx, vals, Format.FP32, tag, change, code)
        tag += 1
    idx, vals = _pairs(rng, 500, 64, Format.BF16, repeats=True)
    await _run(p, source, sink, memory, rng, 500, idx, vals, Format.BF16, tag)


@pytest.mark.sim
@pytest.mark.parametrize("config", CONFIGS)
def test_decomp_engine(config):
    from ndpkit_tools.sim.runner import Design, run_bench
    from ndpkit_hw.engines.decomp.engine import DecompEngine
    from ndpkit_hw.engines.harness import EngineHarness
    c = CONFIGS[config]
    engine = DecompEngine(data_width=c["data_width"], max_burst_bytes=c["max_burst_bytes"])
    run_bench(Design(EngineHarness(engine, mem_size=MEM, stall_per_256=c["stall_per_256"]), "decomp_engine", key=f"{c} {MEM}",
                     quick_build=True),
              __name__, params=c)
