# amaranth: UnusedElaboratable=no
"""The block-float sum units in Amaranth's simulator, bit for bit against
ndpkit.arith.blockfloat, with random gaps on the input stream (the ``rng`` fixture
prints its seed; ``SEED=`` reproduces)."""
import numpy as np
import pytest
from tb.amaranth_sim import run_to_end

from ndpkit.arith import blockfloat as bf
from ndpkit_spec.engines.attention import KvFormat


def _operands(nprng, fmt, shape):
    """16-bit patterns: normal values of a few magnitudes, subnormals, zeros, rare
    infinities and NaNs, so rows align over wide and narrow exponent ranges."""
    exp_bits, frac_bits = (5, 10) if fmt == KvFormat.FP16 else (8, 7)
    top = (1 << exp_bits) - 1
    centre = nprng.integers(2, top - 2, shape[:-1] + (1,))
    spread = nprng.choice([1, 3, top], shape[:-1] + (1,))
    x = np.clip(centre + nprng.integers(-1, 2, shape) * nprng.integers(0, spread + 1, shape), 0, top - 1)
    f = nprng.integers(0, 1 << frac_bits, shape)
    r = nprng.random(shape)
    x = np.where(r < 0.08, 0, x)                                  # subnormals and zeros
    f = np.where(r < 0.03, 0, f)
    x = np.where(r > 0.998, top, x)                               # inf / NaN
    s = nprng.integers(0, 2, shape)
    return ((s << 15) | (x << frac_bits) | f).astype(np.uint16)


def _tf32(nprng, shape):
    """TF32 weights as binary32 patterns: bf16-like patterns of every range (subnormals,
    zeros, rare infinities and NaNs) with three more fraction bits."""
    b = _operands(nprng, KvFormat.BF16, shape).astype(np.uint32)
    special = (b & 0x7F80) == 0x7F80
    return (b << 16) | np.where(special, 0, nprng.integers(0, 8, shape) << 13).astype(np.uint32)


def _weights(nprng, shape):
    """TF32 softmax numerators as binary32 patterns: values in [0, 1] over a wide range
    of exponents (subnormals included), some exactly 1, some 0, rare NaNs."""
    x = np.exp2(-nprng.uniform(0, 150, shape) * (nprng.random(shape) < 0.3) - nprng.uniform(0, 12, shape))
    u = bf.to_tf32(x.astype(np.float32).view(np.uint32))
    r = nprng.random(shape)
    u = np.where(r < 0.1, 0x3F800000, np.where(r > 0.93, 0, u))
    return np.where(r > 0.995, 0x7FC00000, u).astype(np.uint32)


def v_lanes(v, fmt):
    """A V row's :data:`~ndpkit_hw.arith.blockfloat.VLane` elements and its exponent,
    as the value side's aligner gives them (the golden model's ``value_rows``, the
    integers' magnitudes beside their signs)."""
    X, E, (t, _, special) = bf.value_rows(v, fmt)
    return [{"x": abs(int(x)), "sign": int(h) >> 15, "zero": int(sp == bf.FINITE and tt == 0),
             "inf": int(sp in (bf.POS_INF, bf.NEG_INF)), "nan": int(sp == bf.NAN)}
            for x, h, sp, tt in zip(X, v, special, t)], int(E)


def slot_sum(state, fmt, total):
    """A golden weighted sum (``weigh``) and its weights' sum (``weigh_total``) as one
    slot's (S, E, special) sums: the columns', then the weights' sum."""
    return tuple(np.append(x, y) for x, y in zip(bf.weighted_sum(state, fmt), bf.total_sum(total)))


def sum_state_fields(state):
    """A golden sum ``(S, E, special)`` as the lanes' SumState fields."""
    from ndpkit_hw.arith.blockfloat import NO_TERM
    S, E, special = state
    return [{"sum": int(S[i]), "exp": int(E[i]) if E[i] != bf.EMPTY else NO_TERM,
             "pos_inf": int(special[i] == bf.POS_INF), "neg_inf": int(special[i] == bf.NEG_INF),
             "nan": int(special[i] == bf.NAN)} for i in range(len(S))]


