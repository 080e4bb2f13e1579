"""Driver pieces that need no device: URIs, allocator, PCIe link model, the xdma
transport against a fake device folder, argument checking."""
import os
import struct
import subprocess
import sys
import threading

import numpy as np
import pytest

import ndpkit
from ndpkit.device import Allocator, parse_uri
from ndpkit.errors import OutOfDeviceMemory, TransportClosed
from ndpkit.pcie import PcieLink
from ndpkit_spec.shell import BAR0_SIZE, ENGINE_STRIDE, GLOBAL
from ndpkit_spec.engines.dma_copy import BLOCK as DMA_COPY


def test_uri_parsing():
    assert parse_uri("sim") == ("sim", None, {})
    assert parse_uri("model?mem_size=4M&engines=dma_copy") == ("model", None, {"mem_size": "4M",
                                                                                "engines": "dma_copy"})
    assert parse_uri("sim?waves=/tmp/a.fst&read_latency=200") == ("sim", None, {"waves": "/tmp/a.fst",
                                                                               "read_latency": "200"})
    assert parse_uri("/dev/xdma0") == ("xdma", "/dev/xdma0", {})
    assert parse_uri("xdma:/dev/xdma1?channel=1") == ("xdma", "/dev/xdma1", {"channel": "1"})
    for bad in ("tcp://host", "", "xdma:", "models"):
        with pytest.raises(ValueError, match="uri: unknown device"):
            parse_uri(bad)
    with pytest.raises(TypeError, match="uri: a device URI string"):
        parse_uri(123)


def test_allocator_alignment_free_and_out_of_memory():
    a = Allocator(0x1000, 0x10000)
    x = a.alloc(100, 64)
    y = a.alloc(0x1000, 0x1000)
    assert x == 0x1000 and y % 0x1000 == 0 and y >= x + 100
    with pytest.raises(OutOfDeviceMemory, match="largest free range"):
        a.alloc(0x10000, 64)
    a.free(x)
    a.free(y)
    assert a.free_bytes == 0x10000
    assert a.alloc(0x10000, 64) == 0x1000          # fully coalesced again
    with pytest.raises(ValueError, match="double free"):
        a.free(0x2000)
    with pytest.raises(ValueError, match="power of two"):
        a.alloc(64, 3)


@pytest.mark.parametrize("side", ["below", "above"])
def test_guard_regions_catch_a_write_outside_a_buffer(side):
    with ndpkit.open("model?mem_size=1M&guard=100") as dev:
        assert dev.guard_bytes == 100
        keep, buf = dev.alloc(256, align=256), dev.alloc(1000)
        assert buf.address % dev.word_bytes == 0 and keep.address % 256 == 0
        buf.write(bytes(range(256)) * 4)            # inside: fine
        dev.check_guards()
        # a stray write one byte past (or before) the buffer, as a faulty engine would do
        stray = buf.address - 1 if side == "below" else buf.address + buf.size
        dev.transport.dma_write(stray, b"\x5a")
        with pytest.raises(ndpkit.GuardViolation, match=f"{side} the buffer at {buf.address:#x}.*{stray:#x}"):
            buf.free()
        keep.free()                                 # its own guards are intact
        dev.free_all()
        assert dev.allocator.free_bytes == dev.mem_size
    with pytest.raises(ValueError, match="guard: '-1' is not a size"):
        ndpkit.open("model?guard=-1")


def test_pcie_link_model():
    gen3 = PcieLink()
    assert gen3.raw_bytes_per_ns == pytest.approx(15.754, rel=1e-3)
    assert gen3.peak_bytes_per_ns == pytest.approx(15.754 * 256 / 280, rel=1e-3)
    assert PcieLink(gen=4).peak_bytes_per_ns == pytest.approx(2 * gen3.peak_bytes_per_ns)
    assert gen3.c2h_ns(1 << 20) > gen3.h2c_ns(1 << 20)
    with pytest.raises(ValueError, match="generation"):
        PcieLink(gen=7)


def test_model_device_argument_errors():
    with ndpkit.open("model?mem_size=1M&engines=dma_copy") as dev:
        buf = dev.alloc(4096)
        with pytest.raises(TypeError, match="dst"):
            dev.copy("0x100", buf)
        with pytest.raises(ValueError, match="pattern"):
            dev.fill(buf, -1)
        with pytest.raises(ValueError, match="outside"):
            buf.write(bytes(4097))
        with pytest.raises(OutOfDeviceMemory):
            dev.alloc(2 << 20)
        with pytest.raises(ndpkit.NdpkitError, match="no 'adam' engine.*engines="):
            dev.engine("adam")
        buf.free()
        with pytest.raises(ValueError, match="freed"):
            dev.copy(buf, buf)
    with pytest.raises(TransportClosed):
        dev.cycles()


