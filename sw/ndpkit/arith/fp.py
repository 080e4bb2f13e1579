"""Binary32 arithmetic as the hardware computes it, bit for bit (vectorised NumPy).

Conventions shared by every floating-point unit (``ndpkit_hw.arith``):

- IEEE-754 binary32, round to nearest, ties to even; subnormals in and out (no
  flush to zero); overflow gives infinity; invalid operations give NaN.
- Every NaN the hardware produces is the canonical quiet NaN ``0x7FC00000``; NaN
  payloads are not propagated.  Comparisons with these functions therefore treat
  any two NaNs as equal ("NaN-ness").
- add, sub, mul, div, sqrt are correctly rounded, so NumPy's float32 operations are
  their specification; ``fma`` (one rounding) is emulated exactly in
  :func:`fma` and proven against ``fractions.Fraction`` in the tests.
- ``maximum``/``minimum``: NaN if either input is NaN (NumPy's ``np.maximum``
  semantics), and -0 < +0 (IEEE 754-2019 maximum/minimum); NumPy leaves the sign of
  ``maximum(-0.0, +0.0)`` to the CPU, the hardware does not.
- Conversions: fp16/bf16 -> fp32 exact; fp32 -> fp16/bf16 RNE with overflow to
  infinity and subnormal results; int32 -> fp32 RNE; fp32 -> int32 rounds to nearest
  even and saturates to [-2**31, 2**31-1], NaN -> 0.

Arrays of bit patterns are ``uint32`` (``uint16`` for 16-bit formats).
"""
from __future__ import annotations

import numpy as np

__all__ = [
    "QNAN32", "QNAN16", "QNANBF16", "bits", "floats", "canonical",
    "add", "sub", "mul", "div", "sqrt", "fma", "maximum", "minimum", "compare",
    "fp16_to_fp32", "bf16_to_fp32", "fp32_to_fp16", "fp32_to_bf16", "int32_to_fp32", "fp32_to_int32",
    "same", "reduce_tree", "dot",
]

QNAN32 = np.uint32(0x7FC00000)
QNAN16 = np.uint16(0x7E00)
QNANBF16 = np.uint16(0x7FC0)


def bits(x) -> np.ndarray:
    """float32 values -> uint32 bit patterns."""
    return np.ascontiguousarray(np.asarray(x, dtype=np.float32)).view(np.uint32)


def floats(u) -> np.ndarray:
    """uint32 bit patterns -> float32 values."""
    return np.ascontiguousarray(np.asarray(u, dtype=np.uint32)).view(np.float32)


def _isnan32(u):
    u = np.asarray(u, dtype=np.uint32)
    return (u & 0x7FFFFFFF) > 0x7F800000


def canonical(u) -> np.ndarray:
    """Replace every NaN pattern by the canonical quiet NaN."""
    u = np.asarray(u, dtype=np.uint32)
    return np.where(_isnan32(u), QNAN32, u).astype(np.uint32)


def same(a, b) -> np.ndarray:
    """Element-wise bit equality, with all NaNs equal."""
    return canonical(a) == canonical(b)


def _binary(op, a, b):
    with np.errstate(all="ignore"):
        return canonical(bits(op(floats(a), floats(b))))


def add(a, b):
    return _binary(np.add, a, b)


def sub(a, b):
    return _binary(np.subtract, a, b)


def mul(a, b):
    return _binary(np.multiply, a, b)


def div(a, b):
    return _binary(np.divide, a, b)


def sqrt(a):
    with np.errstate(all="ignore"):
        return canonical(bits(np.sqrt(floats(a))))


