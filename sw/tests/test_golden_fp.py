"""The binary32 golden functions against exact rational arithmetic (fractions.Fraction).

An independent reference rounds exact rationals to any binary format (RNE, subnormals,
overflow to infinity); every golden function is checked against it on random bit
patterns biased toward the interesting places (subnormals, ties, overflow edges),
plus exhaustive sweeps where the input space is 2**16.
"""
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ndpkit.arith import fp
from ndpkit.arith.fp_cases import interesting_f32

FORMATS = {"f32": (8, 23), "f16": (5, 10), "bf16": (8, 7)}


def decode(u: int, exp_bits: int, frac_bits: int):
    """Bit pattern -> Fraction, or 'nan' / ('inf', sign) / ('zero', sign)."""
    sign = u >> (exp_bits + frac_bits) & 1
    e = u >> frac_bits & ((1 << exp_bits) - 1)
    f = u & ((1 << frac_bits) - 1)
    bias = (1 << (exp_bits - 1)) - 1
    if e == (1 << exp_bits) - 1:
        return "nan" if f else ("inf", sign)
    if e == 0 and f == 0:
        return ("zero", sign)
    mag = Fraction(f, 1 << frac_bits) * Fraction(2) ** (1 - bias) if e == 0 else \
        Fraction((1 << frac_bits) + f, 1 << frac_bits) * Fraction(2) ** (e - bias)
    return -mag if sign else mag


def encode(q: Fraction, exp_bits: int, frac_bits: int, zero_sign: int = 0) -> int:
    """Round an exact rational to the format (RNE), independently of NumPy."""
    bias = (1 << (exp_bits - 1)) - 1
    sign = int(q < 0)
    q = abs(q)
    top = sign << (exp_bits + frac_bits)
    if q == 0:
        return zero_sign << (exp_bits + frac_bits)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    quantum_exp = max(e, 1 - bias) - frac_bits
    n = q / Fraction(2) ** quantum_exp
    m = n.numerator // n.denominator
    rest = n - m
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and m & 1):
        m += 1
    if m == 0:
        return top
    if m >= 1 << (frac_bits + 1):
        m >>= 1
        quantum_exp += 1
    if m < 1 << frac_bits:
        return top | m                                          # subnormal
    exponent = quantum_exp + frac_bits + bias
    if exponent >= (1 << exp_bits) - 1:
        return top | (((1 << exp_bits) - 1) << frac_bits)       # overflow -> inf
    return top | (exponent << frac_bits) | (m - (1 << frac_bits))


def _finite(u: int) -> bool:
    return (u & 0x7F800000) != 0x7F800000


def _exact_ref(a, b, c, kind):
    x, y = decode(int(a), 8, 23), decode(int(b), 8, 23)
    z = decode(int(c), 8, 23) if c is not None else None
    val = lambda t: Fraction(0) if isinstance(t, tuple) else t
    neg_zero = lambda t: isinstance(t, tuple) and t[0] == "zero" and t[1] == 1
    if kind == "add":
        q = val(x) + val(y)
        zero_sign = int(neg_zero(x) and neg_zero(y))
    elif kind == "mul":
        q = val(x) * val(y)
        sx = neg_zero(x) or (isinstance(x, Fraction) and x < 0)
        sy = neg_zero(y) or (isinstance(y, Fraction) and y < 0)
        zero_sign = int(sx != sy)
    elif kind == "div":
        q = val(x) / val(y)
        sx = neg_zero(x) or (isinstance(x, Fraction) and x < 0)
        zero_sign = int(sx != (y < 0))
    else:  # fma
        p = val(x) * val(y)
        sx = neg_zero(x) or (isinstance(x, Fraction) and x < 0)
        sy = neg_zero(y) or (isinstance(y, Fraction) and y < 0)
        p_neg_zero = p == 0 and sx != sy
        q = p + val(z)
        zero_sign = int(p_neg_zero and neg_zero(z)) if p == 0 and val(z) == 0 else 0
    if q != 0:
        return encode(q, 8, 23)
    return zero_sign << 31


