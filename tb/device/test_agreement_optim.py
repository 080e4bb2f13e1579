"""Fuzz: random command streams mixing dma_copy, adam (dense and sparse) and decomp,
with valid and invalid fields (unaligned or overlapping arrays, addresses past the
end, bad formats and modes, zero and oversized counts, random pair indices that break
the stream rules part way), run on the model and on the 128-bit sim card: every
outcome (error code and argument, byte counters, aux) and the final memory must agree.
A long run (`make sim`); the seeds hypothesis prints reproduce a failure."""
import hashlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import ndpkit
from ndpkit import DeviceError
from ndpkit.engines.adam.golden import scalars_for_step

pytestmark = [pytest.mark.sim, pytest.mark.long, pytest.mark.xdist_group("device_sim_adam")]

URI = "{}?data_width=128&engines=dma_copy,adam,decomp&mem_size=4M"
REGION = 8 * 4096
WORD = 16
SCALARS = scalars_for_step(3, lr=1e-3, weight_decay=0.01).bits()


@pytest.fixture(scope="module")
def both():
    devs = [ndpkit.open(URI.format(kind)) for kind in ("model", "sim")]
    yield devs
    for d in devs:
        d.close()


SLOT = 4096           # the region is 8 slots; a command's arrays go to distinct slots
_faults = st.sampled_from([None] * 6 + ["unaligned", "past_end", "overlap", "field", "zero", "huge"])
_command = st.fixed_dictionaries({
    "engine": st.sampled_from(["adam", "adam", "adam", "decomp", "dma_copy"]),
    "slots": st.permutations(range(8)), "fault": _faults, "which": st.integers(0, 5),
    "n": st.integers(1, 300), "pairs": st.integers(1, 40), "sorted": st.sampled_from([True, True, False]),
    "mode": st.sampled_from([0, 1]), "grad": st.sampled_from([0, 1, 2]), "copy": st.sampled_from([0, 1, 2]),
    "sparse": st.booleans(), "op": st.sampled_from([0, 1]), "words": st.integers(1, 64)})

_ARRAYS = {"adam": ("p", "m", "v", "g", "copy", "idx"), "decomp": ("idx", "val", "dst"), "dma_copy": ("src", "dst")}


def _run(dev, base, cmd, rng_seed):
    """One command (its index array written first, from ``rng_seed``); ``fault`` spoils
    one thing: an address (unaligned, past the end, overlapping another array), a
    field, a zero or an oversized count."""
    rng = np.random.default_rng(rng_seed)
    e, fault = cmd["engine"], cmd["fault"]
    names = _ARRAYS[e]
    addr = {name: base + SLOT * cmd["slots"][i] for i, name in enumerate(names)}
    victim = names[cmd["which"] % len(names)]
    if fault == "unaligned":
        addr[victim] += 4
    elif fault == "past_end":
        addr[victim] = dev.mem_base + dev.mem_size - WORD
    elif fault == "overlap":
        addr[victim] = addr[names[(cmd["which"] + 1) % len(names)]] + WORD
    n, k = cmd["n"], cmd["pairs"]
    if fault == "zero":
        n = 0 if cmd["which"] % 2 else n
        k = 0 if not cmd["which"] % 2 else k
    elif fault == "huge":
        n = 1 << 30
    if "idx" in addr and base <= addr["idx"] and addr["idx"] + 4 * k <= base + REGION:
        limit = max(1, min(n, 300))
        if cmd["sorted"]:           # valid stream-mode pairs (k shrinks to the distinct draws)
            idx = np.unique(rng.integers(0, limit, k)).astype(np.uint32)
            k = len(idx) if k else 0
        else:                       # any order, repeats, sometimes >= n
            idx = rng.integers(0, limit + 2, k).astype(np.uint32)
        dev.transport.dma_write(addr["idx"], idx.tobytes())
    bad = 3 if fault == "field" else None
    if e == "adam":
        field = ["mode", "grad", "copy"][cmd["which"] % 3]
        args = {"format_mode": cmd["mode"], "format_grad": cmd["grad"], "format_copy": cmd["copy"],
                "format_sparse": int(cmd["sparse"]), "count": n, "p": addr["p"], "m": addr["m"], "v": addr["v"],
                "g": addr["g"], "copy": addr["copy"], "pairs": k if cmd["sparse"] else 0, "idx": addr["idx"],
                **SCALARS}
        if bad:
            args["format_" + field] = 2 if field == "mode" else 3
    elif e == "decomp":
        args = {"format": bad or cmd["grad"], "count": n, "pairs": k, "idx": addr["idx"], "val": addr["val"],
                "dst": addr["dst"]}
    else:
        args = {"op": 5 if bad else cmd["op"], "src": addr["src"], "dst": addr["dst"],
                "length": 0 if fault == "zero" else cmd["words"] * WORD, "pattern": 0x5A5A5A5A}
    done = dev.engine(e).submit(args).wait(check=False)
    return (e, int(done.error), done.bytes_read, done.bytes_written, done.aux)


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)
@given(commands=st.lists(_command, min_size=1, max_size=6),
       seed=st.integers(0, 2 ** 32 - 1))
def test_mixed_engine_sessions_agree(both, commands, seed):
    rng = np.random.default_rng(seed)
    # floats of every kind, NaN payloads and infinities included
    initial = rng.integers(0, 2 ** 32, REGION // 4, dtype=np.uint64).astype(np.uint32).tobytes()
    results = []
    for dev in both:
        region = dev.alloc(REGION)
        try:
            dev.transport.dma_write(region.address, initial)
            outcomes = [_run(dev, region.address, c, seed + i) for i, c in enumerate(commands)]
            memory = dev.transport.dma_read(region.address, REGION)
            results.append((outcomes, hashlib.sha256(memory).hexdigest()))
        finally:
            region.free()
    assert results[0][0] == results[1][0], f"outcomes differ:\nmodel {results[0][0]}\nsim   {results[1][0]}"
    assert results[0][1] == results[1][1], "card memory differs"
