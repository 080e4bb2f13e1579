"""Bench: the adam engine (readers -> updater -> writers) on the RTL memory model.

Commands go straight into the engine's cmd stream (no shell).  Each good command is
checked against ndpkit.engines.adam.golden over whole arrays, with element counts that are
not multiples of the lanes, odd word counts with 16-bit gradients, every mode and
format; every bad command must complete with its code and change no byte of memory.
Random stalls on every AXI channel (memory model), on cmd and on cpl.
"""
import cocotb
import numpy as np
import pytest

from ndpkit_spec.codes import ErrorCode
from ndpkit.arith import fp
from ndpkit.engines.adam.golden import Format, Mode, adam_step, scalars_for_step
from ndpkit_spec.engines.adam import BLOCK as ADAM
from ndpkit_tools.sim.bench import bench_params, engine_bench

# w64: one lane, two vectors a word; w128x1: one lane, four vectors a word (eight in a
# 16-bit gradient or copy word), the packing of the 512-bit port-rate engine
CONFIGS = {"w64": {"data_width": 64, "max_burst_bytes": 1024, "stall_per_256": 40, "stall": 0.3},
           "w128x1": {"data_width": 128, "lanes": 1, "max_burst_bytes": 1024, "stall_per_256": 40, "stall": 0.3}}
LONG_CONFIGS = {"w128x1"}
REGION = 0x4000          # bytes per array region; arrays start 0x100 in
BASES = {"p": 0x00000, "m": 0x04000, "v": 0x08000, "g": 0x0C000, "copy": 0x10000}
OFFSET = 0x100


def _layouts():
    from ndpkit_hw.shell.engine_frontend import CompletionLayout, command_layout
    return command_layout(ADAM), CompletionLayout


def _bits16(x):
    return np.asarray(x, dtype=np.uint16)


async def _command(dut, source, sink, fields):
    cmd_layout, _ = _layouts()
    source.send(fields)
    return await sink.receive(timeout_cycles=200_000)


