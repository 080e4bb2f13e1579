"""Bench: BurstWriter against cocotbext-axi's AxiRamWrite (the independent AXI slave).

Same command mix as the reader bench; each accepted command's words go in on the
data stream with random strobes on some words.  Checks: the whole memory after the
run equals a byte model (so nothing was written outside a command's range, and
rejected commands wrote nothing), one status per command in order, SLVERR reported
for commands that hit an injected bad word, every AW inside a command's range with
no 4 KiB crossing, AXI VALID/payload stability, counters.
"""
import random

import cocotb
import pytest
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiWriteBus

from ndpkit.codes import ErrorCode
from ndpkit.sim.bench import (StreamSink, StreamSource, bench_params, pause_generator,
                              start_clock_and_reset, wait_until)
from tb.bus.dma_bench import AddressChannelMonitor, ErrorInjectingRamWrite, random_commands


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def random_writes(dut):
    from ndpkit_hw.bus.dma import DmaCommandLayout, DmaStatusLayout
    p = bench_params()
    word, mem_size = p["data_width"] // 8, p["mem_size"]
    max_burst = p["max_burst_bytes"]
    rng = random.Random(random.getrandbits(32))
    ram = ErrorInjectingRamWrite(AxiWriteBus.from_prefix(dut, "bus"), dut.clk, dut.rst, size=mem_size)
    for channel in (ram.aw_channel, ram.w_channel, ram.b_channel):
        channel.set_pause_generator(pause_generator(p["stall"]))
    window = (0x1000, mem_size - 0x2000)
    dut.window_base.value, dut.window_size.value = window
    dut.clear_counters.value = 0
    cmd = StreamSource(dut, "cmd", DmaCommandLayout(32), stall=p["stall"])
    data_src = StreamSource(dut, "data", stall=p["stall"])
    status = StreamSink(dut, "status", DmaStatusLayout, stall=p["stall"])
    monitor = AddressChannelMonitor(dut, "aw", word, max_burst // word)
    await start_clock_and_reset(dut)
    initial = rng.randbytes(mem_size)
    ram.write(0, initial)
    model = bytearray(initial)
    unknown = bytearray(mem_size)   # 1 where a failed command may or may not have written

    commands = random_commands(rng, p["commands"], word=word, mem_size=mem_size, window=window,
                               max_burst=max_burst)
    for c in rng.sample([c for c in commands if c.expect == ErrorCode.OK], k=2):
        ram.bad_words.add(rng.choice(c.words(word)))
    expected_bytes = 0
    full = (1 << word) - 1
    for c in commands:
        cmd.send({"addr": c.addr, "length": c.length})
        if c.expect != ErrorCode.OK:
            continue
        monitor.allowed.append((c.addr, c.length))
        expected_bytes += c.length
        failed = any(w in ram.bad_words for w in c.words(word))
        if failed:
            c.expect = ErrorCode.SLVERR
            unknown[c.addr:c.addr + c.length] = b"\x01" * c.length
        for w in c.words(word):
            payload = rng.randbytes(word)
            strb = full if rng.random() < 0.8 else rng.getrandbits(word)
            data_src.send(int.from_bytes(payload, "little") | (strb << (8 * word)))
            if not failed:
                for b in range(word):
                    if strb >> b & 1:
                        model[w * word + b] = payload[b]

    await wait_until(dut.clk, lambda: status.count == len(commands), 2_000_000, "all statuses")
    await ClockCycles(dut.clk, 20)
    assert not monitor.errors, monitor.errors[:5]
    got_status = [ErrorCode(s["error"]) for s in status.items]
    assert got_status == [c.expect for c in commands], \
        [(hex(c.addr), c.length, c.expect.name, g.name) for c, g in zip(commands, got_status) if c.expect != g]
    assert data_src.idle(), "the writer left data words unconsumed"
    memory = ram.read(0, mem_size)
    for addr in range(mem_size):
        if not unknown[addr] and memory[addr] != model[addr]:
            raise AssertionError(f"memory differs at {addr:#x}: {memory[addr]:#x} != {model[addr]:#x}")
    assert int(dut.bytes_count.value) == expected_bytes
    assert not int(dut.busy.value)
    dut._log.info("%d commands, %d bursts checked", len(commands), len(monitor.bursts))


# ---- pytest entry --------------------------------------------------------------
CONFIGS = {
    "w64-b2048-o4": dict(data_width=64, max_burst_bytes=2048, max_outstanding=4, buffer_beats=256,
                         mem_size=65536, commands=40, stall=0.3),
    "w512-b4096-o8": dict(data_width=512, max_burst_bytes=4096, max_outstanding=8, buffer_beats=128,
                          mem_size=65536, commands=40, stall=0.3),
    "w128-b256-o1": dict(data_width=128, max_burst_bytes=256, max_outstanding=1, buffer_beats=16,
                         mem_size=32768, commands=40, stall=0.2),
}


def writer_design(p):
    from ndpkit.sim.runner import Design
    from ndpkit_hw.bus.dma import BurstWriter
    return Design(BurstWriter(addr_width=32, data_width=p["data_width"], max_burst_bytes=p["max_burst_bytes"],
                              max_outstanding=p["max_outstanding"], buffer_beats=p["buffer_beats"]),
                  "burst_writer")


@pytest.mark.sim
@pytest.mark.parametrize("config", CONFIGS)
def test_burst_writer(config):
    from ndpkit.sim.runner import run_bench
    run_bench(writer_design(CONFIGS[config]), __name__, params=CONFIGS[config])


@pytest.mark.long
@pytest.mark.parametrize("config", CONFIGS)
def test_burst_writer_long(config):
    from ndpkit.sim.runner import run_bench
    p = dict(CONFIGS[config], commands=400)
    run_bench(writer_design(p), __name__, params=p)
