"""The attention engine's sums of 16-bit-float products, bit for bit.

Two kinds of sum, each rounded once to binary32 (:func:`to_fp32`):

- **Block-fixed dot products** (the score side, :func:`fixed_dot`): a row of fp16 or
  bf16 values shares its largest exponent (:func:`block_fixed`): each element becomes
  an integer of a fixed number of magnitude bits (its magnitude truncated, a negative
  one's ones' complement: the hardware's sign costs an XOR, not a negation), so a row
  of q is :data:`Q_BITS` bits and a row of K :data:`K_BITS` (a DSP48E2's 27- and
  18-bit ports).  The products of the integers are exact; each drops its
  :data:`DROP` low bits (floor) and the row's products are summed exactly.  Elements
  within 2**(Q_BITS - 11) (q) and 2**(K_BITS - 11) (K; bf16: 8 significand bits) of
  their row's largest lose nothing; smaller ones keep the bits above the row's window.
  The sum does not depend on how many lanes a bus word carries.
- **Weighted sums of block-fixed rows** (the value side, :func:`weigh`): a V row
  becomes integers sharing its largest exponent (:func:`value_rows`: as
  :func:`block_fixed` with :data:`V_BITS`, a negative element's magnitude negated).  A
  running sum keeps one exponent ``G`` for all its columns (a multiple of :data:`GROW`);
  a row whose term exponent (the weight's plus the row's) exceeds it moves ``G`` up to
  the next multiple of GROW and shifts the sum down (its floor).  The weight's
  significand is aligned to ``G`` in :data:`W_BITS` bits (its floor), and each column
  adds the exact product of the aligned weight and its integer.
  The weights themselves (the softmax denominator, :func:`weigh_total`) are summed in
  fixed point with :data:`TOTAL_FRAC` fraction bits (each term's floor): they are at
  most 1.  :func:`weighted_sum` gives both as (S, E, special) sums; :func:`merge` joins
  two sums, the one with the smaller exponent floored onto the other's grid (a block
  runs as :data:`PARTIALS` interleaved partial sums, merged at its end).

Specials travel beside the sums: any NaN operand or inf x 0 makes the sum NaN, as
do infinities of both signs; otherwise an infinity is the sum.  A sum with no nonzero
term is +0.  Integers stay within int64.
"""
from __future__ import annotations

import numpy as np

from ndpkit_spec.blockfloat import DROP, GROW, GUARD, K_BITS, PARTIALS, Q_BITS, TOTAL_FRAC, V_BITS, W_BITS
from ndpkit_spec.engines.attention import KvFormat

__all__ = ["GUARD", "EMPTY", "PARTIALS", "Q_BITS", "K_BITS", "DROP", "SIG_BITS", "TF32", "to_tf32", "decompose",
           "multiply", "product_special", "block_fixed", "fixed_dot", "value_rows", "weighted_empty", "weigh",
           "weigh_total", "weighted_sum", "total_sum", "merge", "to_fp32", "sum_fp32", "V_BITS", "W_BITS", "GROW",
           "TOTAL_FRAC"]

#: the exponent of an accumulator with no nonzero term (below every product's)
EMPTY = -1 << 12

# per format: (exponent bits, fraction bits, exponent of a subnormal's unit)
#: TensorFloat-32: binary32's exponent, 10 fraction bits (an 11-bit significand), held as
#: a binary32 pattern with the low 13 bits clear.  Its product with an fp16 or bf16 value
#: is exact in the window, at binary32's range: the attention weights' format.
TF32 = "tf32"
_FORMATS = {KvFormat.FP16: (5, 10, -24), KvFormat.BF16: (8, 7, -133), TF32: (8, 10, -136)}


def to_tf32(u):
    """Binary32 bit patterns rounded to TF32 (RNE at bit 13; overflow to infinity; NaN
    -> the canonical quiet NaN), as binary32 patterns."""
    u = np.asarray(u, dtype=np.uint32).astype(np.uint64)
    rounded = ((u + 0xFFF + ((u >> 13) & 1)) >> 13) << 13
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, 0x7FC00000, rounded).astype(np.uint32)

