"""The sg engine through the driver, on the behavioural model and on the RTL (sim):
gather/scatter against NumPy indexing, raw descriptor batches against
ndpkit.engines.sg.golden.execute (responses, memory, byte counts, link bytes), bad
commands and bad descriptors (code, nothing done from the bad one on, the next
command works), and the driver's own argument checks."""
import numpy as np
import pytest

import ndpkit
from ndpkit_spec.codes import ErrorCode
from ndpkit.errors import DeviceError
from ndpkit.engines.sg import golden

MEM = 4 << 20
TRANSPORTS = [pytest.param("model", id="model"),
              pytest.param("sim", id="sim", marks=[pytest.mark.sim, pytest.mark.xdist_group("device_sim_sg")])]


@pytest.fixture(scope="module", params=TRANSPORTS)
def dev(request):
    with ndpkit.open(f"{request.param}?engines=sg&mem_size={MEM}") as d:
        yield d


@pytest.fixture
def rng():
    import os
    import random
    seed = int(os.environ["SEED"]) if os.environ.get("SEED") else random.randrange(1 << 30)
    print(f"seed={seed} (SEED={seed} reproduces)")
    return np.random.default_rng(seed)


@pytest.mark.parametrize("dtype", [np.float32, np.uint64])
def test_gather_scatter_round_trip(dev, rng, dtype):
    n = 6000
    ref = rng.integers(0, 1 << 31, n).astype(dtype)
    table = dev.upload(ref)
    try:
        idx = rng.integers(0, n, 700)
        assert np.array_equal(dev.sg.gather(table, idx, dtype), ref[idx])
        vals = rng.integers(0, 1 << 31, len(idx)).astype(dtype)
        dev.sg.scatter(table, idx, vals)
        ref[idx] = vals                     # repeats: the last value wins, as in NumPy
        assert np.array_equal(table.download(dtype, n), ref)
    finally:
        table.free()