def _fake_xdma(tmp_path, mem_size=1 << 20):
    """A folder that looks like the XDMA driver's device nodes: the BAR as a regular
    file holding a model card's register values, one file for card memory (h2c and c2h
    both point at it), and a FIFO as the event source of interrupt line 1."""
    from ndpkit.transport.model import ModelDevice
    model = ModelDevice(mem_size=mem_size)
    bar = bytearray(BAR0_SIZE)
    for block, base in ((GLOBAL, 0), (DMA_COPY, ENGINE_STRIDE)):
        for reg in block.registers:
            struct.pack_into("<I", bar, base + reg.offset, model.read32(base + reg.offset))
    prefix = tmp_path / "xdma0"
    (tmp_path / "xdma0_user").write_bytes(bytes(bar))
    with open(tmp_path / "xdma0_h2c_0", "wb") as f:
        f.truncate(mem_size)
    os.symlink(tmp_path / "xdma0_h2c_0", tmp_path / "xdma0_c2h_0")
    os.mkfifo(tmp_path / "xdma0_events_1")
    return str(prefix)


def test_xdma_transport_on_a_fake_device(tmp_path):
    prefix = _fake_xdma(tmp_path)
    with ndpkit.open(prefix) as dev:
        info = dev.info()
        assert info["transport"] == "xdma" and info["engines"] == ["dma_copy"] and dev.mem_size == 1 << 20
        data = np.arange(1000, dtype=np.uint32)
        buf = dev.upload(data)
        assert np.array_equal(buf.download(np.uint32, 1000), data)
        # register writes land in the BAR file (the mmap is shared)
        dev.shell.write("scratch", 0xCAFEF00D)
        assert struct.unpack_from("<I", (tmp_path / "xdma0_user").read_bytes(), 0x1C)[0] == 0xCAFEF00D
        # interrupts: nothing pending -> timeout; an event on line 1 -> line 1
        t = dev.transport
        assert t.wait_irq(0b10, 0.05) == 0
        writer = threading.Timer(0.05, lambda: open(tmp_path / "xdma0_events_1", "wb").write(b"\1\0\0\0"))
        writer.start()
        assert t.wait_irq(0b10, 5.0) == 0b10
        writer.join()
    with pytest.raises(TransportClosed, match="missing"):
        ndpkit.open(str(tmp_path / "xdma9"))


def test_xdma_open_is_exclusive(tmp_path):
    """A second open of the same card (here, or in another process) is refused with the
    holder named, before anything touches the card; closing releases it."""
    from ndpkit.transport.xdma import CardInUse
    prefix = _fake_xdma(tmp_path)
    with ndpkit.open(prefix) as dev:
        dev.shell.write("scratch", 0x1234)
        with pytest.raises(CardInUse, match=f"in use by pid {os.getpid()} "):
            ndpkit.open(prefix)
        other = subprocess.run([sys.executable, "-m", "ndpkit.cli", "info", "--device", prefix],
                               capture_output=True, text=True)
        assert other.returncode == 1 and f"CardInUse: {prefix} is in use by pid {os.getpid()}" in other.stderr
        assert dev.shell.read("scratch") == 0x1234             # the holder's card was not reset
    with ndpkit.open(prefix) as again:                          # released on close
        assert again.shell.read("scratch") == 0x1234


def test_uart_transport_reports_a_silent_or_out_of_step_link():
    from ndpkit.transport.uart import UartTransport

    class Link:
        def __init__(self, reply):
            self.reply, self.sent = reply, b""

        def write(self, data):
            self.sent += data

        def read(self, n):
            out, self.reply = self.reply[:n], self.reply[n:]
            return out

    silent = UartTransport(link=Link(b""), timeout=0.01)
    with pytest.raises(TransportClosed, match="stopped answering"):
        silent.read32(0)
    assert silent.link.sent == bytes([0x02, 0, 0, 0, 0])        # REG_READ, offset 0 (u32)
    with pytest.raises(TransportClosed, match="out of step"):
        UartTransport(link=Link(bytes([0x81, 0, 0, 0, 0, 0]))).read32(4)
    with pytest.raises(ndpkit.RegisterAccessError):
        UartTransport(link=Link(bytes([0x82, 2, 0, 0, 0, 0]))).read32(4)       # SLVERR
    with pytest.raises(ValueError, match="serial device path"):
        UartTransport()
    with pytest.raises(ValueError, match="speed: not an option of a uart card; options: baud, guard, timeout"):
        ndpkit.open("uart:/dev/ttyUSB9?speed=9600")
