"""cocotb side of `make demo`: drive the CopyDemo device like a host would.

Registers go over AXI4-Lite (cocotbext-axi's AxiLiteMaster, standing in for BAR0);
memory is preloaded and checked through the memory model's backdoor (standing in
for host DMA, which arrives with the device shell).  A JSON summary goes to the
file named by NDP_RESULT_FILE.
"""
import json
import os
import random
import time

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiLiteBus, AxiLiteMaster

from ndpkit.codes import ErrorCode
from ndpkit.regs.access import decode_fields
from ndpkit.regs.blocks import COPY_DEMO, NDPKIT_MAGIC
from ndpkit.sim.bench import Backdoor, bench_params, start_clock_and_reset


class _Regs:
    def __init__(self, master):
        self.master = master

    async def read(self, name):
        res = await self.master.read(COPY_DEMO.register(name).offset, 4)
        return int.from_bytes(res.data, "little")

    async def write(self, name, value):
        await self.master.write(COPY_DEMO.register(name).offset, value.to_bytes(4, "little"))


async def _copy(dut, regs, src, dst, length):
    for name, value in (("src", src), ("dst", dst), ("length", length)):
        await regs.write(name, value)
    started = time.perf_counter()
    await regs.write("ctrl", 1)
    if not int(dut.irq.value):
        await RisingEdge(dut.irq)
    wall = time.perf_counter() - started
    status = decode_fields(COPY_DEMO, "status", await regs.read("status"))
    result = {
        "src": src, "dst": dst, "length": length,
        "error": ErrorCode(status["error"]).name, "busy": status["busy"],
        "cycles": await regs.read("cycles"),
        "bytes_read": await regs.read("bytes_read"),
        "bytes_written": await regs.read("bytes_written"),
        "wall_seconds": wall,
    }
    await regs.write("irq", 1)   # W1C: acknowledge
    await ClockCycles(dut.clk, 2)
    assert not int(dut.irq.value), "irq did not clear"
    return result


@cocotb.test(timeout_time=1, timeout_unit="sec")
async def copy_demo(dut):
    p = bench_params()
    word = p["data_width"] // 8
    memory = Backdoor(dut.memory.storage.mem, word)
    regs = _Regs(AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst))
    await start_clock_and_reset(dut)
    assert await regs.read("id") == NDPKIT_MAGIC

    rng = random.Random(p["seed"])
    src, dst, length = 0x10000, 0x60000, p["length"]
    source = rng.randbytes(length)
    memory.write(src, source)
    guard = rng.randbytes(4096)
    memory.write(dst - 4096, guard)
    memory.write(dst + length, guard)
    runs = []

    good = await _copy(dut, regs, src, dst, length)
    assert good["error"] == "OK", good
    assert memory.read(dst, length) == source, "destination differs from source"
    runs.append(dict(good, what="copy", verified=True))

    # Bad commands: each reports its code, writes nothing, and the next copy works.
    for what, args, code in (("unaligned length", (src, dst, length + 3), "UNALIGNED"),
                             ("outside memory", (src, p["mem_size"] - 4096, 8192), "OUT_OF_WINDOW"),
                             ("zero length", (src, dst, 0), "ZERO_LENGTH")):
        memory.write(dst, bytes(length))
        bad = await _copy(dut, regs, *args)
        assert bad["error"] == code, bad
        assert bad["bytes_written"] == 0 and memory.read(dst, length) == bytes(length), f"{what} wrote data"
        runs.append(dict(bad, what=what, verified=True))

    again = await _copy(dut, regs, src + 4096, dst, length - 4096)
    assert again["error"] == "OK"
    assert memory.read(dst, length - 4096) == source[4096:]
    runs.append(dict(again, what="copy after errors", verified=True))
    assert memory.read(dst - 4096, 4096) == guard and memory.read(dst + length, 4096) == guard, \
        "guard regions around the destination were touched"

    out = os.environ.get("NDP_RESULT_FILE")
    if out:
        with open(out, "w") as f:
            json.dump({"params": p, "runs": runs}, f, indent=1)
