"""ndpkit.arith.blockfloat against exact rational arithmetic (fractions.Fraction).

Every operand decodes to the rational it encodes; a product is the exact product;
a block-fixed row is each value's magnitude floored on its row's grid (a negative
one's ones' complement), a block-fixed dot product
the sum of the integer products' floors; an aligned sum is the sum of each term's
floor on the window's grid; the rounding to
binary32 is the independent RNE encoder of test_golden_fp.
"""
from fractions import Fraction
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ndpkit.arith import blockfloat as bf
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


@pytest.mark.parametrize("fmt", [KvFormat.FP16, KvFormat.BF16])
def test_accumulate_against_rationals(fmt):
    """The running sum: the floor of the sum on the grid of its largest exponent so
    far, each step in order (tokens in order), against a rational replay."""
    rng = np.random.default_rng(3 + int(fmt))
    lanes, steps = 40, 130
    a, b = _patterns(rng, fmt, (steps, lanes)), _patterns(rng, fmt, (steps, lanes))
    state = (np.zeros(lanes, np.int64), np.full(lanes, bf.EMPTY, np.int64), np.zeros(lanes, np.int64))
    ref_S = [0] * lanes
    ref_E = [None] * lanes
    for s in range(steps):
        term = bf.multiply(bf.decompose(a[s], fmt), bf.decompose(b[s], fmt))
        state = bf.accumulate(state, term)
        for i in range(lanes):
            t, e = int(term[0][i]), int(term[1][i])
            if t == 0:
                continue
            if ref_E[i] is None or e > ref_E[i]:
                if ref_E[i] is not None:
                    ref_S[i] = _floor_on_grid(Fraction(ref_S[i]) * Fraction(2) ** (ref_E[i] - bf.GUARD),
                                              e - bf.GUARD)
                ref_E[i] = e
            ref_S[i] += _floor_on_grid(_value(t, e), ref_E[i] - bf.GUARD)
    S, E, special = state
    out = bf.sum_fp32(state)
    for i in range(lanes):
        assert S[i] == ref_S[i] and (E[i] == bf.EMPTY) == (ref_E[i] is None)
        if ref_E[i] is not None:
            assert E[i] == ref_E[i]
            assert int(out[i]) == encode(Fraction(ref_S[i]) * Fraction(2) ** (ref_E[i] - bf.GUARD), 8, 23)


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
        state = bf.empty(lanes)
        for _ in range(int(rng.integers(0, 6))):
            state = bf.accumulate(state, bf.multiply(bf.decompose(_patterns(rng, fmt, lanes), fmt),
                                                     bf.decompose(_patterns(rng, fmt, lanes), fmt)))
        states.append(state)
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
