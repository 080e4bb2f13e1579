# amaranth: UnusedElaboratable=no
"""The attention datapath's score side, softmax sweep and value side, each alone in
Amaranth's simulator with its neighbours modelled by the bench, bit for bit against the
golden model's steps (:func:`ndpkit.engines.attention.golden.decode_group`):

- score side (:class:`~ndpkit_hw.engines.attention.score.ScoreSide`): K words and head
  jobs with random gaps, a modelled q loader and a modelled sweep that reads each scored
  bank back after a random wait and frees it; every score ``mul(fixed_dot, scale)``,
  each bank's maxima (new, and before the block) and its rows / first / last;
- softmax sweep (:class:`~ndpkit_hw.engines.attention.sweep.SoftmaxSweep`): scored banks
  offered at random times; every ``corr`` and every TF32 weight, read back by a modelled
  value side at random rows the sweep says are done;
- value side (:class:`~ndpkit_hw.engines.attention.value.ValueSide`): V words and jobs
  with random gaps, weights released row by row at random, a modelled epilogue taking
  blocks at random and flushing every partial sum, each equal to ``weigh`` (and the
  weights' ``weigh_total``) over the partial's rows (the ``rng`` fixture prints its seed; ``SEED=`` reproduces)."""
import numpy as np
import pytest

from ndpkit.arith import blockfloat as bf
from ndpkit.arith import fp
from ndpkit.arith.exp import exp as fp_exp
from ndpkit.engines.attention import golden
from ndpkit_spec.engines.attention import MAX_GROUP, SOFTMAX_BLOCK as BLOCK
from ndpkit_hw.engines.attention.datapath import lane_shape
from ndpkit_hw.engines.attention.score import NEG_INF, ScoreSide
from ndpkit_hw.engines.attention.sweep import SoftmaxSweep
from ndpkit_hw.engines.attention.value import ValueSide
from tb.amaranth_sim import Offer, run_to_end
from tb.arith.test_blockfloat_units import _operands, _weights, q_lanes, state_fields, sum_states
from tb.engines.attention.test_datapath import bus_words, hold_fields

F = golden.KvFormat
WIDTH = 128


def _blocks(tokens):
    """Each head's blocks in order: (bank, first row, rows, first block, last block); the
    banks alternate over the whole command."""
    out = []
    for t in tokens:
        for start in range(0, t, BLOCK):
            out.append((len(out) % 2, start, min(BLOCK, t - start), start == 0, start + BLOCK >= t))
    return out


@pytest.mark.parametrize("width,lanes,group,d,tokens,kv_fmt", [
    (128, 32, 3, 64, [5, 2], F.FP16),    # two units, two passes (the fourth query head unserved)
    (256, 32, 1, 64, [256], F.BF16),     # two full blocks of one head: the maximum before a block
    (512, 32, 2, 128, [3, 4], F.FP16),   # the card build: a word two beats (its row buffer holds beats)
    (256, 8, 3, 64, [6], F.BF16)])       # four beats a word, and four units
