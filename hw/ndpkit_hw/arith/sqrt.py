"""Binary32 square root, RNE, subnormals.  Restoring digit-by-digit integer square
root, one result bit per pipeline stage: latency 32, II=1 per lane.

The normalised input is m * 2**e with m in [1, 2); for odd e the significand is
doubled, so X = m' * 2**23 lies in [2**23, 2**25) and e' is even.  The 26-bit root
Q = isqrt(X * 2**27) is built one bit per stage keeping the exact remainder
X * 2**27 - Q**2; a non-zero final remainder is the sticky bit.  sqrt(-0) = -0,
sqrt(+inf) = +inf, sqrt(x < 0) = NaN.
"""
from amaranth.hdl import Signal, Cat, Const, Mux, signed

from ndpkit_hw.arith.fp_common import F32, FpUnit, leading_zeros, round_pack, unpack, select_result

__all__ = ["FpSqrt"]

ROOT_BITS = 26
RADICAND_BITS = 52


class FpSqrt(FpUnit):
    operands = {"a": 32}
    latency = ROOT_BITS + 6

    def lane(self, m, pipe, inputs, controls):
        a = unpack(m, inputs["a"], F32, "a")
        nan = a.is_nan | (a.sign & ~a.is_zero)
        inf = a.is_inf & ~a.sign
        zero = a.is_zero
        lz = leading_zeros(m, a.sig, "sqrt")
        # the count is registered before the shift and the exponent
        a_sig, a_exp, lz, a_sign, nan, inf, zero = pipe.stage(a.sig, a.exp, lz, a.sign, nan, inf, zero)
        unbiased = Signal(signed(11))
        m.d.comb += unbiased.eq(a_exp - lz - F32.bias)
        odd = unbiased[0]
        sig = Signal(25)
        m.d.comb += sig.eq(Mux(odd, (a_sig << lz) << 1, a_sig << lz))
        exp = Signal(signed(11))
        # root bit 25 weighs 2**k with k = floor(e / 2)
        m.d.comb += exp.eq((unbiased >> 1) + F32.bias)
        radicand = Cat(Const(0, 27), sig)               # X * 2**27, 52 bits
        radicand, exp, sign, nan, inf, zero = pipe.stage(radicand, exp, a_sign, nan, inf, zero)

        root = Const(0, ROOT_BITS)
        remainder = radicand                              # N - root**2, never negative
        for bit in reversed(range(ROOT_BITS)):
            # (root + 2**bit)**2 - root**2 = root * 2**(bit+1) + 2**(2*bit): no bits below
            # 2*bit, and the remainder entering this stage is below 2**(bit + 29) (it is below
            # 2**(bit+2) * root + 2**(2*bit+2), root < 2**26), so only remainder[2*bit:bit+29]
            # takes part: one narrow subtraction, its borrow the decision
            lo, hi = 2 * bit, min(RADICAND_BITS, bit + 29)
            window = remainder[lo:hi]
            step = Cat(Const(1, 2), root[bit + 1:])          # the step / 2**(2*bit)
            diff = Signal(hi - lo + 1, name=f"sqrt_diff{bit}")
            m.d.comb += diff.eq(window - step)
            take = ~diff[-1]
            next_remainder = Signal(RADICAND_BITS, name=f"sqrt_rem{bit}")
            next_root = Signal(ROOT_BITS, name=f"sqrt_root{bit}")
            m.d.comb += [next_remainder.eq(Cat(remainder[:lo], Mux(take, diff[:-1], window))),
                         next_root.eq(root | Mux(take, 1 << bit, 0))]
            remainder, root, exp, sign, nan, inf, zero = pipe.stage(
                next_remainder, next_root, exp, sign, nan, inf, zero)
        sticky = remainder != 0

        # root is in [2**25, 2**26) (the radicand is in [2**50, 2**52)): already normalised,
        # and the result is never subnormal (sqrt of the least subnormal is 2**-74.5)
        root, exp, sticky, sign, nan, inf, zero = pipe.stage(root, exp, sticky, sign, nan, inf, zero)

        packed, (sign, nan, inf, zero) = round_pack(
            m, F32, 0, root, exp, sticky, "sqrt", pipe=pipe, carry=(sign, nan, inf, zero), underflow=False)
        result = select_result(m, 32, packed, [
            (nan, F32.qnan),
            (inf, F32.inf(0)),
            (zero, F32.zero(sign)),
        ])
        return pipe.stage(result)
