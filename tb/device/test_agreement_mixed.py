"""Fuzz, all four engines on one card: random decode-attention batches (valid and
invalid command fields, requests with bad flags, zero or overflowing lengths,
unaligned or out-of-memory arrays, an output on the table) running concurrently with
random dma_copy / adam / decomp commands (the generator of
tb/device/test_agreement_optim.py), under a random memory latency, on the model and
on the 128-bit sim card: every completion and the whole of both working regions must
agree bit for bit.  A long run (`make sim`); hypothesis prints the failing example.
"""
import hashlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import ndpkit
from ndpkit.engines.attention.golden import DESCRIPTOR_BYTES, FLAG_APPEND, pack_descriptors
from ndpkit_tools.sim.device_server import DEFAULTS
from tb.device.test_agreement_optim import REGION, _command as _optim_command, _run as _run_optim

pytestmark = [pytest.mark.sim, pytest.mark.long, pytest.mark.xdist_group("device_sim_mixed")]

URI = "{}?data_width=128&engines=dma_copy,adam,decomp,attention&mem_size=8M"
SLOT = 16 << 10                    # each array of each request: k/v up to 2 heads x 24 rows x 128 x 2 B
TABLE = 1024
MAX_REQUESTS = 4
ARENA = TABLE + MAX_REQUESTS * 6 * SLOT
ARRAYS = ("q", "out", "k", "v", "k_new", "v_new")


@pytest.fixture(scope="module")
def both():
    devs = [ndpkit.open(URI.format(kind)) for kind in ("model", "sim")]
    yield devs
    for d in devs:
        d.close()


_request = st.fixed_dictionaries({
    "length": st.integers(0, 20), "capacity": st.one_of(st.integers(1, 24), st.just(0), st.just(1 << 20)),
    "window": st.integers(0, 22), "flags": st.sampled_from([0, 0, FLAG_APPEND, FLAG_APPEND, 2]),
    "fault": st.sampled_from([None] * 6 + ["unaligned", "past_end", "out_on_table"]),
    "which": st.integers(0, len(ARRAYS) - 1)})
_attention = st.fixed_dictionaries({
    "format_q": st.sampled_from([0, 1, 2, 0, 1, 2, 3]), "format_kv": st.sampled_from([1, 2, 1, 2, 0]),
    "format_out": st.sampled_from([0, 1, 2, 0, 1, 2, 3]), "shape_head_dim": st.sampled_from([64, 128, 64, 128, 96]),
    "shape_group": st.sampled_from([1, 2, 4, 1, 2, 4, 0, 17]), "shape_kv_heads": st.sampled_from([1, 2, 1, 2, 0]),
    "scale": st.floats(0.015625, 0.5, width=32), "requests": st.lists(_request, min_size=0, max_size=MAX_REQUESTS)})


def _attention_args(dev, base, spec):
    """The command and its table for ``spec`` inside an arena at ``base``."""
    requests = []
    for i, r in enumerate(spec["requests"]):
        addr = {name: base + TABLE + (6 * i + j) * SLOT for j, name in enumerate(ARRAYS)}
        victim = ARRAYS[r["which"]]
        if r["fault"] == "unaligned":
            addr[victim] += 4
        elif r["fault"] == "past_end":
            addr[victim] = dev.mem_base + dev.mem_size - dev.word_bytes
        elif r["fault"] == "out_on_table":
            addr["out"] = base
        requests.append({**addr, "length": r["length"], "capacity": r["capacity"],
                         "window": min(r["window"], r["length"]), "flags": r["flags"]})
    args = {k: spec[k] for k in ("format_q", "format_kv", "format_out", "shape_head_dim", "shape_group",
                                 "shape_kv_heads")}
    args.update(table=base, requests=len(requests), shape_block_size=0,
                scale=int(np.float32(spec["scale"]).view(np.uint32)))
    return args, pack_descriptors(requests)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)
@given(attention=_attention, optim=st.lists(_optim_command, min_size=0, max_size=3),
       latency=st.sampled_from([(DEFAULTS["read_latency"], DEFAULTS["write_latency"]), (2, 1), (300, 150),
                                (1500, 700)]),
       seed=st.integers(0, 2 ** 32 - 1))
def test_attention_beside_the_other_engines_agrees(both, attention, optim, latency, seed):
    rng = np.random.default_rng(seed)
    # the cache, q and new rows as bf16 pairs of N(0, 1) (finite whichever format reads them)
    arena_image = (rng.normal(0, 1, ARENA // 2).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    region_image = rng.integers(0, 2 ** 32, REGION // 4, dtype=np.uint64).astype(np.uint32).tobytes()
    results = []
    for dev in both:
        if dev.transport.kind == "sim":
            dev.transport.set_memory(read_latency=latency[0], write_latency=latency[1])
        arena, region = dev.alloc(ARENA), dev.alloc(REGION)
        try:
            arena.write(arena_image)
            region.write(region_image)
            args, table = _attention_args(dev, arena.address, attention)
            if table:
                arena.write(table)
            pending = dev.attention.submit(args)        # runs while the other engines work
            outcomes = [_run_optim(dev, region.address, c, seed + i) for i, c in enumerate(optim)]
            done = pending.wait(check=False)
            outcomes.append(("attention", int(done.error), done.bytes_read, done.bytes_written, done.aux))
            results.append((outcomes, hashlib.sha256(arena.read()).hexdigest(),
                            hashlib.sha256(region.read()).hexdigest()))
        finally:
            arena.free()
            region.free()
    assert results[0][0] == results[1][0], f"outcomes differ:\nmodel {results[0][0]}\nsim   {results[1][0]}"
    assert results[0][1] == results[1][1], "the attention arena differs"
    assert results[0][2] == results[1][2], "the optimizer region differs"
