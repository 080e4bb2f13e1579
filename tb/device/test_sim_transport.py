"""The sim transport's own promises: a dead server is reported at once, the real
``s_axi`` DMA path agrees with the backdoor, several cards run side by side, waves."""
import time

import pytest

import ndpkit
from ndpkit import TransportClosed

pytestmark = pytest.mark.sim


def test_killed_server_gives_transport_closed_promptly(rng):
    with ndpkit.open("sim") as dev:
        length = 1 << 20
        src, dst = dev.alloc(length), dev.alloc(length)
        cmd = dev.copy(dst, src, wait=False)
        dev.transport.kill_server()
        started = time.monotonic()
        with pytest.raises(TransportClosed):
            cmd.wait()
        print(f"TransportClosed after {time.monotonic() - started:.3f} s")
        with pytest.raises(TransportClosed):          # and stays closed
            dev.cycles()


def test_axi_dma_path_matches_the_backdoor(rng):
    """dma=axi drives the device's s_axi port (cocotbext-axi) instead of the backdoor."""
    data = rng.randbytes(3 * 4096 + 100)
    with ndpkit.open("sim?dma=axi") as axi_dev, ndpkit.open("sim") as backdoor_dev:
        for dev in (axi_dev, backdoor_dev):
            buf = dev.alloc(len(data) + 64)
            buf.write(data, offset=7)                 # unaligned start and end
            assert buf.read(len(data), offset=7) == data
            dst = dev.alloc(buf.size)
            assert dev.copy(dst, buf).ok
            assert dst.read(len(data), offset=7) == data
        with pytest.raises(ndpkit.DmaError):
            axi_dev.transport.dma_write(axi_dev.mem_size - 4, bytes(8))


def test_waves_are_written(tmp_path):
    waves = tmp_path / "card.vcd"
    with ndpkit.open(f"sim?waves={waves}&mem_size=1M") as dev:
        buf = dev.alloc(4096)
        dev.fill(buf, 0xA5A5A5A5)
    assert waves.exists() and waves.stat().st_size > 0
