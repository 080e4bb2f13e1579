"""Bench: BurstReader against cocotbext-axi's AxiRamRead (the independent AXI slave).

Random commands (4 KiB crossings, maximum-length bursts, assorted lengths) mixed
with rejected ones (zero length, unaligned, outside the window), SLVERR injected on
chosen words, random pauses on AR and R and on the data/command/status streams.
Checks: the data stream word for word with ``last`` per command, one status per
command in order with the right code, every AR inside a command's range, no 4 KiB
crossing, AXI VALID/payload stability, and the byte and cycle counters.
"""
import cocotb
import pytest
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiReadBus

from ndpkit_spec.codes import ErrorCode
from ndpkit_tools.sim.bench import StreamSink, wait_until
from tb.bus.dma_bench import (READER_CONFIGS, ErrorInjectingRamRead, finish_engine_bench, run_engine_bench,
                              start_engine_bench)


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def random_reads(dut):
    from ndpkit_tools.sim.bench import bench_params, start_clock_and_reset
    size = bench_params()["mem_size"]
    ram = ErrorInjectingRamRead(AxiReadBus.from_prefix(dut, "bus"), dut.clk, dut.rst, size=size)
    p, rng, cmd, status, monitor, commands = start_engine_bench(dut, ram, "ar")
    word, data_width = p["data_width"] // 8, p["data_width"]
    data_sink = StreamSink(dut, "data", stall=p["stall"])
    await start_clock_and_reset(dut)
    contents = rng.randbytes(size)
    ram.write(0, contents)

    expected_words, expected_bytes = [], 0
    for c in commands:
        if c.expect in (ErrorCode.OK, ErrorCode.SLVERR):
            expected_bytes += c.length
            words = list(c.words(word))
            for i, w in enumerate(words):
                value = 0 if w in ram.bad_words else int.from_bytes(contents[w * word:(w + 1) * word], "little")
                expected_words.append((value, int(i == len(words) - 1)))
        cmd.send({"addr": c.addr, "length": c.length})

    await finish_engine_bench(dut, status, monitor, commands)
    await wait_until(dut.clk, lambda: data_sink.count == len(expected_words), 10_000, "all data words")
    await ClockCycles(dut.clk, 20)
    assert data_sink.count == len(expected_words), "extra data words"
    for n, (item, (value, last)) in enumerate(zip(data_sink.items, expected_words)):
        got_value, got_last = item & ((1 << data_width) - 1), item >> data_width
        assert (got_value, got_last) == (value, last), f"data word {n}: got {got_value:#x}/{got_last}"
    assert int(dut.bytes_count.value) == expected_bytes
    assert int(dut.busy_cycles.value) > 0 and int(dut.idle_cycles.value) > 0
    dut.clear_counters.value = 1
    await ClockCycles(dut.clk, 1)
    dut.clear_counters.value = 0
    await ClockCycles(dut.clk, 2)
    assert int(dut.bytes_count.value) == 0 and int(dut.busy_cycles.value) == 0
    dut._log.info("%d commands, %d words, %d bursts checked", len(commands), len(expected_words),
                  len(monitor.bursts))


@pytest.mark.sim
@pytest.mark.parametrize("config", READER_CONFIGS)
def test_burst_reader(config):
    run_engine_bench("read", __name__, config)


@pytest.mark.long
@pytest.mark.parametrize("config", READER_CONFIGS)
def test_burst_reader_long(config):
    run_engine_bench("read", __name__, config, long=True)
