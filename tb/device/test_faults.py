"""Fault injection through every engine on the simulated card (the RTL), compared with
the behavioural model.

For each engine a valid command runs while the card's memory model answers SLVERR or
DECERR for one array it reads and, separately, one array it writes: the completion
must carry exactly that code, and no byte outside the command's output arrays may
change (the rest of its arena and a guard arena beside it are checked whole).  The
fault is then cleared, the arena restored, and the same command must succeed with
results equal, bit for bit, to the model's.  Also: long memory stalls (results do not
change), lost interrupts (the driver finds the completion by polling and counts the
miss), a card killed mid-command on each engine (TransportClosed at once, no wait), a
host that closes the socket in the middle of a DMA (the server exits), and a new host
opening a card the last one left mid-command (nothing of the old work leaks into the
new).

The lean tier (``make test``) runs one engine per fault kind; ``make sim`` runs every
engine with every fault.
"""
import time

import numpy as np
import pytest

import ndpkit
from ndpkit import ErrorCode, TransportClosed
from ndpkit.device import Device
from ndpkit.engines.attention import golden as attention_golden
from ndpkit.transport.sim_protocol import HEADER, Op
from tb.device.test_isolation import ARENA, CARDS, GROUPS, _attention_commands, _commands

ENGINES = list(CARDS)
# (attention's faults run in make sim only: they were make test's slowest case, and
# attention's isolation and engine tests stay in make test)
LEAN = {("dma_copy", "SLVERR"), ("adam", "DECERR"), ("adam", "stall"), ("decomp", "lost_irq")}


def _marks(engine, fault):
    marks = [pytest.mark.sim, pytest.mark.xdist_group(GROUPS[engine])]
    if (engine, fault) not in LEAN:
        marks.append(pytest.mark.long)
    return marks


