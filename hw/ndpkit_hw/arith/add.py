"""Binary32 add/subtract (``sub`` control bit), RNE, subnormals.  Latency 9, II=1.

The larger-magnitude operand A is found by comparing the 31 magnitude bits; B's
significand, with three extra low bits (guard, round, sticky), is shifted right by
the exponent difference with everything shifted out ORed into the sticky bit; the
28-bit sum or difference then goes through the shared normalise/round path.
An exact zero sum is +0, except (-0) + (-0) = -0 (and x - x = +0).
"""
from amaranth.hdl import Signal, Cat, Const, Mux, signed

from ndpkit_hw.arith.fp_common import F32, FpUnit, normalize, round_bits, round_pack, unpack, select_result

__all__ = ["FpAdd", "add_datapath", "ADD_LATENCY"]

EXTRA = 3
ADD_LATENCY = 9


class FpAdd(FpUnit):
    operands = {"a": 32, "b": 32}
    controls = {"sub": 1}
    latency = ADD_LATENCY

    def lane(self, m, pipe, inputs, controls):
        return add_datapath(m, pipe, inputs["a"], inputs["b"] ^ (controls["sub"] << 31))


def add_datapath(m, pipe, a_bits, b_bits):
    """``a + b`` through ``ADD_LATENCY`` stages of ``pipe``."""
    # stage 1: the magnitude comparison and both exponent differences, side by side
    swap = Signal()
    m.d.comb += swap.eq(b_bits[:31] > a_bits[:31])
    exp_a = Mux(a_bits[23:31] == 0, 1, a_bits[23:31])
    exp_b = Mux(b_bits[23:31] == 0, 1, b_bits[23:31])
    a_minus_b, b_minus_a = Signal(8), Signal(8)
    m.d.comb += [a_minus_b.eq(exp_a - exp_b), b_minus_a.eq(exp_b - exp_a)]
    raw_a, raw_b, swap, a_minus_b, b_minus_a = pipe.stage(a_bits, b_bits, swap, a_minus_b, b_minus_a)

    # stage 2: order the operands, special cases, clamped shift distance
    big_bits, small_bits = Mux(swap, raw_b, raw_a), Mux(swap, raw_a, raw_b)
    big, small = unpack(m, big_bits, F32, "big"), unpack(m, small_bits, F32, "small")
    nan = big.is_nan | small.is_nan | (big.is_inf & small.is_inf & (big.sign != small.sign))
    inf = big.is_inf
    subtract = big.sign ^ small.sign
    both_zero_sign = big.sign & small.sign          # sign of an exact zero when adding zeros
    distance = Mux(swap, b_minus_a, a_minus_b)
    # any distance of 32 or more shifts everything out: clamping by the top exponent
    # bits needs no comparator
    shift = Signal(5)
    m.d.comb += shift.eq(Mux(distance[5:] != 0, 31, distance[:5]))
    (sig_big, sig_small, exp, shift, sign, subtract, both_zero_sign, nan, inf) = pipe.stage(
        big.sig, small.sig, big.exp, shift, big.sign, subtract, both_zero_sign, nan, inf)

    # stage 3: alignment
    width = 24 + EXTRA
    small_ext = Cat(Const(0, EXTRA), sig_small)
    wide = Signal(width + 32)
    m.d.comb += wide.eq(Cat(Const(0, 32), small_ext) >> shift)
    aligned = Signal(width)
    m.d.comb += aligned.eq(wide[32:] | (wide[:32] != 0))                # sticky into bit 0
    big_ext = Cat(Const(0, EXTRA), sig_big)
    big_ext, aligned, exp, sign, subtract, both_zero_sign, nan, inf = pipe.stage(
        big_ext, aligned, exp, sign, subtract, both_zero_sign, nan, inf)

    total = Signal(width + 1)
    m.d.comb += total.eq(Mux(subtract, big_ext - aligned, big_ext + aligned))
    zero_sign = Signal()
    m.d.comb += zero_sign.eq(~subtract & both_zero_sign)
    # total's top bit (bit 27) weighs 2**(exp - bias + 1)
    top_exp = Signal(signed(10))
    m.d.comb += top_exp.eq(exp + 1)
    total, top_exp, sign, zero_sign, nan, inf = pipe.stage(total, top_exp, sign, zero_sign, nan, inf)

    norm, norm_exp, is_zero, (sign, zero_sign, nan, inf) = normalize(
        m, total, top_exp, "add", pipe=pipe, carry=(sign, zero_sign, nan, inf), keep=round_bits(F32), min_exp=1)
    norm, norm_exp, is_zero, sign, zero_sign, nan, inf = pipe.stage(
        norm, norm_exp, is_zero, sign, zero_sign, nan, inf)

    packed, (is_zero, zero_sign, nan, inf, sign) = round_pack(
        m, F32, sign, norm, norm_exp, 0, "add", pipe=pipe, carry=(is_zero, zero_sign, nan, inf, sign),
        underflow=False)
    result = select_result(m, 32, packed, [
        (nan, F32.qnan),
        (inf, F32.inf(sign)),
        (is_zero, F32.zero(zero_sign)),
    ])
    return pipe.stage(result)