def test_score_side_gives_every_score_and_maximum(rng, width, lanes, group, d, tokens, kv_fmt):
    C, H = lane_shape(width, lanes)
    dut = ScoreSide(data_width=width, columns=C, units=H)
    PM, GROUPS = dut.max_passes, dut.groups
    passes = -(-group // H)
    nprng = np.random.default_rng(rng.randrange(1 << 30))
    scale = np.float32(1 / np.sqrt(d)).view(np.uint32)
    heads = []
    for t in tokens:
        q = golden.narrow(fp.bits(nprng.standard_normal((group, d)).astype(np.float32)), kv_fmt)
        k = _operands(nprng, kv_fmt, (t, d))
        q[:, 0] = np.where(nprng.random(group) < 0.3, _operands(nprng, kv_fmt, (group, 1))[:, 0], q[:, 0])
        heads.append((q, k, fp.mul(bf.sum_fp32(bf.fixed_dot(q[:, None, :], k, kv_fmt)), scale)))
    blocks = []                          # (bank, rows, first, last, scores, m_new, m_old)
    for (q, k, s) in heads:
        m = np.full(group, NEG_INF, np.uint32)
        for bank, start, rows, first, last in _blocks([len(k)]):
            m_new = m
            for j in range(rows):
                m_new = fp.maximum(m_new, s[:, start + j])
            blocks.append((len(blocks) % 2, rows, first, last, s[:, start:start + rows], m_new, m))
            m = m_new
    # the q loader's banks: per unit, at (bank * PM + pass) * GROUPS + column group, C columns
    # of block-fixed lanes and the row's exponent
    empty = {"q": [{"x": 0, "cls": 1}] * C, "exp": 0}
    q_mem = [[empty] * (2 * PM * GROUPS) for _ in range(H)]

    def load(bank, q):
        for h in range(H):
            for j in range(PM):
                g = j * H + h
                lanes, exp = q_lanes(q[g], kv_fmt) if g < group else (None, 0)
                for cg in range(GROUPS):
                    cols = lanes[cg * C:(cg + 1) * C] if g < group and cg * C < d else empty["q"]
                    q_mem[h][(bank * PM + j) * GROUPS + cg] = {"q": cols, "exp": exp}
    words = [w for _, k, _ in heads for w in bus_words(k, width)]
    read = []                             # the modelled sweep's reads: (block, pass, row)

    async def bench(ctx):
        hold_fields(ctx, dut, head_dim128=d == 128, group=group, kv_format=kv_fmt, scale=int(scale))
        jobs, k = Offer(dut.jobs, list(tokens), rng), Offer(dut.k, words, rng)
        q_full, loaded, free = 0, 0, 0b11
        fills, scored = 0, 0
        queue, reading, q_addr = [], None, 0     # reading: [block, its reads left, cycles to wait]
        while scored < len(blocks) or queue or reading is not None:
            if reading is None and queue:
                n = queue.pop(0)
                reading = [n, [(j, t) for j in range(passes) for t in range(blocks[n][1])], rng.randrange(1, 30)]
            jobs.drive(ctx)
            k.drive(ctx)
            if loaded < len(heads) and not q_full >> (loaded % 2) & 1 and rng.random() < 0.2:
                load(loaded % 2, heads[loaded][0])
                q_full |= 1 << (loaded % 2)
                loaded += 1
            ctx.set(dut.q_full, q_full)
            ctx.set(dut.free, free)
            for h in range(H):
                ctx.set(dut.q_data[h], q_mem[h][q_addr])
            q_addr = ctx.get(dut.q_addr)
            if reading is not None and reading[2] == 0 and reading[1]:
                n, (j, t) = reading[0], reading[1][0]
                ctx.set(dut.score_addr, (blocks[n][0] * PM + j) * BLOCK + t)
            if ctx.get(dut.fill.valid):
                b = ctx.get(dut.fill.payload)
                assert b == blocks[fills][0] and free >> b & 1, f"block {fills} filled bank {b}"
                free &= ~(1 << b)
                fills += 1
            if ctx.get(dut.scored.valid):
                bank, rows, first, last, *_ = blocks[scored]
                assert ctx.get(dut.scored.payload) == bank
                assert (ctx.get(dut.bank_rows[bank]), ctx.get(dut.bank_first) >> bank & 1,
                        ctx.get(dut.bank_last) >> bank & 1) == (rows, first, last)
                queue.append(scored)
                scored += 1
            q_full &= ~ctx.get(dut.q_release)
            jobs.advance(ctx)
            k.advance(ctx)
            was = reading and reading[2] == 0 and reading[1] and reading[1].pop(0)
            await ctx.tick()
            if reading is None:
                continue
            n = reading[0]
            bank, rows, first, last, s, m_new, m_old = blocks[n]
            if reading[2] == 1:           # the block's maxima are in a cycle after its end
                for j in range(passes):
                    ctx.set(dut.max_addr, bank * PM + j)
                    for h in range(H):
                        g = j * H + h
                        if g < group:
                            assert (ctx.get(dut.m_new[h]), ctx.get(dut.m_old[h])) == (m_new[g], m_old[g]), \
                                f"block {n} head {g}: maxima"
            reading[2] = max(0, reading[2] - 1)
            if was:
                j, t = was
                for h in range(H):
                    if j * H + h < group:
                        assert ctx.get(dut.score_data[h]) == s[j * H + h, t], f"block {n} head {j * H + h} row {t}"
                read.append((n, j, t))
            if reading[2] == 0 and not reading[1] and not was:
                free |= 1 << bank
                reading = None
        for _ in range(8):
            await ctx.tick()
        assert not ctx.get(dut.busy) and q_full == 0
    run_to_end(dut, bench, deadline=60_000)
    assert len(read) == sum(b[1] for b in blocks) * passes


@pytest.mark.parametrize("units,group,rows", [(2, 3, [5, 128, 2]), (1, 1, [3, 1, 4])])
def test_softmax_sweep_gives_every_weight_and_correction(rng, units, group, rows):
    dut = SoftmaxSweep(units=units)
    H, PM = units, dut.max_passes
    passes = -(-group // H)
    pass_bits = (PM - 1).bit_length()
    nprng = np.random.default_rng(rng.randrange(1 << 30))
    blocks = []                          # (bank, rows, scores, m_new, m_old)
    m = np.full(group, NEG_INF, np.uint32)
    for n, r in enumerate(rows):
        s = fp.bits((nprng.standard_normal((group, r)) * 6).astype(np.float32))
        s[nprng.random(s.shape) < 0.05] = NEG_INF
        m_new = m
        for t in range(r):
            m_new = fp.maximum(m_new, s[:, t])
        blocks.append((n % 2, r, s, m_new, m))
        m = m_new
    score_mem = [[0] * (2 * PM * BLOCK) for _ in range(H)]
    maxima = [[(0, 0)] * (2 * PM) for _ in range(H)]

    def score(n):
        bank, r, s, m_new, m_old = blocks[n]
        for h in range(H):
            for j in range(PM):
                g = j * H + h
                if g < group:
                    maxima[h][bank * PM + j] = (int(m_new[g]), int(m_old[g]))
                    for t in range(r):
                        score_mem[h][(bank * PM + j) * BLOCK + t] = int(s[g, t])
    probes = 0

    async def bench(ctx):
        nonlocal probes
        hold_fields(ctx, dut, group=group)
        scored, state = 0, [None, None]        # per bank: the block it holds, "scored" / "sweeping" / "ready"
        started, done = 0, 0
        score_addr, probe, hold = 0, None, [0, 0]
        while done < len(blocks):
            n = scored
            if n < len(blocks) and state[blocks[n][0]] is None and rng.random() < 0.1:
                score(n)
                state[blocks[n][0]] = [n, "scored"]
                scored += 1
            ctx.set(dut.scored, sum(1 << b for b in (0, 1) if state[b] and state[b][1] == "scored"))
            for b in (0, 1):
                ctx.set(dut.bank_rows[b], blocks[state[b][0]][1] if state[b] else 0)
            for h in range(H):
                ctx.set(dut.score_data[h], score_mem[h][score_addr])
                new, old = maxima[h][ctx.get(dut.max_addr)]
                ctx.set(dut.m_new[h], new)
                ctx.set(dut.m_old[h], old)
            score_addr = ctx.get(dut.score_addr)
            # the value side: a weight of a row the sweep has done
            weighing = [b for b in (0, 1) if state[b] and state[b][1] != "scored" and ctx.get(dut.swept[b])]
            probe = None
            if weighing and rng.random() < 0.5:
                b = rng.choice(weighing)
                swept = ctx.get(dut.swept[b])
                assert swept <= blocks[state[b][0]][1]
                probe = (state[b][0], rng.randrange(passes), rng.randrange(swept))
                ctx.set(dut.pk_addr, (b * PM + probe[1]) * BLOCK + probe[2])
            if ctx.get(dut.start.valid):
                b = ctx.get(dut.start.payload)
                assert state[b] and state[b][:2] == [started, "scored"], f"bank {b} started out of order"
                state[b][1] = "sweeping"
                started += 1
            if ctx.get(dut.done.valid):
                b = ctx.get(dut.done.payload)
                n, _ = state[b]
                assert n == done, f"bank {b}: block {n} done, block {done} expected"
                state[b][1] = "ready"
                hold[b] = rng.randrange(1, 40)
                done += 1
            await ctx.tick()
            for b in (0, 1):
                if state[b] and state[b][1] == "ready":
                    n = state[b][0]
                    bank, r, s, m_new, m_old = blocks[n]
                    assert ctx.get(dut.swept[b]) == r, f"block {n}: swept {ctx.get(dut.swept[b])} of {r}"
                    want = fp_exp(fp.sub(m_old, m_new))
                    for g in range(group):         # (the bank's generation: its blocks before this one, mod 2)
                        ctx.set(dut.corr_addr, (g // H) | (b << pass_bits) | ((n // 2) % 2 << (pass_bits + 1)))
                        assert ctx.get(dut.corr_data[g % H]) == want[g], f"block {n} head {g}: corr"
                    hold[b] -= 1
                    if hold[b] == 0:
                        state[b] = None          # merged: the bank is free
            if probe is not None:
                n, j, t = probe
                bank, r, s, m_new, m_old = blocks[n]
                for h in range(H):
                    g = j * H + h
                    if g < group:
                        want = bf.to_tf32(fp_exp(fp.sub(s[g, t:t + 1], m_new[g:g + 1])))[0] >> 13
                        assert ctx.get(dut.pk_data[h]) == want, f"block {n} head {g} row {t}: pk"
                probes += 1
        for _ in range(8):
            await ctx.tick()
        assert not ctx.get(dut.busy)
    run_to_end(dut, bench, deadline=40_000)
    assert probes > len(rows)


@pytest.mark.parametrize("lanes,group,d,tokens,kv_fmt,shared", [
    (32, 3, 64, [5, 2], F.BF16, False),        # two units, two passes, short blocks (stale partials)
    (32, 3, 64, [5, 2], F.BF16, True),         # ... the flushes on the beats' read port
    (8, 1, 64, [133], F.FP16, False),          # two blocks, one sums bank each
    (8, 1, 64, [133], F.FP16, True)])
def test_value_side_gives_every_partial_sum(rng, lanes, group, d, tokens, kv_fmt, shared):
    C, H = lane_shape(WIDTH, lanes)
    dut = ValueSide(data_width=WIDTH, columns=C, units=H, shared_sums=shared)
    latency = dut.flush_latency()
    PM, GROUPS = dut.max_passes, dut.groups
    passes = -(-group // H)
    nprng = np.random.default_rng(rng.randrange(1 << 30))
    vs = [_operands(nprng, kv_fmt, (t, d)) for t in tokens]
    blocks = []                          # (bank, rows, first, last, pk (passes, H, rows), partial sums)
    for v, (bank, start, rows, first, last) in zip(
            [v for v, t in zip(vs, tokens) for _ in range(-(-t // BLOCK))], _blocks(tokens)):
        pk = (_weights(nprng, (passes, H, rows)) >> 13).astype(np.uint32)
        sums = {}
        for j in range(passes):
            for h in range(H):
                if j * H + h >= group:
                    continue
                for r in range(min(rows, bf.PARTIALS)):
                    state = bf.weighted_empty((), d)
                    total = (np.int64(0), np.int64(0))
                    for t in range(r, rows, bf.PARTIALS):
                        p = bf.decompose(np.uint32(pk[j, h, t]) << 13, bf.TF32)
                        state = bf.weigh(state, p, bf.value_rows(v[start + t], kv_fmt))
                        total = bf.weigh_total(total, p)
                    fields = sum_states(state, kv_fmt, total)
                    for cg in range(d // C):
                        slot = ((j * GROUPS + cg) << 2) + r
                        sums[(h, slot)] = fields[cg * C:(cg + 1) * C] + (fields[d:] if cg == 0 else [])
        blocks.append((bank, rows, first, last, pk, sums))
    words = [w for v in vs for w in bus_words(v, WIDTH)]
    flushed = []

    async def bench(ctx):
        hold_fields(ctx, dut, head_dim128=d == 128, group=group, kv_format=kv_fmt)
        jobs, v = Offer(dut.jobs, list(tokens), rng), Offer(dut.v, words, rng)
        weighing, swept = [None, None], [0, 0]       # per bank: the block whose weights it holds
        offered, merged, taken = 0, 0, 0
        pk_addr = 0
        flushes, pending, released, eager = [], {}, None, False    # the modelled epilogue's work
        cycle = 0
        while taken < len(blocks) or flushes or pending or released is not None:
            cycle += 1
            jobs.drive(ctx)
            v.drive(ctx)
            n = offered
            if n < len(blocks) and weighing[blocks[n][0]] is None and rng.random() < 0.1:
                bank, rows, first, last, *_ = blocks[n]
                weighing[bank], swept[bank] = n, 0
                ctx.set(dut.bank_rows[bank], rows)
                for name, bit in (("bank_first", first), ("bank_last", last)):
                    ctx.set(getattr(dut, name), ctx.get(getattr(dut, name)) & ~(1 << bank) | bit << bank)
                offered += 1
            for b in (0, 1):
                if weighing[b] is not None and swept[b] < blocks[weighing[b]][1] and rng.random() < 0.3:
                    swept[b] += 1
                ctx.set(dut.swept[b], swept[b])
            ctx.set(dut.weighing, sum(1 << b for b in (0, 1) if weighing[b] is not None))
            for h in range(H):
                b, rest = divmod(pk_addr, PM * BLOCK)
                j, t = divmod(rest, BLOCK)
                pk = blocks[weighing[b]][4] if weighing[b] is not None else None
                ctx.set(dut.pk_data[h], int(pk[j, h, t]) if pk is not None and j < passes and t < len(pk[0, 0]) else 0)
            pk_addr = ctx.get(dut.pk_addr)
            # the epilogue: take a block, flush its partials one a cycle at random, then release its bank
            # (half the blocks flushed at once, the last rows' partials first: the block's
            # last updates must have landed when it is offered)
            ready = not flushes and released is None and rng.random() < 0.5
            ctx.set(dut.blocks.ready, ready)
            if ready and ctx.get(dut.blocks.valid):
                bank, rows, first, last, pk, sums = blocks[taken]
                job = ctx.get(dut.blocks.payload)
                assert (job.b, job.first, job.last, job.rows) == (bank, first, last, rows), f"block {taken}"
                flushes = [(taken, h, slot) for (h, slot) in sums]
                eager = rng.random() < 0.5
                if eager:        # the last row's partial, its last pass and column group, first
                    flushes.sort(key=lambda f: (f[2] % bf.PARTIALS != (rows - 1) % bf.PARTIALS, -f[2]))
                taken += 1
            flush = flushes and (eager or rng.random() < 0.6) and flushes.pop(0)
            ctx.set(dut.flush.valid, bool(flush))
            if flush:
                n, h, slot = flush
                ctx.set(dut.flush.payload, {"slot": slot, "bank": blocks[n][0], "unit": h})
                pending[cycle + latency] = flush
                if not flushes:
                    released = (cycle + latency + 1, blocks[n][0])
            ctx.set(dut.released, released is not None and released[0] == cycle)
            ctx.set(dut.released_bank, released[1] if released else 0)
            if released is not None and released[0] == cycle:
                released = None
            want = pending.pop(cycle, None)
            assert bool(ctx.get(dut.state.valid)) == (want is not None), f"cycle {cycle}: a state out of turn"
            if want is not None:
                n, h, slot = want
                lanes = ctx.get(dut.state.payload)
                want_fields = blocks[n][5][(h, slot)]
                got = [state_fields(x) for x in list(lanes)[:len(want_fields)]]
                assert got == want_fields, f"block {n} unit {h} slot {slot}"
                flushed.append(want)
            if ctx.get(dut.merging.valid):
                b = ctx.get(dut.merging.payload)
                assert weighing[b] == merged and swept[b] == blocks[merged][1], f"block {merged} merged early"
                weighing[b] = None
                merged += 1
            jobs.advance(ctx)
            v.advance(ctx)
            await ctx.tick()
        for _ in range(8):
            await ctx.tick()
        assert not ctx.get(dut.busy)
    run_to_end(dut, bench, deadline=60_000)
    assert len(flushed) == sum(len(b[5]) for b in blocks)
