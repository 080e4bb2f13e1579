"""Binary32 divide, RNE, subnormals.  Radix-2 restoring division, one quotient bit
per pipeline stage: latency 32, II=1 per lane.

Both significands are normalised (subnormals shifted up); the 27-bit quotient
floor(sig_a * 2**26 / sig_b) has 26 or 27 significant bits, and the final remainder
gives the sticky bit, so the shared round/pack path rounds exactly once.
"""
from amaranth.hdl import Signal, Cat, Mux, signed

from ndpkit_hw.arith.fp_common import F32, FpUnit, leading_zeros, normalize, round_pack, unpack, select_result

__all__ = ["FpDiv"]

QUOTIENT_BITS = 27


class FpDiv(FpUnit):
    operands = {"a": 32, "b": 32}
    latency = QUOTIENT_BITS + 5

    def lane(self, m, pipe, inputs, controls):
        a, b = unpack(m, inputs["a"], F32, "a"), unpack(m, inputs["b"], F32, "b")
        sign = a.sign ^ b.sign
        nan = a.is_nan | b.is_nan | (a.is_zero & b.is_zero) | (a.is_inf & b.is_inf)
        inf = a.is_inf | b.is_zero
        zero = a.is_zero | b.is_inf
        lz_a, lz_b = leading_zeros(m, a.sig, "div_a"), leading_zeros(m, b.sig, "div_b")
        sig_a, sig_b = Signal(24), Signal(24)
        exp = Signal(signed(11))
        # quotient bit 26 weighs 2**(ea - eb) for normalised significands
        m.d.comb += [sig_a.eq(a.sig << lz_a), sig_b.eq(b.sig << lz_b),
                     exp.eq((a.exp - lz_a) - (b.exp - lz_b) + F32.bias)]
        remainder, divisor, exp, sign, nan, inf, zero = pipe.stage(sig_a, sig_b, exp, sign, nan, inf, zero)

        quotient = None
        remainder = Cat(remainder, Signal(1))            # 25 bits: always < 2 * divisor
        for bit in reversed(range(QUOTIENT_BITS)):
            take = remainder >= divisor
            diff = Signal(25, name=f"div_diff{bit}")
            m.d.comb += diff.eq(Mux(take, remainder - divisor, remainder))
            quotient = take if quotient is None else Cat(take, quotient)
            if bit:
                next_remainder = Signal(25, name=f"div_rem{bit}")
                m.d.comb += next_remainder.eq(diff << 1)
            else:
                next_remainder = diff
            remainder, quotient, divisor, exp, sign, nan, inf, zero = pipe.stage(
                next_remainder, quotient, divisor, exp, sign, nan, inf, zero)
        sticky = remainder != 0

        norm, norm_exp, _ = normalize(m, quotient, exp, "div")
        norm, norm_exp, sticky, sign, nan, inf, zero = pipe.stage(norm, norm_exp, sticky, sign, nan, inf, zero)

        packed, (sign, nan, inf, zero) = round_pack(
            m, F32, sign, norm, norm_exp, sticky, "div", pipe=pipe, carry=(sign, nan, inf, zero))
        result = select_result(m, 32, packed, [
            (nan, F32.qnan),
            (inf, F32.inf(sign)),
            (zero, F32.zero(sign)),
        ])
        return pipe.stage(result)
