"""ndpkit.arith.blockfloat against exact rational arithmetic (fractions.Fraction).

Every operand decodes to the rational it encodes; a product is the exact product;
a block-fixed row is each value's magnitude floored on its row's grid (a negative
one's ones' complement), a block-fixed dot product
the sum of the integer products' floors; a weighted sum the sum of its weights'
floors times its rows' integers, floored when its exponent grows; the rounding to
binary32 is the independent RNE encoder of test_golden_fp.
"""
from fractions import Fraction
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ndpkit.arith import blockfloat as bf
from ndpkit_spec.blockfloat import SUM_BITS
from ndpkit_spec.engines.attention import KvFormat
from test_golden_fp import decode as decode_bits, encode

LAYOUT = {KvFormat.FP16: (5, 10), KvFormat.BF16: (8, 7)}


def _value(t, e):
    return Fraction(int(t)) * Fraction(2) ** int(e)


def _patterns(rng, fmt, n, specials=False):
    """Random 16-bit patterns biased to subnormals, tiny and huge exponents."""
    exp_bits, frac_bits = LAYOUT[fmt]
    top = (1 << exp_bits) - 1
    x = rng.integers(0, top if not specials else top + 1, n)
    x = np.where(rng.random(n) < 0.2, 0, x)                       # subnormals and zeros
    f = rng.integers(0, 1 << frac_bits, n)
    s = rng.integers(0, 2, n)
    return ((s << 15) | (x << frac_bits) | f).astype(np.uint16)


@pytest.mark.parametrize("fmt", [KvFormat.FP16, KvFormat.BF16])
def test_decompose_is_exact_everywhere(fmt):
    """All 65,536 patterns: t * 2**e is the rational the pattern encodes."""
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    t, e, special = bf.decompose(h, fmt)
    for u in range(0, 1 << 16, 7):
        want = decode_bits(u, *LAYOUT[fmt])
        if want == "nan":
            assert special[u] == bf.NAN
        elif isinstance(want, tuple) and want[0] == "inf":
            assert special[u] == (bf.NEG_INF if want[1] else bf.POS_INF)
        else:
            assert special[u] == bf.FINITE
            assert _value(t[u], e[u]) == (0 if isinstance(want, tuple) else want)


@pytest.mark.parametrize("fmt", [KvFormat.FP16, KvFormat.BF16])
def test_products_exact_and_specials(fmt):
    rng = np.random.default_rng(1)
    a, b = _patterns(rng, fmt, 4000, specials=True), _patterns(rng, fmt, 4000, specials=True)
    t, e, special = bf.multiply(bf.decompose(a, fmt), bf.decompose(b, fmt))
    for i in range(len(a)):
        x, y = decode_bits(int(a[i]), *LAYOUT[fmt]), decode_bits(int(b[i]), *LAYOUT[fmt])
        if x == "nan" or y == "nan":
            assert special[i] == bf.NAN
            continue
        zero_x, zero_y = isinstance(x, tuple) and x[0] == "zero", isinstance(y, tuple) and y[0] == "zero"
        inf_x, inf_y = isinstance(x, tuple) and x[0] == "inf", isinstance(y, tuple) and y[0] == "inf"
        if inf_x or inf_y:
            if zero_x or zero_y:
                assert special[i] == bf.NAN
            else:
                negative = (x[1] if inf_x else x < 0) ^ (y[1] if inf_y else y < 0)
                assert special[i] == (bf.NEG_INF if negative else bf.POS_INF)
            continue
        assert special[i] == bf.FINITE
        want = 0 if zero_x or zero_y else x * y
        assert _value(t[i], e[i]) == want


def _floor_on_grid(v: Fraction, unit_exp: int) -> int:
    """floor(v / 2**unit_exp)."""
    n = v / Fraction(2) ** unit_exp
    return math.floor(n)


