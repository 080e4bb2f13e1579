"""Binary32 exp(x), bit-exact to :func:`ndpkit.arith.exp.exp` (the algorithm is
documented there): fixed-point range reduction with a 40-bit log2(e), a 256 x 32-bit
table of 2**(i/256) (one block RAM per lane) and a degree-2 polynomial, then one RNE
rounding through the shared round/pack path (each product's partials summed over two stages).
Latency 20, II=1 per lane.
"""
from amaranth.hdl import Signal, Cat, Const, Mux, signed
from amaranth.lib.memory import Memory

from ndpkit_spec.exp import FRACTION_BITS, LN2_Q32, LOG2E_Q39, TABLE
from ndpkit_hw.arith.fp_common import F32, FpUnit, normalize, round_bits, round_pack, staged_product, select_result

__all__ = ["FpExp"]


class FpExp(FpUnit):
    operands = {"a": 32}
    latency = 20

    def lane(self, m, pipe, inputs, controls):
        x = inputs["a"]
        sign, e, frac = x[31], x[23:31], x[:23]
        e_eff = Mux(e == 0, 1, e)
        sig = Cat(frac, e != 0)
        nan = (e == 255) & (frac != 0)
        pos_inf = (e == 255) & (frac == 0) & ~sign
        big = e_eff >= 134                                  # |x| >= 128: saturate
        shift = Signal(6)
        m.d.comb += shift.eq(Mux(e_eff > 149 - 63, 149 - e_eff, 63))
        product, (shift, sign, nan, pos_inf, big) = staged_product(
            m, pipe, sig, Const(LOG2E_Q39, 40), carry=(shift, sign, nan, pos_inf, big), sum_stages=2)
        product, shift, sign, nan, pos_inf, big = pipe.stage(product[:64], shift, sign, nan, pos_inf, big)

        y_abs = Signal(49)
        m.d.comb += y_abs.eq(product >> shift)
        y_abs, sign, nan, pos_inf, big = pipe.stage(y_abs, sign, nan, pos_inf, big)
        y = Signal(signed(50))
        # -y_abs as ~y_abs + 1, the complement inside the adder's LUTs (no select behind the carry chain)
        m.d.comb += y.eq((Cat(y_abs, Const(0, 1)) ^ sign.replicate(50)) + sign)
        y, sign, nan, pos_inf, big = pipe.stage(y, sign, nan, pos_inf, big)

        k = Signal(signed(10))
        m.d.comb += k.eq(y >> FRACTION_BITS)
        f = y[:FRACTION_BITS]
        index, r = f[32:40], f[:32]
        table = Memory(shape=32, depth=256, init=[int(v) for v in TABLE])
        m.submodules[f"exp_table_{pipe.name}"] = table
        port = table.read_port()         # addressed one stage later, so the data lines up
        r_ln2, (index, k, sign, nan, pos_inf, big) = staged_product(
            m, pipe, r, Const(LN2_Q32, 32), carry=(index, k, sign, nan, pos_inf, big), sum_stages=2)
        m.d.comb += port.addr.eq(index)
        t = Signal(32)
        m.d.comb += t.eq(r_ln2 >> 32)                       # r * ln2, Q0.40
        t, k, sign, nan, pos_inf, big = pipe.stage(t, k, sign, nan, pos_inf, big)

        partial = Signal(33)
        m.d.comb += partial.eq((1 << 31) + (t >> 9))
        t_squared, (power, partial, k, sign, nan, pos_inf, big) = staged_product(
            m, pipe, t, t, carry=(port.data, partial, k, sign, nan, pos_inf, big), sum_stages=2)
        t2 = Signal(32)
        m.d.comb += t2.eq(t_squared >> 50)
        power, t2, partial, k, sign, nan, pos_inf, big = pipe.stage(power, t2, partial, k, sign, nan,
                                                                    pos_inf, big)

        poly = Signal(33)
        m.d.comb += poly.eq(partial + t2)
        power, poly, k, sign, nan, pos_inf, big = pipe.stage(power, poly, k, sign, nan, pos_inf, big)

        full, (k, sign, nan, pos_inf, big) = staged_product(m, pipe, power, poly[:32],
                                                           carry=(k, sign, nan, pos_inf, big), sum_stages=2)
        mantissa = Signal(33)
        m.d.comb += mantissa.eq(full >> 31)
        top_exp = Signal(signed(12))
        m.d.comb += top_exp.eq(k + 1 + F32.bias)           # mantissa bit 32 weighs 2**(k + 1)
        mantissa, top_exp, sign, nan, pos_inf, big = pipe.stage(mantissa, top_exp, sign, nan, pos_inf, big)

        norm, norm_exp, _, (sign, nan, pos_inf, big) = normalize(
            m, mantissa, top_exp, "exp", pipe=pipe, carry=(sign, nan, pos_inf, big), keep=round_bits(F32))
        norm, norm_exp, sign, nan, pos_inf, big = pipe.stage(norm, norm_exp, sign, nan, pos_inf, big)

        packed, (sign, nan, pos_inf, big) = round_pack(
            m, F32, 0, norm, norm_exp, 0, "exp", pipe=pipe, carry=(sign, nan, pos_inf, big))
        result = select_result(m, 32, packed, [
            (nan, F32.qnan),
            (pos_inf | (big & ~sign), F32.inf(0)),
            (big & sign, 0),
        ])
        return pipe.stage(result)