@pytest.mark.parametrize("kind", ["add", "mul", "div", "fma"])
def test_arithmetic_matches_exact_rationals(kind):
    rng = np.random.default_rng(20261121)
    n = 4000
    a, b, c = interesting_f32(rng, n), interesting_f32(rng, n), interesting_f32(rng, n)
    keep = np.array([_finite(int(x)) and _finite(int(y)) and _finite(int(z)) for x, y, z in zip(a, b, c)])
    if kind == "div":
        keep &= (b & 0x7FFFFFFF) != 0
    a, b, c = a[keep], b[keep], c[keep]
    got = {"add": lambda: fp.add(a, b), "mul": lambda: fp.mul(a, b), "div": lambda: fp.div(a, b),
           "fma": lambda: fp.fma(a, b, c)}[kind]()
    for i in range(len(a)):
        want = _exact_ref(a[i], b[i], c[i] if kind == "fma" else None, kind)
        assert int(got[i]) == want, f"{kind}({a[i]:#010x}, {b[i]:#010x}, {c[i]:#010x}): {int(got[i]):#010x} != {want:#010x}"


FMA_EDGES = [
    (0x3F800001, 0x3F800001, 0xBF800002),      # tiny exact residue
    (0x3F800800, 0x337FF001, 0x3F800000),      # 1 + 2^-24 + 2^-60: double rounding via float64 would tie to 1.0
    (0xBF800800, 0x337FF001, 0xBF800000),      # the same, negative
    (0x00000001, 0x3F000000, 0x00000000),      # half of the smallest subnormal: tie to even -> 0
    (0x00000003, 0x3F000000, 0x80000000),      # 1.5 ulp -> 2 ulp
    (0x7F7FFFFF, 0x3F800001, 0x00000000),      # overflow
    (0x7F7FFFFF, 0x40000000, 0xFF7FFFFF),      # p overflows binary32, p + c does not
    (0x80000000, 0x3F800000, 0x80000000),      # -0 + -0 = -0
    (0x3F800000, 0x3F800000, 0xBF800000),      # exact cancellation = +0
    (0x4B000001, 0x4B000001, 0xD6800002),      # rounding-boundary case at large magnitude
]


@pytest.mark.parametrize("a,b,c", FMA_EDGES)
def test_fma_edges(a, b, c):
    want = _exact_ref(np.uint32(a), np.uint32(b), np.uint32(c), "fma")
    assert int(fp.fma(np.uint32([a]), np.uint32([b]), np.uint32([c]))[0]) == want


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2 ** 32 - 1), st.integers(0, 2 ** 32 - 1), st.integers(0, 2 ** 32 - 1))
def test_fma_hypothesis(a, b, c):
    if not (_finite(a) and _finite(b) and _finite(c)):
        return
    got = int(fp.fma(np.uint32([a]), np.uint32([b]), np.uint32([c]))[0])
    assert got == _exact_ref(np.uint32(a), np.uint32(b), np.uint32(c), "fma")


def test_fma_specials():
    inf, ninf, nan, one, zero = 0x7F800000, 0xFF800000, 0x7FC00000, 0x3F800000, 0
    cases = [((inf, zero, one), nan), ((inf, one, ninf), nan), ((inf, one, one), inf), ((nan, one, one), nan),
             ((one, one, inf), inf)]
    for (a, b, c), want in cases:
        assert int(fp.fma(np.uint32([a]), np.uint32([b]), np.uint32([c]))[0]) == want


def test_sqrt_against_exact_bracketing():
    rng = np.random.default_rng(5)
    a = interesting_f32(rng, 20000) & np.uint32(0x7FFFFFFF)
    a = a[np.array([_finite(int(x)) for x in a])]
    r = fp.sqrt(a)
    for x, y in zip(a[:3000], r[:3000]):
        q, s = decode(int(x), 8, 23), decode(int(y), 8, 23)
        if isinstance(q, tuple):
            assert int(y) == int(x)       # sqrt(+0) = +0
            continue
        # y is the correctly rounded root iff q lies between the squares of the midpoints around y
        up, down = decode(int(y) + 1, 8, 23), decode(max(int(y) - 1, 0), 8, 23)
        down = Fraction(0) if isinstance(down, tuple) else down
        lo, hi = ((s + down) / 2) ** 2, ((s + up) / 2) ** 2
        assert lo <= q <= hi


