"""The ``uart`` transport: a card whose host link is a serial line to the UART-AXI
bridge (:mod:`ndpkit_hw.shell.uart_bridge`), as on the ECP5 board, which has no PCIe.

``ndpkit.open("uart:/dev/ttyUSB1?baud=1000000")``.  The same API as over XDMA, at
serial-line speed: registers are one request each, card memory moves in requests
of up to :data:`MAX_WORDS` 32-bit words, and interrupts are found by polling the
shell's ``irq_status`` register (a serial line carries no interrupt).

The protocol is :mod:`ndpkit_spec.bridge`.

``resp`` is the AXI response (0 OKAY, 2 SLVERR, 3 DECERR) of the request, the first
error when it has several words.  :class:`BridgeModel` answers the same protocol in
Python on top of another transport (tests, and a "uart" card without hardware).
"""
from __future__ import annotations

import struct
import time

from ndpkit_spec.codes import AxiResp
from ndpkit.errors import DmaError, RegisterAccessError, TransportClosed
from ndpkit_spec.bridge import BAD_OPCODE, MAX_WORDS, MEM_READ, MEM_WRITE, REG_READ, REG_WRITE
from ndpkit_spec.shell import BAR0_SIZE, GLOBAL
from ndpkit.transport.base import Transport

__all__ = ["REG_WRITE", "REG_READ", "MEM_WRITE", "MEM_READ", "BAD_OPCODE", "MAX_WORDS", "UartTransport",
           "BridgeModel", "encode_reg_write", "encode_reg_read", "encode_mem_write", "encode_mem_read"]

IRQ_STATUS = GLOBAL.register("irq_status").offset
IRQ_MASK = GLOBAL.register("irq_mask").offset


def encode_reg_write(offset: int, value: int) -> bytes:
    return struct.pack("<BII", REG_WRITE, offset, value)


def encode_reg_read(offset: int) -> bytes:
    return struct.pack("<BI", REG_READ, offset)


