"""Fixed-latency dataflow graphs of floating-point operations.

An engine's arithmetic is a graph of unit datapaths (``ndpkit_hw.arith``), each with
its constant latency.  :class:`Dataflow` schedules it as soon as possible: every
value carries the cycle it is ready at, an operation starts when its last operand is
ready, and earlier operands are delayed to meet it (reset-less shift registers).
The whole graph then has one latency and accepts a new set of operands every cycle.

>>> from amaranth.hdl import Module, Signal
>>> m = Module()
>>> grad, scale, one_minus_beta1, m1 = (Signal(32, name=n) for n in ("grad", "scale", "b1", "m1"))
>>> df = Dataflow(m, "lane0")
>>> g = df.op("mul", df.input(grad), df.input(scale))
>>> m2 = df.op("fma", g, df.input(one_minus_beta1), df.input(m1))
>>> out = df.at(m2, df.latency)         # every output delayed to the graph's end
>>> 0 < g.time < m2.time == df.latency   # the fma starts when the product is ready
True
"""
from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Const, Mux, Signal, Value

from ndpkit_hw.arith.add import FpAdd
from ndpkit_hw.arith.convert import Fp32ToBf16, Fp32ToFp16, Fp16ToFp32, Bf16ToFp32, Int32ToFp32
from ndpkit_hw.arith.div import FpDiv
from ndpkit_hw.arith.exp import FpExp
from ndpkit_hw.arith.fma import FpFma
from ndpkit_hw.arith.fp_common import Pipeline, multiplier_shape
from ndpkit_hw.arith.mul import FpMul, FpMulSplit
from ndpkit_hw.arith.sqrt import FpSqrt

__all__ = ["Timed", "Dataflow", "OPS", "STATIC", "delay_line", "delayed"]

def delay_line(m, value, n: int, name: str, reset: bool = False) -> list:
    """``value`` and its ``n`` successive register copies (reset ones for a valid bit's):
    element k is ``value`` k cycles late, so taps at several delays share one line."""
    shape = value.shape()                # (a layout's view stays one)
    line = [value]
    for s in range(n):
        reg = Signal(shape, name=f"{name}_d{s}", reset_less=not reset)
        m.d.sync += reg.eq(line[-1])
        line.append(reg)
    return line


def delayed(m, value, n: int, name: str, reset: bool = False):
    """``value`` through ``n`` registers (beside a fixed-latency pipeline's result)."""
    return delay_line(m, value, n, name, reset)[-1]


# name -> (unit class, operand names)
OPS = {
    "add": (FpAdd, ("a", "b")),
    "mul": (FpMul, ("a", "b")),
    "mul_split": (FpMulSplit, ("a", "b")),
    "fma": (FpFma, ("a", "b", "c")),
    "div": (FpDiv, ("a", "b")),
    "sqrt": (FpSqrt, ("a",)),
    "exp": (FpExp, ("a",)),
    "fp32_to_fp16": (Fp32ToFp16, ("a",)),
    "fp32_to_bf16": (Fp32ToBf16, ("a",)),
    "fp16_to_fp32": (Fp16ToFp32, ("a",)),
    "bf16_to_fp32": (Bf16ToFp32, ("a",)),
    "int32_to_fp32": (Int32ToFp32, ("a",)),
}


STATIC = -1


@dataclass(frozen=True)
class Timed:
    """A value and the cycle (from the graph's inputs) at which it is valid; ``STATIC``
    for a value held constant while data flows (a command's scalars): never delayed."""
    value: Value
    time: int


class Dataflow:
    def __init__(self, m, name: str, platform=None):
        self.m, self.name = m, name
        self.multiplier = multiplier_shape(platform)     # the hard multipliers' operand slices
        self.latency = 0
        self._count = 0
        self._lines: dict[int, tuple[int, list]] = {}    # id(value) -> (ready time, delay line)

    def _fresh(self, what: str) -> str:
        self._count += 1
        return f"{self.name}_{what}{self._count}"

    def input(self, value, time: int = 0) -> Timed:
        return Timed(Value.cast(value), time)

    def static(self, value) -> Timed:
        """A value the caller keeps constant while vectors are in flight (no delay line)."""
        return Timed(Value.cast(value), STATIC)

    def at(self, timed: Timed, time: int) -> Value:
        """``timed``'s value delayed to ``time`` (shared delay lines: asking for the same
        value at two times costs the longer line once)."""
        if timed.time == STATIC:
            return timed.value
        if time < timed.time:
            raise ValueError(f"{self.name}: a value ready at {timed.time} is wanted at {time}")
        base, line = self._lines.setdefault(id(timed.value), (timed.time, [timed.value]))
        steps = time - base
        while len(line) <= steps:
            reg = Signal(timed.value.shape(), name=self._fresh("dly"), reset_less=True)
            self.m.d.sync += reg.eq(line[-1])
            line.append(reg)
        return line[steps]

    def op(self, name: str, *operands: Timed) -> Timed:
        """Instantiate unit ``name`` on ``operands``; the result is ready ``latency`` later."""
        cls, names = OPS[name]
        if len(operands) != len(names):
            raise TypeError(f"{name} takes {len(names)} operands")
        start = max([0] + [o.time for o in operands])
        unit = cls(lanes=1)
        unit._MustUse__silence = True       # only its lane datapath is used, inline
        pipe = Pipeline(self.m, Const(1), self._fresh(name), self.multiplier)
        controls = {c: Const(0, width) for c, width in cls.controls.items()}
        result = unit.lane(self.m, pipe, {n: self.at(o, start) for n, o in zip(names, operands)}, controls)
        done = Timed(Value.cast(result), start + unit.latency)
        self.latency = max(self.latency, done.time)
        return done

    def sub(self, a: Timed, b: Timed) -> Timed:
        """``a - b``: the adder with b's sign flipped (exactly IEEE subtraction, signed
        zeros included)."""
        return self.op("add", a, Timed(b.value ^ (1 << 31), b.time))

    def select(self, condition: Timed, if_true: Timed, if_false: Timed) -> Timed:
        """A multiplexer (no latency) at the later of its operands' times."""
        t = max(0, condition.time, if_true.time, if_false.time)
        out = Signal(if_true.value.shape(), name=self._fresh("sel"))
        self.m.d.comb += out.eq(Mux(self.at(condition, t), self.at(if_true, t), self.at(if_false, t)))
        return Timed(out, t)
