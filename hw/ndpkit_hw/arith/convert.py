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


class _OneStageConvert(FpUnit):
    """A conversion done in one stage (:meth:`convert`, from the registered operand),
    its result carried through the rest of the conversions' common latency, 5."""
    latency = 5

    def convert(self, a):  # pragma: no cover - abstract
        raise NotImplementedError

    def lane(self, m, pipe, inputs, controls):
        result = Signal(self.result_width)
        m.d.comb += result.eq(self.convert(pipe.stage(inputs["a"])))
        for _ in range(self.latency - 1):
            result = pipe.stage(result)
        return result


class Bf16ToFp32(_OneStageConvert):
    """bf16 is binary32's top half: the pattern widened by zeros (a NaN the canonical
    quiet one); no normalising path."""
    operands = {"a": 16}
    result_width = 32

    def convert(self, h):
        nan = (h[7:15] == BF16.exp_all_ones) & (h[:7] != 0)
        return Mux(nan, F32.qnan, Cat(Const(0, 16), h))


class Fp32ToFp16(FloatConvert):
    source, target = F32, F16


class Fp32ToBf16(_OneStageConvert):
    """Round to nearest even on the dropped half, one add: a carry out of the significand
    moves into the exponent, to infinity past the largest bf16 and from a subnormal to the
    smallest normal, as binary32's own layout does (a NaN gives the canonical quiet one);
    no normalising path."""
    operands = {"a": 32}
    result_width = 16

    def convert(self, a):
        nan = (a[23:31] == F32.exp_all_ones) & (a[:23] != 0)
        rounded = (a + 0x7FFF + a[16])[16:32]
        return Mux(nan, BF16.qnan, rounded)


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