class Job:
    """One valid command of ``engine`` inside an arena, with the arrays it reads and
    writes (``(offset, length)`` in the arena) and the arena image it starts from."""

    def __init__(self, dev, engine, inside, outside, rng):
        self.engine, self.inside, self.outside = engine, inside, outside
        a = inside.address
        image = rng.integers(0, 256, ARENA, dtype=np.uint8)
        if engine == "attention":
            args, req, _ = _attention_commands(inside, outside, dev.word_bytes)
            table = args["table"] - a
            raw = attention_golden.pack_descriptors([req])
            image[table:table + len(raw)] = np.frombuffer(raw, np.uint8)
            d, g = args["shape_head_dim"], args["shape_group"]
            out_bytes = g * d * 4                                   # fp32 out
            self.args = args
            self.reads = {"table": (table, len(raw)), "k": (req["k"] - a, req["capacity"] * d * 2)}
            self.writes = {"out": (req["out"] - a, out_bytes)}
            self.outputs = [(req["out"] - a, out_bytes), (table + 40, 4)]   # out, the request's status word
        else:
            good, _ = _commands(dev, engine, inside, outside)
            if engine == "adam":             # finite values; a bf16 copy of p is written too
                image[:] = np.frombuffer(rng.standard_normal(ARENA // 4).astype(np.float32).tobytes(), np.uint8)
                n = good["count"]
                good = {**good, "format_copy": 1, "copy": a + 16 * n}
                self.reads = {"g": (12 * n, 4 * n)}
                self.writes = {"copy": (16 * n, 2 * n)}
                self.outputs = [(0, 12 * n), (16 * n, 2 * n)]              # p, m, v in place; the copy
            elif engine == "decomp":
                image[:1024] = np.frombuffer(np.sort(rng.choice(256, 256, replace=False)).astype(np.uint32)
                                             .tobytes(), np.uint8)
                dst_bytes = good["count"] * 4
                self.reads = {"val": (good["val"] - a, good["pairs"] * 4)}
                self.writes = {"dst": (good["dst"] - a, dst_bytes)}
                self.outputs = [(good["dst"] - a, dst_bytes)]
            else:
                self.reads = {"src": (good["src"] - a, good["length"])}
                self.writes = {"dst": (good["dst"] - a, good["length"])}
                self.outputs = [(good["dst"] - a, good["length"])]
            self.args = good
        self.image = image
        self.guard = rng.integers(0, 256, ARENA, dtype=np.uint8)

    def load(self):
        self.inside.write(self.image)
        self.outside.write(self.guard)

    def run(self, client):
        self.load()
        return client.submit(self.args).wait(check=False)

    def check_nothing_else_changed(self):
        got = np.frombuffer(self.inside.read(), np.uint8)
        may_change = np.zeros(ARENA, bool)
        for offset, length in self.outputs:
            may_change[offset:offset + length] = True
        changed = np.flatnonzero((got != self.image) & ~may_change)
        assert changed.size == 0, f"{self.engine}: bytes outside its outputs changed at {changed[:8]}"
        guard = np.frombuffer(self.outside.read(), np.uint8)
        assert np.array_equal(guard, self.guard), f"{self.engine}: the guard arena changed"


def _jobs(cards, engine, seed):
    """The same job on the sim card and on the model (same arenas, same image)."""
    jobs = []
    for kind in ("sim", "model"):
        dev = cards(CARDS[engine].format(kind))
        dev.wait_all()
        dev.free_all()
        inside, outside = dev.alloc(ARENA), dev.alloc(ARENA)
        jobs.append((dev, Job(dev, engine, inside, outside, np.random.default_rng(seed))))
    return jobs


def _same_as_model(sim, sim_job, model, model_job):
    """After a fault is cleared: the command works and equals the model bit for bit."""
    got = [sim_job.run(sim.engine(sim_job.engine)), model_job.run(model.engine(model_job.engine))]
    assert got[0].error == ErrorCode.OK, got[0]
    assert (got[0].error, got[0].aux, got[0].bytes_written) == (got[1].error, got[1].aux, got[1].bytes_written)
    assert sim_job.inside.read() == model_job.inside.read(), f"{sim_job.engine}: results differ from the model"
    sim_job.check_nothing_else_changed()


def _fault_cases():
    for engine in ENGINES:
        for resp in ("SLVERR", "DECERR"):
            yield pytest.param(engine, resp, id=f"{engine}-{resp}", marks=_marks(engine, resp))


@pytest.mark.parametrize("engine, resp", list(_fault_cases()))
def test_bus_fault_is_reported_and_cleared(cards, engine, resp):
    (sim, job), (model, model_job) = _jobs(cards, engine, seed=5)
    client = sim.engine(engine)
    for what, arrays in (("read", job.reads), ("write", job.writes)):
        for name, (offset, length) in arrays.items():
            sim.transport.set_memory(error_base=job.inside.address + offset, error_size=length, error_resp=resp)
            try:
                done = job.run(client)
            finally:
                sim.transport.set_memory(error_base=0, error_size=0, error_resp="SLVERR")
            assert done.error == ErrorCode[resp], f"{engine}: {resp} on the {what} of {name} reported {done}"
            job.check_nothing_else_changed()
    _same_as_model(sim, job, model, model_job)


@pytest.mark.parametrize("engine", [pytest.param(e, marks=_marks(e, "stall")) for e in ENGINES])
def test_long_memory_stalls_change_nothing(cards, engine):
    (sim, job), (model, model_job) = _jobs(cards, engine, seed=6)
    sim.transport.set_memory(read_latency=3000, write_latency=1500)
    try:
        _same_as_model(sim, job, model, model_job)
    finally:
        sim.transport.set_memory(read_latency=64, write_latency=32)


@pytest.mark.parametrize("engine", [pytest.param(e, marks=_marks(e, "lost_irq")) for e in ENGINES])
def test_lost_interrupts_are_recovered_by_polling(cards, engine):
    (sim, job), (model, model_job) = _jobs(cards, engine, seed=7)
    client = sim.engine(engine)
    missed = client.missed_interrupts
    sim.transport.drop_irqs = True
    try:
        _same_as_model(sim, job, model, model_job)
    finally:
        sim.transport.drop_irqs = False
    assert client.missed_interrupts == missed + 1


@pytest.mark.parametrize("engine", [pytest.param(e, marks=_marks(e, "killed")) for e in ENGINES])
def test_card_killed_mid_command(engine):
    """The server dies while the engine runs: the waiting host gets TransportClosed at
    once (EOF on the socket), not after its timeout."""
    dev = ndpkit.open(CARDS[engine].format("sim"))
    try:
        job = Job(dev, engine, dev.alloc(ARENA), dev.alloc(ARENA), np.random.default_rng(8))
        job.load()
        cmd = dev.engine(engine).submit(job.args)
        dev.transport.kill_server()
        started = time.monotonic()
        with pytest.raises(TransportClosed):
            cmd.wait()
        assert time.monotonic() - started < 10
    finally:
        dev.close()


@pytest.mark.sim
@pytest.mark.xdist_group("device_sim")
def test_host_closes_the_socket_mid_dma():
    """Half a DMA frame, then the host is gone: the server notices and exits."""
    dev = ndpkit.open("sim")
    t = dev.transport
    try:
        buf = dev.alloc(1 << 20)
        dev.fill(buf, 0x12345678, wait=False)              # and an engine busy meanwhile
        t.sock.sendall(HEADER.pack(1 << 20, Op.DMA_WR) + (buf.address).to_bytes(8, "little") + bytes(4096))
        t.sock.close()
        assert t.proc.wait(timeout=120) == 0, t._log_tail()     # a clean exit, promptly
    finally:
        t.sock = None
        t._kill()


@pytest.mark.parametrize("kind", ["model", pytest.param("sim", marks=[pytest.mark.sim,
                                                                       pytest.mark.xdist_group("device_sim")])])
def test_new_host_after_one_that_vanished(kind):
    """A host queued work and vanished without waiting; the next host opening the card
    gets a clean engine: none of the old completions answer its commands."""
    with ndpkit.open(kind) as first:
        src, dst = first.alloc(1 << 16), first.alloc(1 << 16)
        first.fill(src, 0xA5A5A5A5)
        for _ in range(3):
            first.copy(dst, src, wait=False)                 # left in flight and in the completion queue
        first.fill(dst, 0, 256, wait=False)
        second = Device(first.transport)                     # the next host: same card, fresh driver state
        pattern = 0x0BADF00D
        done = second.fill(dst.address, pattern, 4096)
        assert done.ok and done.bytes_written == 4096
        assert second.engine("dma_copy")._done == {}, "a stale completion was taken for this host's work"
        assert np.all(np.frombuffer(dst.read(4096), np.uint32) == pattern)
        done = second.copy(dst.address + 4096, src.address, 4096)
        assert done.ok and done.bytes_read == 4096