# special state, kept beside each sum
FINITE, POS_INF, NEG_INF, NAN = 0, 1, 2, 3


def decompose(h, fmt):
    """uint16 fp16/bf16 patterns (or :data:`TF32` values as uint32 binary32 patterns)
    -> (t, e, special): value = t * 2**e exactly (t a signed int64 significand, e
    int64); special is FINITE, POS_INF, NEG_INF or NAN (t = 0 then)."""
    if fmt == TF32:
        exp_bits, frac_bits, sub_e = _FORMATS[TF32]
        h = (np.asarray(h, dtype=np.uint32) >> 13).astype(np.int64)
        sign_bit = 18
    else:
        exp_bits, frac_bits, sub_e = _FORMATS[KvFormat(fmt)]
        h = np.asarray(h, dtype=np.uint16).astype(np.int64)
        sign_bit = 15
    return _decompose(h, exp_bits, frac_bits, sub_e, sign_bit)


def _decompose(h, exp_bits, frac_bits, sub_e, sign_bit):
    sign = (h >> sign_bit) & 1
    x = (h >> frac_bits) & ((1 << exp_bits) - 1)
    f = h & ((1 << frac_bits) - 1)
    top = (1 << exp_bits) - 1
    m = np.where(x == 0, f, f | (1 << frac_bits))
    e = np.where(x == 0, sub_e, x - 1 + sub_e)
    special = np.where(x != top, FINITE, np.where(f != 0, NAN, np.where(sign == 1, NEG_INF, POS_INF)))
    t = np.where(special == FINITE, np.where(sign == 1, -m, m), 0)
    return t, e, special


def product_special(a, b):
    """The special state (FINITE, POS_INF, NEG_INF or NAN) of the product of two
    decomposed operands (t, e, special)."""
    (ta, _, sa), (tb, _, sb) = a, b
    zero_a, zero_b = (sa == FINITE) & (ta == 0), (sb == FINITE) & (tb == 0)
    neg = (ta < 0) | (sa == NEG_INF)
    neg_b = (tb < 0) | (sb == NEG_INF)
    inf = ((sa == POS_INF) | (sa == NEG_INF) | (sb == POS_INF) | (sb == NEG_INF))
    nan = (sa == NAN) | (sb == NAN) | (inf & (zero_a | zero_b))
    return np.where(nan, NAN, np.where(inf, np.where(neg ^ neg_b, NEG_INF, POS_INF), FINITE))


def multiply(a, b):
    """The exact product of two decomposed operands (t, e, special)."""
    special = product_special(a, b)
    return np.where(special == FINITE, a[0] * b[0], 0), a[1] + b[1], special


def _merge_specials(special, axis=-1):
    """The special state of a sum of terms with these states."""
    nan = (special == NAN).any(axis=axis)
    pos, neg = (special == POS_INF).any(axis=axis), (special == NEG_INF).any(axis=axis)
    return np.where(nan | (pos & neg), NAN, np.where(pos, POS_INF, np.where(neg, NEG_INF, FINITE)))


def _align(t, shift):
    """floor(t * 2**(GUARD - shift)) for shift >= 0 (an arithmetic shift either way)."""
    left = np.clip(GUARD - shift, 0, GUARD)
    right = np.clip(shift - GUARD, 0, 63)
    return (t << left) >> right


#: significand bits per KV format
SIG_BITS = {KvFormat.FP16: 11, KvFormat.BF16: 8}


def block_fixed(h, fmt, bits):
    """fp16/bf16 patterns, rows along the last axis -> (X, E, special): each row as
    integers sharing its exponent, ``value ~ X * 2**(E - bits + SIG)``: ``E`` the row's
    largest last-place exponent (over its finite elements; specials count as the
    format's smallest); for an element ``t * 2**e`` the magnitude ``|t| * 2**(bits - SIG
    - (E - e))`` truncated, its ones' complement when ``t < 0`` (the floor but where the
    shift drops nothing: one unit below); 0 for a special.  ``|X| <= 2**bits``;
    ``special`` per element."""
    fmt = KvFormat(fmt)
    decomposed = decompose(h, fmt)
    X, E = _block_fixed(decomposed, fmt, bits)
    return X, E, decomposed[2]


