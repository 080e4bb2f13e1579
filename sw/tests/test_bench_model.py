"""The system model (ndpkit_tools.bench.model): hand-computed cases and monotonicity."""
from dataclasses import replace

import pytest

from ndpkit_tools.bench import model
from ndpkit_tools.bench.model import DecodeSetup, ModelShape, OffloadSetup

GB = model.GB

# round numbers so every phase is computed by hand below
SMALL = OffloadSetup(ssds=2, ssd_read=1 * GB, ssd_write=1 * GB, host_link=4 * GB, cpu_adam=1e9,
                     gpu_flops=6e12, gpu_utilisation=1.0, tokens_per_step=1000,
                     engine_elements_per_cycle=1.0, engine_clock=1e8)
N = 1e9


def test_training_phases_by_hand():
    # forward/backward: 6 N T / F = 1 s of flops; fp16 reads 4 B x N / min(4 GB/s, 2 x 1 GB/s) = 2 s
    assert model.compute_phase(N, SMALL) == pytest.approx(2.0)
    # baseline: host link (12 + 14) GB / 4 GB/s = 6.5 s; SSDs (12 + 14) GB / 1 GB/s / 2 = 13 s; CPU 1 s
    assert model.baseline_update(N, SMALL) == pytest.approx(13.0)
    # near-storage: upload 2 GB / 2 GB/s = 1 s, SSDs 13 s, engines 1e9 / (2 x 1e8) = 5 s
    assert model.near_storage_update(N, SMALL) == pytest.approx(13.0)
    assert model.near_storage_update(N, SMALL, overlap=False) == pytest.approx(19.0)
    # 1 % pairs: 0.01 x 6 B x N = 60 MB upload at 4 GB/s; fast SSDs: 26 GB / 100 GB/s / 2
    assert model.gradient_bytes(0.01) == pytest.approx(0.06)
    assert model.near_storage_update(N, replace(SMALL, ssd_write=100 * GB, ssd_read=100 * GB), overlap=False,
                                     density=0.01) == pytest.approx(0.015 + 0.13 + 5.0)
    assert model.training_step(N, SMALL, "zero-infinity") == pytest.approx(15.0)
    assert model.training_speedups(N, SMALL)["update-offload"] == pytest.approx(15.0 / 21.0)


def test_training_unknown_scheme():
    with pytest.raises(ValueError, match="scheme"):
        model.training_step(N, SMALL, "zero-one")


@pytest.mark.parametrize("scheme", ["zero-infinity", *model.SCHEMES])
@pytest.mark.parametrize("n", [1.3e9, 33e9])
def test_training_monotone(scheme, n):
    """More SSDs, more bandwidth, a faster engine or GPU: never a slower step."""
    base = OffloadSetup()
    for ssds in range(1, 12):
        assert model.training_step(n, replace(base, ssds=ssds + 1), scheme) <= \
            model.training_step(n, replace(base, ssds=ssds), scheme)
    for field in ("ssd_read", "ssd_write", "host_link", "cpu_adam", "gpu_flops", "engine_clock"):
        slow = model.training_step(n, base, scheme)
        fast = model.training_step(n, replace(base, **{field: 2 * getattr(base, field)}), scheme)
        assert fast <= slow, field
    # a denser compressed gradient is never faster
    assert model.training_step(n, base, "compressed", 0.01) <= model.training_step(n, base, "compressed", 0.10)


def test_near_storage_never_moves_more_host_bytes():
    """The near-storage step never loses to the baseline once the SSDs are not the limit."""
    fast_ssd = replace(OffloadSetup(), ssd_read=100 * GB, ssd_write=100 * GB)
    for scheme in ("transfer-handler", "compressed"):
        assert model.training_speedups(6.7e9, fast_ssd)[scheme] > 1.5


TINY = ModelShape(params=1e9, layers=2, heads=2, kv_heads=2, head_dim=4, bytes_per_value=2)
TINY_SETUP = DecodeSetup(gpu_bandwidth=1 * GB, gpu_memory=10 * GB, gpu_flops=1e30, gpu_efficiency=1.0,
                         gpu_reserve=0, card_hbm=1 * GB, card_memory=1e6, card_link=1e6, port_bytes=64,
                         clock=1e6, engines_per_card=1, steady_efficiency=0.5, fixed_cycles=100,
                         context_in=100, context_out=1)


def test_decode_by_hand():
    assert TINY.kv_bytes_per_token() == 2 * 2 * 2 * 4 * 2 == 64
    assert TINY_SETUP.mean_context == 100
    # GPU alone: weights 2 GB + 10 x 100 x 64 B of KV at 1 GB/s
    assert model.gpu_step_time(10, TINY, TINY_SETUP) == pytest.approx((2e9 + 64_000) / 1e9)
    assert model.gpu_step_time(10, TINY, TINY_SETUP, with_attention=False) == pytest.approx(2.0)
    # one card: 1 engine x 64 B x 1 MHz x 0.5 = 32 MB/s
    assert model.card_bandwidth(TINY_SETUP) == pytest.approx(32e6)
    # each instance at most its pseudo-channel's rate, the card at most its HBM's
    fast = replace(TINY_SETUP, clock=1e9, channel_bandwidth=20 * GB, card_hbm=1000 * GB, engines_per_card=3)
    assert model.card_bandwidth(fast) == pytest.approx(3 * 20 * GB)       # 64 B x 1 GHz x 0.5 = 32 GB/s each
    assert model.card_bandwidth(replace(fast, card_hbm=50 * GB)) == pytest.approx(50 * GB)
    # 2 cards, 5 sequences each: KV 32 000 B / 32 MB/s = 1 ms; 2 layers x 100 cycles = 0.2 ms;
    # link 5 x 2 layers x (16 + 32 + 16) B / 1 MB/s = 0.64 ms
    assert model.card_step_time(10, 2, TINY, TINY_SETUP) == pytest.approx(1e-3 + 2e-4 + 6.4e-4)
    # pipelined: the step is the longer of the GPU's linear layers (2 s) and the cards
    assert model.decode_throughput(10, 2, TINY, TINY_SETUP) == pytest.approx(10 / 2.0)
    # capacity: (10 - 2) GB / (101 x 64 B)
    assert model.gpu_max_batch(TINY, TINY_SETUP) == int(8e9 // (101 * 64))
    assert model.cards_fit(10, 2, TINY, TINY_SETUP) and not model.cards_fit(400, 2, TINY, TINY_SETUP)


def test_decode_bad_batch():
    with pytest.raises(ValueError, match="batch"):
        model.decode_throughput(0, 1)


def test_decode_monotone():
    """More cards, more bandwidth or a more efficient engine: never fewer tokens per second."""
    base = DecodeSetup()
    for batch in (16, 64, 256):
        tps = [model.decode_throughput(batch, cards, s=base) for cards in range(0, 9) if cards]
        assert all(b >= a for a, b in zip(tps, tps[1:]))
        for field, factor in (("card_hbm", 2), ("engines_per_card", 2), ("clock", 2), ("gpu_bandwidth", 2),
                              ("steady_efficiency", 0.5)):
            if field == "steady_efficiency":
                better, worse = base, replace(base, steady_efficiency=0.5)
            else:
                better, worse = replace(base, **{field: getattr(base, field) * factor}), base
            for cards in (0, 1, 4):
                assert model.decode_throughput(batch, cards, s=better) >= \
                    model.decode_throughput(batch, cards, s=worse), (field, cards)
