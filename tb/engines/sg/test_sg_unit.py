"""Bench: the memory-side scatter-gather unit (hw/ndpkit_hw/engines/sg/unit.py) on the RTL
memory model, against ndpkit.engines.sg.golden request for request.

Random line reads/writes, row gathers and scatters (element sizes 4 and 8, random
offsets, repeats, runs in one column) and bad requests of every kind, with random
stalls on req/resp and every AXI channel; every response (data and error code), the
final memory image and the counters (requests, link bytes, useful bytes, row
activations, column accesses) must equal the golden model's.  A second test checks
SLVERR from the memory becomes the response's error and the next request works.
"""
import cocotb
import numpy as np
import pytest
from cocotb.triggers import ClockCycles, RisingEdge

from ndpkit_spec.codes import ErrorCode
from ndpkit.engines.sg import golden
from ndpkit_tools.sim.bench import BulkBackdoor, StreamSink, StreamSource, bench_params, start_clock_and_reset, unpack, \
    wait_until

CONFIGS = {
    "row2k_link16": {"row_bytes": 2048, "banks": 16, "link_bytes": 16, "stall_per_256": 40, "stall": 0.3,
                     "requests": 400},
    "row8k_link8": {"row_bytes": 8192, "banks": 4, "link_bytes": 8, "stall_per_256": 40, "stall": 0.3,
                    "requests": 300},
}
MEM = 1 << 17