def _block_fixed(decomposed, fmt, bits, negate=False):
    """:func:`block_fixed` of decomposed elements: (X, E); ``negate``: a negative
    element's truncated magnitude negated instead of complemented."""
    t, e, special = decomposed
    sub_e = _FORMATS[fmt][2]
    E = np.where(special == FINITE, e, sub_e).max(axis=-1)
    up = bits - SIG_BITS[fmt] - (E[..., None] - e)             # > 0: a left shift
    mag = np.abs(t)
    shifted = np.where(up >= 0, mag << np.clip(up, 0, 63), mag >> np.clip(-up, 0, 63))
    return np.where(t < 0, -shifted if negate else ~shifted, shifted), E


def fixed_dot(q, k, fmt):
    """Block-fixed dot products of q rows and K rows (16-bit patterns in ``fmt``; the
    rows along the last axis, the other axes broadcast): returns (S, E, special) with
    the sum ``S * 2**(E - GUARD)``, as :func:`sum_fp32` takes it."""
    fmt = KvFormat(fmt)
    qd, kd = decompose(q, fmt), decompose(k, fmt)
    Q, Eq = _block_fixed(qd, fmt, Q_BITS)
    K, Ek = _block_fixed(kd, fmt, K_BITS)
    S = ((Q * K) >> DROP).sum(axis=-1)
    E = Eq + Ek + DROP - (Q_BITS + K_BITS - 2 * SIG_BITS[fmt]) + GUARD
    # the specials are the exact products' (a special element's X is 0; a tiny one's is
    # 0 or -1 but it is not zero: inf x tiny is inf)
    return S, E, _merge_specials(product_special(qd, kd))


def value_rows(v, fmt):
    """V rows (fp16/bf16 patterns, rows along the last axis) as the value side takes
    them: (X, E, decomposed): :func:`block_fixed` with :data:`V_BITS`, but a negative
    element's truncated magnitude negated (sign and magnitude: a value the grid holds
    stays exact, so one token's output is its V row), and the elements'
    :func:`decompose` (for the products' specials)."""
    fmt = KvFormat(fmt)
    decomposed = decompose(v, fmt)
    X, E = _block_fixed(decomposed, fmt, V_BITS, negate=True)
    return X, E, decomposed


def weighted_empty(shape: tuple, columns: int):
    """A weighted sum with no row yet: (S (shape + (columns,)), G (shape), special)."""
    shape = tuple(shape)
    return (np.zeros(shape + (columns,), np.int64), np.full(shape, EMPTY, np.int64),
            np.zeros(shape + (columns,), np.int64))


def _magnitude(p):
    """A weight's significand magnitude where it is a finite nonzero value, else 0."""
    t, _, special = p
    return np.where((special == FINITE), np.abs(t), 0)