def encode_mem_write(address: int, words: bytes) -> bytes:
    return struct.pack("<BIH", MEM_WRITE, address, len(words) // 4) + words


def encode_mem_read(address: int, count: int) -> bytes:
    return struct.pack("<BIH", MEM_READ, address, count)


class SerialLink:
    """A serial port (pyserial): ``write(bytes)``, ``read(n)`` with a timeout."""

    def __init__(self, port: str, baud: int, timeout: float):
        try:
            import serial
        except ImportError:
            raise TransportClosed("the uart transport needs pyserial: pip install pyserial") from None
        try:
            self.port = serial.Serial(port, baudrate=baud, timeout=timeout)
        except (OSError, ValueError) as e:
            raise TransportClosed(f"cannot open {port}: {e}") from None

    def write(self, data: bytes) -> None:
        self.port.write(data)

    def read(self, n: int) -> bytes:
        return self.port.read(n)

    def close(self) -> None:
        self.port.close()


class UartTransport(Transport):
    kind = "uart"

    def __init__(self, path: str | None = None, *, baud: int = 1_000_000, timeout: float = 2.0, link=None):
        """``path`` a serial device (``/dev/ttyUSB1``), or ``link`` any object with
        ``write(bytes)`` / ``read(n)`` (e.g. :class:`BridgeModel`)."""
        if link is None:
            if not path:
                raise ValueError("the uart transport needs a serial device path, e.g. uart:/dev/ttyUSB1")
            link = SerialLink(path, baud, timeout)
        self.link, self.path, self.baud, self.timeout = link, path, baud, timeout
        self.closed = False

    def _live(self):
        if self.closed:
            raise TransportClosed("the uart transport is closed")

    def _reply(self, n: int, expect: int) -> bytes:
        data = self.link.read(n)
        if len(data) != n:
            raise TransportClosed(f"the card stopped answering on {self.path or 'the link'} "
                                  f"({len(data)} of {n} reply bytes in {self.timeout} s)")
        if data[0] != expect:
            raise TransportClosed(f"reply {data[0]:#04x} where {expect:#04x} was due: the link is out of step")
        return data

    def read32(self, address):
        self._live()
        if not 0 <= address < BAR0_SIZE or address % 4:
            raise RegisterAccessError(address, AxiResp.DECERR, write=False)
        self.link.write(encode_reg_read(address))
        _, resp, value = struct.unpack("<BBI", self._reply(6, REG_READ | 0x80))
        if resp:
            raise RegisterAccessError(address, resp, write=False)
        return value

    def write32(self, address, value):
        self._live()
        if not 0 <= address < BAR0_SIZE or address % 4:
            raise RegisterAccessError(address, AxiResp.DECERR, write=True)
        self.link.write(encode_reg_write(address, value & 0xFFFF_FFFF))
        resp = self._reply(2, REG_WRITE | 0x80)[1]
        if resp:
            raise RegisterAccessError(address, resp, write=True)

    def _words(self, address: int, length: int) -> tuple[int, int]:
        first = address & ~3
        return first, (address + length + 3) // 4 - first // 4

    def dma_write(self, address, data):
        self._live()
        data = bytes(data)
        if not data:
            return
        first, count = self._words(address, len(data))
        head, tail = address - first, count * 4 - (address - first) - len(data)
        # partial words at either end: read them first, so neighbours are kept
        image = bytearray(count * 4)
        if head:
            image[:4] = self.dma_read(first, 4)
        if tail and (count > 1 or not head):
            image[-4:] = self.dma_read(first + (count - 1) * 4, 4)
        image[head:head + len(data)] = data
        for start in range(0, count, MAX_WORDS):
            chunk = bytes(image[start * 4:(start + MAX_WORDS) * 4])
            self.link.write(encode_mem_write(first + start * 4, chunk))
            resp = self._reply(2, MEM_WRITE | 0x80)[1]
            if resp:
                raise DmaError(f"write to card memory at {first + start * 4:#x} answered "
                               f"{AxiResp(resp).name}")

    def dma_read(self, address, length):
        self._live()
        if length <= 0:
            return b""
        first, count = self._words(address, length)
        out = bytearray()
        for start in range(0, count, MAX_WORDS):
            n = min(MAX_WORDS, count - start)
            self.link.write(encode_mem_read(first + start * 4, n))
            reply = self._reply(2 + 4 * n, MEM_READ | 0x80)
            if reply[-1]:
                raise DmaError(f"read of card memory at {first + start * 4:#x} answered {AxiResp(reply[-1]).name}")
            out += reply[1:-1]
        offset = address - first
        return bytes(out[offset:offset + length])

    def wait_irq(self, mask, timeout):
        """Poll ``irq_status & irq_mask`` (what XDMA would see on ``usr_irq_req``)
        until a line in ``mask`` is set (``timeout`` seconds of wall time: on a real
        card device time is wall time)."""
        if not mask:                    # nothing to look for: just let the time pass
            time.sleep(timeout)
            return 0
        deadline = time.monotonic() + timeout
        while True:
            lines = self.read32(IRQ_STATUS) & self.read32(IRQ_MASK) & mask
            if lines or time.monotonic() >= deadline:
                return lines
            time.sleep(0.0005)

    def close(self):
        if not self.closed:
            self.closed = True
            close = getattr(self.link, "close", None)
            if close:
                close()

    def describe(self):
        return {"transport": self.kind, "path": self.path, "baud": self.baud}


class BridgeModel:
    """The bridge's protocol in Python over another transport (the card behind it):
    a byte link for :class:`UartTransport` that needs no hardware."""

    def __init__(self, card: Transport):
        self.card = card
        self.pending = bytearray()
        self.replies = bytearray()

    def write(self, data: bytes) -> None:
        self.pending += data
        while self._step():
            pass

    def read(self, n: int) -> bytes:
        out, self.replies = bytes(self.replies[:n]), self.replies[n:]
        return out

    def _take(self, n):
        if len(self.pending) < n:
            return None
        out, self.pending = bytes(self.pending[:n]), self.pending[n:]
        return out

    def _step(self) -> bool:
        if not self.pending:
            return False
        op = self.pending[0]
        sizes = {REG_WRITE: 9, REG_READ: 5, MEM_WRITE: 7, MEM_READ: 7}
        if op not in sizes:
            self.pending = self.pending[1:]
            self.replies.append(BAD_OPCODE)
            return True
        if len(self.pending) < sizes[op]:
            return False
        if op == MEM_WRITE:
            count = struct.unpack_from("<H", self.pending, 5)[0]
            if len(self.pending) < 7 + 4 * count:
                return False
        request = self._take(sizes[op])
        if op == REG_WRITE:
            _, offset, value = struct.unpack("<BII", request)
            self.replies += bytes([op | 0x80, self._resp(lambda: self.card.write32(offset, value))])
        elif op == REG_READ:
            _, offset = struct.unpack("<BI", request)
            box = [0]
            resp = self._resp(lambda: box.__setitem__(0, self.card.read32(offset)))
            self.replies += struct.pack("<BBI", op | 0x80, resp, box[0])
        elif op == MEM_WRITE:
            _, address, count = struct.unpack("<BIH", request)
            data = self._take(4 * count)
            self.replies += bytes([op | 0x80, self._resp(lambda: self.card.dma_write(address, data))])
        else:
            _, address, count = struct.unpack("<BIH", request)
            box = [bytes(4 * count)]
            resp = self._resp(lambda: box.__setitem__(0, self.card.dma_read(address, 4 * count)))
            self.replies += bytes([op | 0x80]) + box[0] + bytes([resp])
        return True

    @staticmethod
    def _resp(action) -> int:
        try:
            action()
            return AxiResp.OKAY
        except RegisterAccessError as e:
            return e.resp
        except DmaError:
            return AxiResp.DECERR

    def close(self):
        self.card.close()
