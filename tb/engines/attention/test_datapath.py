# amaranth: UnusedElaboratable=no
"""The attention datapath alone in Amaranth's simulator, bit for bit against
ndpkit.engines.attention.golden.decode_group: q, K and V words in with random gaps,
the output words into a buffer drained at random, on its credit (the ``rng`` fixture prints its seed;
``SEED=`` reproduces).  Small shapes (the engine bench runs the large ones on Verilator)."""
import numpy as np
import pytest

from ndpkit.arith import fp
from ndpkit.engines.attention import golden
from ndpkit_hw.engines.attention.datapath import AttentionDatapath
from tb.amaranth_sim import CreditSink, Offer, run_to_end

F = golden.KvFormat


def hold_fields(ctx, dut, **fields):
    """Set the fields a datapath (or a part of it) holds for a whole command."""
    for name, value in fields.items():
        ctx.set(getattr(dut, name), value)


def bus_words(bits: np.ndarray, width: int) -> list[int]:
    raw = np.ascontiguousarray(bits).tobytes()
    step = width // 8
    return [int.from_bytes(raw[i:i + step], "little") for i in range(0, len(raw), step)]


@pytest.mark.parametrize("width,lanes,group,d,tokens,pairs", [
    (128, 32, 3, 64, [5], False),                                   # two units, passes over them, bf16
    # built with pair_words, a pass a head (the engine bench's w128l32pairs runs these in make test)
    pytest.param(128, 32, 7, 128, [5], True, marks=pytest.mark.long),
    (128, 64, 5, 64, [4], False),                                   # four units: the registered epilogue
    (256, 64, 3, 128, [6], False),                                  # ... two: one copy of the sums
    # the card build at SmolLM2's head dim, words back to back: a row of two words fills
    # its slot faster than the row's exponent field lands
    (512, 32, 1, 64, [5], False),
    pytest.param(128, 16, 1, 64, [3, 130], False, marks=pytest.mark.long),  # two blocks
    pytest.param(128, 32, 5, 64, [3, 130], True, marks=pytest.mark.long),   # pairs over two blocks
    pytest.param(128, 8, 2, 128, [1, 4], False, marks=pytest.mark.long)])   # one token, fp16 out
def test_datapath_matches_golden(rng, width, lanes, group, d, tokens, pairs):
    offer_rate = 1.0 if width == 512 else 0.7
    nprng = np.random.default_rng(rng.randrange(1 << 30))
    q_fmt, kv_fmt, out_fmt = F.FP32, F.FP16 if lanes != 32 else F.BF16, F.FP32 if lanes != 8 else F.FP16
    scale = float(np.float32(1 / np.sqrt(d)))
    heads = []
    for t in tokens:
        q = fp.bits(nprng.standard_normal((group, d)).astype(np.float32))
        k = golden.narrow(fp.bits(nprng.standard_normal((t, d)).astype(np.float32)), kv_fmt)
        v = golden.narrow(fp.bits(nprng.standard_normal((t, d)).astype(np.float32)), kv_fmt)
        heads.append((q, k, v, golden.narrow(golden.decode_group(q, k, v, scale, kv_format=kv_fmt), out_fmt)))
    dut = AttentionDatapath(data_width=width, lanes=lanes, pair_words=pairs)
    streams = {"head": [t for t in tokens],
               "q": [w for q, *_ in heads for w in bus_words(q, width)],
               "k": [w for _, k, _, _ in heads for w in bus_words(k, width)],
               "v": [w for _, _, v, _ in heads for w in bus_words(v, width)]}
    want = [w for *_, out in heads for w in bus_words(out, width)]
    sink = CreditSink(dut.out, dut.out_space, rng, capacity=rng.choice([8, 32]), rate=0.8)
    got = sink.words

    async def bench(ctx):
        hold_fields(ctx, dut, head_dim128=d == 128, group=group, q_format=q_fmt, kv_format=kv_fmt,
                    out_format=out_fmt, scale=int(np.float32(scale).view(np.uint32)))
        offers = {name: Offer(getattr(dut, name), items, rng, offer_rate) for name, items in streams.items()}
        cycles = 0
        while len(got) < len(want):
            cycles += 1
            assert cycles < 2000 + 50 * sum(map(len, streams.values())), \
                f"stuck: {len(got)} of {len(want)} words, sent {({n: o.i for n, o in offers.items()})}"
            for offer in offers.values():
                offer.drive(ctx)
            sink.cycle(ctx)
            for offer in offers.values():
                offer.advance(ctx)
            await ctx.tick()
        for _ in range(50):
            await ctx.tick()
        assert ctx.get(dut.idle)

    run_to_end(dut, bench, deadline=200_100)
    bad = [i for i, (a, b) in enumerate(zip(got, want)) if a != b]
    assert not bad, f"{len(bad)} of {len(want)} words differ, first {bad[0]}: {got[bad[0]]:#x} != {want[bad[0]]:#x}"
