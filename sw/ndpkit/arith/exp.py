"""Binary32 ``exp`` as the hardware computes it (``ndpkit_hw.arith.exp.FpExp``).

exp(x) = 2**y with y = x * log2(e), computed in fixed point:

1. ``y``: the 24-bit significand times ``C = round(log2(e) * 2**39)`` (a 40-bit
   constant) is exact in 64 bits; shifted right by ``149 - e`` (truncating) it gives
   |y| with 40 fractional bits; the sign is applied after.  |x| >= 128 saturates
   (+inf or +0) before this step.
2. ``k = floor(y)``, ``f = y - k`` in [0, 1) with 40 bits; ``i`` = the top 8 bits of
   ``f``, ``r`` = the low 32 bits (r < 2**-8).
3. ``2**f = T[i] * 2**r``: ``T[i] = round(2**(i/256) * 2**31)`` (256 x 32-bit table);
   ``2**r = e**t`` with ``t = floor(r * LN2 / 2**32)``, ``LN2 = round(ln 2 * 2**32)``,
   approximated by ``1 + t + t*t/2`` in Q1.31 (``r`` and ``t`` are Q0.40; every
   product is truncated).
4. ``M = floor(T[i] * P / 2**31)`` and the result ``M * 2**(k - 31)`` is rounded once
   to binary32 (RNE, subnormal results, overflow to +inf).

NaN -> NaN, +inf -> +inf, -inf -> +0.  The measured error against a float64
reference (``python -m ndpkit.arith.exp``) is reported in docs/arith.md; the bound
asserted by the tests is 1 ulp over every input whose result is a normal number.
"""
from __future__ import annotations

import numpy as np

from ndpkit.arith.fp import QNAN32, bits, floats
from ndpkit_spec import exp as _spec
from ndpkit_spec.exp import FRACTION_BITS, LN2_Q32, LOG2E_Q39

__all__ = ["LOG2E_Q39", "LN2_Q32", "TABLE", "exp", "ulp_error"]

TABLE = np.array(_spec.TABLE, dtype=np.uint64)


def exp(u) -> np.ndarray:
    u = np.asarray(u, dtype=np.uint32)
    sign = (u >> 31).astype(np.int64)
    e = ((u >> 23) & 0xFF).astype(np.int64)
    frac = (u & 0x7FFFFF).astype(np.uint64)
    sig = np.where(e == 0, frac, frac | np.uint64(1 << 23))
    e_eff = np.where(e == 0, 1, e)
    big = e_eff >= 134                                                   # |x| >= 128
    product = sig * np.uint64(LOG2E_Q39)                                 # < 2**64
    shift = np.clip(149 - e_eff, 0, 63).astype(np.uint64)
    y_abs = (product >> shift).astype(np.int64)
    y = np.where(sign == 1, -y_abs, y_abs)
    k = y >> FRACTION_BITS                                               # floor
    f = (y - (k << FRACTION_BITS)).astype(np.uint64)
    index = (f >> np.uint64(32)).astype(np.int64)
    r = f & np.uint64(0xFFFFFFFF)
    t = (r * np.uint64(LN2_Q32)) >> np.uint64(32)                         # r*ln2, Q0.40, < 2**32
    t2 = (t * t) >> np.uint64(50)                                         # t*t/2 in Q0.31
    poly = np.uint64(1 << 31) + (t >> np.uint64(9)) + t2                  # 1 + t + t*t/2, Q1.31
    m = (TABLE[index] * poly) >> np.uint64(31)                            # < 2**33
    with np.errstate(over="ignore", under="ignore"):                       # |x| >= 128 lanes, replaced below
        value = np.ldexp(m.astype(np.float64), (k - 31).astype(np.int64))  # exact in float64
        result = bits(value.astype(np.float32))                          # the one rounding
    nan = (e == 255) & (frac != 0)
    pos_inf = (e == 255) & (frac == 0) & (sign == 0)
    result = np.where(big & (sign == 0), np.uint32(0x7F800000), result)
    result = np.where(big & (sign == 1), np.uint32(0), result)
    result = np.where(pos_inf, np.uint32(0x7F800000), result)
    return np.where(nan, QNAN32, result).astype(np.uint32)


def ulp_error(u, result) -> np.ndarray:
    """|result - exp(x)| in units of the binary32 ulp at the exact value (float64 reference)."""
    x = floats(u).astype(np.float64)
    with np.errstate(all="ignore"):
        exact = np.exp(x)
        got = floats(result).astype(np.float64)
        exponent = np.floor(np.log2(np.abs(exact)))
        ulp = np.ldexp(1.0, (np.maximum(exponent, -126) - 23).astype(np.int64))
        return np.abs(got - exact) / ulp


def sweep(samples: int = 10_000_000, seed: int = 1, chunk: int = 1 << 20) -> dict:
    """Max ulp error over ``samples`` inputs spanning every input whose result is normal."""
    rng = np.random.default_rng(seed)
    lo, hi = np.float32(-87.33654), np.float32(88.72283)       # exp(lo) >= 2**-126, exp(hi) < max
    lo_bits, hi_bits = int(bits([lo])[0]), int(bits([hi])[0])
    worst, worst_x, done = 0.0, 0, 0
    while done < samples:
        n = min(chunk, samples - done)
        # half uniform in the value range, half uniform in the bit patterns (dense near 0)
        values = rng.uniform(float(lo), float(hi), n // 2).astype(np.float32)
        patterns = np.concatenate([rng.integers(0, hi_bits + 1, n // 4, dtype=np.uint64),
                                   rng.integers(0x80000000, lo_bits + 1, n - n // 2 - n // 4, dtype=np.uint64)])
        u = np.concatenate([bits(values), patterns.astype(np.uint32)])
        err = ulp_error(u, exp(u))
        i = int(np.argmax(err))
        if err[i] > worst:
            worst, worst_x = float(err[i]), int(u[i])
        done += n
    return {"samples": samples, "max_ulp": worst, "worst_input": f"{worst_x:#010x}",
            "range": [float(lo), float(hi)]}


if __name__ == "__main__":
    import json
    import sys
    print(json.dumps(sweep(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_000), indent=1))
