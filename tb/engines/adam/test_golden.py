"""The Adam golden model against an exact rational reference and against float64 Adam."""
import math
import os
import random
from fractions import Fraction

import numpy as np
import pytest

from ndpkit.arith import fp
from ndpkit.engines.adam.golden import AdamScalars, Format, Mode, adam_step, scalars_for_step

F32_MAX_EXP = 127
F32_MIN_EXP = -126      # smallest normal exponent
PRECISION = 24


def round_f32(q: Fraction, inexact_below: bool = False) -> np.uint32:
    """Round an exact rational to binary32, RNE, subnormals and overflow included.
    ``inexact_below``: the true value is strictly above |q| (an irrational square root
    whose floor was taken), which can only break ties."""
    if q == 0 and not inexact_below:
        return np.uint32(0)
    sign = 0x8000_0000 if q < 0 else 0
    q = abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1                                   # now 2**e <= q < 2**(e+1)
    e = max(e, F32_MIN_EXP)
    scaled = q / Fraction(2) ** (e - (PRECISION - 1))  # the significand in units of the last place
    whole = math.floor(scaled)
    rest = scaled - whole
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and (inexact_below or whole & 1)):
        whole += 1
    if whole == 1 << PRECISION:
        whole >>= 1
        e += 1
    if e > F32_MAX_EXP:
        return np.uint32(sign | 0x7F80_0000)
    if whole < 1 << (PRECISION - 1):             # subnormal (e is the minimum exponent)
        return np.uint32(sign | whole)
    return np.uint32(sign | (e + 127) << 23 | (whole - (1 << 23)))


def exact(u) -> Fraction:
    return Fraction(float(np.uint32(u).view(np.float32)))


def exact_sqrt(q: Fraction) -> tuple[Fraction, bool]:
    """floor(sqrt(q)) to ~80 fractional bits, and whether it is inexact."""
    scale = 1 << 160
    n = q.numerator * scale * scale // q.denominator
    r = math.isqrt(n)
    exact_root = r * r == n and (q.numerator * scale * scale) % q.denominator == 0
    return Fraction(r, scale), not exact_root


def rational_adam(p, m, v, g, s, mode):
    """The golden's operation sequence, each operation exact then rounded once."""
    r = lambda q: round_f32(q)
    g = r(exact(g) * exact(s["grad_scale"]))
    if mode == Mode.ADAM and s["weight_decay"] & 0x7FFF_FFFF:
        g = r(exact(p) * exact(s["weight_decay"]) + exact(g))
    m = r(exact(g) * exact(s["one_minus_beta1"]) + exact(r(exact(m) * exact(s["beta1"]))))
    v = r(exact(r(exact(g) * exact(g))) * exact(s["one_minus_beta2"]) + exact(r(exact(v) * exact(s["beta2"]))))
    root, inexact = exact_sqrt(exact(v))
    d = round_f32(root, inexact)
    d = r(exact(d) * exact(s["bias_correction2"]) + exact(s["eps"]))
    u = r(exact(m) / exact(d))
    if mode == Mode.ADAMW and s["decay"] & 0x7FFF_FFFF:
        p = r(exact(p) * exact(s["decay"]) + exact(p))
    p = r(exact(u) * exact(s["step_size"]) + exact(p))
    return p, m, v


def _sample(rng, n):
    """Finite float32 values across the range, subnormals and zeros included."""
    kinds = rng.integers(0, 5, n)
    mag = np.where(kinds == 0, rng.uniform(-1, 1, n),
          np.where(kinds == 1, rng.uniform(-1e-3, 1e-3, n),
          np.where(kinds == 2, rng.uniform(-1e30, 1e30, n) * rng.uniform(0, 1e-30, n), rng.normal(0, 1e-2, n))))
    out = mag.astype(np.float32)
    sub = kinds == 4
    out[sub] = fp.floats(rng.integers(0, 1 << 23, sub.sum(), dtype=np.uint32)
                         | (rng.integers(0, 2, sub.sum(), dtype=np.uint32) << 31))
    return out


@pytest.mark.parametrize("mode", [Mode.ADAMW, Mode.ADAM])
def test_golden_equals_exact_rational_reference(mode):
    seed = int(os.environ.get("SEED", random.randrange(1 << 30)))
    print(f"seed={seed}")
    rng = np.random.default_rng(seed)
    n = 300
    p, m, g = _sample(rng, n), _sample(rng, n), _sample(rng, n)
    v = np.abs(_sample(rng, n))
    for step in (1, 7, 1000):
        sc = scalars_for_step(step, lr=1e-3, weight_decay=0.01, mode=mode, grad_scale=1 / 1024)
        gp, gm, gv, _, nonfinite = adam_step(p, m, v, g, sc, mode=mode)
        assert nonfinite == 0
        s = sc.bits()
        for i in range(n):
            want = rational_adam(*(int(x[i:i + 1].view(np.uint32)[0]) for x in (p, m, v, g)), s, mode)
            got = (gp[i], gm[i], gv[i])
            assert [int(x) for x in got] == [int(x) for x in want], (step, i, p[i], m[i], v[i], g[i])


