"""Bench: a generated CSRBlock against the behavioural RegisterModel.

cocotbext-axi's AxiLiteMaster (random pauses on all five channels) issues random
full and partial-strobe writes and reads to mapped and unmapped offsets, while the
bench drives RO inputs and W1C set pulses.  After every access: the response
(OKAY/SLVERR), the read data, every RW/W1C output and every W1S pulse seen equal
the model's.
"""
import random

import cocotb
import pytest
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiResp

from ndpkit_spec.regs import Access, Field, Register, RegisterBlock
from ndpkit.regs.model import RegisterModel, UnmappedRegister
from ndpkit_tools.sim.bench import start_clock_and_reset, stall_axi

EXAMPLE = RegisterBlock("example", [
    Register("ctrl", 0x00, [
        Field("enable", 0, 1, Access.RW, reset=1, doc="enables the thing"),
        Field("mode", 4, 3, Access.RW, reset=5),
        Field("start", 8, 1, Access.W1S, doc="doorbell"),
        Field("flush", 9, 2, Access.W1S),
        Field("tag", 16, 16, Access.RW, reset=0xBEEF),
    ], doc="control"),
    Register("status", 0x04, [
        Field("busy", 0, 1, Access.RO),
        Field("count", 8, 12, Access.RO),
    ]),
    Register("irq", 0x08, [Field("done", 0, 1, Access.W1C), Field("error", 1, 7, Access.W1C)]),
    Register.single("scratch", 0x0C, Access.RW, reset=0x12345678),
    Register.single("wide_ro", 0x20, Access.RO),
    Register.single("narrow", 0x24, Access.RW, width=5, reset=3),
], doc="An example with every access type and holes in the map.", size=0x40)


async def _collect_pulses(dut, ports, seen):
    while True:
        await RisingEdge(dut.clk)
        for port in ports:
            value = int(getattr(dut, port).value)
            if value:
                seen.append((port, value))


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def random_accesses(dut):
    block, model = EXAMPLE, RegisterModel(EXAMPLE)
    master = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "bus"), dut.clk, dut.rst)
    stall_axi(master, 0.3)
    ro = [(r, f, port) for r, f, port in block.port_names() if f.access is Access.RO]
    w1c = [(r, f, port) for r, f, port in block.port_names() if f.access is Access.W1C]
    w1s = [port for r, f, port in block.port_names() if f.access is Access.W1S]
    outs = [(r, f, port) for r, f, port in block.port_names() if f.access in (Access.RW, Access.W1C)]
    for _, _, port in ro:
        getattr(dut, port).value = 0
    for _, _, port in w1c:
        getattr(dut, f"{port}_set").value = 0
    await start_clock_and_reset(dut)
    pulses = []
    cocotb.start_soon(_collect_pulses(dut, w1s, pulses))

    for step in range(400):
        # the hardware side moves
        for r, f, port in ro:
            if random.random() < 0.3:
                v = random.getrandbits(f.width)
                getattr(dut, port).value = v
                model.set_input(r.name, f.name, v)
        if random.random() < 0.3:
            r, f, port = random.choice(w1c)
            bits = random.getrandbits(f.width)
            getattr(dut, f"{port}_set").value = bits
            await RisingEdge(dut.clk)
            getattr(dut, f"{port}_set").value = 0
            model.set_bits(r.name, f.name, bits)
        await RisingEdge(dut.clk)

        offset = random.choice([r.offset for r in block.registers] + [0x10, 0x3C, 0x14])
        if random.random() < 0.5:
            first = random.randrange(4)
            n = random.randint(1, 4 - first) if random.random() < 0.4 else 4 - first
            if random.random() < 0.6:
                first, n = 0, 4
            data = random.randbytes(n)
            value = int.from_bytes(data, "little") << (8 * first)
            strb = ((1 << n) - 1) << first
            try:
                expected_pulses = model.write(offset, value, strb)
                expected = AxiResp.OKAY
            except UnmappedRegister:
                expected_pulses, expected = {}, AxiResp.SLVERR
            pulses.clear()
            res = await master.write(offset + first, data)
            await ClockCycles(dut.clk, 2)
            assert res.resp == expected, f"step {step}: write {offset:#x} resp {res.resp} != {expected}"
            assert dict(pulses) == expected_pulses and len(pulses) == len(expected_pulses), \
                f"step {step}: pulses {pulses} != {expected_pulses}"
        else:
            res = await master.read(offset, 4)
            try:
                expected_value, expected = model.read(offset), AxiResp.OKAY
            except UnmappedRegister:
                expected_value, expected = 0, AxiResp.SLVERR
            assert res.resp == expected, f"step {step}: read {offset:#x} resp {res.resp}"
            got = int.from_bytes(res.data, "little")
            assert got == expected_value, f"step {step}: read {offset:#x} = {got:#x}, model {expected_value:#x}"
        for r, f, port in outs:
            assert int(getattr(dut, port).value) == model.output(r.name, f.name), f"step {step}: {port}"


@cocotb.test()
async def reset_values(dut):
    master = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "bus"), dut.clk, dut.rst)
    model = RegisterModel(EXAMPLE)
    await start_clock_and_reset(dut)
    for r in EXAMPLE.registers:
        if all(f.access is not Access.RO for f in r.fields):
            res = await master.read(r.offset, 4)
            assert int.from_bytes(res.data, "little") == model.read(r.offset), r.name


@pytest.mark.sim
def test_csr_block():
    from ndpkit_tools.sim.runner import Design, run_bench
    from ndpkit_hw.shell.csr import CSRBlock
    run_bench(Design(CSRBlock(EXAMPLE), "csr_example", quick_build=True), __name__)
