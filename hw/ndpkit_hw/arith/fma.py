"""Binary32 fused multiply-add ``a*b + c`` with one rounding.  Latency 14, II=1.

Subnormal inputs are normalised first, so the exact 48-bit product has its top bit
at 46 or 47 and the addend, widened to 48 bits, has its top bit at 47: the sum is then
an addition of two exact 48-bit significands.  The smaller one is shifted right with
three extra bits and a sticky bit, exactly as in the adder (if the shift is more than
one place there is at most one bit of cancellation, so the sticky bit lies far below
the rounding point; otherwise nothing is lost), and the shared normalise/round path
rounds once.  An exact zero is +0, except that (-0) + (-0) is -0.
"""
from amaranth.hdl import Signal, Cat, Const, Mux, signed

from ndpkit_hw.arith.fp_common import F32, FpUnit, leading_zeros, normalize_into_range, round_bits, round_pack, staged_product, unpack, select_result

__all__ = ["FpFma"]

EXTRA = 3
SIG = 48


class FpFma(FpUnit):
    operands = {"a": 32, "b": 32, "c": 32}
    latency = 14

    def lane(self, m, pipe, inputs, controls):
        a, b, c = (unpack(m, inputs[n], F32, n) for n in "abc")
        product_sign = a.sign ^ b.sign
        product_zero = a.is_zero | b.is_zero
        product_inf = a.is_inf | b.is_inf
        nan = (a.is_nan | b.is_nan | c.is_nan | (a.is_inf & b.is_zero) | (a.is_zero & b.is_inf) |
               (product_inf & c.is_inf & (product_sign != c.sign)))
        inf = product_inf | c.is_inf
        inf_sign = Mux(product_inf, product_sign, c.sign)
        # normalise the three significands (subnormals have leading zeros)
        lz_a, lz_b, lz_c = (leading_zeros(m, u.sig, f"fma_{n}") for u, n in ((a, "a"), (b, "b"), (c, "c")))
        # the counts are registered before the shifts and the exponent sums
        (a_sig, b_sig, c_sig, a_exp, b_exp, c_exp, lz_a, lz_b, lz_c, product_sign, product_zero, c_sign_in,
         c_zero_in, nan, inf, inf_sign) = pipe.stage(
            a.sig, b.sig, c.sig, a.exp, b.exp, c.exp, lz_a, lz_b, lz_c, product_sign, product_zero, c.sign,
            c.is_zero, nan, inf, inf_sign)
        sig_a, sig_b, sig_c = Signal(24), Signal(24), Signal(24)
        exp_p, exp_c = Signal(signed(11)), Signal(signed(11))
        m.d.comb += [
            sig_a.eq(a_sig << lz_a), sig_b.eq(b_sig << lz_b), sig_c.eq(c_sig << lz_c),
            # product bit 47 weighs 2**(exp_p - bias); addend bit 23 (bit 47 once widened) 2**(exp_c - bias)
            exp_p.eq(a_exp - lz_a + b_exp - lz_b - F32.bias + 1),
            exp_c.eq(c_exp - lz_c),
        ]
        (sig_a, sig_b, sig_c, exp_p, exp_c, product_sign, product_zero, c_sign, c_zero, nan, inf, inf_sign) = \
            pipe.stage(sig_a, sig_b, sig_c, exp_p, exp_c, product_sign, product_zero, c_sign_in, c_zero_in,
                       nan, inf, inf_sign)

        # the product of two normalised significands has its top bit at 46 or 47; move it
        # to 47 so that both terms compare by (exponent, significand)
        raw, (sig_c, exp_p, exp_c, product_sign, product_zero, c_sign, c_zero, nan, inf, inf_sign) = \
            staged_product(m, pipe, sig_a, sig_b, carry=(sig_c, exp_p, exp_c, product_sign, product_zero,
                                                       c_sign, c_zero, nan, inf, inf_sign))
        product = Signal(SIG)
        exp_p_fixed = Signal(signed(11))
        m.d.comb += [product.eq(Mux(raw[SIG - 1], raw, raw << 1)),
                     exp_p_fixed.eq(Mux(raw[SIG - 1], exp_p, exp_p - 1))]
        exp_p = exp_p_fixed
        (product, sig_c, exp_p, exp_c, product_sign, product_zero, c_sign, c_zero, nan, inf, inf_sign) = \
            pipe.stage(product, sig_c, exp_p, exp_c, product_sign, product_zero, c_sign, c_zero, nan, inf,
                       inf_sign)

        # order the two terms by magnitude (a zero term is always the smaller)
        addend = Cat(Const(0, SIG - 24), sig_c)
        c_bigger = Signal()
        with m.If(product_zero):
            m.d.comb += c_bigger.eq(1)
        with m.Elif(c_zero):
            m.d.comb += c_bigger.eq(0)
        with m.Else():
            m.d.comb += c_bigger.eq((exp_c > exp_p) | ((exp_c == exp_p) & (addend > product)))
        big_sig, small_sig = Mux(c_bigger, addend, product), Mux(c_bigger, product, addend)
        big_exp = Signal(signed(11))
        distance = Signal(signed(12))
        m.d.comb += [big_exp.eq(Mux(c_bigger, exp_c, exp_p)),
                     distance.eq(Mux(c_bigger, exp_c - exp_p, exp_p - exp_c))]
        small_zero = Mux(c_bigger, product_zero, c_zero)
        sign = Mux(c_bigger, c_sign, product_sign)
        subtract = product_sign ^ c_sign
        zero_sign = product_zero & c_zero & product_sign & c_sign
        (big_sig, small_sig, big_exp, distance, small_zero, sign, subtract, zero_sign, nan, inf, inf_sign) = \
            pipe.stage(big_sig, small_sig, big_exp, distance, small_zero, sign, subtract, zero_sign, nan, inf,
                       inf_sign)

        width = SIG + EXTRA
        # distance >= 0; 64 or more shifts everything out, so the clamp needs no comparator
        shift = Signal(6)
        m.d.comb += shift.eq(Mux(small_zero | (distance[6:] != 0), 63, distance[:6]))
        # in two steps: by the multiple of 8, registered, then by the rest
        coarse = Signal(width + 64)
        m.d.comb += coarse.eq(Cat(Const(0, 64), Const(0, EXTRA), small_sig) >> Cat(Const(0, 3), shift[3:]))
        coarse, fine, big_sig, big_exp, sign, subtract, zero_sign, nan, inf, inf_sign = pipe.stage(
            coarse, shift[:3], big_sig, big_exp, sign, subtract, zero_sign, nan, inf, inf_sign)
        wide = Signal(width + 64)
        m.d.comb += wide.eq(coarse >> fine)
        big_ext = Cat(Const(0, EXTRA), big_sig)
        # registered: the aligned term with its sticky bit (the OR of the shifted-out bits),
        # complemented for a subtraction, so the next stage is the adder alone
        aligned = Signal(width)
        m.d.comb += aligned.eq((wide[64:] | (wide[:64] != 0)) ^ subtract.replicate(width))
        aligned, big_ext, big_exp, sign, subtract, zero_sign, nan, inf, inf_sign = pipe.stage(
            aligned, big_ext, big_exp, sign, subtract, zero_sign, nan, inf, inf_sign)

        # one adder for both: big + (aligned, or its complement + 1), the +1 entering as the
        # carry of a low bit both operands get; a subtraction never goes below zero (big is
        # the larger term), so its carry out is dropped.  The adder is 52 bits: its low half
        # is registered with its carry, and the high half adds them in the next stage
        half = (width + 1) // 2
        low = Signal(half + 2)
        m.d.comb += low.eq(Cat(subtract, big_ext[:half]) + Cat(subtract, aligned[:half]))
        low, big_high, aligned_high, big_exp, sign, subtract, zero_sign, nan, inf, inf_sign = pipe.stage(
            low[1:], big_ext[half:], aligned[half:], big_exp, sign, subtract, zero_sign, nan, inf, inf_sign)
        # the normalising count of a sum whose high half is zero, from the low half (final
        # here) while the high half adds: the next stage counts the high half's zeros only
        keep = round_bits(F32)
        low_zeros = Signal(range(width + 1 + keep + 1))
        m.d.comb += low_zeros.eq((width + 1 - half) + leading_zeros(m, Cat(low[:half], Const(0, keep)), "fma_low"))
        high = Signal(width - half + 1)
        m.d.comb += high.eq(big_high + aligned_high + low[half])
        total = Signal(width + 1)
        m.d.comb += total.eq(Cat(low[:half], high[:width - half], high[width - half] & ~subtract))
        top_exp = Signal(signed(12))
        m.d.comb += top_exp.eq(big_exp + 1)
        total, low_zeros, top_exp, sign, zero_sign, nan, inf, inf_sign = pipe.stage(
            total, low_zeros, top_exp, sign, zero_sign, nan, inf, inf_sign)

        norm, norm_exp, is_zero, (sign, zero_sign, nan, inf, inf_sign) = normalize_into_range(
            m, total, top_exp, "fma", keep, pipe=pipe, carry=(sign, zero_sign, nan, inf, inf_sign),
            low_count=(half, low_zeros))
        norm, norm_exp, is_zero, sign, zero_sign, nan, inf, inf_sign = pipe.stage(
            norm, norm_exp, is_zero, sign, zero_sign, nan, inf, inf_sign)

        packed, (is_zero, zero_sign, nan, inf, inf_sign) = round_pack(
            m, F32, sign, norm, norm_exp, 0, "fma", pipe=pipe, carry=(is_zero, zero_sign, nan, inf, inf_sign),
            underflow=False)
        result = select_result(m, 32, packed, [
            (nan, F32.qnan),
            (inf, F32.inf(inf_sign)),
            (is_zero, F32.zero(zero_sign)),
        ])
        return pipe.stage(result)