def _run_against_golden(dev, rng, op, descriptors, data_buffer):
    """Run one raw batch; compare completion, out and the data buffer with the golden model."""
    mem = np.zeros(MEM, dtype=np.uint8)
    raw = b"".join(descriptors)
    table = dev.upload(raw)
    out = dev.alloc(len(descriptors) * 64) if op == golden.OP_READ else None
    if out is not None:
        out.write(rng.bytes(out.size))
    base = data_buffer.address
    mem[base:base + data_buffer.size] = np.frombuffer(data_buffer.read(), dtype=np.uint8)
    mem[table.address:table.address + len(raw)] = np.frombuffer(raw, dtype=np.uint8)
    cmd = {"op": op, "table": table.address, "requests": len(descriptors), "out": out.address if out else 0}
    want = golden.execute(mem, cmd, word_bytes=dev.word_bytes, base=0, window_base=0, window_size=MEM)
    done = dev.sg.run(op, table, len(descriptors), out, wait=False).wait(check=False)
    assert (int(done.error), done.bytes_read, done.bytes_written, done.aux) == want   # aux: link bytes
    assert data_buffer.read() == mem[base:base + data_buffer.size].tobytes()
    if out is not None:
        got, exp = out.read(), mem[out.address:out.address + out.size].tobytes()
        wrong = sorted({i // 64 for i in range(len(got)) if got[i] != exp[i]})
        assert not wrong, f"out entries {wrong[:10]} of {len(descriptors)} differ: {got[:16].hex()} {exp[:16].hex()}"
    table.free()
    if out is not None:
        out.free()
    return done


def _random_descriptors(rng, op, buf, count, bad_at=None):
    rows = [r for r in range(buf.address // 2048 * 2048, buf.address + buf.size, 2048)
            if r >= buf.address and r + 2048 <= buf.address + buf.size]
    out = []
    for i in range(count):
        size = int(rng.choice([4, 8]))
        k = int(rng.integers(1, 64 // size + 1))
        start = int(rng.integers(0, 2048 // size - 32))
        offs = np.sort(rng.integers(start, start + 32, k)) if rng.random() < 0.6 else rng.integers(0, 2048 // size, k)
        row = int(rng.choice(rows))
        line = buf.address + 64 * int(rng.integers(0, buf.size // 64))
        if rng.random() < 0.3:
            d = golden.pack_descriptor(golden.Op.LINE_READ + op, line, data=rng.bytes(64))
        else:
            d = golden.pack_descriptor(golden.Op.ROW_GATHER + op, row, size=size, offsets=offs, data=rng.bytes(64))
        out.append(d)
    if bad_at is not None:
        out[bad_at] = golden.pack_descriptor(golden.Op.ROW_GATHER + op, rows[0], size=4, offsets=[600])
    return out


@pytest.mark.parametrize("op", [golden.OP_READ, golden.OP_WRITE])
def test_raw_batches_match_golden(dev, rng, op):
    buf = dev.upload(rng.bytes(64 << 10), align=2048)
    try:
        _run_against_golden(dev, rng, op, _random_descriptors(rng, op, buf, 60), buf)
        # a bad descriptor (offset past its row) in the middle stops the batch there
        done = _run_against_golden(dev, rng, op, _random_descriptors(rng, op, buf, 20, bad_at=11), buf)
        assert done.error == ErrorCode.BAD_INDEX
        # and the next batch runs
        assert _run_against_golden(dev, rng, op, _random_descriptors(rng, op, buf, 5), buf).error == 0
    finally:
        buf.free()


@pytest.mark.parametrize("change, code, field", [
    ({"op": 2}, ErrorCode.BAD_OPCODE, "op"),
    ({"requests": 0}, ErrorCode.ZERO_LENGTH, "requests"),
    ({"table": MEM - 128}, ErrorCode.OUT_OF_WINDOW, "table"),
    ({"out": 32}, ErrorCode.UNALIGNED, "out"),
    ({"out": "table"}, ErrorCode.OVERLAP, "out"),
])
def test_bad_commands(dev, change, code, field):
    table = dev.upload(golden.pack_descriptor(golden.Op.LINE_READ, 0) * 2)
    out = dev.alloc(128)
    try:
        before = out.read()
        args = {"op": 0, "table": table.address, "requests": 2, "out": out.address}
        args.update({k: (table.address if v == "table" else v) for k, v in change.items()})
        with pytest.raises(DeviceError) as e:
            dev.sg.run(args["op"], args["table"], args["requests"], args["out"])
        assert e.value.code == code and e.value.field == field
        assert out.read() == before
        dev.sg.run(0, table, 2, out)                 # the next command works
    finally:
        table.free()
        out.free()


def test_bad_descriptor_kinds(dev):
    buf = dev.alloc(4096, align=2048)
    out = dev.alloc(64)
    try:
        for desc, code in ((golden.pack_descriptor(golden.Op.LINE_WRITE, buf.address), ErrorCode.BAD_FIELD),
                           (golden.pack_descriptor(golden.Op.ROW_GATHER, buf.address, size=2, offsets=[0]),
                            ErrorCode.BAD_FIELD),
                           (golden.pack_descriptor(golden.Op.ROW_GATHER, buf.address + 64, size=4, offsets=[0]),
                            ErrorCode.UNALIGNED),
                           (golden.pack_descriptor(golden.Op.LINE_READ, MEM), ErrorCode.OUT_OF_WINDOW)):
            table = dev.upload(desc)
            with pytest.raises(DeviceError) as e:
                dev.sg.run(golden.OP_READ, table, 1, out)
            assert e.value.code == code and e.value.field == "table"
            table.free()
    finally:
        buf.free()
        out.free()


def test_driver_argument_checks(dev):
    table = dev.alloc(4096)
    try:
        with pytest.raises(IndexError, match="indices"):
            dev.sg.gather(table, np.array([0, 1024]), np.float32)
        with pytest.raises(ValueError, match="dtype"):
            dev.sg.gather(table, np.array([0]), np.float16)
        with pytest.raises(TypeError, match="table"):
            dev.sg.gather(table.address, np.array([0]))
        with pytest.raises(ValueError, match="values"):
            dev.sg.scatter(table, np.array([0, 1]), np.zeros(3, np.float32))
    finally:
        table.free()