@pytest.mark.parametrize("fmt", [KvFormat.FP16, KvFormat.BF16])
@pytest.mark.parametrize("n", [1, 2, 64, 128])
def test_fixed_dot_against_rationals(fmt, n):
    """Each row's integers are its values' magnitudes floored on the grid of its largest
    last-place exponent (``bits`` magnitude bits), a negative one's ones' complement;
    the dot product is the sum of the
    integer products' floors by 2**DROP, rounded once to binary32 by the independent
    encoder."""
    rng = np.random.default_rng(n * 7 + int(fmt))
    rows = 60
    sig = bf.SIG_BITS[fmt]
    a, b = _patterns(rng, fmt, rows * n).reshape(rows, n), _patterns(rng, fmt, rows * n).reshape(rows, n)
    a[::5] &= 0x7FFF if fmt == KvFormat.FP16 else 0xFFFF     # some rows of like signs
    b[1::7, 1:] &= 0x83FF if fmt == KvFormat.FP16 else 0x807F  # rows of one large element among subnormals
    S, E, special = bf.fixed_dot(a, b, fmt)
    out = bf.sum_fp32((S, E, special))
    for r in range(rows):
        assert special[r] == bf.FINITE
        ints = []
        units = []
        for row, bits in ((a[r], bf.Q_BITS), (b[r], bf.K_BITS)):
            t, e, _ = bf.decompose(row, fmt)
            E_row = max(int(x) for x in e)
            unit = E_row - bits + sig
            values = [_value(t[i], e[i]) for i in range(n)]
            # the magnitude's floor on the grid; a negative value's ones' complement of it
            ints.append([_floor_on_grid(x, unit) if x >= 0 else ~_floor_on_grid(-x, unit) for x in values])
            units.append(unit)
            assert all(abs(x) <= 1 << bits for x in ints[-1])
        want_S = sum((x * y) >> bf.DROP for x, y in zip(*ints))
        assert S[r] == want_S
        want = Fraction(want_S) * Fraction(2) ** (units[0] + units[1] + bf.DROP)
        assert int(out[r]) == encode(want, 8, 23)
        # within the window's floors of the exact dot product
        exact = sum(_value(*bf.decompose(a[r, i], fmt)[:2]) * _value(*bf.decompose(b[r, i], fmt)[:2])
                    for i in range(n))
        grid = Fraction(2) ** (units[0] + units[1])
        qmax, kmax = (max(abs(x) for x in v) + 1 for v in ints)
        assert abs(want - exact) <= n * grid * (qmax + kmax + 1 + (1 << bf.DROP))


def test_fixed_dot_specials():
    fmt = KvFormat.FP16
    one, inf, ninf, nan, zero, tiny = 0x3C00, 0x7C00, 0xFC00, 0x7E00, 0x0000, 0x0001
    cases = [([one, inf], bf.POS_INF), ([ninf, one], bf.NEG_INF), ([inf, ninf], bf.NAN), ([nan, one], bf.NAN),
             ([one, one], bf.FINITE)]
    for row, want in cases:
        a = np.array(row, dtype=np.uint16)
        b = np.array([one, one], dtype=np.uint16)
        assert bf.fixed_dot(a, b, fmt)[2] == want
    # inf x 0 is NaN; inf x a value whose integer floors to 0 is still inf
    assert bf.fixed_dot(np.array([inf, one], np.uint16), np.array([zero, one], np.uint16), fmt)[2] == bf.NAN
    big = 0x7BFF
    X, _, _ = bf.block_fixed(np.array([big, tiny], np.uint16), fmt, bf.K_BITS)
    assert X[1] == 0
    assert bf.fixed_dot(np.array([big, tiny], np.uint16), np.array([one, inf], np.uint16), fmt)[2] == bf.POS_INF
    assert bf.to_fp32([1, 1, 1], [0, 0, 0], np.array([bf.NAN, bf.POS_INF, bf.NEG_INF])).tolist() == \
        [0x7FC00000, 0x7F800000, 0xFF800000]


def _weights(rng, n):
    """TF32 softmax numerators: values in (0, 1] over a wide range of exponents, some
    exactly 1, some 0, some subnormal."""
    x = np.exp2(-rng.uniform(0, 40, n)).astype(np.float32)
    x = np.where(rng.random(n) < 0.1, 1.0, x)
    x = np.where(rng.random(n) < 0.1, 0.0, x).astype(np.float32)
    u = bf.to_tf32(x.view(np.uint32))
    return np.where(rng.random(n) < 0.03, np.uint32(0x00012000), u).astype(np.uint32)   # a subnormal