def fma(a, b, c):
    """``a*b + c`` with a single rounding to binary32.

    a*b is exact in float64 (24x24 <= 53 bits).  p + c is computed in float64 and its
    exact error recovered with TwoSum; the sum is then moved to its round-to-odd
    neighbour (if inexact and the float64 result has an even last bit, step one ulp
    toward the exact value).  Rounding to odd at 53 bits followed by rounding to
    nearest at 24 (or fewer, for subnormals) bits is a correct single rounding
    (Boldo & Melquiond, 2008), since 53 >= 24 + 2.
    """
    with np.errstate(all="ignore"):
        p = floats(a).astype(np.float64) * floats(b).astype(np.float64)
        c64 = floats(c).astype(np.float64)
        s = p + c64
        bp = s - c64
        err = (p - bp) + (c64 - (s - bp))                     # TwoSum: p + c == s + err exactly
        s_bits = np.ascontiguousarray(s).view(np.uint64)
        fix = np.isfinite(s) & (err != 0) & ((s_bits & 1) == 0)
        toward = np.where(err > 0, np.inf, -np.inf)
        odd = np.where(fix, np.nextafter(s, toward), s)
        return canonical(bits(odd.astype(np.float32)))


def _ordered_key(u):
    """Signed integer key that orders non-NaN binary32 patterns numerically, -0 < +0."""
    u = np.asarray(u, dtype=np.uint32).astype(np.int64)
    return np.where(u & 0x80000000, -(u & 0x7FFFFFFF) - 1, u)


def maximum(a, b):
    a, b = np.asarray(a, dtype=np.uint32), np.asarray(b, dtype=np.uint32)
    out = np.where(_ordered_key(a) >= _ordered_key(b), a, b)
    return np.where(_isnan32(a) | _isnan32(b), QNAN32, out).astype(np.uint32)


def minimum(a, b):
    a, b = np.asarray(a, dtype=np.uint32), np.asarray(b, dtype=np.uint32)
    out = np.where(_ordered_key(a) <= _ordered_key(b), a, b)
    return np.where(_isnan32(a) | _isnan32(b), QNAN32, out).astype(np.uint32)


def compare(a, b):
    """Bits {0: a < b, 1: a == b, 2: a > b, 3: unordered}, NumPy's comparison semantics."""
    x, y = floats(a), floats(b)
    with np.errstate(all="ignore"):
        return ((x < y).astype(np.uint8) | ((x == y).astype(np.uint8) << 1) | ((x > y).astype(np.uint8) << 2)
                | ((np.isnan(x) | np.isnan(y)).astype(np.uint8) << 3))


def fp16_to_fp32(h):
    h = np.ascontiguousarray(np.asarray(h, dtype=np.uint16))
    return canonical(bits(h.view(np.float16).astype(np.float32)))


def bf16_to_fp32(h):
    h = np.asarray(h, dtype=np.uint16).astype(np.uint32)
    return canonical(h << 16)


def fp32_to_fp16(u):
    u = np.asarray(u, dtype=np.uint32)
    with np.errstate(all="ignore"):
        h = np.ascontiguousarray(floats(u).astype(np.float16)).view(np.uint16)
    return np.where(_isnan32(u), QNAN16, h).astype(np.uint16)


def fp32_to_bf16(u):
    u = np.asarray(u, dtype=np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16           # RNE on the dropped 16 bits
    return np.where(_isnan32(u.astype(np.uint32)), QNANBF16, rounded).astype(np.uint16)


def int32_to_fp32(i):
    return bits(np.asarray(i, dtype=np.int32).astype(np.float32))


def fp32_to_int32(u):
    with np.errstate(all="ignore"):                 # signalling NaNs warn on the cast
        x = floats(u).astype(np.float64)
        r = np.rint(x)                                         # ties to even
        r = np.clip(np.nan_to_num(r, nan=0.0), -2.0 ** 31, 2.0 ** 31 - 1)
    return r.astype(np.int64).astype(np.int32)


_REDUCE_OPS = {"sum": add, "max": maximum, "min": minimum}


def reduce_tree(values, op: str = "sum"):
    """Reduce the last axis (a power of two) pairwise, adjacent pairs level by level:
    ((x0 op x1) op (x2 op x3)) op ...; each node is the binary32 operation above."""
    v = np.asarray(values, dtype=np.uint32)
    node = _REDUCE_OPS[op]
    while v.shape[-1] > 1:
        v = node(v[..., 0::2], v[..., 1::2])
    return v[..., 0]


def dot(a, b):
    """sum_i round(a_i * b_i) over the last axis, in the ``reduce_tree`` order."""
    return reduce_tree(mul(a, b), "sum")
