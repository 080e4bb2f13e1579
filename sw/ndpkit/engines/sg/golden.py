"""The memory-side scatter-gather unit (after Piccolo's in-memory gather), bit for
bit and count for count: the specification of ``ndpkit_hw.engines.sg``.

The unit sits on the memory side of an off-chip link, in front of a DRAM with rows of
``row_bytes`` (a parameter, 2 KiB or 8 KiB) in ``banks`` banks (row ``r`` lives in
bank ``r mod banks``; each bank keeps its last row open).  Requests cross the link:

=============  ===========================================  ===========================
request        fields                                       response
=============  ===========================================  ===========================
LINE_READ      64 B-aligned address                          the 64 B line
LINE_WRITE     address, 64 B of data                         (none)
ROW_GATHER     row address, element size 4 or 8, ``k``      one packed 64 B line:
               offsets (in elements) within the row,         element ``j`` at bytes
               ``1 <= k <= 64 / size``                       ``j*size..``, the rest 0
ROW_SCATTER    row address, element size, ``k`` offsets,    (none)
               ``k`` packed elements                         element ``j`` to its
                                                             offset, in order
=============  ===========================================  ===========================

Link bytes (what a request costs on the link, both directions): an 8-byte header per
request, 2 bytes per offset, 64 bytes per line of data or packed response.  Memory
side: a request to a row that is not open in its bank costs one activation; each run of
consecutive offsets that fall in the same 64 B column costs one column access (the
unit reads or writes that column once for the whole run).

Errors (``ndpkit_spec.codes.ErrorCode``; nothing is read or written): an element size
other than 4 or 8, or ``k`` outside ``1..64/size`` (BAD_FIELD); an address not
aligned to its request (a line to 64 B, a row to ``row_bytes``: UNALIGNED); outside
memory (OUT_OF_WINDOW); an offset at or past the end of the row (BAD_INDEX).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ndpkit_spec.codes import ErrorCode
from ndpkit.transfer import check_ranges, default_window
from ndpkit_spec.engines.sg import (DESCRIPTOR_BYTES, DEVICE_BANKS, DEVICE_ROW_BYTES, HEADER_BYTES, LINE,
                                    OFFSET_BYTES, OP_READ, OP_WRITE, Op)



class SgError(ValueError):
    def __init__(self, code: ErrorCode, field: str, detail: str):
        super().__init__(f"{field}: {detail} ({code.name})")
        self.code, self.field = code, field


@dataclass
class Counters:
    requests: int = 0
    link_bytes: int = 0
    useful_bytes: int = 0
    activations: int = 0
    column_accesses: int = 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class RowMemory:
    """DRAM contents plus its open rows and the traffic counters.  ``data`` may be an
    outside array (card memory starting at card address ``base``); requests may touch
    ``window`` = (first address, bytes), by default all of ``data``."""
    size: int
    row_bytes: int = 2048
    banks: int = 16
    data: np.ndarray | None = None
    base: int = 0
    window: tuple[int, int] | None = None
    counters: Counters = field(default_factory=Counters)

    def __post_init__(self):
        if self.row_bytes % LINE or self.row_bytes & (self.row_bytes - 1):
            raise ValueError("row_bytes: a power of two, a multiple of 64")
        if self.data is None:
            self.data = np.zeros(self.size, dtype=np.uint8)
        if self.window is None:
            self.window = (self.base, self.size)
        self._open = [-1] * self.banks

    def _inside(self, address: int, length: int) -> bool:
        lo, size = self.window
        return lo <= address and address + length <= lo + size

    def _touch(self, address: int, columns: int) -> None:
        row = address // self.row_bytes
        bank = row % self.banks
        if self._open[bank] != row:
            self._open[bank] = row
            self.counters.activations += 1
        self.counters.column_accesses += columns

    def _check_line(self, address: int) -> None:
        if address % LINE:
            raise SgError(ErrorCode.UNALIGNED, "address", f"{address:#x} is not 64-byte aligned")
        if not self._inside(address, LINE):
            raise SgError(ErrorCode.OUT_OF_WINDOW, "address", f"{address:#x} outside the window")

    def _check_row(self, row_address: int, size: int, offsets) -> np.ndarray:
        if size not in (4, 8):
            raise SgError(ErrorCode.BAD_FIELD, "size", f"element size {size}, not 4 or 8")
        offsets = np.asarray(offsets, dtype=np.int64)
        if not 1 <= len(offsets) <= LINE // size:
            raise SgError(ErrorCode.BAD_FIELD, "count", f"{len(offsets)} offsets, not 1..{LINE // size}")
        if row_address % self.row_bytes:
            raise SgError(ErrorCode.UNALIGNED, "row", f"{row_address:#x} is not a multiple of {self.row_bytes}")
        if not self._inside(row_address, self.row_bytes):
            raise SgError(ErrorCode.OUT_OF_WINDOW, "row", f"{row_address:#x} outside the window")
        bad = np.flatnonzero((offsets < 0) | (offsets * size >= self.row_bytes))
        if bad.size:
            raise SgError(ErrorCode.BAD_INDEX, "offsets",
                          f"offset {int(offsets[bad[0]])} (entry {int(bad[0])}) outside a {self.row_bytes}-byte row")
        return offsets

    def line_read(self, address: int) -> bytes:
        self._check_line(address)
        self._touch(address, 1)
        self.counters.requests += 1
        self.counters.link_bytes += HEADER_BYTES + LINE
        a = address - self.base
        return self.data[a:a + LINE].tobytes()

    def line_write(self, address: int, line: bytes) -> None:
        self._check_line(address)
        self._touch(address, 1)
        self.counters.requests += 1
        self.counters.link_bytes += HEADER_BYTES + LINE
        a = address - self.base
        self.data[a:a + LINE] = np.frombuffer(bytes(line), dtype=np.uint8)

    def _columns(self, offsets, size) -> int:
        """One column access per run of consecutive offsets in the same 64 B column."""
        col = offsets * size // LINE
        return 1 + int(np.count_nonzero(col[1:] != col[:-1]))

    def row_gather(self, row_address: int, size: int, offsets) -> bytes:
        offsets = self._check_row(row_address, size, offsets)
        self._touch(row_address, self._columns(offsets, size))
        self.counters.requests += 1
        self.counters.link_bytes += HEADER_BYTES + OFFSET_BYTES * len(offsets) + LINE
        self.counters.useful_bytes += size * len(offsets)
        out = np.zeros(LINE, dtype=np.uint8)
        for j, off in enumerate(offsets):
            a = row_address - self.base + int(off) * size
            out[j * size:(j + 1) * size] = self.data[a:a + size]
        return out.tobytes()

    def row_scatter(self, row_address: int, size: int, offsets, packed: bytes) -> None:
        offsets = self._check_row(row_address, size, offsets)
        packed = np.frombuffer(bytes(packed).ljust(LINE, b"\0")[:LINE], dtype=np.uint8)
        self._touch(row_address, self._columns(offsets, size))
        self.counters.requests += 1
        self.counters.link_bytes += HEADER_BYTES + OFFSET_BYTES * len(offsets) + LINE
        self.counters.useful_bytes += size * len(offsets)
        for j, off in enumerate(offsets):
            a = row_address - self.base + int(off) * size
            self.data[a:a + size] = packed[j * size:(j + 1) * size]


def group_by_row(addresses, size: int, row_bytes: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """How the driver splits an arbitrary list of element addresses into row requests:
    rows in order of first appearance; within a row the elements sorted by address
    (stably, so a repeated address keeps its input order and a scatter's last value
    wins), then cut into requests of at most ``64 / size`` offsets.  Sorting makes
    each column one run, so one access.  Returns ``(row address, element offsets,
    positions in the input)`` per request."""
    addresses = np.asarray(addresses, dtype=np.int64)
    rows = addresses // row_bytes
    per = LINE // size
    requests = []
    _, first = np.unique(rows, return_index=True)
    for row in rows[np.sort(first)]:
        where = np.flatnonzero(rows == row)
        where = where[np.argsort(addresses[where], kind="stable")]
        for i in range(0, len(where), per):
            chunk = where[i:i + per]
            requests.append((int(row) * row_bytes, (addresses[chunk] - row * row_bytes) // size, chunk))
    return requests


def _check_table(table: int, size: int) -> None:
    if size not in (4, 8):
        raise SgError(ErrorCode.BAD_FIELD, "size", f"element size {size}, not 4 or 8")
    if table % size:
        raise SgError(ErrorCode.UNALIGNED, "table", f"{table:#x} is not aligned to its {size}-byte elements")


def gather(memory: RowMemory, table: int, indices, size: int) -> np.ndarray:
    """``table[indices]`` through row gathers (the driver's grouping above); raw bytes
    of ``size`` per element, as a ``uint32``/``uint64`` array."""
    _check_table(table, size)
    indices = np.asarray(indices, dtype=np.int64)
    out = np.zeros(len(indices), dtype=np.uint32 if size == 4 else np.uint64)
    for row, offsets, pos in group_by_row(table + indices * size, size, memory.row_bytes):
        line = np.frombuffer(memory.row_gather(row, size, offsets), dtype=out.dtype)
        out[pos] = line[:len(pos)]
    return out


def scatter(memory: RowMemory, table: int, indices, values, size: int) -> None:
    """``table[indices] = values`` through row scatters; a repeated index keeps its last
    value (requests keep the input order within a row)."""
    indices = np.asarray(indices, dtype=np.int64)
    values = np.asarray(values, dtype=np.uint32 if size == 4 else np.uint64)
    for row, offsets, pos in group_by_row(table + indices * size, size, memory.row_bytes):
        memory.row_scatter(row, size, offsets, values[pos].tobytes())


# ---- the sg engine's command (a batch of requests from a descriptor table) -----------



def pack_descriptor(op: int, address: int, *, size: int = 4, offsets=(), data: bytes = b"") -> bytes:
    """One 128-byte descriptor: word 0 = op | size << 4 | count << 8, word 1 = the
    address, bytes 8..39 = 16 offsets (uint16), bytes 64..127 = the 64 data bytes."""
    offsets = [int(o) for o in offsets]
    head = np.zeros(16, dtype=np.uint32)
    head[0] = int(op) | (size & 0xF) << 4 | (len(offsets) & 0x1F) << 8
    head[1] = address
    words = np.zeros(16, dtype=np.uint16)
    words[:min(16, len(offsets))] = offsets[:16]
    head[2:10] = words.view(np.uint32)
    return head.tobytes() + bytes(data).ljust(LINE, b"\0")[:LINE]


def parse_descriptor(raw: bytes) -> tuple[int, int, int, int, list[int], bytes]:
    """(op, size, count, address, offsets (count of them, at most 16), data)."""
    head = np.frombuffer(raw[:64], dtype=np.uint32)
    op, size, count = int(head[0]) & 3, int(head[0]) >> 4 & 0xF, int(head[0]) >> 8 & 0x1F
    offsets = np.frombuffer(raw[8:40], dtype=np.uint16).tolist()[:count]
    return op, size, count, int(head[1]), offsets, bytes(raw[64:128])


def command_ranges(cmd: dict, word_bytes: int) -> dict[str, tuple[int, int]]:
    ranges = {"table": (cmd["table"], cmd["requests"] * DESCRIPTOR_BYTES)}
    if cmd["op"] == OP_READ:
        ranges["out"] = (cmd["out"], cmd["requests"] * LINE)
    return ranges


def check(cmd: dict, *, word_bytes: int, window_base: int, window_size: int) -> tuple[int, str | None]:
    """(ErrorCode, offending argument) of the whole command, in the hardware's order:
    op (BAD_OPCODE), requests (ZERO_LENGTH), the table then (reads) the output array
    by the transfer rule, and the two not overlapping."""
    if cmd["op"] > OP_WRITE:
        return ErrorCode.BAD_OPCODE, "op"
    if cmd["requests"] == 0:
        return ErrorCode.ZERO_LENGTH, "requests"
    return check_ranges(command_ranges(cmd, word_bytes), word_bytes, window_base, window_size)


def request_check(memory: RowMemory, cmd_op: int, descriptor: bytes) -> tuple[int, str | None]:
    """A descriptor's own checks: its op of the command's direction (BAD_FIELD), then
    the unit's checks (:class:`RowMemory`)."""
    op, size, count, address, offsets, _ = parse_descriptor(descriptor)
    if (op & 1) != cmd_op:
        return ErrorCode.BAD_FIELD, "op"
    try:
        if op & 2:
            memory._check_row(address, size, offsets if count <= 16 else offsets + [0] * (count - 16))
        else:
            memory._check_line(address)
    except SgError as e:
        return e.code, e.field
    return ErrorCode.OK, None


def execute(memory: np.ndarray, cmd: dict, *, word_bytes: int, base: int = 0, window_base: int | None = None,
            window_size: int | None = None) -> tuple[int, int, int, int]:
    """Run an accepted command on card memory (``memory`` from card address ``base``):
    requests in table order until the first bad one (its code is the command's; it and
    the requests after it do nothing, and their ``out`` entries are zero).  Returns
    (error, bytes read, bytes written, link bytes)."""
    window_base, window_size = default_window(memory, base, window_base, window_size)
    rows = RowMemory(len(memory), DEVICE_ROW_BYTES, DEVICE_BANKS, data=memory, base=base,
                     window=(window_base, window_size))
    n = cmd["requests"]
    t = cmd["table"] - base
    table = memory[t:t + n * DESCRIPTOR_BYTES].tobytes()      # read whole before anything is written
    responses = np.zeros(n * LINE, dtype=np.uint8)
    error = ErrorCode.OK
    for i in range(n):
        raw = table[i * DESCRIPTOR_BYTES:(i + 1) * DESCRIPTOR_BYTES]
        code, _ = request_check(rows, cmd["op"], raw)
        if code:
            error = code
            break
        op, size, _, address, offsets, data = parse_descriptor(raw)
        if op == Op.LINE_READ:
            responses[i * LINE:(i + 1) * LINE] = np.frombuffer(rows.line_read(address), dtype=np.uint8)
        elif op == Op.ROW_GATHER:
            responses[i * LINE:(i + 1) * LINE] = np.frombuffer(rows.row_gather(address, size, offsets), np.uint8)
        elif op == Op.LINE_WRITE:
            rows.line_write(address, data)
        else:
            rows.row_scatter(address, size, offsets, data)
    columns = LINE * rows.counters.column_accesses
    if cmd["op"] == OP_READ:
        o = cmd["out"] - base
        memory[o:o + n * LINE] = responses
        return int(error), n * DESCRIPTOR_BYTES + columns, n * LINE, rows.counters.link_bytes
    return int(error), n * DESCRIPTOR_BYTES, columns, rows.counters.link_bytes
