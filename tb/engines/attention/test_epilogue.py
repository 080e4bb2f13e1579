# amaranth: UnusedElaboratable=no
"""The attention datapath's epilogue alone in Amaranth's simulator, bit for bit against
the golden model's block step (``merge(merge(merge(s0, s1), s2), s3)`` rounded once,
``o = fma(o, corr, ob)``, ``l`` likewise, ``out = o x (1 / l)`` narrowed): the WeightedSums
units modelled by the bench (each flushed slot's state two cycles later, four where the
flush shares the units' read port, from real
weighted sums of random rows; the slots of partials a short block never touched
hold stale sums the epilogue must ignore), jobs arriving with random gaps, the output
into a buffer drained at random, on its credit (the ``rng`` fixture prints its seed;
``SEED=`` reproduces)."""
import numpy as np
import pytest

from ndpkit.arith import blockfloat as bf
from ndpkit.arith import fp
from ndpkit.engines.attention import golden
from ndpkit_hw.engines.attention.epilogue import Epilogue
from ndpkit_hw.engines.attention.value import flush_latency
from tb.amaranth_sim import CreditSink, run_to_end
from tb.engines.attention.test_datapath import bus_words
from tb.arith.test_blockfloat_units import _operands, _weights, slot_sum, sum_state_fields

F = golden.KvFormat
WIDTH, C = 128, 8                      # a 128-bit port: 8 columns a beat
GROUPS = 128 // C


def _partial_sum(nprng, columns: int):
    """A partial's flushed state as (S, E, special) over ``columns + 1`` lanes: up to 32
    weighted fp16 V rows (``weigh``), then the weights' sum (``weigh_total``)."""
    state, total = bf.weighted_empty((), columns), (np.int64(0), np.int64(0))
    for _ in range(nprng.integers(0, 33)):
        p = bf.decompose(_weights(nprng, ()), bf.TF32)
        state = bf.weigh(state, p, bf.value_rows(_operands(nprng, F.FP16, (columns,)), F.FP16))
        total = bf.weigh_total(total, p)
    return slot_sum(state, F.FP16, total)


@pytest.mark.parametrize("units,width,serial,group,d,out_fmt", [
    (2, 1, False, 3, 64, F.FP16),       # two units (a flush names its unit), an odd group
    (1, 2, False, 2, 128, F.FP32),      # two lanes a cycle
    # a lane every four cycles, two units, binary32 out (the engine bench runs this form too)
    pytest.param(2, 1, True, 3, 128, F.FP32, marks=pytest.mark.long),
    (1, 1, True, 2, 64, F.BF16)])
def test_epilogue_matches_golden(rng, units, width, serial, group, d, out_fmt):
    nprng = np.random.default_rng(rng.randrange(1 << 30))
    heads = [[128, 3], [2], [1, 130 % 128]]             # each KV head's blocks (rows)
    slots, jobs, want = {}, [], []
    bank = 0
    for blocks in heads:
        o = np.zeros((group, d), np.uint32)
        l = np.zeros(group, np.uint32)
        for n, rows in enumerate(blocks):
            corr = fp.bits(nprng.uniform(0.01, 1.0, group).astype(np.float32))
            ob = np.zeros((group, d), np.uint32)
            lb = np.zeros(group, np.uint32)
            for g in range(group):
                for grp in range(d // C):
                    parts = [_partial_sum(nprng, C) for _ in range(bf.PARTIALS)]
                    for r, part in enumerate(parts):
                        slot = ((g // units * GROUPS + grp) << 2) + r
                        slots[(len(jobs), g % units, slot)] = sum_state_fields(part)     # stale beyond the block's rows
                    empty = (np.zeros(C + 1, np.int64), np.full(C + 1, bf.EMPTY), np.zeros(C + 1, np.int64))
                    total = parts[0] if rows > 0 else empty
                    for part in parts[1:min(rows, bf.PARTIALS)]:
                        total = bf.merge(total, part)
                    value = bf.sum_fp32(total)
                    ob[g, grp * C:(grp + 1) * C] = value[:C]
                    if grp == 0:
                        lb[g] = value[C]
            first = n == 0
            o = fp.fma(np.zeros_like(o) if first else o, np.broadcast_to(corr[:, None], o.shape), ob)
            l = fp.fma(np.zeros_like(l) if first else l, corr, lb)
            jobs.append({"job": {"b": bank, "first": int(first), "last": int(n == len(blocks) - 1), "rows": rows},
                         "corr": corr})
            bank ^= 1
        want += bus_words(golden.narrow(golden.output(o, l), out_fmt), WIDTH)
    # (the registered form's flushes share the units' read port with the value side's beats:
    # delayed to where a beat would meet the units, as in the datapath)
    latency = flush_latency(shared_sums=not serial)
    dut = Epilogue(data_width=WIDTH, columns=C, units=units, width=width, serial=serial, flush_latency=latency)
    sink = CreditSink(dut.out, dut.out_space, rng, capacity=rng.choice([8, 32]))
    got = sink.words

    # the sweep writes a block's corrections as early as it could: once the bank's block
    # before it has been taken (so a read of the wrong generation would see them)
    corr_files = [{} for _ in range(units)]
    passes_bits = (16 // units - 1).bit_length()

    def sweep(k):
        b, generation = jobs[k]["job"]["b"], (k // 2) % 2
        for g, c in enumerate(jobs[k]["corr"]):
            corr_files[g % units][(g // units) | (b << passes_bits) | (generation << (passes_bits + 1))] = int(c)
    sweep(0)
    sweep(1)

    async def bench(ctx):
        ctx.set(dut.head_dim128, d == 128)
        ctx.set(dut.group, group)
        ctx.set(dut.out_format, out_fmt)
        pending = {}                      # cycle -> the state the model gives then
        job = 0
        cycle = 0
        taken_at = []
        while len(got) < len(want):
            cycle += 1
            assert cycle < 100_000, f"stuck: {len(got)} of {len(want)} words, {job} jobs taken"
            state = pending.pop(cycle, None)
            ctx.set(dut.state.valid, state is not None)
            if state is not None:
                ctx.set(dut.state.payload, state)
            offer = job < len(jobs) and rng.random() < 0.6
            ctx.set(dut.job.valid, offer)
            if offer:
                ctx.set(dut.job.payload, jobs[job]["job"])
            # the sweep's register files of corrections, read where the epilogue asks
            at = ctx.get(dut.corr_addr)
            for h in range(units):
                ctx.set(dut.corr_data[h], corr_files[h].get(at, 0))
            sink.cycle(ctx)
            if ctx.get(dut.flush.valid):
                f = ctx.get(dut.flush.payload)
                assert f.bank == jobs[job - 1]["job"]["b"], "a flush of the other bank"
                unit = f.unit if units > 1 else 0
                pending[cycle + latency] = slots[(job - 1, unit, f.slot)]
            if ctx.get(dut.released):
                assert ctx.get(dut.released_bank) == jobs[job - 1]["job"]["b"]
            if offer and ctx.get(dut.job.ready):
                job += 1
                taken_at.append(cycle)
                if job + 1 < len(jobs):
                    sweep(job + 1)        # the bank is free: its block after next may be swept now
            await ctx.tick()
        for _ in range(40):
            await ctx.tick()
        assert ctx.get(dut.idle)

    run_to_end(dut, bench, deadline=120_000)
    bad = [i for i, (a, b) in enumerate(zip(got, want)) if a != b]
    assert not bad, f"words {bad[:8]} of {len(want)} differ"
