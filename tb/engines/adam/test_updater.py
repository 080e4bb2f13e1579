"""Bench: the Adam update datapath against ndpkit.engines.adam.golden, bit for bit.

Random p, m, v and gradients (normal values, zeros of both signs, subnormals, huge
and tiny magnitudes, inf and NaN gradients), both modes, both copy formats, random
stalls on the input and the output streams.  Each run checks every lane of every
vector, the non-finite flags, and that the pipeline drains (``idle``).
"""
import cocotb
import numpy as np
import pytest
from cocotb.triggers import RisingEdge

from ndpkit.arith import fp
from ndpkit.engines.adam.golden import Format, Mode, adam_step, scalars_for_step
from ndpkit_tools.sim.bench import StreamSink, StreamSource, bench_params, start_clock_and_reset, wait_until

CONFIGS = {"lanes2": {"lanes": 2, "vectors": 600, "stall": 0.3}}


def operands(rng, n):
    """float32 bit patterns of every interesting kind."""
    kind = rng.integers(0, 8, n)
    x = rng.normal(0, 1e-2, n).astype(np.float32)
    x[kind == 1] = rng.normal(0, 1e30, (kind == 1).sum())
    x[kind == 2] = rng.normal(0, 1e-30, (kind == 2).sum())
    x[kind == 3] = fp.floats(rng.integers(0, 1 << 23, (kind == 3).sum(), dtype=np.uint32))      # subnormal
    x[kind == 4] = np.float32(-0.0)
    x[kind == 5] = 0.0
    return fp.bits(x)


def _vector(values, lanes, start):
    return sum(int(values[start + i]) << (32 * i) for i in range(lanes))


async def _run(dut, p, rng, source, sink, mode, copy_fmt, step, grad_fmt):
    lanes, n = p["lanes"], p["vectors"] * p["lanes"]
    pp, mm, gg = operands(rng, n), operands(rng, n), operands(rng, n)
    vv = operands(rng, n) & 0x7FFF_FFFF
    special = rng.random(n) < 0.03
    gg[special] = rng.choice(np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0x7F812345], np.uint32), special.sum())
    if grad_fmt == Format.FP16:
        gg = fp.fp32_to_fp16(gg).astype(np.uint32)
        sub = rng.random(n) < 0.05
        gg[sub] = rng.integers(0, 0x400, sub.sum())                         # fp16 subnormals
    elif grad_fmt == Format.BF16:
        gg = fp.fp32_to_bf16(gg).astype(np.uint32)
    sc = scalars_for_step(step, lr=rng.choice([1e-3, 3e-4]), weight_decay=rng.choice([0.0, 0.01]), mode=mode,
                          grad_scale=rng.choice([1.0, 1 / 4096]))
    for name, value in sc.bits().items():
        getattr(dut, name).value = value
    dut.mode.value = int(mode)
    dut.copy_bf16.value = int(copy_fmt == Format.BF16)
    dut.grad_format.value = int(grad_fmt)
    g_in = gg if grad_fmt == Format.FP32 else gg.astype(np.uint16)
    want_p, want_m, want_v, want_copy, nonfinite = adam_step(pp, mm, vv, g_in, sc, mode=mode, copy_format=copy_fmt,
                                                             grad_format=grad_fmt)

    width = 32 * lanes
    for k in range(0, n, lanes):
        source.send(_vector(pp, lanes, k) | _vector(mm, lanes, k) << width | _vector(vv, lanes, k) << 2 * width
                    | _vector(gg, lanes, k) << 3 * width)
    got_nonfinite = 0
    for k in range(0, n, lanes):
        word = await sink.receive(timeout_cycles=5000)
        for lane in range(lanes):
            i = k + lane
            got = [(word >> (j * width + 32 * lane)) & 0xFFFF_FFFF for j in range(3)]
            copy = (word >> (3 * width + 16 * lane)) & 0xFFFF
            want = [int(want_p[i]), int(want_m[i]), int(want_v[i])]
            assert got == want, (f"element {i} lane {lane}: p/m/v {[hex(x) for x in got]} != "
                                 f"{[hex(x) for x in want]} (inputs {hex(pp[i])} {hex(mm[i])} {hex(vv[i])} "
                                 f"{hex(gg[i])}, mode {mode.name})")
            assert copy == int(want_copy[i]), f"element {i}: copy {copy:#x} != {int(want_copy[i]):#x}"
        got_nonfinite += bin((word >> (3 * width + 16 * lanes)) & ((1 << lanes) - 1)).count("1")
    assert got_nonfinite == nonfinite, f"non-finite gradients: {got_nonfinite} != {nonfinite}"
    await wait_until(dut.clk, lambda: int(dut.idle.value) == 1, 1000, "the updater to drain")


@cocotb.test(timeout_time=600, timeout_unit="sec")
async def random_updates(dut):
    p = bench_params()
    rng = np.random.default_rng(cocotb.RANDOM_SEED)
    source = StreamSource(dut, "i", stall=p["stall"])
    sink = StreamSink(dut, "o", stall=p["stall"])
    await start_clock_and_reset(dut)
    for mode, copy_fmt, step, grad_fmt in ((Mode.ADAMW, Format.FP16, 1, Format.FP32),
                                           (Mode.ADAM, Format.BF16, 5, Format.FP16),
                                           (Mode.ADAMW, Format.BF16, 1000, Format.BF16)):
        await _run(dut, p, rng, source, sink, mode, copy_fmt, step, grad_fmt)
        for _ in range(5):
            await RisingEdge(dut.clk)


# make sim: its Verilator build alone takes ~15 min of a core; in make test the same
# datapath is checked bit for bit inside the engine bench (tb/engines/adam/test_engine.py)
# and the device tests
@pytest.mark.sim
@pytest.mark.long
@pytest.mark.parametrize("config", CONFIGS)
def test_adam_updater(config):
    from ndpkit_tools.sim.runner import Design, run_bench
    from ndpkit_hw.engines.adam.updater import AdamUpdater
    params = CONFIGS[config]
    run_bench(Design(AdamUpdater(lanes=params["lanes"]), "adam_updater", key=f"lanes={params['lanes']}", quick_build=True),
              __name__, params=params)
