"""Bench: BurstWriter against cocotbext-axi's AxiRamWrite (the independent AXI slave).

Same command mix as the reader bench; each accepted command's words go in on the
data stream with random strobes on some words (with ``word_bits``, one narrow word a
beat, which the writer repeats across the bus).  Checks: the whole memory after the
run equals a byte model (so nothing was written outside a command's range, and
rejected commands wrote nothing), one status per command in order, SLVERR reported
for commands that hit an injected bad word, every AW inside a command's range with
no 4 KiB crossing, AXI VALID/payload stability, counters.
"""
import cocotb
import pytest
from cocotbext.axi import AxiWriteBus

from ndpkit_spec.codes import ErrorCode
from ndpkit_tools.sim.bench import StreamSource
from tb.bus.dma_bench import (CONFIGS, ErrorInjectingRamWrite, finish_engine_bench, run_engine_bench,
                              start_engine_bench)


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def random_writes(dut):
    from ndpkit_tools.sim.bench import bench_params, start_clock_and_reset
    size = bench_params()["mem_size"]
    ram = ErrorInjectingRamWrite(AxiWriteBus.from_prefix(dut, "bus"), dut.clk, dut.rst, size=size)
    p, rng, cmd, status, monitor, commands = start_engine_bench(dut, ram, "aw")
    word = p["data_width"] // 8
    narrow = p.get("word_bits", 0) // 8
    strobes = p.get("strobes", True)
    data_src = StreamSource(dut, "data", stall=p["stall"])
    await start_clock_and_reset(dut)
    initial = rng.randbytes(size)
    ram.write(0, initial)
    model = bytearray(initial)
    unknown = bytearray(size)   # 1 where a failed command may or may not have written

    expected_bytes = 0
    full = (1 << word) - 1
    for c in commands:
        cmd.send({"addr": c.addr, "length": c.length})
        if c.expect not in (ErrorCode.OK, ErrorCode.SLVERR):
            continue
        expected_bytes += c.length
        failed = c.expect == ErrorCode.SLVERR
        if failed:
            unknown[c.addr:c.addr + c.length] = b"\x01" * c.length
        for w in c.words(word):
            if narrow:                  # one narrow word a beat, repeated across the bus
                piece = rng.randbytes(narrow)
                payload = piece * (word // narrow)
            else:
                payload = rng.randbytes(word)
            strb = full if rng.random() < 0.8 or not strobes else rng.getrandbits(word)
            if w in ram.bad_words:
                # a beat with no strobe writes nothing, so the RAM model raises no error for
                # it: the injected bad word always gets a byte (SEED=2025681474 drew 0)
                strb |= 1
            sent = payload[:narrow] if narrow else payload
            data_src.send(int.from_bytes(sent, "little") | (strb << (8 * len(sent)) if strobes else 0))
            if not failed:
                for b in range(word):
                    if strb >> b & 1:
                        model[w * word + b] = payload[b]

    await finish_engine_bench(dut, status, monitor, commands)
    assert data_src.idle(), "the writer left data words unconsumed"
    memory = ram.read(0, size)
    for addr in range(size):
        if not unknown[addr] and memory[addr] != model[addr]:
            raise AssertionError(f"memory differs at {addr:#x}: {memory[addr]:#x} != {model[addr]:#x}")
    assert int(dut.bytes_count.value) == expected_bytes
    dut._log.info("%d commands, %d bursts checked", len(commands), len(monitor.bursts))


@pytest.mark.sim
@pytest.mark.parametrize("config", CONFIGS)
def test_burst_writer(config):
    run_engine_bench("write", __name__, config)


@pytest.mark.long
@pytest.mark.parametrize("config", CONFIGS)
def test_burst_writer_long(config):
    run_engine_bench("write", __name__, config, long=True)