async def _good(dut, p, rng, source, sink, memory, n, mode, grad_fmt, copy_fmt, tag):
    word = p["data_width"] // 8
    pp = fp.bits(rng.normal(0, 1, n).astype(np.float32))
    mm = fp.bits(rng.normal(0, 1e-2, n).astype(np.float32))
    vv = fp.bits(np.abs(rng.normal(0, 1e-4, n)).astype(np.float32))
    g32 = rng.normal(0, 1e-2, n).astype(np.float32)
    g32[rng.random(n) < 0.05] = np.inf
    if grad_fmt == Format.FP32:
        gg, graw = fp.bits(g32), fp.bits(g32).tobytes()
    else:
        gg = fp.fp32_to_fp16(fp.bits(g32)) if grad_fmt == Format.FP16 else fp.fp32_to_bf16(fp.bits(g32))
        graw = gg.tobytes()
    image = bytearray(rng.bytes(5 * REGION))          # random everywhere: the guards
    for name, data in (("p", pp.tobytes()), ("m", mm.tobytes()), ("v", vv.tobytes()), ("g", graw)):
        image[BASES[name] + OFFSET:BASES[name] + OFFSET + len(data)] = data
    memory.write(0, bytes(image))
    sc = scalars_for_step(int(rng.integers(1, 100)), lr=1e-3, weight_decay=0.01, mode=mode,
                          grad_scale=float(rng.choice([1.0, 0.5])))
    fields = {"format_mode": int(mode), "format_grad": int(grad_fmt), "format_copy": int(copy_fmt or 0),
              "count": n, "tag": tag, **{k: BASES[k] + OFFSET for k in BASES}, **sc.bits()}
    cpl = await _command(dut, source, sink, fields)
    assert cpl["tag"] == tag and cpl["error"] == 0, cpl
    want_p, want_m, want_v, want_copy, nonfinite = adam_step(pp, mm, vv, gg, sc, mode=mode, grad_format=grad_fmt,
                                                             copy_format=copy_fmt or None)
    assert cpl["aux"] == nonfinite, f"non-finite count {cpl['aux']} != {nonfinite}"
    expect = bytearray(image)
    for name, data in (("p", want_p), ("m", want_m), ("v", want_v)) + ((("copy", want_copy),) if copy_fmt else ()):
        raw = np.asarray(data).tobytes()
        expect[BASES[name] + OFFSET:BASES[name] + OFFSET + len(raw)] = raw
    got = memory.read(0, 5 * REGION)
    for name, base in BASES.items():
        a, b = got[base:base + REGION], bytes(expect[base:base + REGION])
        if a != b:
            diff = next(i for i in range(REGION) if a[i] != b[i])
            raise AssertionError(f"n={n} {mode.name} grad {grad_fmt.name} copy {copy_fmt}: {name} region differs "
                                 f"first at byte {diff - OFFSET} of the array")
    words = -(-n // (word // 4))
    len32 = words * word
    len16 = -(-words // 2) * word
    assert cpl["bytes_read"] == 3 * len32 + (len32 if grad_fmt == Format.FP32 else len16)
    assert cpl["bytes_written"] == 3 * len32 + (len16 if copy_fmt else 0)


async def _bad(dut, rng, source, sink, memory, change, code, tag):
    before = memory.read(0, 5 * REGION)
    fields = {"format_mode": 0, "format_grad": 0, "format_copy": 1, "count": 40, "tag": tag,
              **{k: BASES[k] + OFFSET for k in BASES}, **scalars_for_step(1, lr=1e-3).bits()}
    fields.update(change)
    cpl = await _command(dut, source, sink, fields)
    assert cpl["error"] == code, f"{change}: {ErrorCode(cpl['error']).name} != {code.name}"
    assert cpl["bytes_written"] == 0 and cpl["aux"] == 0
    assert memory.read(0, 5 * REGION) == before, f"{change}: memory changed"


@cocotb.test(timeout_time=900, timeout_unit="sec")
async def adam_engine(dut):
    p = bench_params()
    rng = np.random.default_rng(cocotb.RANDOM_SEED)
    source, sink, memory = await engine_bench(dut, _layouts()[0], stall=p["stall"])
    tag = 0
    for n, mode, grad_fmt, copy_fmt in ((37, Mode.ADAMW, Format.FP32, Format.FP16),
                                        (50, Mode.ADAM, Format.FP16, Format.BF16),
                                        (1, Mode.ADAMW, Format.BF16, 0),
                                        (203, Mode.ADAMW, Format.FP16, Format.FP16),
                                        (64, Mode.ADAM, Format.FP32, 0)):
        await _good(dut, p, rng, source, sink, memory, n, mode, grad_fmt, copy_fmt, tag)
        tag += 1
    for change, code in (({"format_grad": 3}, ErrorCode.BAD_FIELD), ({"format_mode": 2}, ErrorCode.BAD_FIELD),
                         ({"count": 0}, ErrorCode.ZERO_LENGTH), ({"p": BASES["p"] + OFFSET + 4}, ErrorCode.UNALIGNED),
                         ({"g": 0xFFFC0}, ErrorCode.OUT_OF_WINDOW), ({"m": BASES["p"] + OFFSET}, ErrorCode.OVERLAP),
                         ({"copy": BASES["v"] + OFFSET + 64}, ErrorCode.OVERLAP),
                         ({"count": 0x7FFF_FFFF}, ErrorCode.OUT_OF_WINDOW)):
        await _bad(dut, rng, source, sink, memory, change, code, tag)
        tag += 1
    await _good(dut, p, rng, source, sink, memory, 33, Mode.ADAMW, Format.BF16, Format.BF16, tag)


SPARSE_BASES = {**BASES, "idx": 0x14000}


def _sparse_fields(rng, n, k, fmt, mode, copy_fmt, tag, indices=None):
    """Memory image (random guards) and a sparse-mode command."""
    pp = fp.bits(rng.normal(0, 1, n).astype(np.float32))
    mm = fp.bits(rng.normal(0, 1e-2, n).astype(np.float32))
    vv = fp.bits(np.abs(rng.normal(0, 1e-4, n)).astype(np.float32))
    if indices is None:
        indices = np.sort(rng.choice(n, size=k, replace=False)).astype(np.uint32)
    vals32 = rng.normal(0, 1e-2, len(indices)).astype(np.float32)
    vals32[rng.random(len(indices)) < 0.05] = -np.inf
    vals = fp.bits(vals32)
    if fmt != Format.FP32:
        vals = fp.fp32_to_fp16(vals) if fmt == Format.FP16 else fp.fp32_to_bf16(vals)
    image = bytearray(rng.bytes(6 * REGION))
    for name, arr in (("p", pp), ("m", mm), ("v", vv), ("g", vals), ("idx", np.asarray(indices, np.uint32))):
        raw = arr.tobytes()
        image[SPARSE_BASES[name] + OFFSET:SPARSE_BASES[name] + OFFSET + len(raw)] = raw
    sc = scalars_for_step(int(rng.integers(1, 100)), lr=1e-3, weight_decay=0.01, mode=mode)
    fields = {"format_mode": int(mode), "format_grad": int(fmt), "format_copy": int(copy_fmt or 0),
              "format_sparse": 1, "count": n, "pairs": len(indices), "tag": tag,
              **{k_: SPARSE_BASES[k_] + OFFSET for k_ in SPARSE_BASES}, **sc.bits()}
    return image, fields


async def _sparse(p, source, sink, memory, image, fields, expect_error=ErrorCode.OK):
    """Run one sparse command; memory must equal the golden execute's."""
    from ndpkit.engines.adam.golden import check, execute
    word = p["data_width"] // 8
    memory.write(0, bytes(image))
    expect = np.frombuffer(bytes(image), dtype=np.uint8).copy()
    error, _ = check(fields, word_bytes=word, window_base=0, window_size=1 << 20)
    read = written = aux = 0
    if not error:
        error, read, written, aux = execute(expect, fields, word_bytes=word)
    assert error == expect_error, f"the golden model says {ErrorCode(error).name}"
    cpl = await _command(None, source, sink, fields)
    assert (cpl["error"], cpl["aux"]) == (error, aux), (cpl, error, aux)
    assert (cpl["bytes_read"], cpl["bytes_written"]) == (read, written), cpl
    got = np.frombuffer(memory.read(0, 6 * REGION), dtype=np.uint8)
    for name, base in SPARSE_BASES.items():
        bad = np.flatnonzero(got[base:base + REGION] != expect[base:base + REGION])
        assert bad.size == 0, (f"n={fields['count']} k={fields['pairs']} {Format(fields['format_grad']).name}: "
                               f"{name} region differs first at byte {int(bad[0]) - OFFSET} of the array")


@cocotb.test(timeout_time=900, timeout_unit="sec")
async def adam_engine_sparse(dut):
    """Stream-mode decompression fused into the update: good pairs at several densities
    and formats; pairs out of order, repeated or past n stop the update where the golden
    model says, and the next command works."""
    p = bench_params()
    rng = np.random.default_rng(cocotb.RANDOM_SEED + 1)
    source, sink, memory = await engine_bench(dut, _layouts()[0], stall=p["stall"])
    tag = 100
    for n, k, fmt, mode, copy_fmt in ((300, 30, Format.FP32, Mode.ADAMW, Format.FP16),
                                      (301, 3, Format.FP16, Mode.ADAM, 0),
                                      (77, 77, Format.BF16, Mode.ADAMW, Format.BF16),
                                      (1, 1, Format.FP32, Mode.ADAMW, 0),
                                      (257, 60, Format.FP16, Mode.ADAMW, Format.FP16)):
        image, fields = _sparse_fields(rng, n, k, fmt, mode, copy_fmt, tag)
        await _sparse(p, source, sink, memory, image, fields)
        tag += 1
    # bad pairs: [indices], expected code
    for indices, code in (([3, 9, 40, 40, 77], ErrorCode.BAD_FIELD),      # duplicate
                          ([5, 61, 60, 99], ErrorCode.BAD_FIELD),          # out of order
                          ([0, 2, 150, 151], ErrorCode.OUT_OF_WINDOW),     # index >= n
                          ([120, 1], ErrorCode.OUT_OF_WINDOW),             # first pair past n
                          ([7, 3], ErrorCode.BAD_FIELD)):
        image, fields = _sparse_fields(rng, 120, 0, Format.FP16, Mode.ADAMW, Format.FP16, tag,
                                       indices=np.array(indices, np.uint32))
        dut._log.info(f"bad pairs {indices} at {cocotb.utils.get_sim_time('ns')} ns")
        await _sparse(p, source, sink, memory, image, fields, code)
        tag += 1
    # count 0 right after a pair error (a rejected command whose vector count differs
    # from the stopped one's): found by the fuzz suite, it once pushed a stale beat into
    # the idle writers and shifted the next command's writes
    for change, code in (({"count": 0}, ErrorCode.ZERO_LENGTH),
                         ({"pairs": 0}, ErrorCode.ZERO_LENGTH), ({"pairs": 121}, ErrorCode.BAD_FIELD),
                         ({"idx": SPARSE_BASES["p"] + OFFSET}, ErrorCode.OVERLAP),
                         ({"idx": 0xFFFF0}, ErrorCode.OUT_OF_WINDOW)):
        image, fields = _sparse_fields(rng, 120, 10, Format.FP32, Mode.ADAMW, 0, tag)
        fields.update(change)
        await _sparse(p, source, sink, memory, image, fields, code)
        tag += 1
    image, fields = _sparse_fields(rng, 199, 20, Format.BF16, Mode.ADAM, Format.FP16, tag)
    await _sparse(p, source, sink, memory, image, fields)


@pytest.mark.sim
@pytest.mark.parametrize("config", [pytest.param(c, marks=[pytest.mark.long] if c in LONG_CONFIGS else [])
                                    for c in CONFIGS])
def test_adam_engine(config):
    from ndpkit_tools.sim.runner import Design, run_bench
    from ndpkit_hw.engines.adam.engine import AdamEngine
    from ndpkit_hw.engines.harness import EngineHarness
    c = CONFIGS[config]
    engine = AdamEngine(data_width=c["data_width"], max_burst_bytes=c["max_burst_bytes"], lanes=c.get("lanes"))
    run_bench(Design(EngineHarness(engine, mem_size=1 << 20, stall_per_256=c["stall_per_256"]), "adam_engine", key=str(c),
                     quick_build=True),
              __name__, params=c)