def sum_states(state, fmt, total):
    """:func:`slot_sum` as a slot's flushed SumState fields."""
    return sum_state_fields(slot_sum(state, fmt, total))


def state_fields(state):
    """A SumState's fields, its flags as the one state they stand for (NaN over an
    infinity, both infinities NaN)."""
    nan = state.nan or (state.pos_inf and state.neg_inf)
    return {"sum": state.sum, "exp": state.exp, "pos_inf": int(state.pos_inf and not nan),
            "neg_inf": int(state.neg_inf and not nan), "nan": int(nan)}


def q_lanes(q, fmt):
    """A q row's :data:`~ndpkit_hw.arith.blockfloat.QLane` elements and its exponent,
    as the q loader writes them (the golden model's ``block_fixed``)."""
    X, E, special = bf.block_fixed(q, fmt, bf.Q_BITS)
    t, _, _ = bf.decompose(q, fmt)
    lanes = [{"x": -1 if sp == bf.NEG_INF else int(x),
              "cls": 3 if sp == bf.NAN else 2 if sp != bf.FINITE else 1 if tt == 0 else 0}
             for x, sp, tt in zip(X, special, t)]
    return lanes, int(E)


@pytest.mark.parametrize("fmt, lanes", [(KvFormat.FP16, 16), (KvFormat.BF16, 4),      # each format, each width once
                                        pytest.param(KvFormat.BF16, 16, marks=pytest.mark.long),
                                        pytest.param(KvFormat.FP16, 4, marks=pytest.mark.long)])