@pytest.mark.parametrize("fmt", [KvFormat.FP16, KvFormat.BF16])
def test_weigh_against_rationals(fmt):
    """A partial sum of 32 weighted rows (a block's partial): the sum's exponent G the
    multiple of GROW at or above the largest term exponent so far (a larger one floors
    the sum onto its grid), each weight floored on the grid of G less the row's
    exponent, times the row's block-fixed values, added exactly; the weights' own sum
    each weight's floor on 2**-TOTAL_FRAC.  Against a rational replay, with the
    widths the hardware has (|w| < 2**W_BITS, |S| < 2**(SUM_BITS - 1)) and the error bound."""
    rng = np.random.default_rng(21 + int(fmt))
    d, steps, heads = 48, 32, 6
    sig = bf.SIG_BITS[fmt]
    v = _patterns(rng, fmt, (steps, d))
    v[::3] &= 0x3FFF if fmt == KvFormat.FP16 else 0x3FFF                   # smaller rows
    p = _weights(rng, (steps, heads))
    p[:, 0] = 0x3F800000                                                    # a head of weight 1 throughout
    rows = bf.value_rows(v, fmt)
    state = bf.weighted_empty((heads,), d)
    total = (np.zeros(heads, np.int64), np.zeros(heads, np.int64))
    G_ref = [None] * heads
    R = [[Fraction(0)] * d for _ in range(heads)]
    exact = [[Fraction(0)] * d for _ in range(heads)]
    L_ref = [Fraction(0)] * heads
    for t in range(steps):
        pd = bf.decompose(p[t], bf.TF32)
        state = bf.weigh(state, pd, (rows[0][t], rows[1][t], tuple(x[t] for x in rows[2])))
        total = bf.weigh_total(total, pd)
        tv, ev, _ = bf.decompose(v[t], fmt)
        Ev = max(int(x) for x in ev)
        unit_x = Ev - bf.V_BITS + sig
        values = [_value(tv[i], ev[i]) for i in range(d)]
        xs = [(_floor_on_grid(x, unit_x) if x >= 0 else -_floor_on_grid(-x, unit_x)) * Fraction(2) ** unit_x
              for x in values]
        for h in range(heads):
            weight = _value(pd[0][h], pd[1][h])
            L_ref[h] += _floor_on_grid(weight, -bf.TOTAL_FRAC)
            if weight == 0:
                continue
            T = int(pd[1][h]) + Ev
            T_up = -((-T) // bf.GROW) * bf.GROW
            if G_ref[h] is None or T_up > G_ref[h]:
                if G_ref[h] is not None:
                    unit = T_up + 11 + sig - bf.W_BITS - bf.V_BITS
                    R[h] = [_floor_on_grid(x, unit) * Fraction(2) ** unit for x in R[h]]
                G_ref[h] = T_up
            w_unit = G_ref[h] - Ev - bf.W_BITS + 11
            w = _floor_on_grid(weight, w_unit)
            assert 0 <= w < 1 << bf.W_BITS
            for i in range(d):
                R[h][i] += w * Fraction(2) ** w_unit * xs[i]
                exact[h][i] += weight * values[i]
    S, E, special = bf.weighted_sum(state, fmt)
    L, LE, _ = bf.total_sum(total)
    assert (special == bf.FINITE).all()
    for h in range(heads):
        assert L[h] == L_ref[h] and LE[h] - bf.GUARD == -bf.TOTAL_FRAC
        if G_ref[h] is None:
            assert (S[h] == 0).all()
            continue
        assert state[1][h] == G_ref[h]
        for i in range(d):
            assert abs(int(S[h][i])) < 1 << (SUM_BITS - 1)
            assert S[h][i] * Fraction(2) ** int(E[h][i] - bf.GUARD) == R[h][i]
        # every error a floor on a grid at most 2**-(W_BITS - GROW) of the largest |weight x row maximum|
        top = max(abs(_value(*(x[0] for x in bf.decompose(p[t, h:h + 1], bf.TF32)[:2]))) *
                  max(abs(_value(a, b)) for a, b in zip(*bf.decompose(v[t], fmt)[:2])) for t in range(steps))
        if top:
            bound = top * steps * Fraction(2) ** -(min(bf.V_BITS, bf.W_BITS) - bf.GROW)
            assert max(abs(R[h][i] - exact[h][i]) for i in range(d)) <= bound


def test_weigh_specials():
    """inf x 0 and NaN weights make NaN; an infinite value with a live weight is that
    infinity; a zero weight leaves the sum's exponent; the weights' sum takes a NaN."""
    fmt = KvFormat.FP16
    v = np.array([[0x3C00, 0x7C00, 0xFC00, 0x7E00]], np.uint16)       # 1, +inf, -inf, NaN
    rows = bf.value_rows(v, fmt)
    row = (rows[0][0], rows[1][0], tuple(x[0] for x in rows[2]))
    p = bf.decompose(np.array([0x3F800000, 0, 0x7FC00000], np.uint32), bf.TF32)
    S, G, special = bf.weigh(bf.weighted_empty((3,), 4), p, row)
    assert special.tolist() == [[bf.FINITE, bf.POS_INF, bf.NEG_INF, bf.NAN], [bf.FINITE, bf.NAN, bf.NAN, bf.NAN],
                                [bf.NAN] * 4]
    assert G[1] == bf.EMPTY and G[2] == bf.EMPTY and G[0] != bf.EMPTY
    L, lspecial = bf.weigh_total((np.zeros(3, np.int64), np.zeros(3, np.int64)), p)
    assert L.tolist() == [1 << bf.TOTAL_FRAC, 0, 0] and lspecial.tolist() == [bf.FINITE, bf.FINITE, bf.NAN]


@settings(max_examples=400, deadline=None)
@given(st.integers(-(1 << 62) + 1, (1 << 62) - 1), st.integers(-220, 120))
def test_to_fp32_rounds_like_the_rational_encoder(S, k):
    assert int(bf.to_fp32(S, k)) == encode(Fraction(S) * Fraction(2) ** k, 8, 23)


def test_to_fp32_edges():
    """Ties, the carry into the next binade, the subnormal boundary, overflow."""
    cases = [((1 << 25) + 1, 0), ((1 << 25) + 2, 0), ((1 << 25) + 6, 0), ((1 << 24) - 1, -1), ((1 << 25) - 1, 0),
             (3, -151), (1, -150), (1, -151), (3, -150), ((1 << 23) - 1, -149), ((1 << 24) - 1, -150),
             ((1 << 24) - 1, 104), ((1 << 25) - 1, 103), (1, 128), (-(1 << 25) - 2, 0), (0, 5), (-1, -149)]
    for S, k in cases:
        assert int(bf.to_fp32(S, k)) == encode(Fraction(S) * Fraction(2) ** k, 8, 23), (S, k)


@pytest.mark.parametrize("fmt", [KvFormat.FP16, KvFormat.BF16])
def test_merge_against_rationals(fmt):
    rng = np.random.default_rng(9 + int(fmt))
    lanes = 200
    states = []
    for _ in range(2):
        state = bf.weighted_empty((lanes,), 8)
        for _ in range(int(rng.integers(0, 6))):
            v = _patterns(rng, fmt, 8)
            rows = bf.value_rows(v, fmt)
            state = bf.weigh(state, bf.decompose(_weights(rng, lanes), bf.TF32), rows)
        S, E, special = bf.weighted_sum(state, fmt)
        states.append((S[:, 0], E[:, 0], special[:, 0]))
    S, E, special = bf.merge(*states)
    for i in range(lanes):
        (Sa, Ea, _), (Sb, Eb, _) = ((int(x[0][i]), int(x[1][i]), None) for x in states)
        assert E[i] == max(Ea, Eb)
        unit = int(E[i]) - bf.GUARD
        want = _floor_on_grid(Fraction(Sa) * Fraction(2) ** (Ea - bf.GUARD), unit) + \
            _floor_on_grid(Fraction(Sb) * Fraction(2) ** (Eb - bf.GUARD), unit)
        assert S[i] == want


@settings(max_examples=400, deadline=None)
@given(st.integers(0, (1 << 32) - 1))
def test_tf32_rounding_and_decomposition_are_exact(u):
    """to_tf32 rounds like the rational encoder with 8 exponent and 10 fraction bits;
    decompose(TF32) gives back exactly the value."""
    x = decode_bits(u, 8, 23)
    got = int(bf.to_tf32(np.uint32(u)))
    if x == "nan":
        assert got == 0x7FC00000
        return
    if isinstance(x, tuple) and x[0] == "inf":
        assert got == u
        return
    value = 0 if isinstance(x, tuple) else x
    sign = (u >> 31) if isinstance(x, tuple) else 0
    assert got == encode(value, 8, 10, zero_sign=sign) << 13
    t, e, special = bf.decompose(np.uint32(got), bf.TF32)
    rounded = decode_bits(got >> 13, 8, 10)
    if isinstance(rounded, tuple):
        assert (rounded[0] == "inf") == (special != bf.FINITE)
        if rounded[0] == "zero":
            assert t == 0
    else:
        assert special == bf.FINITE and _value(t, e) == rounded
