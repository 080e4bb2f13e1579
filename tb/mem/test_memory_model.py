"""Bench: AxiMemoryModel against cocotbext-axi's AxiMaster and a Python byte model.

Covers random bursts (lengths 1..256 beats, unaligned starts, byte strobes), stall
injection inside the model plus pauses on every channel of the master, the DECERR
window outside the memory and the run-time SLVERR window (writes there are
dropped), the backdoor, and the latency and bandwidth parameters in cycles.
"""
import random

import cocotb
import pytest
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiBus, AxiMaster, AxiResp

from ndpkit_tools.sim.bench import Backdoor, bench_params, start_clock_and_reset, stall_axi


def _setup(dut, with_master=True):
    p = bench_params()
    dut.error_base.value = 0
    dut.error_size.value = 0
    master = AxiMaster(AxiBus.from_prefix(dut, "bus"), dut.clk, dut.rst) if with_master else None
    return p, master, Backdoor(dut.storage.mem, p["data_width"] // 8, p["base"])


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def random_bursts(dut):
    p, master, backdoor = _setup(dut)
    stall_axi(master, p["master_stall"])
    await start_clock_and_reset(dut)
    size, base, word = p["size"], p["base"], p["data_width"] // 8
    model = bytearray(random.randbytes(size))
    backdoor.write(base, bytes(model))
    for _ in range(p["iterations"]):
        length = random.randint(1, min(size // 4, 256 * word))
        offset = random.randrange(0, size - length)
        if random.random() < 0.5:
            payload = random.randbytes(length)
            await master.write(base + offset, payload)
            model[offset:offset + length] = payload
        else:
            got = await master.read(base + offset, length)
            assert got.resp == AxiResp.OKAY
            assert got.data == model[offset:offset + length], f"read mismatch at {offset:#x}+{length}"
    assert backdoor.read(base, size) == model, "backdoor view differs from the byte model"


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def error_windows(dut):
    p, master, backdoor = _setup(dut)
    await start_clock_and_reset(dut)
    size, base, word = p["size"], p["base"], p["data_width"] // 8
    backdoor.write(base, bytes(size))
    err_lo = base + size // 2
    dut.error_base.value = err_lo
    dut.error_size.value = 4 * word
    res = await master.read(err_lo, word)
    assert res.resp == AxiResp.SLVERR
    res = await master.write(err_lo + word, b"\xff" * word)
    assert res.resp == AxiResp.SLVERR
    assert backdoor.read(err_lo + word, word) == bytes(word), "write into the SLVERR window landed"
    # A burst that straddles the window end is SLVERR as a whole; beats outside it land.
    res = await master.write(err_lo + 3 * word, b"\x5a" * (2 * word))
    assert res.resp == AxiResp.SLVERR
    assert backdoor.read(err_lo + 4 * word, word) == b"\x5a" * word
    dut.error_size.value = 0
    res = await master.read(err_lo, word)
    assert res.resp == AxiResp.OKAY
    if base + size < 2 ** 32:
        res = await master.read(base + size, word)
        assert res.resp == AxiResp.DECERR
        res = await master.write(base + size, b"\x11" * word)
        assert res.resp == AxiResp.DECERR
    if base > 0:
        res = await master.read(base - word, word)
        assert res.resp == AxiResp.DECERR


async def first_beat_latency(dut, addr: int, arlen: int, word: int) -> int:
    """Drive one read burst on AR by hand; cycles from its handshake to the first R beat."""
    dut.bus_arid.value = 0
    dut.bus_araddr.value = addr
    dut.bus_arlen.value = arlen
    dut.bus_arsize.value = word.bit_length() - 1
    dut.bus_arburst.value = 1
    dut.bus_rready.value = 1
    dut.bus_arvalid.value = 1
    await RisingEdge(dut.clk)
    while not int(dut.bus_arready.value):
        await RisingEdge(dut.clk)
    dut.bus_arvalid.value = 0        # the handshake happened at this edge
    latency = 0
    while True:
        await RisingEdge(dut.clk)
        latency += 1
        if int(dut.bus_rvalid.value):
            return latency


async def _cycles_until(dut, signal, start_cycles=0):
    n = start_cycles
    while not int(signal.value):
        await RisingEdge(dut.clk)
        n += 1
    return n


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def latency_and_bandwidth(dut):
    """Exact cycle counts; only meaningful without random stalls."""
    p, _, backdoor = _setup(dut, with_master=False)
    if p["stall_per_256"] or p["master_stall"]:
        return
    await start_clock_and_reset(dut)
    word = p["data_width"] // 8
    base = p["base"]
    latency = await first_beat_latency(dut, base, 255, word)
    assert latency == p["read_latency"], f"read latency {latency}, expected {p['read_latency']}"
    beats, cycles = 1, 0
    while beats < 256:
        await RisingEdge(dut.clk)
        cycles += 1
        beats += int(dut.bus_rvalid.value)
    rate = p["bytes_per_cycle"]
    expected = 255 * word / min(rate, word)
    assert abs(cycles - expected) <= 2, f"255 beats took {cycles} cycles, expected about {expected:.0f}"
    dut._log.info("read latency %d cycles, %.2f bytes/cycle sustained", latency, 255 * word / cycles)


# ---- pytest entry --------------------------------------------------------------
CONFIGS = {
    # exact-timing set: no stalls, so the latency/bandwidth test asserts cycle counts
    "lat2-full-bw": dict(size=16384, base=0, data_width=64, read_latency=2, write_latency=1,
                         bytes_per_cycle=8, stall_per_256=0, master_stall=0.0, iterations=60),
    "lat23-3Bpc": dict(size=16384, base=0x10000, data_width=64, read_latency=23, write_latency=7,
                       bytes_per_cycle=3, stall_per_256=0, master_stall=0.0, iterations=40),
    "stalls": dict(size=16384, base=0x4000, data_width=128, read_latency=9, write_latency=5,
                   bytes_per_cycle=16, stall_per_256=80, master_stall=0.3, iterations=80),
}


@pytest.mark.sim
@pytest.mark.parametrize("config", CONFIGS)
def test_memory_model(config):
    from ndpkit_tools.sim.runner import Design, run_bench
    from ndpkit_hw.mem.memory_model import AxiMemoryModel

    p = CONFIGS[config]
    model = AxiMemoryModel(size=p["size"], base=p["base"], data_width=p["data_width"],
                           read_latency=p["read_latency"], write_latency=p["write_latency"],
                           bytes_per_cycle=p["bytes_per_cycle"], stall_per_256=p["stall_per_256"])
    run_bench(Design(model, "memory_model", quick_build=True), __name__, params=p)
