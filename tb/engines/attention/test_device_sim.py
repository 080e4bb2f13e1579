"""The attention engine's device tests on the RTL (sim transport, 128-bit card, 16 MAC
lanes: one query head at a time, so G > 1 takes several passes): the decode loop, sliding
window and 16-bit output, per-request and whole-command errors, torch SDPA and
multi-card sharding, the paged KV cache (decode loops on contiguous, driver-paged and
handed-in-paged caches bit-identical, windows mid-block, BAD_INDEX and the other bad
inputs, paged shards, two instances) — the same checks as on the behavioural model."""
import numpy as np
import pytest

import ndpkit

from tb.engines.attention import test_device as on_model

URI = "sim?data_width=128&engines=attention&mem_size=8M"
pytestmark = [pytest.mark.sim, pytest.mark.xdist_group("device_sim_attention")]


@pytest.fixture(scope="module")
def dev():
    with ndpkit.open(URI) as d:
        yield d


@pytest.mark.parametrize("fmt, group, d", [("fp16", 4, 64),
                                           pytest.param("bf16", 1, 128, marks=pytest.mark.long)])
def test_decode_loop_bit_exact(dev, fmt, group, d):
    on_model.test_decode_loop_bit_exact(dev, fmt, group, d, steps=2, layers=1)


@pytest.mark.long
def test_decode_loop_group8(dev):
    on_model.test_decode_loop_bit_exact(dev, "fp16", 8, 128, steps=2, layers=2)


def test_window_and_out_format(dev):
    on_model.test_window_and_out_format(dev)


def test_bad_requests_and_commands(dev):
    on_model.test_bad_requests_and_commands(dev)


@pytest.mark.long
def test_torch_sdpa_equivalence(dev):
    on_model.test_torch_sdpa_equivalence(dev)


@pytest.mark.long
def test_sharded_two_cards(dev):
    with ndpkit.open(URI) as second:
        on_model.check_sharded(dev, [dev, second], np.random.default_rng(8))


@pytest.mark.parametrize("fmt, group, d, bs", [("fp16", 4, 64, 16),
                                               pytest.param("bf16", 1, 128, 32, marks=pytest.mark.long)])
def test_paged_decode_loop_bit_exact(dev, fmt, group, d, bs):
    on_model.test_paged_decode_loop_bit_exact(dev, fmt, group, d, bs, steps=2, layers=1)


def test_paged_window_and_no_append(dev):
    on_model.test_paged_window_and_no_append(dev)


def test_paged_bad_inputs(dev):
    on_model.test_paged_bad_inputs(dev)


@pytest.mark.long
def test_paged_sharded_two_cards(dev):
    with ndpkit.open(URI) as second:
        on_model.check_sharded(dev, [dev, second], np.random.default_rng(17), block_size=16)


@pytest.mark.long
def test_paged_over_instances(dev):
    with ndpkit.open("sim?data_width=128&engines=attention*2&memory_ports=2&mem_size=8M") as two:
        on_model.check_paged_over_instances(two, dev, np.random.default_rng(23))