def test_rounding_helper_against_numpy():
    rng = np.random.default_rng(5)
    for x in list(rng.normal(0, 1e-40, 200)) + list(rng.normal(0, 1e38, 200)) + [0.0, 3.5e38, 1e-46]:
        with np.errstate(over="ignore"):
            want = np.float32(x).view(np.uint32)
        assert round_f32(Fraction(float(x))) == want, x


def test_golden_tracks_float64_adam():
    """Against a float64 Adam of the same formula: relative error per step stays at
    float32 rounding level (the golden rounds at every operation)."""
    rng = np.random.default_rng(11)
    n = 4096
    p = rng.normal(0, 0.1, n).astype(np.float32)
    m = np.zeros(n, np.float32)
    v = np.zeros(n, np.float32)
    p64, m64, v64 = p.astype(np.float64), m.astype(np.float64), v.astype(np.float64)
    lr, b1, b2, eps, wd = 1e-3, 0.9, 0.999, 1e-8, 0.01
    worst = 0.0
    for step in range(1, 21):
        g = rng.normal(0, 1e-2, n).astype(np.float32)
        sc = scalars_for_step(step, lr=lr, weight_decay=wd)
        pb, mb, vb, _, _ = adam_step(p, m, v, g, sc)
        p, m, v = fp.floats(pb), fp.floats(mb), fp.floats(vb)
        g64 = g.astype(np.float64)
        m64 = b1 * m64 + (1 - b1) * g64
        v64 = b2 * v64 + (1 - b2) * g64 * g64
        p64 = p64 * (1 - lr * wd)
        p64 = p64 - lr / (1 - b1 ** step) * m64 / (np.sqrt(v64) / math.sqrt(1 - b2 ** step) + eps)
        worst = max(worst, float(np.max(np.abs(p - p64) / np.maximum(np.abs(p64), 1e-3))))
    print(f"max relative difference to float64 Adam over 20 steps: {worst:.3g}")
    assert worst < 1e-5


def test_formats_modes_and_nonfinite():
    rng = np.random.default_rng(3)
    n = 64
    p = rng.normal(0, 1, n).astype(np.float32)
    m = rng.normal(0, 1e-2, n).astype(np.float32)
    v = np.abs(rng.normal(0, 1e-4, n)).astype(np.float32)
    g32 = rng.normal(0, 1e-2, n).astype(np.float32)
    g16 = g32.astype(np.float16)
    sc = scalars_for_step(3, lr=1e-3, weight_decay=0.1)
    # an fp16 gradient is its exact fp32 value
    a = adam_step(p, m, v, g16.view(np.uint16), sc, grad_format=Format.FP16)
    b = adam_step(p, m, v, g16.astype(np.float32), sc, grad_format=Format.FP32)
    assert all(np.array_equal(x, y) for x, y in zip(a[:3], b[:3]))
    bf = (fp.bits(g32) >> 16).astype(np.uint16)
    c = adam_step(p, m, v, bf, sc, grad_format=Format.BF16)
    d = adam_step(p, m, v, fp.floats(bf.astype(np.uint32) << 16), sc)
    assert all(np.array_equal(x, y) for x, y in zip(c[:3], d[:3]))
    # the parameter copy is the RNE conversion of the new p
    pb, _, _, copy, _ = adam_step(p, m, v, g32, sc, copy_format=Format.BF16)
    assert np.array_equal(copy, fp.fp32_to_bf16(pb))
    # non-finite gradients are counted and propagate
    g = g32.copy()
    g[[1, 5, 9]] = [np.inf, -np.inf, np.nan]
    pb, mb, vb, _, nonfinite = adam_step(p, m, v, g, sc)
    assert nonfinite == 3
    assert np.isnan(fp.floats(pb[[1, 5, 9]])).all() and np.isfinite(fp.floats(pb[[0, 2]])).all()
    # AdamW with zero decay skips step 7: an infinite parameter stays infinite, not NaN
    p_inf = p.copy()
    p_inf[0] = np.inf
    sc0 = scalars_for_step(1, lr=1e-3, weight_decay=0.0)
    assert fp.floats(adam_step(p_inf, m, v, g32, sc0)[0])[0] == np.inf
    # Adam mode folds the decay into the gradient, AdamW decays p: different results
    adam = adam_step(p, m, v, g32, scalars_for_step(2, lr=1e-3, weight_decay=0.1, mode=Mode.ADAM), mode=Mode.ADAM)
    adamw = adam_step(p, m, v, g32, scalars_for_step(2, lr=1e-3, weight_decay=0.1))
    assert not np.array_equal(adam[0], adamw[0])
    with pytest.raises(ValueError, match="one shape"):
        adam_step(p, m, v[:3], g32, sc)
    with pytest.raises(ValueError, match="step"):
        scalars_for_step(0, lr=1e-3)
    assert AdamScalars().bits()["beta1"] == int(np.float32(0.9).view(np.uint32))
