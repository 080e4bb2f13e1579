"""Binary32 divide, RNE, subnormals.  Radix-2 non-restoring division (one add or
subtract a stage, the restoring division's quotient bits), one quotient bit per
pipeline stage: latency 33, II=1 per lane.

Both significands are normalised (subnormals shifted up); the 27-bit quotient
floor(sig_a * 2**26 / sig_b) has 26 or 27 significant bits, and the final remainder
gives the sticky bit, so the shared round/pack path rounds exactly once.
"""
from amaranth.hdl import Signal, Cat, Const, Mux, signed

from ndpkit_hw.arith.fp_common import F32, FpUnit, leading_zeros, round_bits, round_pack, unpack, select_result

__all__ = ["FpDiv"]

QUOTIENT_BITS = 27


class FpDiv(FpUnit):
    operands = {"a": 32, "b": 32}
    latency = QUOTIENT_BITS + 6

    def lane(self, m, pipe, inputs, controls):
        a, b = unpack(m, inputs["a"], F32, "a"), unpack(m, inputs["b"], F32, "b")
        sign = a.sign ^ b.sign
        nan = a.is_nan | b.is_nan | (a.is_zero & b.is_zero) | (a.is_inf & b.is_inf)
        inf = a.is_inf | b.is_zero
        zero = a.is_zero | b.is_inf
        lz_a, lz_b = leading_zeros(m, a.sig, "div_a"), leading_zeros(m, b.sig, "div_b")
        # the counts are registered before the shifts and the exponent
        a_sig, b_sig, a_exp, b_exp, lz_a, lz_b, sign, nan, inf, zero = pipe.stage(
            a.sig, b.sig, a.exp, b.exp, lz_a, lz_b, sign, nan, inf, zero)
        sig_a, sig_b = Signal(24), Signal(24)
        exp = Signal(signed(11))
        # quotient bit 26 weighs 2**(ea - eb) for normalised significands
        m.d.comb += [sig_a.eq(a_sig << lz_a), sig_b.eq(b_sig << lz_b),
                     exp.eq((a_exp - lz_a) - (b_exp - lz_b) + F32.bias)]
        remainder, divisor, exp, sign, nan, inf, zero = pipe.stage(sig_a, sig_b, exp, sign, nan, inf, zero)

        # non-restoring: the partial remainder may go negative (then the divisor is added
        # back in the next step instead of being subtracted); its quotient bits are the
        # restoring division's (bit = remainder >= 0) with one add/subtract per stage
        quotient = None
        remainder = Cat(remainder, Const(0, 2))          # 26-bit two's complement, in [-2d, 2d)
        for bit in reversed(range(QUOTIENT_BITS)):
            subtract = ~remainder[-1]
            # subtract: r + ~d + 1; add: r + d; the +1 rides in on the extra low bit
            operand = Cat(divisor, Const(0, 2)) ^ subtract.replicate(26)
            step = Signal(27, name=f"div_step{bit}")
            m.d.comb += step.eq(Cat(subtract, remainder) + Cat(subtract, operand))
            partial = step[1:]                           # in [-d, d)
            take = ~partial[-1]
            quotient = take if quotient is None else Cat(take, quotient)
            next_remainder = Signal(26, name=f"div_rem{bit}")
            m.d.comb += next_remainder.eq(partial << 1 if bit else partial)
            remainder, quotient, divisor, exp, sign, nan, inf, zero = pipe.stage(
                next_remainder, quotient, divisor, exp, sign, nan, inf, zero)
        # the last partial remainder restored (negative: the divisor added back) is exact
        restored = Signal(26)
        m.d.comb += restored.eq(Mux(remainder[-1], remainder + divisor, remainder))
        sticky = restored != 0

        # normalising: the quotient's top bit is bit 26 or 25 (significands in [1, 2)), so a
        # shift of one place or none, not a leading-zero count and a shifter
        keep = round_bits(F32)
        below = QUOTIENT_BITS - keep
        top = quotient[-1]
        shifted = Signal(QUOTIENT_BITS, name="div_shifted")
        m.d.comb += shifted.eq(Mux(top, quotient, quotient << 1))
        norm = Signal(keep + 1, name="div_norm")
        norm_exp = Signal(signed(len(exp) + 1), name="div_norm_exp")
        m.d.comb += [norm.eq(Cat(shifted[:below] != 0 if below else Const(0, 1), shifted[below:])),
                     norm_exp.eq(exp - ~top)]
        norm, norm_exp, sticky, sign, nan, inf, zero = pipe.stage(norm, norm_exp, sticky, sign, nan, inf, zero)

        packed, (sign, nan, inf, zero) = round_pack(
            m, F32, sign, norm, norm_exp, sticky, "div", pipe=pipe, carry=(sign, nan, inf, zero))
        result = select_result(m, 32, packed, [
            (nan, F32.qnan),
            (inf, F32.inf(sign)),
            (zero, F32.zero(sign)),
        ])
        return pipe.stage(result)
