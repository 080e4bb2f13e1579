"""Bench: AxiRegionRouter with a cocotbext-axi AxiMaster (several transfers in flight,
several IDs) on its slave port and one AxiRam per region behind its ports, random
pauses on every channel of all of them.

The master runs a random mix of bursts anywhere in card memory (transfers crossing a
region boundary are split there, as the host's DMA splits at 4 KiB); every read must
match a byte model, every response be OKAY; each RAM must see only its own region's
addresses (its contents at the end equal the model's slice).  Concurrency: a second
task hammers the last region's upper half while the first moves between all the
others (so the router switches ports with transfers of the other task in flight).
"""
import random

import cocotb
import pytest
from cocotb.triggers import Combine, RisingEdge
from cocotbext.axi import AxiBus, AxiMaster, AxiRam, AxiResp

from ndpkit_tools.sim.bench import bench_params, start_clock_and_reset, stall_axi


def _pieces(addr, length, region):
    while length:
        n = min(length, region - addr % region, 4096 - addr % 4096)
        yield addr, n
        addr, length = addr + n, length - n


async def _traffic(master, rng, lo, hi, region, model, operations, word):
    for _ in range(operations):
        length = rng.randint(1, 3 * 1024)
        addr = rng.randrange(lo, hi - length)
        if rng.random() < 0.5:
            payload = rng.randbytes(length)
            for a, n in _pieces(addr, length, region):
                res = await master.write(a, payload[a - addr:a - addr + n], awid=rng.randrange(2))
                assert res.resp == AxiResp.OKAY
            model[addr:addr + length] = payload
        else:
            got = bytearray()
            for a, n in _pieces(addr, length, region):
                res = await master.read(a, n, arid=rng.randrange(2))
                assert res.resp == AxiResp.OKAY
                got += res.data
            assert bytes(got) == model[addr:addr + length], f"read mismatch at {addr:#x}+{length}"


async def _address_monitor(dut, port, lo, hi, strays):
    while True:
        await RisingEdge(dut.clk)
        for ch in ("ar", "aw"):
            if int(getattr(dut, f"m{port}_{ch}valid").value) and int(getattr(dut, f"m{port}_{ch}ready").value):
                a = int(getattr(dut, f"m{port}_{ch}addr").value)
                if not lo <= a < hi:
                    strays.append((port, ch, hex(a)))


@cocotb.test(timeout_time=50, timeout_unit="ms")
async def traffic_over_regions(dut):
    p = bench_params()
    n, word, region = p["ports"], p["data_width"] // 8, p["region"]
    rams = []
    for k in range(n):
        ram = AxiRam(AxiBus.from_prefix(dut, f"m{k}"), dut.clk, dut.rst, size=region * n)
        stall_axi(ram, p["stall"])
        rams.append(ram)
    master = AxiMaster(AxiBus.from_prefix(dut, "s"), dut.clk, dut.rst, max_burst_len=256)
    stall_axi(master, p["stall"])
    strays = []
    for k in range(n):
        cocotb.start_soon(_address_monitor(dut, k, k * region, (k + 1) * region, strays))
    await start_clock_and_reset(dut)
    model = bytearray(region * n)
    for k, ram in enumerate(rams):
        data = random.randbytes(region)
        ram.write(k * region, data)
        model[k * region:(k + 1) * region] = data
    rng = random.Random(random.getrandbits(32))
    split = n * region - region // 2
    tasks = [cocotb.start_soon(_traffic(master, random.Random(rng.getrandbits(32)), 0, split, region, model,
                                        p["operations"], word)),
             cocotb.start_soon(_traffic(master, random.Random(rng.getrandbits(32)), split, n * region, region,
                                        model, p["operations"] // 2, word))]
    await Combine(*tasks)
    assert not strays, f"a port saw another region's address: {strays[:5]}"
    for k, ram in enumerate(rams):
        assert ram.read(k * region, region) == model[k * region:(k + 1) * region], f"region {k} differs"


CONFIGS = {
    "p4-w128": dict(ports=4, data_width=128, region=16384, operations=40, stall=0.3),
    "p2-w512": dict(ports=2, data_width=512, region=32768, operations=30, stall=0.3),
}


def router_design(p):
    from ndpkit_tools.sim.runner import Design
    from ndpkit_hw.bus.region_router import AxiRegionRouter
    return Design(AxiRegionRouter(num_ports=p["ports"], base=0, region_size=p["region"], addr_width=32,
                                  data_width=p["data_width"], id_width=4), "region_router", quick_build=True)


@pytest.mark.sim
@pytest.mark.parametrize("config", CONFIGS)
def test_region_router(config):
    from ndpkit_tools.sim.runner import run_bench
    run_bench(router_design(CONFIGS[config]), __name__, params=CONFIGS[config])
