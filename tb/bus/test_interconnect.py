"""Bench: AxiInterconnect with cocotbext-axi AxiMasters on every slave port and an
AxiRam behind the shared port, random pauses on all channels of all of them.

Each master runs its own random mix of bursts (1..256 beats, unaligned starts,
several IDs in flight) concurrently with the others, in its own region, and then
reads back a neighbour's region.  Checks: every read matches a byte model, every
write response is OKAY, the IDs seen at the memory carry the master index in their
upper bits, and under saturation the round-robin grants stay within one grant of
fair shares.
"""
import random

import cocotb
import pytest
from cocotb.triggers import Combine, RisingEdge
from cocotbext.axi import AxiBus, AxiMaster, AxiRam, AxiResp

from ndpkit_tools.sim.bench import bench_params, start_clock_and_reset, stall_axi


async def _traffic(master, rng, region_base, region_size, model, operations, word):
    for _ in range(operations):
        length = rng.randint(1, min(region_size // 2, 256 * word))
        offset = rng.randrange(0, region_size - length)
        addr = region_base + offset
        if rng.random() < 0.5:
            payload = rng.randbytes(length)
            res = await master.write(addr, payload)
            assert res.resp == AxiResp.OKAY
            model[addr:addr + length] = payload
        else:
            res = await master.read(addr, length)
            assert res.resp == AxiResp.OKAY
            assert res.data == model[addr:addr + length], f"read mismatch at {addr:#x}+{length}"


async def _grant_monitor(dut, n, index_shift, counts, bad_ids):
    while True:
        await RisingEdge(dut.clk)
        for ch in ("ar", "aw"):
            if int(getattr(dut, f"m_{ch}valid").value) and int(getattr(dut, f"m_{ch}ready").value):
                owner = int(getattr(dut, f"m_{ch}id").value) >> index_shift
                if owner >= n:
                    bad_ids.append(owner)
                else:
                    counts[ch][owner] += 1


@cocotb.test(timeout_time=50, timeout_unit="ms")
async def concurrent_masters(dut):
    p = bench_params()
    n, word, size = p["num_masters"], p["data_width"] // 8, p["mem_size"]
    ram = AxiRam(AxiBus.from_prefix(dut, "m"), dut.clk, dut.rst, size=size)
    stall_axi(ram, p["stall"])
    masters = []
    for i in range(n):
        master = AxiMaster(AxiBus.from_prefix(dut, f"s{i}"), dut.clk, dut.rst)
        stall_axi(master, p["stall"])
        masters.append(master)
    counts = {"ar": [0] * n, "aw": [0] * n}
    bad_ids = []
    cocotb.start_soon(_grant_monitor(dut, n, p["id_width"], counts, bad_ids))
    await start_clock_and_reset(dut)
    contents = random.randbytes(size)
    ram.write(0, contents)
    model = bytearray(contents)
    region = size // n // 4096 * 4096
    rng = random.Random(random.getrandbits(32))
    tasks = [cocotb.start_soon(_traffic(masters[i], random.Random(rng.getrandbits(32)), i * region, region,
                                        model, p["operations"], word)) for i in range(n)]
    await Combine(*tasks)
    # read a neighbour's region back through another port
    for i in range(n):
        base = ((i + 1) % n) * region
        res = await masters[i].read(base, region)
        assert res.data == model[base:base + region]
    assert not bad_ids, f"IDs with master index out of range: {bad_ids[:5]}"
    assert ram.read(0, size) == model
    dut._log.info("grants: %s", counts)


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def fair_under_saturation(dut):
    """All masters stream reads back to back; grants must be round-robin fair."""
    p = bench_params()
    n, word = p["num_masters"], p["data_width"] // 8
    AxiRam(AxiBus.from_prefix(dut, "m"), dut.clk, dut.rst, size=p["mem_size"])   # answers on its own
    masters = [AxiMaster(AxiBus.from_prefix(dut, f"s{i}"), dut.clk, dut.rst) for i in range(n)]
    counts = {"ar": [0] * n, "aw": [0] * n}
    cocotb.start_soon(_grant_monitor(dut, n, p["id_width"], counts, []))
    await start_clock_and_reset(dut)

    async def hammer(master):
        for _ in range(30):
            await master.read(0, word)

    tasks = [cocotb.start_soon(hammer(m)) for m in masters]
    # while everyone still has work, the counts may differ by at most one grant
    while all(not t.done() for t in tasks):
        await RisingEdge(dut.clk)
        spread = max(counts["ar"]) - min(counts["ar"])
        assert spread <= 1, f"unfair AR grants {counts['ar']}"
    await Combine(*tasks)


CONFIGS = {
    "n3-w64": dict(num_masters=3, data_width=64, id_width=4, mem_size=3 * 8192, operations=30, stall=0.25),
    "n2-w512": dict(num_masters=2, data_width=512, id_width=2, mem_size=2 * 16384, operations=20, stall=0.25),
}


def interconnect_design(p):
    from ndpkit_tools.sim.runner import Design
    from ndpkit_hw.bus.interconnect import AxiInterconnect
    return Design(AxiInterconnect(num_masters=p["num_masters"], data_width=p["data_width"],
                                  id_width=p["id_width"]), "interconnect", quick_build=True)


@pytest.mark.sim
@pytest.mark.parametrize("config", CONFIGS)
def test_interconnect(config):
    from ndpkit_tools.sim.runner import run_bench
    run_bench(interconnect_design(CONFIGS[config]), __name__, params=CONFIGS[config])


@pytest.mark.long
@pytest.mark.parametrize("config", CONFIGS)
def test_interconnect_long(config):
    from ndpkit_tools.sim.runner import run_bench
    p = dict(CONFIGS[config], operations=300)
    run_bench(interconnect_design(p), __name__, params=p)
