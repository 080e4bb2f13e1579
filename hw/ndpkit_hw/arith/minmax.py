"""maximum/minimum (``max`` control bit: 1 = maximum) and comparison.  Latency 1.

Semantics (the golden ``maximum``/``minimum``/``compare``): any NaN input gives the
canonical NaN (NumPy's ``np.maximum``), -0 < +0 for maximum/minimum (IEEE 754-2019).
``FpCompare`` returns bits {0: a < b, 1: a == b, 2: a > b, 3: unordered}; -0 == +0
and every comparison with a NaN is false except "unordered", as in NumPy.
"""
from amaranth.hdl import Signal, Cat, Mux

from ndpkit_hw.arith.fp_common import F32, FpUnit, unpack

__all__ = ["FpMinMax", "FpCompare", "minmax_datapath", "minmax_value"]


def _ordered(value):
    """Unsigned key in numeric order for non-NaN patterns (-0 just below +0)."""
    return Mux(value[31], ~value, value | (1 << 31))


class FpMinMax(FpUnit):
    operands = {"a": 32, "b": 32}
    controls = {"max": 1}
    latency = 1

    def lane(self, m, pipe, inputs, controls):
        return minmax_datapath(m, pipe, inputs["a"], inputs["b"], controls["max"])


def minmax_datapath(m, pipe, a_bits, b_bits, is_max):
    """maximum (``is_max``) or minimum of ``a`` and ``b`` through one stage of ``pipe``."""
    return pipe.stage(minmax_value(m, a_bits, b_bits, is_max))


def minmax_value(m, a_bits, b_bits, is_max):
    """The same without a register (for a running maximum updated every cycle)."""
    a, b = unpack(m, a_bits, F32, "a"), unpack(m, b_bits, F32, "b")
    result = Signal(32)
    with m.If(a.is_nan | b.is_nan):
        m.d.comb += result.eq(F32.qnan)
    with m.Elif(is_max):
        m.d.comb += result.eq(Mux(_ordered(a_bits) >= _ordered(b_bits), a_bits, b_bits))
    with m.Else():
        m.d.comb += result.eq(Mux(_ordered(a_bits) <= _ordered(b_bits), a_bits, b_bits))
    return result


class FpCompare(FpUnit):
    operands = {"a": 32, "b": 32}
    result_width = 4
    latency = 1

    def lane(self, m, pipe, inputs, controls):
        a_bits, b_bits = inputs["a"], inputs["b"]
        a, b = unpack(m, a_bits, F32, "a"), unpack(m, b_bits, F32, "b")
        unordered = a.is_nan | b.is_nan
        both_zero = a.is_zero & b.is_zero
        ka, kb = _ordered(a_bits), _ordered(b_bits)
        lt = ~unordered & ~both_zero & (ka < kb)
        gt = ~unordered & ~both_zero & (ka > kb)
        eq = ~unordered & (both_zero | (ka == kb))
        return pipe.stage(Cat(lt, eq, gt, unordered))
