"""Reduction trees with a defined order: sum / max / min of N lanes, and a dot product.

Order (mirrored by :func:`ndpkit.arith.fp.reduce_tree`): a balanced binary tree over
adjacent pairs, level by level — for 8 lanes ((x0+x1)+(x2+x3))+((x4+x5)+(x6+x7)) —
each node a correctly rounded binary32 operation.  The dot product first rounds each
product a_i*b_i (FpMul), then sums them with the same tree.  N is a power of two.
One result per cycle; latency = log2(N) x the node latency (+ the multiplier's).
"""
from __future__ import annotations

from amaranth.hdl import Module, Const
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_hw.arith.add import ADD_LATENCY, add_datapath
from ndpkit_hw.arith.fp_common import Pipeline, multiplier_shape
from ndpkit_hw.arith.minmax import minmax_datapath
from ndpkit_hw.arith.mul import MUL_LATENCY, mul_datapath

__all__ = ["FpReduce", "FpDotProduct"]

_NODES = {
    "sum": (ADD_LATENCY, lambda m, pipe, a, b: add_datapath(m, pipe, a, b)),
    "max": (1, lambda m, pipe, a, b: minmax_datapath(m, pipe, a, b, Const(1))),
    "min": (1, lambda m, pipe, a, b: minmax_datapath(m, pipe, a, b, Const(0))),
}


def _levels(lanes: int) -> int:
    if lanes < 2 or lanes & (lanes - 1):
        raise ValueError(f"lanes must be a power of two >= 2, not {lanes}")
    return lanes.bit_length() - 1


def _tree(m: Module, values, valid, op: str):
    """Reduce ``values`` (one per lane, all valid together) pairwise; returns (result, valid)."""
    _, node = _NODES[op]
    pipes = [Pipeline(m, valid, f"{op}_l0_{i}") for i in range(len(values))]
    level = 0
    while len(values) > 1:
        level += 1
        next_values, next_pipes = [], []
        for i in range(0, len(values), 2):
            pipe = Pipeline(m, pipes[i].valid, f"{op}_l{level}_{i // 2}")
            next_values.append(node(m, pipe, values[i], values[i + 1]))
            next_pipes.append(pipe)
        values, pipes = next_values, next_pipes
    return values[0], pipes[0].valid


class FpReduce(wiring.Component):
    """``op`` in {"sum", "max", "min"} over ``lanes`` binary32 values per cycle."""

    operands = {"a": 32}
    controls: dict = {}
    result_width = 32
    reduces = True      # one result per vector, not per lane

    def __init__(self, *, lanes: int = 8, op: str = "sum"):
        if op not in _NODES:
            raise ValueError(f"op must be one of {sorted(_NODES)}, not {op!r}")
        self.lanes, self.op = lanes, op
        self.latency = _levels(lanes) * _NODES[op][0]
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({"a": data.ArrayLayout(32, lanes)}), always_ready=True)),
            "o": Out(stream.Signature(32, always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        values = [self.i.payload.a[i] for i in range(self.lanes)]
        result, valid = _tree(m, values, self.i.valid, self.op)
        m.d.comb += [self.o.payload.eq(result), self.o.valid.eq(valid)]
        return m


class FpDotProduct(wiring.Component):
    """sum_i round(a_i * b_i), summed by the tree above."""

    operands = {"a": 32, "b": 32}
    controls: dict = {}
    result_width = 32
    reduces = True

    def __init__(self, *, lanes: int = 8):
        self.lanes = lanes
        self.latency = MUL_LATENCY + _levels(lanes) * ADD_LATENCY
        lanes_layout = data.ArrayLayout(32, lanes)
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({"a": lanes_layout, "b": lanes_layout}), always_ready=True)),
            "o": Out(stream.Signature(32, always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        products, valid = [], None
        for i in range(self.lanes):
            pipe = Pipeline(m, self.i.valid, f"dot_mul{i}", multiplier_shape(platform))
            products.append(mul_datapath(m, pipe, self.i.payload.a[i], self.i.payload.b[i]))
            valid = valid if valid is not None else pipe.valid
        result, out_valid = _tree(m, products, valid, "sum")
        m.d.comb += [self.o.payload.eq(result), self.o.valid.eq(out_valid)]
        return m