def weigh(state, p, row):
    """One V row into weighted sums: ``state`` (S (..., d), G (...), special (..., d)),
    the weights ``p`` (decomposed TF32, shape (...): non-negative, as softmax numerators
    are) and the row (one row of :func:`value_rows`: X (d,), E (), decomposed (d,)).

    A nonzero weight ``t * 2**e`` against the row's exponent ``Ev`` makes the term
    exponent ``T = e + Ev``; ``G`` moves up to ``ceil(T / GROW) * GROW`` when that is
    larger (S shifted down by the difference, its floor); the aligned weight ``w =
    floor(|t| * 2**(W_BITS - 11 - (G - T)))`` (``< 2**W_BITS``); ``S += w * X``."""
    S, G, special = state
    X, Ev, decomposed = row
    t = _magnitude(p)
    live = t != 0
    T = p[1] + Ev
    T_up = -((-T) // GROW) * GROW
    G_new = np.where(live & (T_up > G), T_up, G)
    down = np.clip(G_new - G, 0, 63)
    w = np.where(live, (t << (W_BITS - 11)) >> np.clip(G_new - T, 0, 63), 0)
    S_new = (S >> down[..., None]) + w[..., None] * X
    products = product_special(tuple(x[..., None] for x in p), decomposed)
    return S_new, G_new, _merge_specials(np.stack(np.broadcast_arrays(special, products)), axis=0)


def weigh_total(state, p):
    """The weights ``p`` (decomposed TF32, at most 1) into their own sum, ``state`` (L,
    special): ``L += floor(p * 2**TOTAL_FRAC)``.  Start from ``(0, FINITE)``."""
    L, special = state
    t = _magnitude(p)
    up = p[1] + TOTAL_FRAC
    term = np.where(up >= 0, t << np.clip(up, 0, 63), t >> np.clip(-up, 0, 63))
    # (the special state of p * 1 is p's own)
    return L + term, _merge_specials(np.stack([special, p[2]]), axis=0)


def weighted_sum(state, fmt):
    """A :func:`weigh` state as an (S, E, special) sum (:func:`merge`, :func:`sum_fp32`):
    the product of an aligned weight and an integer weighs ``2**(G + 11 + SIG - W_BITS -
    V_BITS)``."""
    S, G, special = state
    offset = 11 + SIG_BITS[KvFormat(fmt)] - W_BITS - V_BITS + GUARD
    E = np.where(G == EMPTY, EMPTY, G + offset)
    return S, np.broadcast_to(E[..., None], S.shape), special


def total_sum(state):
    """A :func:`weigh_total` state as an (S, E, special) sum."""
    L, special = state
    return L, np.full(np.shape(L), GUARD - TOTAL_FRAC, np.int64), special


def merge(a, b):
    """Two running sums' states as one: both aligned to the larger exponent (floors)
    and added."""
    (Sa, Ea, sa), (Sb, Eb, sb) = a, b
    E = np.maximum(Ea, Eb)
    S = _align(Sa, E - Ea + GUARD) + _align(Sb, E - Eb + GUARD)
    return S, E, _merge_specials(np.stack([sa, sb]), axis=0)


def _bit_length(a):
    n = np.zeros_like(a)
    for step in (32, 16, 8, 4, 2, 1):
        up = (a >> (n + step)) != 0
        n = n + np.where(up, step, 0)
    return np.where(a != 0, n + 1, 0)


def to_fp32(S, k, special=None):
    """Binary32 bits of S * 2**k (int64 S, int64 k), round to nearest even, with
    subnormal results and overflow to infinity; 0 gives +0.  ``special`` (optional)
    overrides with NaN / +-inf."""
    S, k = np.broadcast_arrays(np.asarray(S, dtype=np.int64), np.asarray(k, dtype=np.int64))
    neg = S < 0
    a = np.abs(S)
    msb = _bit_length(a) - 1
    quantum = np.maximum(msb + k - 23, -149)            # exponent of the result's last place
    shift = quantum - k                                  # > 0: bits dropped
    right = np.clip(shift, 1, 63)
    kept = a >> right
    rest = a - (kept << right)
    half = np.int64(1) << (right - 1)
    up = (rest > half) | ((rest == half) & ((kept & 1) == 1))
    m = np.where(shift > 0, kept + up, a << np.clip(-shift, 0, 63))
    carry = m == (1 << 24)
    m = np.where(carry, m >> 1, m)
    quantum = quantum + carry
    biased = quantum + 150                               # the exponent field when m >= 2**23
    normal = m >= (1 << 23)
    magnitude = np.where(normal, (biased << 23) | (m & 0x7FFFFF), m)
    magnitude = np.where(normal & (biased >= 255), 0x7F800000, magnitude)
    magnitude = np.where(a == 0, 0, magnitude)
    out = magnitude | np.where(neg & (a != 0), 1 << 31, 0)
    if special is not None:
        out = np.where(special == NAN, 0x7FC00000, np.where(special == POS_INF, 0x7F800000,
                       np.where(special == NEG_INF, 0xFF800000, out)))
    return out.astype(np.uint32)


def sum_fp32(state):
    """A (S, E, special) sum as binary32 bits."""
    S, E, special = state
    return to_fp32(np.where(E == EMPTY, 0, S), np.where(E == EMPTY, 0, E - GUARD), special)
