"""Operand generators for floating-point tests: where the bugs live.

Uniform random bit patterns almost never hit subnormals, ties, cancellation or
overflow; these generators mix them in on purpose.  Used by the golden-function
tests and by the RTL benches.
"""
from __future__ import annotations

import numpy as np

__all__ = ["CORNERS32", "interesting_f32", "near_pairs", "corner_pairs"]

CORNERS32 = np.array([
    0x00000000, 0x80000000,                          # +-0
    0x00000001, 0x80000001, 0x00000002, 0x00000003,  # smallest subnormals
    0x007FFFFF, 0x807FFFFF, 0x00400000,              # largest subnormal, a middle one
    0x00800000, 0x80800000, 0x00800001,              # smallest normals
    0x7F7FFFFF, 0xFF7FFFFF, 0x7F7FFFFE,              # largest finite
    0x7F800000, 0xFF800000,                          # +-inf
    0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF,  # quiet and signalling NaNs
    0x3F800000, 0xBF800000, 0x3F800001, 0x3F7FFFFF,  # 1 and its neighbours
    0x40000000, 0x3F000000, 0x34000000, 0x33800000,  # 2, 0.5, 2**-23, 2**-24
    0x4B000000, 0x4B7FFFFF, 0x4F000000, 0xCF000000,  # 2**23, 2**24 - 1, +-2**31
    0x3FC00000, 0x40400000, 0x00C00000, 0x7E800000,
], dtype=np.uint32)


def interesting_f32(rng: np.random.Generator, n: int) -> np.ndarray:
    """n binary32 patterns: uniform bits, subnormals, near overflow, around 1, corners."""
    k = max(1, n // 5 + 1)
    sign = lambda: rng.integers(0, 2, k, dtype=np.uint64) << 31
    parts = [
        rng.integers(0, 2 ** 32, k, dtype=np.uint64),
        rng.integers(0, 0x00800000, k, dtype=np.uint64) | sign(),
        rng.integers(0x7E800000, 0x7F800000, k, dtype=np.uint64) | sign(),
        rng.integers(0x3E000000, 0x41000000, k, dtype=np.uint64) | sign(),
        rng.choice(CORNERS32.astype(np.uint64), k),
    ]
    out = np.concatenate(parts).astype(np.uint32)
    rng.shuffle(out)
    return out[:n]


def near_pairs(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Pairs with close exponents and shared high bits: cancellation and alignment cases."""
    a = interesting_f32(rng, n)
    flip = rng.integers(0, 1 << 24, n, dtype=np.uint64).astype(np.uint32) >> rng.integers(0, 24, n).astype(np.uint32)
    exp_step = (rng.integers(-2, 3, n) << 23).astype(np.int64)
    b = ((a.astype(np.int64) ^ flip.astype(np.int64)) + exp_step) & 0xFFFFFFFF
    b = b.astype(np.uint32) ^ (rng.integers(0, 2, n, dtype=np.uint64).astype(np.uint32) << 31)
    return a, b


def corner_pairs() -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair of the corner values."""
    a, b = np.meshgrid(CORNERS32, CORNERS32)
    return a.ravel(), b.ravel()