def test_key_align_and_fixed_dot_match_fixed_dot(rng, fmt, lanes):
    """K rows through the score side's dot products (``ScoreDots``: KeyAlign into FixedDot;
    random gaps), each aligned beat's q lanes read from a modelled q bank at the address it
    gives, a cycle later: every row's binary32 sum equals ``sum_fp32(fixed_dot(q, k))``."""
    from ndpkit_hw.engines.attention.score import ScoreDots
    nprng = np.random.default_rng(rng.randrange(1 << 30))
    max_beats = 8
    rows = []
    for _ in range(60):
        beats = int(nprng.integers(1, max_beats + 1))
        rows.append((_operands(nprng, fmt, (beats * lanes,)), _operands(nprng, fmt, (beats * lanes,))))
    want = [int(bf.sum_fp32(bf.fixed_dot(q, k, fmt))) for q, k in rows]
    # the q bank: row r's beat j at address r * max_beats + j
    bank = {}
    for r, (q, _) in enumerate(rows):
        q_row, q_exp = q_lanes(q, fmt)
        for j in range(len(q) // lanes):
            bank[r * max_beats + j] = [{"q": q_row[j * lanes:(j + 1) * lanes], "exp": q_exp}]
    dut = ScoreDots(columns=lanes, units=1, max_row_beats=max_beats, tag_width=8, q_depth=len(rows) * max_beats)
    beats = [(k[i:i + lanes], i + lanes == len(k), r, r * max_beats + i // lanes) for r, (_, k) in enumerate(rows)
             for i in range(0, len(k), lanes)]
    got = run_score_dots(dut, rng, beats, bank, len(rows), units=1, bf16=fmt == KvFormat.BF16)
    bad = [(r, hex(v[0]), hex(w)) for r, (v, w) in enumerate(zip(got, want)) if v[0] != w]
    assert not bad, bad[:5]


def run_score_dots(dut, rng, beats, bank, rows: int, *, units: int, bf16: bool, **held) -> list:
    """Drive a ScoreDots with ``beats`` ((k elements, last, tag, q address), offered with
    random gaps), answering each q address with ``bank``'s word a cycle later; returns
    each row's sums of the first ``units`` units, checked to come out in row order."""
    got = []

    async def bench(ctx):
        ctx.set(dut.bf16, bf16)
        for name, value in held.items():
            ctx.set(getattr(dut, name), value)
        i, read = 0, None
        while len(got) < rows:
            if read is not None:                       # the bank's word a cycle after its address
                ctx.set(dut.q_data, bank.get(read, bank[0]))
            on = i < len(beats) and rng.random() < 0.75
            ctx.set(dut.i.valid, on)
            if on:
                k, last, tag, q_addr = beats[i]
                ctx.set(dut.i.payload, {"k": [int(x) for x in k], "last": int(last), "tag": tag, "q_addr": q_addr})
            taken = on and ctx.get(dut.i.ready)
            read = ctx.get(dut.q_addr)
            if ctx.get(dut.o.valid):
                got.append((ctx.get(dut.o.payload[0].tag), [ctx.get(dut.o.payload[h].value) for h in range(units)]))
            await ctx.tick()
            i += taken
    run_to_end(dut, bench)
    assert [t for t, _ in got] == list(range(rows)), [t for t, _ in got]
    return [sums for _, sums in got]


@pytest.mark.parametrize("fmt, pairs", [(KvFormat.FP16, 1), (KvFormat.BF16, 1), (KvFormat.FP16, 0)])
def test_score_dots_pair_words(rng, fmt, pairs):
    """ScoreDots of two units built with ``pair_words`` (random gaps).  With ``pairs`` a
    beat is two words of one row, the even one unit 0's and the odd one unit 1's, and
    unit 0's sum is the whole row's, ``sum_fp32(fixed_dot(q, k))`` (unit 1's row integer
    added before the one rounding).  Without, a beat is the same word twice, as the side
    reads it, and each unit's sum is its own query head's."""
    from ndpkit_hw.engines.attention.score import ScoreDots
    nprng = np.random.default_rng(rng.randrange(1 << 30))
    lanes, max_beats = 4, 4
    words = 2 if pairs else 1                          # distinct words a beat
    rows = []
    for _ in range(40):
        beats = int(nprng.integers(1, max_beats + 1))
        n = words * beats * lanes
        rows.append(([_operands(nprng, fmt, (n,)) for _ in range(2 - pairs)], _operands(nprng, fmt, (n,))))
    want = [[int(bf.sum_fp32(bf.fixed_dot(q, k, fmt))) for q in qs] for qs, k in rows]
    # the q bank: unit h's lanes of beat j of row r at r * max_beats + j (with pairs, the
    # row's word 2j + h; else its query head h's word j)
    bank = {}
    for r, (qs, k) in enumerate(rows):
        heads = [q_lanes(q, fmt) for q in qs]
        for j in range(len(k) // (words * lanes)):
            bank[r * max_beats + j] = [
                {"q": heads[0][0][(2 * j + h) * lanes:(2 * j + h + 1) * lanes], "exp": heads[0][1]} if pairs else
                {"q": heads[h][0][j * lanes:(j + 1) * lanes], "exp": heads[h][1]} for h in range(2)]
    dut = ScoreDots(columns=lanes, units=2, max_row_beats=max_beats, tag_width=8, q_depth=len(rows) * max_beats,
                    pair_words=True)
    step = words * lanes
    beats = [(list(k[i:i + step]) * (2 // words), i + step == len(k), r, r * max_beats + i // step)
             for r, (_, k) in enumerate(rows) for i in range(0, len(k), step)]
    got = run_score_dots(dut, rng, beats, bank, len(rows), units=2 - pairs, bf16=fmt == KvFormat.BF16, pairs=pairs)
    bad = [(r, [hex(x) for x in v], [hex(x) for x in w]) for r, (v, w) in enumerate(zip(got, want)) if v != w]
    assert not bad, bad[:5]


@pytest.mark.parametrize("fmt, split_banks, shared_read", [(KvFormat.FP16, False, False), (KvFormat.BF16, True, False),
                                                          (KvFormat.BF16, False, True)])
def test_weighted_sums_match_weigh(rng, fmt, split_banks, shared_read):
    """Weights in [0, 1] times V rows' block-fixed elements (each beat's row twice the
    lanes wide: its exponent is the whole row's; the elements X_LAG cycles behind it).  Two banks of slots, tokens in blocks:
    each slot's sum starts fresh at its block's first token, a slot is revisited every
    ``slots_used`` beats, the weights' sum is taken on one slot of each token's beats,
    and after each block the other bank keeps running while this one is flushed and
    compared with ``weigh`` / ``weigh_total``.  With ``shared_read`` (one read port) a flush
    only takes a cycle with no beat."""
    from ndpkit_hw.arith.blockfloat import REVISIT, X_LAG, WeightedSums
    nprng = np.random.default_rng(rng.randrange(1 << 30))
    lanes, slots_used, blocks, tokens = 4, REVISIT, 4, 32
    # UltraRAM's memory shape, block RAM's, one read port
    dut = WeightedSums(lanes=lanes, slots=16, split_banks=split_banks, shared_read=shared_read)
    # per block: tokens x slots beats of (p, V row); slot 0's beats also take the weights' sum
    data_ = [(_weights(nprng, (tokens, slots_used)), _operands(nprng, fmt, (tokens, slots_used, 2 * lanes)))
             for _ in range(blocks)]
    inf = 0x7C00 if fmt == KvFormat.FP16 else 0x7F80
    for _, v in data_[1:]:                 # infinities in one lane (against zero weights: NaN)
        v[..., 1] = np.where(nprng.random(v.shape[:-1]) < 0.2, inf | (v[..., 1] & 0x8000), v[..., 1])
    want = []
    for p, v in data_:
        states = []
        for s in range(slots_used):
            st = bf.weighted_empty((), 2 * lanes)
            total = (np.int64(0), np.int64(0))
            for t in range(tokens):
                pd = bf.decompose(p[t, s], bf.TF32)
                st = bf.weigh(st, pd, bf.value_rows(v[t, s], fmt))
                if s == 0:
                    total = bf.weigh_total(total, pd)
            S, G, special = st
            states.append(sum_states((S[:lanes], G, special[:lanes]), fmt, total))
        want.append(states)
    got = {}

    async def bench(ctx):
        ctx.set(dut.bf16, fmt == KvFormat.BF16)
        flushes = []                       # (block, slot) to flush, of the bank not being updated
        idle = [{"x": 0, "sign": 0, "zero": 0, "inf": 0, "nan": 0}] * lanes
        elements = [idle] * X_LAG          # a beat's elements follow it X_LAG cycles later
        for blk, item in enumerate(data_ + [None]):
            p, v = item if item is not None else (None, None)
            beats = [] if p is None else [(t, s) for t in range(tokens) for s in range(slots_used)]
            i = 0
            while i < len(beats) or (p is None and flushes):
                on = i < len(beats) and rng.random() < 0.7
                ctx.set(dut.i.valid, on)
                x = idle
                if on:
                    t, s = beats[i]
                    x, v_exp = v_lanes(v[t, s], fmt)
                    ctx.set(dut.i.payload, {"p": int(p[t, s]) >> 13, "v_exp": v_exp, "total": int(s == 0),
                                            "slot": s, "bank": blk % 2, "fresh": int(t == 0)})
                elements.append(x[:lanes])
                ctx.set(dut.x, elements.pop(0))
                fl = bool(flushes) and rng.random() < 0.5 and not (shared_read and on)
                ctx.set(dut.flush.valid, fl)
                if fl:
                    fb, fs = flushes[0]
                    ctx.set(dut.flush.payload, {"slot": fs, "bank": fb % 2})
                if ctx.get(dut.state.valid):
                    got.setdefault("order", []).append(ctx.get(dut.state.payload))
                await ctx.tick()
                i += on
                if fl:
                    got.setdefault("flushed", []).append(flushes.pop(0))
            for _ in range(8):                 # the last updates land
                ctx.set(dut.i.valid, 0)
                ctx.set(dut.flush.valid, 0)
                elements.append(idle)
                ctx.set(dut.x, elements.pop(0))
                if ctx.get(dut.state.valid):
                    got.setdefault("order", []).append(ctx.get(dut.state.payload))
                await ctx.tick()
            if p is not None:
                flushes += [(blk, s) for s in range(slots_used)]
    run_to_end(dut, bench)
    assert len(got["order"]) == blocks * slots_used
    for (blk, s), lanes_state in zip(got["flushed"], got["order"]):
        assert [state_fields(x) for x in lanes_state] == want[blk][s], (blk, s)

