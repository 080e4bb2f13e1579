"""Register-level fuzz: random values written to every register of every block (the
shell and each engine, doorbells, soft reset, interrupt and window registers
included), random reads, and accesses to offsets where no register or no block is —
the same sequence on the behavioural model and on the RTL (sim), every read and
every error response compared.

The shell's ``control.hold`` is kept set throughout (each write to ``control`` has
bit 0 forced on), so random doorbells queue and overflow but start nothing: the
register state stays a function of the writes alone and the two sides must agree on
all of it (the free-running cycle counter excepted).  At the end a new host opens
the card (a soft reset, the hold released) and a copy must work: no random write
leaves the card unusable.  Commands with random fields are the command fuzzers' job
(tb/device/test_agreement*.py).
"""
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import ndpkit
from ndpkit import RegisterAccessError
from ndpkit_spec.registry import EngineKind
from ndpkit.device import Device
from ndpkit_spec.shell import ENGINE_STRIDE, GLOBAL
from ndpkit_spec.registry import ENGINE_BLOCKS

CARDS = {"optim": "{}?data_width=128&engines=dma_copy,adam,decomp&mem_size=4M",
         "attention": "{}?data_width=128&engines=attention&mem_size=8M"}
GROUPS = {"optim": "device_sim_adam", "attention": "device_sim_attention"}
VOLATILE = {(0, GLOBAL.register("cycles_lo").offset), (0, GLOBAL.register("cycles_hi").offset)}
CONTROL = GLOBAL.register("control").offset


def _blocks(dev):
    """(BAR0 base, block) of the shell and every engine the card has."""
    return [(0, GLOBAL)] + [(EngineKind[name.upper()] * ENGINE_STRIDE, ENGINE_BLOCKS[name]) for name in dev.engines]


def _ops(draw_blocks):
    word = st.one_of(st.integers(0, 2 ** 32 - 1), st.sampled_from([0, 1, 0xFFFF_FFFF, 0x8000_0000]))
    block = st.integers(0, draw_blocks - 1)
    register_slot = st.integers(0, 63)                       # an index into the block's registers
    hole = st.integers(0, ENGINE_STRIDE // 4 - 1).map(lambda w: ("raw", w * 4))
    where = st.one_of(register_slot.map(lambda i: ("reg", i)), register_slot.map(lambda i: ("reg", i)), hole)
    op = st.tuples(st.sampled_from(["write", "write", "read"]), block, where, word)
    absent = st.tuples(st.just("absent"), st.integers(0, 15), st.just(("raw", 0)), word)
    return st.lists(st.one_of(op, op, op, absent), min_size=5, max_size=60)


def _session(dev, ops):
    t = dev.transport
    blocks = _blocks(dev)
    present = {base for base, _ in blocks}
    t.write32(CONTROL, 1)
    for base, block in blocks[1:]:        # the last session's completions set irq.done when their
        t.write32(base + block.register("irq").offset, 0b11)      # timing allowed: start from clear
    log = []
    for kind, b, (how, where), value in ops:
        if kind == "absent":             # a block no engine answers for
            base = b * ENGINE_STRIDE
            if base in present:
                continue
            address = base + (value % ENGINE_STRIDE) // 4 * 4
            kind = "write" if value & 1 else "read"
        else:
            base, block = blocks[b % len(blocks)]
            offset = block.registers[where % len(block.registers)].offset if how == "reg" else where
            address = base + offset
            if (base, offset) == (0, CONTROL):
                value |= 1                # keep the hold: nothing starts
        try:
            if kind == "write":
                t.write32(address, value)
                log.append(("w", address))
            elif (address & ~(ENGINE_STRIDE - 1), address % ENGINE_STRIDE) in VOLATILE:
                t.read32(address)
                log.append(("r", address, "volatile"))
            else:
                log.append(("r", address, t.read32(address)))
        except RegisterAccessError as e:
            log.append((kind, address, "error", e.resp))
    # the whole register state at the end, every block
    for base, block in blocks:
        for reg in block.registers:
            if (base, reg.offset) not in VOLATILE:
                log.append(("final", base + reg.offset, t.read32(base + reg.offset)))
    return log


def _still_usable(dev):
    """A new host opens the card (soft reset, hold released) and runs a command of each
    engine with every argument zero (each engine rejects or finishes it promptly), then,
    where there is a copy engine, a copy that must move the right bytes.  Returns the
    completions, to compare model and sim."""
    from ndpkit_spec.shell import command_fields
    fresh = Device(dev.transport)
    seen = []
    for name, client in fresh.engines.items():
        done = client.submit({f: 0 for f, _, _ in command_fields(client.block)}).wait(check=False)
        seen.append((name, int(done.error), done.bytes_read, done.bytes_written, done.aux))
    if "dma_copy" in fresh.engines:
        src, dst = fresh.alloc(4096), fresh.alloc(4096)
        src.write(bytes(range(256)) * 16)
        assert fresh.copy(dst, src).ok
        assert dst.read() == bytes(range(256)) * 16
    return seen


@pytest.fixture(scope="module", params=[pytest.param(k, id=k, marks=pytest.mark.xdist_group(GROUPS[k]))
                                        for k in CARDS])
def both(request):
    devs = [ndpkit.open(CARDS[request.param].format(kind)) for kind in ("model", "sim")]
    yield devs
    for d in devs:
        d.close()


def _check(both, data):
    ops = data.draw(_ops(len(_blocks(both[0]))))
    logs = [_session(dev, ops) for dev in both]
    for a, b in zip(*logs):
        assert a == b, f"model {a} vs sim {b}"
    assert len(logs[0]) == len(logs[1])
    after = [_still_usable(dev) for dev in both]
    assert after[0] == after[1]


@pytest.mark.sim
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)
@given(data=st.data())
def test_random_register_writes_agree_and_leave_the_card_usable(both, data):
    _check(both, data)


@pytest.mark.sim
@pytest.mark.long
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)
@given(data=st.data())
def test_random_register_writes_long(both, data):
    _check(both, data)
