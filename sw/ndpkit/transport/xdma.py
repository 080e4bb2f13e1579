"""``xdma``: a real card through the Xilinx XDMA Linux driver (dma_ip_drivers/XDMA).

The driver creates, for card ``N``:

- ``/dev/xdmaN_user``: BAR0 (the AXI4-Lite ``s_axil`` port); mapped with ``mmap``
  and accessed as aligned 32-bit words;
- ``/dev/xdmaN_h2c_C`` / ``/dev/xdmaN_c2h_C``: DMA channel ``C``; ``pwrite`` /
  ``pread`` at the card address move host memory to / from the card (``s_axi``);
- ``/dev/xdmaN_events_K``: user interrupt ``K`` (``usr_irq_req[K]``); a 4-byte read
  returns when the interrupt has fired, and ``poll`` says when one is pending.

``path`` is the common prefix (``/dev/xdma0``).  Timeouts are wall-clock seconds
(device time is wall time on a card).  The transport has no cycle counter of its
own; ``Device.cycles()`` reads the card's.

Opening is exclusive: opening a card soft-resets its engines, which would pull the card
from under another process using it.  The transport takes an ``flock`` on the BAR's
device node (released when it closes or its process ends) and notes its process in
``<tmp>/ndpkit-<path>.owner``; a second open fails with :class:`CardInUse` naming the
holder.
"""
from __future__ import annotations

import fcntl
import mmap
import os
import select
import sys
import tempfile
import time
from pathlib import Path

from ndpkit.errors import DmaError, NdpkitError, TransportClosed
from ndpkit_spec.shell import BAR0_SIZE, IRQ_LINES
from ndpkit.transport.base import Transport

__all__ = ["XdmaTransport", "CardInUse"]


class CardInUse(NdpkitError):
    """Another process has the card open; ``holder`` describes it (pid, command, since)."""

    def __init__(self, path: str, holder: str):
        super().__init__(f"{path} is in use by {holder}; close it there first (opening a card resets its engines)")
        self.path, self.holder = path, holder


def _owner_file(path: str) -> Path:
    return Path(tempfile.gettempdir()) / f"ndpkit-{path.strip('/').replace('/', '_')}.owner"

_CHUNK = 8 << 20        # the XDMA driver splits larger requests anyway; this bounds one syscall


class XdmaTransport(Transport):
    kind = "xdma"

    def __init__(self, path: str = "/dev/xdma0", *, channel: int = 0, bar_size: int = BAR0_SIZE):
        self.path, self.channel = path, channel
        self.closed = True
        names = {"user": f"{path}_user", "h2c": f"{path}_h2c_{channel}", "c2h": f"{path}_c2h_{channel}"}
        missing = [n for n in names.values() if not os.path.exists(n)]
        if missing:
            raise TransportClosed(f"no XDMA device at {path}: missing {', '.join(missing)} (is the xdma driver "
                                  f"loaded and the card's bitstream programmed?)")
        self._user = os.open(names["user"], os.O_RDWR | getattr(os, "O_SYNC", 0))
        try:
            fcntl.flock(self._user, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._user)
            owner = _owner_file(path)
            holder = owner.read_text().strip() if owner.exists() else "another process"
            raise CardInUse(path, holder) from None
        try:
            _owner_file(path).write_text(f"pid {os.getpid()} ({' '.join(sys.argv) or sys.executable}), "
                                         f"since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        except OSError:             # the note is for messages only
            pass
        try:
            self._bar = mmap.mmap(self._user, bar_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            self._words = memoryview(self._bar).cast("I")    # one aligned 32-bit access per word
            self._h2c = os.open(names["h2c"], os.O_WRONLY)
            self._c2h = os.open(names["c2h"], os.O_RDONLY)
        except BaseException:
            os.close(self._user)
            raise
        self.bar_size = bar_size
        self._events: dict[int, int] = {}
        self.closed = False

    def _live(self):
        if self.closed:
            raise TransportClosed(f"{self.path} is closed")

    def _word(self, address: int) -> int:
        if address % 4 or not 0 <= address < self.bar_size:
            raise ValueError(f"BAR0 address {address:#x} is not an aligned word inside {self.bar_size:#x} bytes")
        return address // 4

    def read32(self, address):
        self._live()
        return int(self._words[self._word(address)])

    def write32(self, address, value):
        self._live()
        self._words[self._word(address)] = value & 0xFFFF_FFFF

    def dma_write(self, address, data):
        self._live()
        view = memoryview(bytes(data))
        done = 0
        while done < len(view):
            try:
                n = os.pwrite(self._h2c, view[done:done + _CHUNK], address + done)
            except OSError as e:
                raise DmaError(f"H2C DMA to {address + done:#x} failed: {e}") from None
            if n <= 0:
                raise DmaError(f"H2C DMA to {address + done:#x} wrote nothing")
            done += n

    def dma_read(self, address, length):
        self._live()
        out = bytearray()
        while len(out) < length:
            try:
                chunk = os.pread(self._c2h, min(_CHUNK, length - len(out)), address + len(out))
            except OSError as e:
                raise DmaError(f"C2H DMA from {address + len(out):#x} failed: {e}") from None
            if not chunk:
                raise DmaError(f"C2H DMA from {address + len(out):#x} returned no data")
            out += chunk
        return bytes(out)

    def _event_fd(self, line: int) -> int:
        if line not in self._events:
            name = f"{self.path}_events_{line}"
            try:
                self._events[line] = os.open(name, os.O_RDONLY | os.O_NONBLOCK)
            except OSError as e:
                raise TransportClosed(f"cannot open {name}: {e}") from None
        return self._events[line]

    def wait_irq(self, mask, timeout):
        self._live()
        fds = {self._event_fd(k): k for k in range(IRQ_LINES) if mask >> k & 1}
        if not fds:
            return 0
        ready, _, _ = select.select(list(fds), [], [], max(0.0, timeout))
        lines = 0
        for fd in ready:
            try:
                count = os.read(fd, 4)       # the driver's event counter; reading re-arms it
            except BlockingIOError:
                continue
            if count:
                lines |= 1 << fds[fd]
        return lines

    def close(self):
        if self.closed:
            return
        self.closed = True
        self._words.release()
        self._bar.close()
        for fd in (self._user, self._h2c, self._c2h, *self._events.values()):
            os.close(fd)
        self._events.clear()
        try:
            if _owner_file(self.path).read_text().startswith(f"pid {os.getpid()} "):
                _owner_file(self.path).unlink()
        except OSError:
            pass

    def describe(self):
        return {"transport": "xdma", "path": self.path, "channel": self.channel}
