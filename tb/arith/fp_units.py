"""The floating-point units under test: class, golden function, operand generator.

Shared by the cocotb bench (tb/arith/test_fp_units.py) and the unit tests; the unit
list, how to build a unit and whether it reduces its lanes are the gateware's
(``ndpkit_hw.arith``), which the implementation report (a product module: a wheel ships
no tb) takes them from.  Adding a unit means an entry there and one here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ndpkit.arith import fp
from ndpkit.arith.exp import exp as exp_golden
from ndpkit.arith.fp_cases import corner_pairs, interesting_f32, near_pairs


@dataclass(frozen=True)
class UnitSpec:
    name: str                                  # key of ndpkit_hw.arith.UNIT_CLASSES
    golden: Callable                           # (operands, controls) -> expected results
    generate: Callable                         # (rng, n) -> dict of operand arrays
    controls: tuple = ()
    exhaustive: bool = False                   # generate() ignores n and returns every input

    def component_class(self):
        from ndpkit_hw.arith import unit_class
        return unit_class(self.name)

    def build(self, lanes: int):
        from ndpkit_hw.arith import build_unit
        return build_unit(self.name, lanes)

    @property
    def reduces(self) -> bool:
        from ndpkit_hw.arith import unit_reduces
        return unit_reduces(self.name)


def _binary(rng, n):
    ca, cb = corner_pairs()
    na, nb = near_pairs(rng, n // 3)
    ra, rb = interesting_f32(rng, n), interesting_f32(rng, n)
    a = np.concatenate([ca, na, ra])[:max(n, len(ca))]
    b = np.concatenate([cb, nb, rb])[:max(n, len(cb))]
    return {"a": a, "b": b}


def _ternary(rng, n):
    """Products near the addend (cancellation), tiny and huge mixes, corners, uniform bits."""
    ops = _binary(rng, n)
    k = len(ops["a"])
    c = interesting_f32(rng, k)
    # for a third of the vectors, c is close to -a*b: the exact product rounded, perturbed
    with np.errstate(all="ignore"):
        close = fp.mul(ops["a"], ops["b"]) ^ np.uint32(0x80000000)
    close ^= rng.integers(0, 4, k, dtype=np.uint64).astype(np.uint32)
    pick = rng.random(k) < 0.35
    return {"a": ops["a"], "b": ops["b"], "c": np.where(pick, close, c).astype(np.uint32)}


def _unary_f32(rng, n):
    a = np.concatenate([fp_corners(), interesting_f32(rng, n)])
    return {"a": a[:max(n, len(fp_corners()))]}


def _positive_f32(rng, n):
    """Mostly non-negative operands (negative ones only check the NaN path)."""
    a = _unary_f32(rng, n)["a"]
    keep_sign = rng.random(len(a)) < 0.1
    return {"a": np.where(keep_sign, a, a & np.uint32(0x7FFFFFFF)).astype(np.uint32)}


def _exp_operands(rng, n):
    """Uniform over the interesting range [-110, 95], bit patterns near 0, corners."""
    values = rng.uniform(-110.0, 95.0, n // 2).astype(np.float32).view(np.uint32)
    a = np.concatenate([fp_corners(), values, interesting_f32(rng, n // 2)])
    return {"a": a[:max(n, 64)]}


def fp_corners():
    from ndpkit.arith.fp_cases import CORNERS32
    return CORNERS32


def _narrow_ties(rng, n, drop_bits):
    base = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32) & ~np.uint32((1 << drop_bits) - 1)
    tie = base | np.uint32(1 << (drop_bits - 1))
    near = tie ^ rng.integers(0, 2, n, dtype=np.uint64).astype(np.uint32)   # one ulp either side of the tie
    return np.concatenate([tie, near])


def _to_narrow(drop_bits):
    def gen(rng, n):
        a = np.concatenate([fp_corners(), _narrow_ties(rng, n // 2, drop_bits), interesting_f32(rng, n)])
        return {"a": a[:max(n, 64)]}
    return gen


def _all16(rng, n):
    return {"a": np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)}


def _int32(rng, n):
    edges = np.array([0, 1, -1, 2 ** 31 - 1, -2 ** 31, 2 ** 24, 2 ** 24 + 1, 2 ** 25 + 2, 2 ** 25 + 6, -(2 ** 24 + 3)],
                     dtype=np.int64)
    widths = rng.integers(1, 33, n)
    values = rng.integers(0, 2 ** 32, n, dtype=np.uint64) >> (32 - widths).astype(np.uint64)
    a = np.concatenate([edges & 0xFFFFFFFF, values]).astype(np.uint32)
    return {"a": a[:max(n, len(edges))]}


def _select(name, if_one, if_zero):
    return lambda o, c: np.where(c[name].astype(bool), if_one(o["a"], o["b"]), if_zero(o["a"], o["b"]))


UNITS: dict[str, UnitSpec] = {
    "add": UnitSpec("add", _select("sub", fp.sub, fp.add), _binary, controls=("sub",)),
    "mul": UnitSpec("mul", lambda o, c: fp.mul(o["a"], o["b"]), _binary),
    "fma": UnitSpec("fma", lambda o, c: fp.fma(o["a"], o["b"], o["c"]), _ternary),
    "div": UnitSpec("div", lambda o, c: fp.div(o["a"], o["b"]), _binary),
    "sqrt": UnitSpec("sqrt", lambda o, c: fp.sqrt(o["a"]), _positive_f32),
    "exp": UnitSpec("exp", lambda o, c: exp_golden(o["a"]), _exp_operands),
    "reduce_sum": UnitSpec("reduce_sum", lambda o, c: fp.reduce_tree(o["a"], "sum"), _unary_f32),
    "reduce_max": UnitSpec("reduce_max", lambda o, c: fp.reduce_tree(o["a"], "max"), _unary_f32),
    "dot": UnitSpec("dot", lambda o, c: fp.dot(o["a"], o["b"]), _binary),
    "minmax": UnitSpec("minmax", _select("max", fp.maximum, fp.minimum), _binary, controls=("max",)),
    "compare": UnitSpec("compare", lambda o, c: fp.compare(o["a"], o["b"]), _binary),
    "fp16_to_fp32": UnitSpec("fp16_to_fp32", lambda o, c: fp.fp16_to_fp32(o["a"]), _all16, exhaustive=True),
    "bf16_to_fp32": UnitSpec("bf16_to_fp32", lambda o, c: fp.bf16_to_fp32(o["a"]), _all16, exhaustive=True),
    "fp32_to_fp16": UnitSpec("fp32_to_fp16", lambda o, c: fp.fp32_to_fp16(o["a"]), _to_narrow(13)),
    "fp32_to_bf16": UnitSpec("fp32_to_bf16", lambda o, c: fp.fp32_to_bf16(o["a"]), _to_narrow(16)),
    "int32_to_fp32": UnitSpec("int32_to_fp32",
                              lambda o, c: fp.int32_to_fp32(o["a"].astype(np.uint32).view(np.int32)), _int32),
    "fp32_to_int32": UnitSpec("fp32_to_int32",
                              lambda o, c: fp.fp32_to_int32(o["a"]).view(np.uint32), _unary_f32),
}


def run_one_lane(unit, operands: dict, platform=None) -> list[int]:
    """Push ``operands`` (name -> array) through lane 0 of ``unit`` one a cycle in Amaranth's
    simulator, the unit elaborated for ``platform`` (its multiplier shape: None the
    DSP48E2's); the lane's outputs in order."""
    from amaranth.hdl import Elaboratable
    from amaranth.sim import Simulator

    class OnPlatform(Elaboratable):
        def elaborate(self, _):
            return unit.elaborate(platform)

    n = len(next(iter(operands.values())))
    got = []

    async def bench(ctx):
        for i in range(n + unit.latency):
            if i < n:
                for k, v in operands.items():
                    ctx.set(getattr(unit.i.payload, k)[0], int(v[i]))
                ctx.set(unit.i.valid, 1)
            else:
                ctx.set(unit.i.valid, 0)
            await ctx.tick()
            if ctx.get(unit.o.valid):
                got.append(ctx.get(unit.o.payload[0]))

    sim = Simulator(OnPlatform())
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return got
