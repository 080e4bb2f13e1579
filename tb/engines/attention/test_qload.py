# amaranth: UnusedElaboratable=no
"""The attention datapath's q loader (:class:`~ndpkit_hw.engines.attention.qload.QueryBanks`)
alone in Amaranth's simulator: several KV heads' groups of q rows in, words with random
gaps, a modelled score side that reads a loaded bank back after a random wait and
releases it; every element in its unit, pass, column group and lane, rounded to the KV
format bit for bit as the golden model rounds q (``narrow(widen(q, q_format),
kv_format)``) and turned into its row's block-fixed integer with the row's exponent
(``block_fixed``) and the element's flags, and no bank overwritten while it is full (the ``rng`` fixture prints its
seed; ``SEED=`` reproduces)."""
import numpy as np
import pytest

from ndpkit.engines.attention import golden
from ndpkit_hw.engines.attention.datapath import lane_shape
from ndpkit_hw.engines.attention.qload import QueryBanks
from tb.amaranth_sim import Offer, run_to_end
from tb.arith.test_blockfloat_units import q_lanes
from tb.engines.attention.test_datapath import bus_words, hold_fields

F = golden.KvFormat
WIDTH = 128


def _q_bits(nprng, fmt, shape):
    """q rows as bit patterns: ordinary values, and any pattern (NaN, infinities,
    subnormals) now and then."""
    floats = nprng.standard_normal(shape) * 4.0 ** nprng.integers(-8, 8, shape)
    bits = golden.widen(floats, fmt) if fmt == F.FP32 else golden.narrow(golden.widen(floats, F.FP32), fmt)
    wild = nprng.integers(0, 1 << (32 if fmt == F.FP32 else 16), shape, dtype=np.uint64)
    return np.where(nprng.random(shape) < 0.2, wild, bits).astype(np.uint32 if fmt == F.FP32 else np.uint16)


@pytest.mark.parametrize("q_fmt,kv_fmt,d,group,pairs", [(F.FP32, F.FP16, 64, 3, 0), (F.FP16, F.BF16, 128, 4, 0),
                                                        (F.BF16, F.FP16, 64, 1, 0), (F.FP16, F.FP16, 128, 7, 1)])
def test_query_banks_hold_each_group_rounded_to_the_kv_format(rng, q_fmt, kv_fmt, d, group, pairs):
    """Each loaded group read back as the score side reads it: every head's lanes and its
    row's exponent where its unit and pass find them (with ``pairs``, head g in pass g,
    its column group k in unit k mod 2 at k // 2)."""
    C, H = lane_shape(WIDTH, 32)
    dut = QueryBanks(data_width=WIDTH, columns=C, units=H)
    nprng = np.random.default_rng(rng.randrange(1 << 30))
    heads = [_q_bits(nprng, q_fmt, (group, d)) for _ in range(5)]
    words = [w for q in heads for w in bus_words(q, WIDTH)]
    want = [[q_lanes(row, kv_fmt) for row in golden.narrow(golden.widen(q, q_fmt), kv_fmt)] for q in heads]
    # each read: (pass j, address within the pass) -> {unit h: (its query head, column group)}
    if pairs:
        reads = {(j, at): {h: (j, at * H + h) for h in range(H)} for j in range(group) for at in range(d // C // H)}
    else:
        reads = {(j, cg): {h: (j * H + h, cg) for h in range(H)} for j in range(-(-group // H)) for cg in range(d // C)}
    read_heads = 1 + max(head for units in reads.values() for head, _ in units.values())
    got = []

    async def bench(ctx):
        hold_fields(ctx, dut, head_dim128=d == 128, group=group, q_format=q_fmt, kv_format=kv_fmt, pairs=pairs)
        full, queue = 0, []
        offer = Offer(dut.q, words, rng)
        # the score side: the oldest loaded bank read back whole (an address a cycle, its
        # data the next) after a random wait, then released
        addresses = sorted(reads)
        reading, rows, step = None, None, 0
        while len(got) < len(heads):
            offer.drive(ctx)
            ctx.set(dut.full, full)
            if reading is None and queue and rng.random() < 0.004:     # (slower than the loader at times)
                reading, step = queue.pop(0), 0
                rows = [([None] * d, set()) for _ in range(read_heads)]
            if reading is not None and step < len(addresses):
                j, cg = addresses[step]
                ctx.set(dut.read_addr, (reading * dut.max_passes + j) * dut.groups + cg)
            offer.advance(ctx)
            loaded = ctx.get(dut.loaded)
            await ctx.tick()
            full |= loaded
            queue += [b for b in (0, 1) if loaded >> b & 1]
            if reading is not None and step < len(addresses):
                for h, (head, cg) in reads[addresses[step]].items():
                    lanes, exps = rows[head]
                    for c in range(C):
                        lane = ctx.get(dut.read_data[h].q[c])
                        lanes[cg * C + c] = {"x": int(lane.x), "cls": int(lane.cls)}
                    exps.add(ctx.get(dut.read_data[h].exp))
                step += 1
            elif reading is not None:
                got.append([(lanes, exps.pop() if len(exps) == 1 else exps) for lanes, exps in rows[:group]])
                full &= ~(1 << reading)
                reading = None
    run_to_end(dut, bench)
    for k, (g, w) in enumerate(zip(got, want)):
        for r, ((lanes, exp), (want_lanes, want_exp)) in enumerate(zip(g, w)):
            assert exp == want_exp, f"head {k} row {r}: exponent {exp}, not {want_exp}"
            bad = [(i, a, b) for i, (a, b) in enumerate(zip(lanes, want_lanes)) if a != b]
            assert not bad, f"head {k} row {r}: {bad[:3]}"
