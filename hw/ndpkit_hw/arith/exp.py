"""Binary32 exp(x), bit-exact to :func:`ndpkit.arith.exp.exp` (the algorithm is
documented there): fixed-point range reduction with a 40-bit log2(e), a 256 x 32-bit
table of 2**(i/256) (one block RAM per lane) and a degree-2 polynomial, then one RNE
rounding through the shared round/pack path (each product's partials summed over two stages).
Latency 20, II=1 per lane.

The first product, significand x log2(e), multiplies only the 23 fraction bits in the DSPs
(the unit's input bits, no logic in front of the DSPs): the hidden bit (``e != 0``, two
LUT levels of the exponent) travels in a register beside the partial products and adds
its term, ``hidden * (LOG2E_Q39 << 23)``, where they are summed (:func:`_significand_product`).
"""
from amaranth.hdl import Signal, Cat, Const, Mux, signed
from amaranth.lib.memory import Memory

from ndpkit_spec.exp import FRACTION_BITS, LN2_Q32, LOG2E_Q39, TABLE
from ndpkit_hw.arith.fp_common import F32, FpUnit, normalize, round_bits, round_pack, staged_product, select_result

__all__ = ["FpExp"]


def _significand_product(m, pipe, frac, hidden, carry=()):
    """``Cat(frac, hidden) * LOG2E_Q39`` (64 bits) over three stages, as
    ``staged_product(..., sum_stages=2)`` would compute it, with the hidden bit kept out
    of the multipliers.

    ``Cat(frac, hidden) = frac + hidden * 2**23``, so the product is
    ``frac * C + hidden * (C << 23)``: the DSPs take ``frac`` only (its slices straight
    from the unit's input, no LUT in front of them), ``hidden`` is registered beside their partial products and
    its term, ``C << 23`` gated by it, is one more addend of their sum.  Every term is
    non-negative and the whole is below ``2**24 * C < 2**64``, so no partial sum wraps:
    the 64-bit result equals ``sig * C`` for every input.  Terms whose bit ranges do not
    overlap are concatenated (no adder), then summed in two halves, registered, and the
    halves added: on the DSP48E2 shape ``Cat(P0, P3) + P1`` and ``H + P2``, each a
    two-operand adder, as before."""
    const = Const(LOG2E_Q39, 40)
    a_bits, b_bits = pipe.multiplier

    def slices(v, piece):
        return [(lo, v[lo:min(lo + piece, len(v))]) for lo in range(0, len(v), piece)]
    partial = []
    for lo_a, part_a in slices(const, a_bits):         # the wider operand on the wider port
        for lo_b, part_b in slices(frac, b_bits):
            p = Signal(len(part_a) + len(part_b))
            m.d.comb += p.eq(part_a * part_b)
            partial.append((lo_a + lo_b, p))
    staged = pipe.stage(*[p for _, p in partial], hidden, *carry)
    registered, hidden, carried = staged[:len(partial)], staged[len(partial)], list(staged[len(partial) + 1:])
    low = (LOG2E_Q39 & -LOG2E_Q39).bit_length() - 1  # C's trailing zeros: the term's lowest set bit
    hidden_term = Signal(LOG2E_Q39.bit_length() - low)
    m.d.comb += hidden_term.eq(Mux(hidden, LOG2E_Q39 >> low, 0))
    terms = sorted([(shift, value) for (shift, _), value in zip(partial, registered)]
                   + [(len(frac) + low, hidden_term)], key=lambda t: t[0])
    rows = []                                          # [[(lo, value), ...]]: disjoint bit ranges
    for lo, value in terms:
        row = next((r for r in rows if r[-1][0] + len(r[-1][1]) <= lo), None)
        if row is None:
            rows.append([(lo, value)])
        else:
            row.append((lo, value))
    operands = []
    for row in rows:
        parts, at = [], 0
        for lo, value in row:
            parts += [Const(0, lo - at), value] if lo > at else [value]
            at = lo + len(value)
        operands.append(Cat(*parts))
    width = len(const) + len(frac) + 1
    half = (len(operands) + 1) // 2
    sums = [Signal(width) for _ in range(2)]
    m.d.comb += [sums[0].eq(sum(operands[1:half], operands[0])),
                 sums[1].eq(sum(operands[half + 1:], operands[half]) if len(operands) > half else 0)]
    staged = pipe.stage(*sums, *carried)
    product = Signal(width)
    m.d.comb += product.eq(staged[0] + staged[1])
    return product, list(staged[2:])


class FpExp(FpUnit):
    operands = {"a": 32}
    latency = 20

    def lane(self, m, pipe, inputs, controls):
        x = inputs["a"]
        sign, e, frac = x[31], x[23:31], x[:23]
        e_eff = Mux(e == 0, 1, e)
        nan = (e == 255) & (frac != 0)
        pos_inf = (e == 255) & (frac == 0) & ~sign
        big = e_eff >= 134                                  # |x| >= 128: saturate
        shift = Signal(6)
        m.d.comb += shift.eq(Mux(e_eff > 149 - 63, 149 - e_eff, 63))
        # the hidden bit (e != 0) beside the multipliers, not in front of them
        product, (shift, sign, nan, pos_inf, big) = _significand_product(
            m, pipe, frac, e != 0, carry=(shift, sign, nan, pos_inf, big))
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
