"""Bench: AxiLiteDecoder with cocotbext-axi's AxiLiteMaster in front and one
AxiLiteRam per region behind, random pauses on every channel of all of them.

Random reads and writes (partial strobes too) over the whole address space:
addresses inside a region land in that region's RAM at the right offset (checked
through a byte model of every RAM), addresses in no region answer DECERR and
touch nothing.
"""
import random

import cocotb
import pytest
from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiLiteRam, AxiResp

from ndpkit_tools.sim.bench import bench_params, start_clock_and_reset, stall_axi

REGIONS = [(0x0000, 0x1000), (0x4000, 0x4000), (0x1000, 0x100)]
ADDR_WIDTH = 16


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def random_accesses(dut):
    p = bench_params()
    master = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "bus"), dut.clk, dut.rst)
    stall_axi(master, p["stall"])
    rams = []
    for i, (_, size) in enumerate(REGIONS):
        ram = AxiLiteRam(AxiLiteBus.from_prefix(dut, f"m{i}"), dut.clk, dut.rst, size=size)
        stall_axi(ram, p["stall"])
        rams.append(ram)
    await start_clock_and_reset(dut)
    models = []
    for ram, (_, size) in zip(rams, REGIONS):
        contents = random.randbytes(size)
        ram.write(0, contents)
        models.append(bytearray(contents))

    def locate(addr):
        for i, (base, size) in enumerate(REGIONS):
            if base <= addr < base + size:
                return i, addr - base
        return None, None

    hits = misses = 0
    for step in range(p["operations"]):
        if random.random() < 0.7:
            base, size = random.choice(REGIONS)
            word = random.randrange(base, base + size, 4)
        else:
            word = random.randrange(0, 2 ** ADDR_WIDTH, 4)
        index, offset = locate(word)
        first = random.randrange(4) if random.random() < 0.3 else 0
        n = random.randint(1, 4 - first) if first else 4
        if random.random() < 0.5:
            data = random.randbytes(n)
            res = await master.write(word + first, data)
            if index is None:
                assert res.resp == AxiResp.DECERR, f"step {step}: write {word:#x} not DECERR"
            else:
                assert res.resp == AxiResp.OKAY
                models[index][offset + first:offset + first + n] = data
        else:
            res = await master.read(word, 4)
            if index is None:
                assert res.resp == AxiResp.DECERR and res.data == bytes(4)
            else:
                assert res.resp == AxiResp.OKAY
                assert res.data == models[index][offset:offset + 4], f"step {step}: read {word:#x}"
        hits += index is not None
        misses += index is None
    for ram, model in zip(rams, models):
        assert ram.read(0, len(model)) == model, "a RAM was written outside the accesses aimed at it"
    dut._log.info("%d hits, %d misses", hits, misses)


@pytest.mark.sim
def test_axil_decoder():
    from ndpkit_tools.sim.runner import Design, run_bench
    from ndpkit_hw.bus.axil_decoder import AxiLiteDecoder
    run_bench(Design(AxiLiteDecoder(addr_width=ADDR_WIDTH, regions=REGIONS), "axil_decoder", quick_build=True), __name__,
              params=dict(operations=400, stall=0.3))
