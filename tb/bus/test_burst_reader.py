"""Bench: BurstReader against cocotbext-axi's AxiRamRead (the independent AXI slave).

Random commands (4 KiB crossings, maximum-length bursts, assorted lengths) mixed
with rejected ones (zero length, unaligned, outside the window), SLVERR injected on
chosen words, random pauses on AR and R and on the data/command/status streams.
Checks: the data stream word for word with ``last`` per command, one status per
command in order with the right code, every AR inside a command's range, no 4 KiB
crossing, AXI VALID/payload stability, and the byte and cycle counters.
"""
import random

import cocotb
import pytest
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiReadBus

from ndpkit.codes import ErrorCode
from ndpkit.sim.bench import (StreamSink, StreamSource, bench_params, pause_generator,
                              start_clock_and_reset, wait_until)
from tb.bus.dma_bench import AddressChannelMonitor, ErrorInjectingRamRead, random_commands


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def random_reads(dut):
    from ndpkit_hw.bus.dma import DmaCommandLayout, DmaStatusLayout
    p = bench_params()
    word, mem_size = p["data_width"] // 8, p["mem_size"]
    max_burst = p["max_burst_bytes"]
    rng = random.Random(random.getrandbits(32))
    ram = ErrorInjectingRamRead(AxiReadBus.from_prefix(dut, "bus"), dut.clk, dut.rst, size=mem_size)
    for channel in (ram.ar_channel, ram.r_channel):
        channel.set_pause_generator(pause_generator(p["stall"]))
    window = (0x1000, mem_size - 0x2000)
    dut.window_base.value, dut.window_size.value = window
    dut.clear_counters.value = 0
    cmd = StreamSource(dut, "cmd", DmaCommandLayout(32), stall=p["stall"])
    data_sink = StreamSink(dut, "data", stall=p["stall"])
    status = StreamSink(dut, "status", DmaStatusLayout, stall=p["stall"])
    monitor = AddressChannelMonitor(dut, "ar", word, max_burst // word)
    await start_clock_and_reset(dut)
    contents = rng.randbytes(mem_size)
    ram.write(0, contents)

    commands = random_commands(rng, p["commands"], word=word, mem_size=mem_size, window=window,
                               max_burst=max_burst)
    for c in rng.sample([c for c in commands if c.expect == ErrorCode.OK], k=2):
        bad = rng.choice(c.words(word))
        ram.bad_words.add(bad)
    expected_words, expected_bytes = [], 0
    for c in commands:
        if c.expect == ErrorCode.OK and any(w in ram.bad_words for w in c.words(word)):
            c.expect = ErrorCode.SLVERR
        if c.expect in (ErrorCode.OK, ErrorCode.SLVERR):
            monitor.allowed.append((c.addr, c.length))
            expected_bytes += c.length
            words = list(c.words(word))
            for i, w in enumerate(words):
                value = 0 if w in ram.bad_words else int.from_bytes(contents[w * word:(w + 1) * word], "little")
                expected_words.append((value, int(i == len(words) - 1)))
        cmd.send({"addr": c.addr, "length": c.length})

    await wait_until(dut.clk, lambda: status.count == len(commands), 2_000_000, "all statuses")
    await wait_until(dut.clk, lambda: data_sink.count == len(expected_words), 10_000, "all data words")
    await ClockCycles(dut.clk, 20)
    assert data_sink.count == len(expected_words), "extra data words"
    assert not monitor.errors, monitor.errors[:5]
    got_status = [ErrorCode(s["error"]) for s in status.items]
    assert got_status == [c.expect for c in commands], \
        [(hex(c.addr), c.length, c.expect.name, g.name) for c, g in zip(commands, got_status) if c.expect != g]
    data_width = p["data_width"]
    for n, (item, (value, last)) in enumerate(zip(data_sink.items, expected_words)):
        got_value, got_last = item & ((1 << data_width) - 1), item >> data_width
        assert (got_value, got_last) == (value, last), f"data word {n}: got {got_value:#x}/{got_last}"
    assert int(dut.bytes_count.value) == expected_bytes
    total = int(dut.busy_cycles.value) + int(dut.idle_cycles.value)
    assert int(dut.busy_cycles.value) > 0 and total > 0
    assert not int(dut.busy.value)
    dut.clear_counters.value = 1
    await ClockCycles(dut.clk, 1)
    dut.clear_counters.value = 0
    await ClockCycles(dut.clk, 2)
    assert int(dut.bytes_count.value) == 0 and int(dut.busy_cycles.value) == 0
    dut._log.info("%d commands, %d words, %d bursts checked", len(commands), len(expected_words),
                  len(monitor.bursts))


# ---- pytest entry --------------------------------------------------------------
CONFIGS = {
    # 256-beat maximum bursts, few outstanding, a small buffer
    "w64-b2048-o4": dict(data_width=64, max_burst_bytes=2048, max_outstanding=4, buffer_beats=256,
                         mem_size=65536, commands=40, stall=0.3),
    # the card's 512-bit bus with 4 KiB bursts
    "w512-b4096-o8": dict(data_width=512, max_burst_bytes=4096, max_outstanding=8, buffer_beats=128,
                          mem_size=65536, commands=40, stall=0.3),
    # short bursts, one outstanding, a buffer of exactly one burst
    "w128-b256-o1": dict(data_width=128, max_burst_bytes=256, max_outstanding=1, buffer_beats=16,
                         mem_size=32768, commands=40, stall=0.2),
}


def reader_design(p):
    from ndpkit.sim.runner import Design
    from ndpkit_hw.bus.dma import BurstReader
    return Design(BurstReader(addr_width=32, data_width=p["data_width"], max_burst_bytes=p["max_burst_bytes"],
                              max_outstanding=p["max_outstanding"], buffer_beats=p["buffer_beats"]),
                  "burst_reader")


@pytest.mark.sim
@pytest.mark.parametrize("config", CONFIGS)
def test_burst_reader(config):
    from ndpkit.sim.runner import run_bench
    run_bench(reader_design(CONFIGS[config]), __name__, params=CONFIGS[config])


@pytest.mark.long
@pytest.mark.parametrize("config", CONFIGS)
def test_burst_reader_long(config):
    from ndpkit.sim.runner import run_bench
    p = dict(CONFIGS[config], commands=400)
    run_bench(reader_design(p), __name__, params=p)
