"""Bench: every floating-point unit against its golden function, bit for bit.

Operands come from tb/arith/fp_units.py (corner-value cross products, cancellation
pairs, subnormals, ties, overflow edges, uniform bits; exhaustive for the 16-bit
input conversions); control bits are random per vector; VALID is dropped at random
(the pipeline must keep order and drop nothing).  Every result is compared with the
golden function; NaN results are the canonical quiet NaN on both sides.
"""
import math

import cocotb
import numpy as np
import pytest
from cocotb.triggers import RisingEdge

from ndpkit_tools.sim.bench import bench_params, start_clock_and_reset
from tb.arith.fp_units import UNITS


def _pack_fields(fields, lanes):
    """(name, width) in layout order -> {name: (offset, width)} for the flat payload."""
    out, offset = {}, 0
    for name, width, per_lane in fields:
        out[name] = (offset, width)
        offset += width * (lanes if per_lane else 1)
    return out


@cocotb.test(timeout_time=100, timeout_unit="sec")
async def random_vectors(dut):
    p = bench_params()
    spec = UNITS[p["unit"]]
    unit_cls = spec.component_class()
    lanes = p["lanes"]
    rng = np.random.default_rng(cocotb.RANDOM_SEED)
    operands = {k: np.asarray(v) for k, v in spec.generate(rng, p["count"]).items()}
    n = len(next(iter(operands.values())))
    cycles = math.ceil(n / lanes)
    for k, v in operands.items():
        operands[k] = np.resize(v, cycles * lanes)           # pad by repeating
    controls = {c: rng.integers(0, 2, cycles) for c in spec.controls}
    if spec.reduces:      # one result per vector: the golden function reduces the lane axis
        expected = np.asarray(spec.golden({k: v.reshape(cycles, lanes) for k, v in operands.items()}, controls))
        out_lanes = 1
    else:
        expected = np.asarray(spec.golden(operands, {c: np.repeat(v, lanes) for c, v in controls.items()}))
        out_lanes = lanes
    fields = [(k, w, True) for k, w in unit_cls.operands.items()] + [(c, 1, False) for c in spec.controls]
    layout = _pack_fields(fields, lanes)
    words = []
    for i in range(cycles):
        word = 0
        for k, (offset, width) in layout.items():
            if k in operands:
                for lane in range(lanes):
                    word |= int(operands[k][i * lanes + lane]) << (offset + lane * width)
            else:
                word |= int(controls[k][i]) << offset
        words.append(word)
    result_width, mask = unit_cls.result_width, (1 << unit_cls.result_width) - 1

    dut.i_valid.value = 0
    await start_clock_and_reset(dut)
    got, sent, idle = [], 0, 0
    while len(got) < cycles:
        await RisingEdge(dut.clk)
        if int(dut.o_valid.value):
            word = int(dut.o_payload.value)
            got.append([(word >> (lane * result_width)) & mask for lane in range(out_lanes)])
        if sent < cycles and rng.random() >= p["gap"]:
            dut.i_payload.value = words[sent]
            dut.i_valid.value = 1
            sent += 1
        else:
            dut.i_valid.value = 0
            idle += 1
        if idle > 10 * cycles + 100:
            raise TimeoutError("results stopped coming")
    got = np.array(got, dtype=np.uint64).reshape(-1)
    want = expected.astype(np.uint64) & mask
    bad = np.nonzero(got != want)[0]
    if len(bad):
        lines = []
        for i in bad[:8]:
            sel = slice(i * lanes, (i + 1) * lanes) if spec.reduces else slice(i, i + 1)
            args = ", ".join(f"{k}={[hex(int(x)) for x in v[sel]]}" for k, v in operands.items())
            ctl = ", ".join(f"{c}={int(controls[c][i // out_lanes])}" for c in controls)
            lines.append(f"  {args} {ctl}: got {int(got[i]):#x}, want {int(want[i]):#x}")
        raise AssertionError(f"{len(bad)} of {len(got)} results differ:\n" + "\n".join(lines))
    dut._log.info("%s: %d results bit-exact (%d lanes)", p["unit"], len(got), lanes)


LANES = 4
TREE_LANES = 8


def unit_lanes(unit: str) -> int:
    return TREE_LANES if UNITS[unit].reduces else LANES


def fp_design(unit: str):
    from ndpkit_tools.sim.runner import Design
    return Design(UNITS[unit].build(unit_lanes(unit)), f"fp_{unit}", key=f"{unit} lanes={unit_lanes(unit)}",
                  quick_build=True)


@pytest.mark.sim
@pytest.mark.parametrize("unit", UNITS)
def test_fp_unit(unit):
    from ndpkit_tools.sim.runner import run_bench
    run_bench(fp_design(unit), __name__, params=dict(unit=unit, lanes=unit_lanes(unit), count=20_000, gap=0.2))


@pytest.mark.long
@pytest.mark.parametrize("unit", [u for u in UNITS if not UNITS[u].exhaustive])
def test_fp_unit_million(unit):
    from ndpkit_tools.sim.runner import run_bench
    run_bench(fp_design(unit), __name__, params=dict(unit=unit, lanes=unit_lanes(unit), count=1_000_000,
                                                     gap=0.05))


def test_every_unit_has_a_golden_model():
    from ndpkit_hw.arith import UNIT_CLASSES
    assert set(UNITS) == set(UNIT_CLASSES)
