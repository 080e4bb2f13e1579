"""``sim``: a simulated card in a device-server process (Verilator + cocotb).

The transport listens on a Unix socket in a fresh temporary folder, starts
``python -m ndpkit_tools.sim.device_server`` in its own process group, and waits for the
server to connect (the first start of a configuration builds the Verilator model,
a minute or two; later starts reuse the build).  Every call is one request/response
frame (:mod:`ndpkit.transport.sim_protocol`).  If the server dies, the next call raises
:class:`~ndpkit.errors.TransportClosed` at once (the socket reports EOF); a server
that stops answering is given ``reply_timeout`` seconds.  Several transports can
run at once, one process each.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ndpkit.errors import DmaError, RegisterAccessError, TransportClosed
from ndpkit.pcie import PcieLink, StorageLink
from ndpkit.transport.sim_protocol import DEFAULTS, Op, Status, recv_frame, send_frame
from ndpkit.transport.base import Transport

__all__ = ["SimTransport"]


class SimTransport(Transport):
    kind = "sim"

    def __init__(self, *, start_timeout: float = 1800.0, reply_timeout: float = 600.0, **config):
        unknown = set(config) - set(DEFAULTS)
        if unknown:
            raise TypeError(f"unknown sim option(s): {', '.join(sorted(unknown))}; known: {', '.join(DEFAULTS)}")
        self.config = dict(DEFAULTS, **config)
        self.link = PcieLink(**self.config["link"])
        self.reply_timeout = reply_timeout
        #: fault injection: when True, interrupts never reach the host (the device runs on)
        self.drop_irqs = False
        self.sock = None
        self.closed = False
        self.run_dir = Path(tempfile.mkdtemp(prefix="ndpkit-sim-"))
        path = str(self.run_dir / "device.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(1)
        listener.settimeout(0.5)
        self.log_path = self.run_dir / "server.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ndpkit_tools.sim.device_server", "--socket", path, "--config",
             json.dumps(self.config), "--run-dir", str(self.run_dir / "run")],
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + start_timeout
        relayed = 0
        try:
            while True:
                try:
                    self.sock, _ = listener.accept()
                    break
                except socket.timeout:
                    relayed = self._relay_build_messages(relayed)
                    if self.proc.poll() is not None:
                        raise TransportClosed(f"the device server exited ({self.proc.returncode}) before "
                                              f"connecting:\n{self._log_tail()}") from None
                    if time.monotonic() > deadline:
                        raise TransportClosed(f"the device server did not connect within {start_timeout:.0f} s; "
                                              f"log: {self.log_path}") from None
        except BaseException:
            self._kill()
            raise
        finally:
            listener.close()
        self._relay_build_messages(relayed)
        self.sock.settimeout(reply_timeout)
        self.server_config = json.loads(self._call(Op.HELLO))

    # -- plumbing ---------------------------------------------------------------
    def _relay_build_messages(self, offset: int) -> int:
        """Show the server's build messages that arrived in its log past ``offset`` (a
        first build takes minutes and the user should know why nothing happens);
        returns the offset of the first line not yet read."""
        self._log.flush()
        with open(self.log_path, "rb") as log:
            log.seek(offset)
            text = log.read()
        complete = text[:text.rfind(b"\n") + 1]          # a line still being written waits
        for line in complete.decode(errors="replace").splitlines():
            if line.startswith("ndpkit-sim: "):
                print(f"ndpkit sim: {line[len('ndpkit-sim: '):]}", file=sys.stderr, flush=True)
        return offset + len(complete)

    def _log_tail(self, lines: int = 25) -> str:
        if not self._log.closed:
            self._log.flush()
        text = self.log_path.read_text(errors="replace").splitlines() if self.log_path.exists() else []
        return "\n".join(text[-lines:])

    def _call(self, op: Op, payload: bytes = b"", *, address: int = 0, write: bool = False) -> bytes:
        if self.closed or self.sock is None:
            raise TransportClosed("the sim transport is closed")
        try:
            send_frame(self.sock, op, payload)
            status, reply = recv_frame(self.sock)
        except socket.timeout:
            self._kill()
            raise TransportClosed(f"the device server did not answer within {self.reply_timeout:.0f} s") from None
        except (ConnectionError, OSError) as e:
            tail = self._log_tail()
            self._kill()
            raise TransportClosed(f"the device server is gone ({e}); log tail:\n{tail}") from None
        if status == Status.OK:
            return reply
        if status == Status.AXI_ERROR:
            if op in (Op.DMA_WR, Op.DMA_RD, Op.P2P_WR, Op.P2P_RD):
                raise DmaError(f"host DMA at {address:#x} answered AXI resp {reply[0]}")
            raise RegisterAccessError(address, reply[0], write)
        if status == Status.DMA_ERROR:
            raise DmaError(reply.decode(errors="replace"))
        raise ValueError(f"device server rejected the request: {reply.decode(errors='replace')}")

    def _kill(self):
        self.closed = True
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()

    # -- the Transport interface ------------------------------------------------
    def read32(self, address):
        return struct.unpack("<I", self._call(Op.READ32, struct.pack("<Q", address), address=address))[0]

    def write32(self, address, value):
        self._call(Op.WRITE32, struct.pack("<QI", address, value & 0xFFFF_FFFF), address=address, write=True)

    def dma_write(self, address, data):
        self._call(Op.DMA_WR, struct.pack("<Q", address) + bytes(data), address=address)

    def dma_read(self, address, length):
        return self._call(Op.DMA_RD, struct.pack("<QQ", address, length), address=address)

    p2p_native = True

    def p2p_write(self, address, data):
        self._call(Op.P2P_WR, struct.pack("<Q", address) + bytes(data), address=address)

    def p2p_read(self, address, length):
        return self._call(Op.P2P_RD, struct.pack("<QQ", address, length), address=address)

    def wait_irq(self, mask, timeout):
        budget = max(1, int(timeout * self.config["clock_mhz"] * 1e6))
        if self.drop_irqs:                    # fault injection: the interrupt is lost on the way
            self.run(budget)
            return 0
        lines, _ = struct.unpack("<IQ", self._call(Op.WAIT_IRQ, struct.pack("<IQd", mask, budget,
                                                                            self.reply_timeout * 0.9)))
        return lines

    def cycles(self):
        return struct.unpack("<Q", self._call(Op.CYCLES))[0]

    def run(self, cycles: int) -> None:
        """Let the device run ``cycles`` cycles with no host activity."""
        self._call(Op.RUN, struct.pack("<Q", cycles))

    def set_memory(self, **cfg) -> None:
        """Change the memory model at run time: read_latency, write_latency (cycles),
        error_base/error_size (a range answering error_resp: "SLVERR", the default, or
        "DECERR"; writes there are dropped)."""
        timed = [k for k in ("read_latency", "write_latency") if k in cfg]
        if timed and self.config["memory"] != "ideal":
            raise ValueError(f"{timed[0]}: the card's memory is {self.config['memory']}, which times every access "
                             "itself; latencies are set on the ideal memory only")
        if cfg.get("error_resp", "SLVERR") not in ("SLVERR", "DECERR"):
            raise ValueError(f"error_resp must be 'SLVERR' or 'DECERR', not {cfg['error_resp']!r}")
        self._call(Op.MEMORY, json.dumps(cfg).encode())

    def close(self):
        if self.closed:
            return
        try:
            self._call(Op.SHUTDOWN)
            self.proc.wait(timeout=60)
        except (TransportClosed, subprocess.TimeoutExpired):
            pass
        self._kill()
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def kill_server(self) -> None:
        """Kill the server process (tests: a card that disappears)."""
        os.killpg(self.proc.pid, signal.SIGKILL)

    def describe(self):
        c = self.config
        return {"transport": "sim", "board": c["board"], "mem_size": c["mem_size"], "clock_mhz": c["clock_mhz"],
                "memory": c["memory"],
                "memory_latency": [c["read_latency"], c["write_latency"]], "dma": c["dma"],
                "link": self.link.describe(), "storage": StorageLink(**c["storage"]).describe(),
                "server_pid": self.proc.pid}

    def __del__(self):
        try:
            if not self.closed:
                self._kill()
        except Exception:
            pass