def test_min_max_semantics():
    rng = np.random.default_rng(3)
    a, b = interesting_f32(rng, 50000), interesting_f32(rng, 50000)
    ok = ~(np.isnan(fp.floats(a)) | np.isnan(fp.floats(b))) & ~((fp.floats(a) == 0) & (fp.floats(b) == 0))
    assert np.array_equal(fp.maximum(a, b)[ok], fp.bits(np.maximum(fp.floats(a), fp.floats(b)))[ok])
    assert np.array_equal(fp.minimum(a, b)[ok], fp.bits(np.minimum(fp.floats(a), fp.floats(b)))[ok])
    nan = np.isnan(fp.floats(a)) | np.isnan(fp.floats(b))
    assert np.all(fp.maximum(a, b)[nan] == fp.QNAN32) and np.all(fp.minimum(a, b)[nan] == fp.QNAN32)
    z = np.uint32([0x80000000, 0x00000000])
    assert list(fp.maximum(z, z[::-1])) == [0, 0] and list(fp.minimum(z, z[::-1])) == [0x80000000] * 2


@pytest.mark.parametrize("name", ["f16", "bf16"])
def test_narrow_to_fp32_exhaustive(name):
    exp_bits, frac_bits = FORMATS[name]
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    got = fp.fp16_to_fp32(h) if name == "f16" else fp.bf16_to_fp32(h)
    for u, g in zip(range(1 << 16), got):
        v = decode(u, exp_bits, frac_bits)
        if v == "nan":
            want = 0x7FC00000
        elif isinstance(v, tuple):
            want = (v[1] << 31) | (0x7F800000 if v[0] == "inf" else 0)
        else:
            want = encode(v, 8, 23)
        assert int(g) == want, f"{name} {u:#06x}"


@pytest.mark.parametrize("name", ["f16", "bf16"])
def test_fp32_to_narrow(name):
    exp_bits, frac_bits = FORMATS[name]
    rng = np.random.default_rng(11)
    a = interesting_f32(rng, 20000)
    # every tie of the narrow format in a dense band: the dropped bits exactly one half
    drop = 23 - frac_bits
    ties = (rng.integers(0, 2 ** 32, 4000, dtype=np.uint64).astype(np.uint32) & ~np.uint32((1 << drop) - 1)) \
        | np.uint32(1 << (drop - 1))
    a = np.concatenate([a, ties])
    got = fp.fp32_to_fp16(a) if name == "f16" else fp.fp32_to_bf16(a)
    for u, g in zip(a, got):
        v = decode(int(u), 8, 23)
        if v == "nan":
            want = 0x7E00 if name == "f16" else 0x7FC0
        elif isinstance(v, tuple):
            want = (v[1] << (exp_bits + frac_bits)) | ((((1 << exp_bits) - 1) << frac_bits) if v[0] == "inf" else 0)
        else:
            want = encode(v, exp_bits, frac_bits, zero_sign=int(u) >> 31)
        assert int(g) == want, f"{name}: {int(u):#010x} -> {int(g):#06x}, want {want:#06x}"


def test_int_conversions():
    rng = np.random.default_rng(2)
    i = np.concatenate([rng.integers(-2 ** 31, 2 ** 31, 20000), [0, -1, 1, 2 ** 31 - 1, -2 ** 31, 2 ** 24 + 1,
                                                                  2 ** 25 + 2, 2 ** 25 + 6]]).astype(np.int32)
    got = fp.int32_to_fp32(i)
    for x, g in zip(i, got):
        assert int(g) == encode(Fraction(int(x)), 8, 23)
    u = interesting_f32(rng, 20000)
    got = fp.fp32_to_int32(u)
    for x, g in zip(u, got):
        v = decode(int(x), 8, 23)
        if v == "nan":
            want = 0
        elif isinstance(v, tuple):
            want = 0 if v[0] == "zero" else (-2 ** 31 if v[1] else 2 ** 31 - 1)
        else:
            want = max(-2 ** 31, min(2 ** 31 - 1, round(v)))      # Python round(): ties to even
        assert int(g) == want, f"{int(x):#010x}"