def _request(rng, row_bytes, mem_size, bad: bool):
    """A random request as (fields, golden call)."""
    op = int(rng.integers(0, 4))
    size = int(rng.choice([4, 8]))
    count = int(rng.integers(1, 64 // size + 1))
    rows = mem_size // row_bytes
    row = int(rng.integers(0, rows)) * row_bytes
    if rng.random() < 0.5:                      # clustered offsets: several elements per column
        start = int(rng.integers(0, row_bytes // size - 16))
        offsets = np.sort(rng.integers(start, start + 24, count)).clip(0, row_bytes // size - 1)
    else:
        offsets = rng.integers(0, row_bytes // size, count)
    address = int(rng.integers(0, mem_size // 64)) * 64
    line = rng.bytes(64)
    kind = None
    if bad:
        kind = str(rng.choice(["size", "count", "row_align", "line_align", "window", "offset"]))
        if kind == "size":
            op, size = int(rng.choice([2, 3])), int(rng.choice([0, 2, 5, 15]))
        elif kind == "count":
            op = int(rng.choice([2, 3]))
            count = int(rng.choice([0, 64 // size + 1, 31]))
            offsets = rng.integers(0, row_bytes // size, max(count, 1))
        elif kind == "row_align":
            op, row = int(rng.choice([2, 3])), row + int(rng.choice([4, 64, row_bytes // 2]))
        elif kind == "line_align":
            op, address = int(rng.choice([0, 1])), address + int(rng.choice([4, 32]))
        elif kind == "window":
            if rng.random() < 0.5:
                op, row = int(rng.choice([2, 3])), mem_size + row_bytes * int(rng.integers(0, 4))
            else:
                op, address = int(rng.choice([0, 1])), mem_size + 64 * int(rng.integers(0, 8))
        else:
            op = int(rng.choice([2, 3]))
            offsets = offsets.copy()
            offsets[int(rng.integers(0, count))] = int(rng.integers(row_bytes // size, 1 << 16))
    offsets = [int(o) for o in offsets[:count]]
    fields = {"op": op, "size": size, "count": count % 32, "address": row if op >= 2 else address,
              "offsets": sum(o << (16 * j) for j, o in enumerate(offsets[:16])),
              "data": int.from_bytes(line, "little")}
    return fields, (op, size, count, row, address, offsets, line), kind


def _golden(mem, spec):
    """The golden model's response (error code, 64 bytes) to one request."""
    op, size, count, row, address, offsets, line = spec
    try:
        if op == golden.Op.LINE_READ:
            return 0, mem.line_read(address)
        if op == golden.Op.LINE_WRITE:
            mem.line_write(address, line)
            return 0, bytes(64)
        if op == golden.Op.ROW_GATHER:
            return 0, mem.row_gather(row, size, offsets)
        mem.row_scatter(row, size, offsets, line)
        return 0, bytes(64)
    except golden.SgError as e:
        return int(e.code), bytes(64)


@cocotb.test(timeout_time=600, timeout_unit="sec")
async def random_requests(dut):
    from ndpkit_hw.engines.sg.unit import ResponseLayout, request_layout
    p = bench_params()
    rng = np.random.default_rng(cocotb.RANDOM_SEED)
    source = StreamSource(dut, "req", request_layout(32), stall=p["stall"])
    sink = StreamSink(dut, "resp", ResponseLayout, stall=p["stall"])
    dut.read_latency.value = int(rng.integers(2, 60))
    dut.write_latency.value = int(rng.integers(1, 40))
    dut.error_base.value = 0
    dut.error_size.value = 0
    dut.clear.value = 0
    await start_clock_and_reset(dut)
    memory = BulkBackdoor(dut.memory.storage, dut.clk, 64)
    model = golden.RowMemory(MEM, row_bytes=p["row_bytes"], banks=p["banks"])
    image = rng.bytes(MEM)
    model.data[:] = np.frombuffer(image, dtype=np.uint8)
    await memory.write(0, image)
    expected = []
    kinds = {}
    for i in range(p["requests"]):
        fields, spec, kind = _request(rng, p["row_bytes"], MEM, bad=rng.random() < 0.15)
        kinds[kind] = kinds.get(kind, 0) + 1
        expected.append((_golden(model, spec), spec))
        source.send(fields)
    await wait_until(dut.clk, lambda: len(sink.items) == len(expected), 200 * len(expected) + 20000,
                     "all responses")
    for i, ((code, data), spec) in enumerate(expected):
        got = sink.items[i]
        assert got["op"] == spec[0], (i, got["op"], spec)
        assert got["error"] == code, f"request {i} {spec[:5]}: error {got['error']} != {code}"
        assert got["data"].to_bytes(64, "little") == data, f"request {i} {spec[:5]}: data differs"
    assert await memory.read(0, MEM) == model.data.tobytes(), "memory image differs from the golden model"
    c = model.counters
    counters = unpack(_counter_layout(), int(dut.counters.value))
    assert counters == c.as_dict(), f"counters {counters} != golden {c.as_dict()}"
    dut._log.info(f"{len(expected)} requests ({kinds}), counters {counters}")
    # clear zeroes the counters
    dut.clear.value = 1
    await RisingEdge(dut.clk)
    dut.clear.value = 0
    await ClockCycles(dut.clk, 2)
    assert int(dut.counters.value) == 0


def _counter_layout():
    from ndpkit_hw.engines.sg.unit import SgUnit
    return SgUnit().signature.members["counters"].shape


@cocotb.test(timeout_time=120, timeout_unit="sec")
async def bus_errors(dut):
    """SLVERR on one column: the gather that touches it reports SLVERR; the next request
    (outside the window) gets its data."""
    from ndpkit_hw.engines.sg.unit import ResponseLayout, request_layout
    p = bench_params()
    source = StreamSource(dut, "req", request_layout(32), stall=p["stall"])
    sink = StreamSink(dut, "resp", ResponseLayout, stall=p["stall"])
    dut.read_latency.value = 20
    dut.write_latency.value = 20
    dut.clear.value = 0
    dut.error_base.value = 0x1040
    dut.error_size.value = 64
    await start_clock_and_reset(dut)
    row = 0x1000 - 0x1000 % p["row_bytes"]
    offs = [(0x1040 - row) // 4, 0]
    source.send({"op": 2, "size": 4, "count": 2, "address": row, "offsets": offs[0] | offs[1] << 16, "data": 0})
    source.send({"op": 3, "size": 4, "count": 1, "address": row, "offsets": offs[0], "data": 7})
    source.send({"op": 0, "size": 0, "count": 0, "address": row, "offsets": 0, "data": 0})
    await wait_until(dut.clk, lambda: len(sink.items) == 3, 5000, "three responses")
    assert [sink.items[i]["error"] for i in range(3)] == [ErrorCode.SLVERR, ErrorCode.SLVERR, 0]


@pytest.mark.sim
@pytest.mark.parametrize("config", CONFIGS)
def test_sg_unit(config):
    from ndpkit_tools.sim.runner import Design, run_bench
    from ndpkit_hw.engines.sg.harness import SgHarness
    from ndpkit_hw.engines.sg.unit import SgUnit
    c = CONFIGS[config]
    unit = SgUnit(row_bytes=c["row_bytes"], banks=c["banks"], link_bytes=c["link_bytes"])
    run_bench(Design(SgHarness(unit, mem_size=MEM, stall_per_256=c["stall_per_256"]), "sg_unit",
                     key=f"{c} {MEM}", quick_build=True), __name__, params=c)
