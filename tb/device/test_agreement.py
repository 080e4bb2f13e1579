"""The model and the sim card agree: the same random sessions on both, compared on
every result and counter both know (error codes, tags, byte counts, memory)."""
import hashlib

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ndpkit import DeviceError

pytestmark = [pytest.mark.sim, pytest.mark.xdist_group("device_sim")]

REGION = 64 << 10       # each session works in this much card memory (plus invalid addresses)


def _session(dev, base, commands, initial):
    """Run ``commands`` (tuples) inside [base, base + REGION); returns what happened."""
    dev.transport.dma_write(base, initial)
    outcomes = []
    for op, src, dst, length, pattern in commands:
        src_addr, dst_addr = base + src, base + dst
        if dst < 0:                              # an address outside card memory
            dst_addr = dev.mem_base + dev.mem_size + (-dst)
        try:
            if op == "copy":
                done = dev.copy(dst_addr, src_addr, length)
            elif op == "fill":
                done = dev.fill(dst_addr, pattern, length)
            else:
                done = dev.engine("dma_copy").submit(
                    {"op": 5, "src": src_addr, "dst": dst_addr, "length": length, "pattern": 0}).wait()
            outcomes.append(("ok", done.bytes_read, done.bytes_written))
        except DeviceError as e:
            outcomes.append((e.code.name, e.field))
    memory = dev.transport.dma_read(base, REGION)
    return outcomes, hashlib.sha256(memory).hexdigest()


_word = 64
_offset = st.integers(0, REGION // _word - 1).map(lambda w: w * _word)
_command = st.tuples(
    st.sampled_from(["copy", "copy", "fill", "badop"]),
    st.one_of(_offset, _offset.map(lambda o: o + 4)),                  # sometimes unaligned
    st.one_of(_offset, _offset, st.just(-_word)),                       # sometimes past the end
    st.one_of(st.integers(0, 64).map(lambda w: w * _word), st.just(12), st.just(0xFFFF_FFC0)),
    st.integers(0, 2 ** 32 - 1),
)


@pytest.fixture(scope="module")
def both(devices):
    return devices("model"), devices("sim")


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=False,
          print_blob=True)
@given(commands=st.lists(_command, min_size=1, max_size=8), fill_seed=st.integers(0, 2 ** 32 - 1))
def test_random_sessions_agree(both, commands, fill_seed):
    import random
    initial = random.Random(fill_seed).randbytes(REGION)
    model, sim = both
    results = []
    for dev in (model, sim):
        region = dev.alloc(REGION + 4096)
        try:
            results.append(_session(dev, region.address, commands, initial))
        finally:
            region.free()
    assert results[0] == results[1]


def test_counters_agree_on_a_scripted_session(both):
    """Fixed session: every completion field both transports know is equal."""
    import random
    outcomes = []
    for dev in both:
        a, b = dev.alloc(REGION), dev.alloc(REGION)
        dev.transport.dma_write(a.address, random.Random(1).randbytes(REGION))
        client = dev.engine("dma_copy")
        log = []
        local = random.Random(7)
        for i in range(20):
            length = local.randrange(1, 64) * 64
            cmd = (client.copy(b.address, a.address, length) if i % 3 else
                   client.fill(b.address + 64, local.getrandbits(32), length))
            done = cmd.wait(check=False)
            log.append((done.tag - cmd.tag + i, int(done.error), done.bytes_read, done.bytes_written))
        log.append(hashlib.sha256(b.read()).hexdigest())
        outcomes.append(log)
        a.free()
        b.free()
    assert outcomes[0] == outcomes[1]
