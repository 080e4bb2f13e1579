"""Format conversions: fp16/bf16 -> fp32 (exact), fp32 -> fp16/bf16 (RNE, overflow to
infinity, subnormal results), int32 -> fp32 (RNE), fp32 -> int32 (RNE, saturating,
NaN -> 0).  Latency 5 (int32 -> fp32: 6; fp32 -> int32: 4), II=1 per lane: the normalising
leading-zero count is registered before its shift.  NaN results are the canonical quiet NaN."""
from amaranth.hdl import Signal, Cat, Const, Mux, signed

from ndpkit_hw.arith.fp_common import BF16, F16, F32, FloatFormat, FpUnit, normalize, round_bits, round_pack, unpack, select_result

__all__ = ["FloatConvert", "Fp16ToFp32", "Bf16ToFp32", "Fp32ToFp16", "Fp32ToBf16", "Int32ToFp32", "Fp32ToInt32"]


class FloatConvert(FpUnit):
    """One float format to another through the shared normalise/round path."""
    source: FloatFormat = F32
    target: FloatFormat = F32
    latency = 5

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.operands = {"a": cls.source.width}
        cls.result_width = cls.target.width

    def lane(self, m, pipe, inputs, controls):
        src, dst = self.source, self.target
        a = unpack(m, inputs["a"], src, "a")
        exp = Signal(signed(12))
        m.d.comb += exp.eq(a.exp - src.bias + dst.bias)
        # widening (fp16/bf16 to fp32) is exact and never leaves the normal range from
        # below: a subnormal stays subnormal-formatted, no rounding shift
        widening = dst.frac_bits >= src.frac_bits and dst.exp_bits >= src.exp_bits
        norm, norm_exp, _, (sign, zero, inf, nan) = normalize(
            m, a.sig, exp, "convert", pipe=pipe, carry=(a.sign, a.is_zero, a.is_inf, a.is_nan),
            min_exp=1 if widening else None)
        norm, norm_exp, sign, zero, inf, nan = pipe.stage(norm, norm_exp, sign, zero, inf, nan)
        packed, (sign, zero, inf, nan) = round_pack(
            m, dst, sign, norm, norm_exp, 0, "convert", pipe=pipe, carry=(sign, zero, inf, nan), underflow=not widening)
        result = select_result(m, dst.width, packed, [
            (nan, dst.qnan),
            (inf, dst.inf(sign)),
            (zero, dst.zero(sign)),
        ])
        return pipe.stage(result)


class Fp16ToFp32(FloatConvert):
    source, target = F16, F32


class _DirectConvert(FpUnit):
    """A conversion without the normalising path: :meth:`convert` from the registered
    operand (its own stages of ``pipe`` as it needs), the result carried through the
    rest of the conversions' common latency, 5."""
    latency = 5

    def convert(self, m, pipe, a):  # pragma: no cover - abstract
        raise NotImplementedError

    def lane(self, m, pipe, inputs, controls):
        result = self.convert(m, pipe, pipe.stage(inputs["a"]))
        while pipe.depth < self.latency:
            result = pipe.stage(result)
        return result


class Bf16ToFp32(_DirectConvert):
    """bf16 is binary32's top half: the pattern widened by zeros (a NaN the canonical
    quiet one); no normalising path."""
    operands = {"a": 16}
    result_width = 32

    def convert(self, m, pipe, h):
        nan = (h[7:15] == BF16.exp_all_ones) & (h[:7] != 0)
        result = Signal(32)
        m.d.comb += result.eq(Mux(nan, F32.qnan, Cat(Const(0, 16), h)))
        return result


