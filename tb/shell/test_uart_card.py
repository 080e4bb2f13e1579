"""Bench: the UART card (UART-AXI bridge + device + block-RAM memory, the ECP5
board's design) in Verilator, with cocotbext-uart driving and watching its serial
lines and the ndpkit driver (``UartTransport``) on top, through ``bridge`` /
``resume`` (cocotb.task) so the blocking driver runs against the simulation.

The RTL bench is in ``make sim`` (a Verilator build of its own); the same checks
(:func:`exercise`) run in ``make test`` on ``uart:model`` (the bridge protocol in
Python in front of the behavioural model) without Verilator: registers, memory at
odd offsets and lengths (partial words keep their neighbours), a copy on the card,
a bad copy reported with its code and the next one working, an unknown opcode
answered and the link still in step, an unmapped register and memory beyond the
card answered with errors.
"""
import logging
import random

import cocotb
from cocotb.task import bridge, resume
import numpy as np
import pytest
from cocotb.triggers import ClockCycles

import ndpkit
from ndpkit import DeviceError, DmaError, ErrorCode, RegisterAccessError
from ndpkit.device import Device
from ndpkit_tools.sim.bench import bench_params, start_clock_and_reset
from ndpkit.transport.uart import BAD_OPCODE, UartTransport, encode_reg_read, encode_reg_write
from ndpkit_spec.codes import AxiResp
from ndpkit_spec.shell import BAR0_SIZE, GLOBAL

DIVISOR = 16                      # clock cycles per bit: 10 ns clock -> 160 ns bits (6.25 Mbaud)
CARD = dict(engines=("dma_copy",), data_width=64, mem_size=64 << 10, max_burst_bytes=512, max_outstanding=2)


def exercise(dev: Device, rng: random.Random) -> None:
    """Checks any card behind a UART transport must pass (blocking)."""
    t = dev.transport
    assert dev.engines.keys() == {"dma_copy"}
    # memory: odd offsets and lengths keep their neighbours
    buf = dev.alloc(256)
    image = bytearray(rng.randbytes(256))
    buf.write(bytes(image))
    for _ in range(4):
        offset, length = rng.randrange(0, 200), rng.randrange(1, 40)
        data = rng.randbytes(length)
        buf.write(data, offset)
        image[offset:offset + length] = data
        assert buf.read(64, 0) + buf.read(192, 64) == bytes(image)
    # a copy on the card
    src = dev.upload(np.arange(96, dtype=np.uint32))
    dst = dev.alloc(src.size)
    done = dev.copy(dst, src)
    assert done.ok and done.bytes_written == src.size
    assert np.array_equal(dst.download(np.uint32), np.arange(96, dtype=np.uint32))
    # a bad copy (overlapping ranges) is reported; the next one works
    try:
        dev.copy(src.address + 8, src, 64)
        raise AssertionError("an overlapping copy was accepted")
    except DeviceError as e:
        assert e.code == ErrorCode.OVERLAP, e
    assert dev.copy(dst, src).ok
    # an unknown opcode is answered; the link stays in step
    t.link.write(bytes([0x7A]))
    assert t.link.read(1) == bytes([BAD_OPCODE])
    assert t.read32(0) == dev.shell.read("id")
    # errors: a register nobody decodes (an instance slot above 64 KiB too: the offset is
    # 32 bits on the link), memory beyond the card
    for action in (lambda: t.read32(0x7000), lambda: t.write32(0x7000, 1),
                   lambda: t.read32(BAR0_SIZE - 4), lambda: t.write32(BAR0_SIZE - 4, 1)):
        try:
            action()
            raise AssertionError("an unmapped register answered OKAY")
        except RegisterAccessError:
            pass
    # an offset beyond BAR0, past the transport's own check: answered DECERR, never sent
    # aliased onto a register (register 0 is the id, which would answer OKAY)
    t.link.write(encode_reg_read(BAR0_SIZE))
    assert t.link.read(6) == bytes([0x82, AxiResp.DECERR, 0, 0, 0, 0])
    scratch = GLOBAL.register("scratch").offset
    t.write32(scratch, 0x1234)
    t.link.write(encode_reg_write(BAR0_SIZE + scratch, 0x5A5A))
    assert t.link.read(2) == bytes([0x81, AxiResp.DECERR])
    assert t.read32(scratch) == 0x1234
    for action in (lambda: t.dma_read(dev.mem_base + dev.mem_size, 8),
                   lambda: t.dma_write(dev.mem_base + dev.mem_size, bytes(8))):
        try:
            action()
            raise AssertionError("memory beyond the card answered OKAY")
        except DmaError:
            pass
    assert buf.read() == bytes(image)
    dev.free_all()


class CocotbUartLink:
    """The transport's byte link, on cocotbext-uart's source and sink, callable from
    the bridged (blocking) thread."""

    def __init__(self, source, sink, timeout_ns: int):
        self.source, self.sink, self.timeout_ns = source, sink, timeout_ns

    def write(self, data: bytes) -> None:
        resume(self._write)(bytes(data))

    def read(self, n: int) -> bytes:
        return resume(self._read)(n)

    async def _write(self, data):
        await self.source.write(data)
        await self.source.wait()

    async def _read(self, n):
        out = bytearray()
        while len(out) < n:
            if self.sink.empty():
                await self.sink.wait(self.timeout_ns, "ns")
                if self.sink.empty():
                    break                   # the transport reports the short reply
            out += self.sink.read_nowait(min(n - len(out), self.sink.count()))
        return bytes(out)


@cocotb.test()
async def uart_card(dut):
    from cocotbext.uart import UartSink, UartSource
    p = bench_params()
    baud = 1e9 / (10 * p["divisor"])
    await start_clock_and_reset(dut)
    source, sink = UartSource(dut.rx, baud=baud, bits=8), UartSink(dut.tx, baud=baud, bits=8)
    for model in (source, sink):
        model.log.setLevel(logging.WARNING)          # they log every byte at INFO
    await ClockCycles(dut.clk, 10)
    link = CocotbUartLink(source, sink, timeout_ns=2_000_000)

    def run():
        dev = Device(UartTransport(link=link, timeout=2.0), guard_bytes=16)
        exercise(dev, random.Random(p["seed"]))

    await bridge(run)()


def uart_card_design():
    from ndpkit_tools.sim.runner import Design
    from ndpkit_hw.uart_card import UartCard
    return Design(UartCard(divisor=DIVISOR, **CARD), "uart_card")


def test_uart_card_model():
    with ndpkit.open(f"uart:model?mem_size={CARD['mem_size']}&engines=dma_copy&data_width={CARD['data_width']}") \
            as dev:
        seed = random.randrange(1 << 30)
        print(f"seed={seed}")
        exercise(dev, random.Random(seed))


@pytest.mark.sim
@pytest.mark.long
def test_uart_card():
    from ndpkit_tools.sim.runner import run_bench
    run_bench(uart_card_design(), __name__, params={"divisor": DIVISOR, "seed": random.randrange(1 << 30)})
