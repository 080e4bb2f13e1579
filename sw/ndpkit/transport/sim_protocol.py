"""The sim transport's wire protocol: length-prefixed frames over a Unix socket.

Request:  ``<I length><B op>`` + ``length`` payload bytes.
Response: ``<I length><B status>`` + ``length`` payload bytes.

======== ===================================== ===================================
op       request payload                        response payload (status OK)
======== ===================================== ===================================
HELLO    --                                     JSON: the server's configuration
READ32   ``<Q address>``                        ``<I value>``
WRITE32  ``<QI address, value>``                --
DMA_WR   ``<Q address>`` + data                 --
DMA_RD   ``<QQ address, length>``               data
WAIT_IRQ ``<IQd mask, max cycles, wall secs>``  ``<IQ lines, cycles waited>`` (lines 0: timeout)
CYCLES   --                                     ``<Q cycles since reset>``
RUN      ``<Q cycles>``                         --
MEMORY   JSON {read_latency, write_latency,     --
         error_base, error_size, error_resp}
SHUTDOWN --                                     -- (then the server exits)
P2P_WR   ``<Q address>`` + data                 --   (storage -> card, charged on the storage link)
P2P_RD   ``<QQ address, length>``               data (card -> storage, likewise)
======== ===================================== ===================================

Status: OK, AXI_ERROR (payload ``<B resp>``), DMA_ERROR and BAD_REQUEST (payload a
UTF-8 message).
"""
from __future__ import annotations

import enum
import socket
import struct

__all__ = ["DEFAULTS", "Op", "Status", "HEADER", "send_frame", "recv_frame", "recv_exact"]

#: server configuration defaults; ndpkit.open("sim?key=value&...") overrides them
DEFAULTS = {
    "data_width": 512, "mem_base": 0, "mem_size": 16 << 20, "engines": ["dma_copy"], "queue_depth": 4,
    "clock_mhz": 250, "read_latency": 64, "write_latency": 32, "dma": "backdoor", "waves": None,
    "link": {}, "storage": {}, "attention_lanes": None,
    "mem_queue": None,     # requests the memory model queues (None: 16, or a DRAM preset's port queue)
    "memory_ports": 1,     # memory regions, one memory model each (HBM pseudo-channels)
    "memory": "ideal",     # the memory's timing: "ideal" or a DRAM preset of ndpkit_spec.dram.PRESETS
    "board": None,         # the board whose build this card simulates (ndpkit.options.board_defaults has put its
                           # preset, clock and width in the keys above; the server does not read it)
}

HEADER = struct.Struct("<IB")


class Op(enum.IntEnum):
    HELLO = 1
    READ32 = 2
    WRITE32 = 3
    DMA_WR = 4
    DMA_RD = 5
    WAIT_IRQ = 6
    CYCLES = 7
    RUN = 8
    MEMORY = 9
    SHUTDOWN = 10
    P2P_WR = 11
    P2P_RD = 12


class Status(enum.IntEnum):
    OK = 0
    AXI_ERROR = 1
    DMA_ERROR = 2
    BAD_REQUEST = 3


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes, or ConnectionError when the peer has gone."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("peer closed the connection")
        buf += chunk
    return bytes(buf)


def send_frame(sock: socket.socket, code: int, payload: bytes = b"") -> None:
    sock.sendall(HEADER.pack(len(payload), code) + payload)


def recv_frame(sock: socket.socket) -> tuple[int, bytes]:
    length, code = HEADER.unpack(recv_exact(sock, HEADER.size))
    return code, recv_exact(sock, length)