class Fp32ToFp16(_DirectConvert):
    """Round to nearest even, subnormal results, overflow to infinity (a NaN the canonical
    quiet one); no normalising path.  binary32's significand ``z`` (24 bits) leaves ``13 +
    s`` bits: s = 0 for a binary16 normal (exponent field e >= 113), else ``113 - e``, at
    most 12 (all of it gone).  The kept bits and the guard are ``z[12:] >> s`` (a 13-bit
    shift), the sticky bit the bits below them.  The kept bits sit under the exponent
    field (0 for a subnormal), so the rounding increment carries into it: from a
    subnormal to the smallest normal, from the largest finite to infinity."""
    operands = {"a": 32}
    result_width = 16

    def convert(self, m, pipe, a):
        e, frac, sign = a[23:31], a[:23], a[31]
        nan = (e == F32.exp_all_ones) & (frac != 0)
        big = e >= F32.bias + F16.bias + 1                       # 2**16 and up: infinity
        normal = e >= F32.bias - F16.bias + 1                    # a binary16 normal
        s = Signal(range(13))
        m.d.comb += s.eq(Mux(normal, 0, Mux(e < F32.bias - F16.bias - 11, 12, F32.bias - F16.bias + 1 - e)))
        biased = Signal(F16.exp_bits)
        m.d.comb += biased.eq(Mux(normal, e - (F32.bias - F16.bias), 0))
        z, s, biased, sign, nan, big = pipe.stage(Cat(frac, e != 0), s, biased, sign, nan, big)
        # the shift, and the sticky bit from z's bits below the guard (12 + s of them)
        top = Signal(13)
        m.d.comb += top.eq(Cat(z[12:], Const(0, 1)) >> s)
        sticky = (z[:12] != 0) | Cat(*[z[12 + j] & (s > j) for j in range(12)]).any()
        kept, guard = top[1:], top[0]
        round_up = guard & (sticky | kept[0])
        kept, round_up, biased, sign, nan, big = pipe.stage(kept, round_up, biased, sign, nan, big)
        magnitude = Signal(15)
        m.d.comb += magnitude.eq(Cat(kept[:F16.frac_bits], biased) + round_up)
        result = Signal(16)
        m.d.comb += result.eq(Mux(nan, F16.qnan, Mux(big, F16.inf(sign), Cat(magnitude, sign))))
        return result


class Fp32ToBf16(_DirectConvert):
    """Round to nearest even on the dropped half, one add: a carry out of the significand
    moves into the exponent, to infinity past the largest bf16 and from a subnormal to the
    smallest normal, as binary32's own layout does (a NaN gives the canonical quiet one);
    no normalising path."""
    operands = {"a": 32}
    result_width = 16

    def convert(self, m, pipe, a):
        nan = (a[23:31] == F32.exp_all_ones) & (a[:23] != 0)
        result = Signal(16)
        m.d.comb += result.eq(Mux(nan, BF16.qnan, (a + 0x7FFF + a[16])[16:32]))
        return result


class Int32ToFp32(FpUnit):
    operands = {"a": 32}
    latency = 6

    def lane(self, m, pipe, inputs, controls):
        value = inputs["a"]
        sign = value[31]
        magnitude = Signal(32)
        m.d.comb += magnitude.eq(Mux(sign, -value, value))
        magnitude, sign = pipe.stage(magnitude, sign)
        exp = Signal(signed(10))
        m.d.comb += exp.eq(F32.bias + 31)                 # bit 31 weighs 2**31
        norm, norm_exp, _, (sign,) = normalize(m, magnitude, exp, "i2f", pipe=pipe, carry=(sign,),
                                               keep=round_bits(F32))
        norm, norm_exp, sign = pipe.stage(norm, norm_exp, sign)
        packed, _ = round_pack(m, F32, sign, norm, norm_exp, 0, "i2f", pipe=pipe, underflow=False)   # >= 2**0
        return pipe.stage(packed)


class Fp32ToInt32(FpUnit):
    operands = {"a": 32}
    latency = 4

    def lane(self, m, pipe, inputs, controls):
        a = unpack(m, inputs["a"], F32, "a")
        # value = sig * 2**(exp - 150); exp >= 158 (|x| >= 2**31) saturates
        big = a.exp >= 158
        exact = a.exp >= 150
        left = Signal(range(8))
        right = Signal(range(27))
        m.d.comb += [left.eq(Mux(exact, a.exp - 150, 0)),
                     right.eq(Mux(exact, 0, Mux(a.exp < 124, 26, 150 - a.exp)))]
        sig, left, right, exact, sign, big, nan = pipe.stage(a.sig, left, right, exact, a.sign, big, a.is_nan)

        wide = Signal(24 + 26)
        m.d.comb += wide.eq(Cat(Const(0, 26), sig) >> right)
        truncated = wide[26:]
        guard = wide[25]
        sticky = wide[:25] != 0
        round_up = guard & (sticky | truncated[0])
        shifted = Signal(31)
        m.d.comb += shifted.eq(sig << left)
        truncated, round_up, shifted, exact, sign, big, nan = pipe.stage(
            truncated, round_up, shifted, exact, sign, big, nan)

        magnitude = Signal(33)
        m.d.comb += magnitude.eq(Mux(exact, shifted, truncated + round_up))
        magnitude, sign, big, nan = pipe.stage(magnitude, sign, big, nan)

        result = select_result(m, 32, Mux(big | (magnitude > 2 ** 31 - 1), 2 ** 31 - 1, magnitude), [
            (nan, 0),
            (sign, Mux(big | (magnitude > 2 ** 31), 2 ** 31, -magnitude)),
        ])
        return pipe.stage(result)
