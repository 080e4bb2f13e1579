"""Binary32 multiply, RNE, subnormals in and out.  Latency 8, II=1 per lane."""
from amaranth.hdl import Signal, signed

from ndpkit_hw.arith.fp_common import F32, FpUnit, normalize_into_range, round_bits, round_pack, staged_product, unpack, select_result

__all__ = ["FpMul", "FpMulSplit", "mul_datapath", "MUL_LATENCY"]

MUL_LATENCY = 8


class FpMul(FpUnit):
    operands = {"a": 32, "b": 32}
    latency = MUL_LATENCY

    def lane(self, m, pipe, inputs, controls):
        return mul_datapath(m, pipe, inputs["a"], inputs["b"])


class FpMulSplit(FpMul):
    """:class:`FpMul` with its normalising shift's count and limits registered before the
    amount is chosen (``normalize_into_range(split=True)``): a stage more, for builds
    where that stage came out the longest path (the same results)."""
    latency = MUL_LATENCY + 1

    def lane(self, m, pipe, inputs, controls):
        return mul_datapath(m, pipe, inputs["a"], inputs["b"], split=True)


def mul_datapath(m, pipe, a_bits, b_bits, split: bool = False):
    """``a * b`` through ``MUL_LATENCY`` stages of ``pipe`` (one more with ``split``)."""
    a, b = unpack(m, a_bits, F32, "a"), unpack(m, b_bits, F32, "b")
    sign = a.sign ^ b.sign
    nan = a.is_nan | b.is_nan | (a.is_inf & b.is_zero) | (a.is_zero & b.is_inf)
    inf = a.is_inf | b.is_inf
    # the product's top bit (bit 47) weighs 2**(ea + eb - 2*bias + 1)
    exp = Signal(signed(11))
    m.d.comb += exp.eq(a.exp + b.exp - F32.bias + 1)
    sig_a, sig_b, exp, sign, nan, inf = pipe.stage(a.sig, b.sig, exp, sign, nan, inf)

    # partial products registered in one stage, summed in the next
    product, (exp, sign, nan, inf) = staged_product(m, pipe, sig_a, sig_b, carry=(exp, sign, nan, inf))
    product, exp, sign, nan, inf = pipe.stage(product, exp, sign, nan, inf)

    norm, norm_exp, _, (sign, nan, inf) = normalize_into_range(m, product, exp, "mul", round_bits(F32), pipe=pipe,
                                                               carry=(sign, nan, inf), split=split)
    norm, norm_exp, sign, nan, inf = pipe.stage(norm, norm_exp, sign, nan, inf)

    packed, (nan, inf, sign) = round_pack(m, F32, sign, norm, norm_exp, 0, "mul", pipe=pipe,
                                          carry=(nan, inf, sign), underflow=False)
    result = select_result(m, 32, packed, [
        (nan, F32.qnan),
        (inf, F32.inf(sign)),
    ])
    return pipe.stage(result)
