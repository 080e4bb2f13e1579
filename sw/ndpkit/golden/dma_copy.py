"""Golden model of the ``dma_copy`` engine (gateware: ndpkit_hw/cores/dma_copy.py).

:func:`check` is the hardware's validation order; :func:`execute` what an accepted
command does to card memory.  The model transport runs these, and the device tests
compare the simulated card against them.
"""
from __future__ import annotations

import numpy as np

from ..codes import ErrorCode

__all__ = ["OP_COPY", "OP_FILL", "check", "execute", "transfer_check"]

OP_COPY, OP_FILL = 0, 1


def transfer_check(addr: int, length: int, word_bytes: int, window_base: int, window_size: int) -> ErrorCode:
    """The burst engines' transfer rule (ndpkit_hw.bus.dma.transfer_error)."""
    if length == 0:
        return ErrorCode.ZERO_LENGTH
    if (addr | length) % word_bytes:
        return ErrorCode.UNALIGNED
    if addr < window_base or addr + length > window_base + window_size:
        return ErrorCode.OUT_OF_WINDOW
    return ErrorCode.OK


def check_ranges(ranges: dict, word_bytes: int, window_base: int, window_size: int) -> tuple[ErrorCode, str | None]:
    """Every named (address, length) range by the transfer rule, in order, then no two
    overlapping: (code, name of the offending range) — the engines' common check."""
    for name, (addr, length) in ranges.items():
        if length >= 1 << 32:
            return ErrorCode.OUT_OF_WINDOW, name
        code = transfer_check(addr, length, word_bytes, window_base, window_size)
        if code:
            return code, name
    names = list(ranges)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            (xa, la), (xb, lb) = ranges[a], ranges[b]
            if xa < xb + lb and xb < xa + la:
                return ErrorCode.OVERLAP, b
    return ErrorCode.OK, None


def check(op: int, src: int, dst: int, length: int, *, word_bytes: int, window_base: int,
          window_size: int) -> tuple[ErrorCode, str | None]:
    """(error code, offending argument) in the hardware's order."""
    if op not in (OP_COPY, OP_FILL):
        return ErrorCode.BAD_OPCODE, "op"
    def blame(code, addr, name):
        if code is ErrorCode.ZERO_LENGTH or (code is ErrorCode.UNALIGNED and addr % word_bytes == 0):
            return "length"
        return name

    code = transfer_check(dst, length, word_bytes, window_base, window_size)
    if code:
        return code, blame(code, dst, "dst")
    if op == OP_COPY:
        code = transfer_check(src, length, word_bytes, window_base, window_size)
        if code:
            return code, blame(code, src, "src")
        if src < dst + length and dst < src + length:
            return ErrorCode.OVERLAP, "dst"
    return ErrorCode.OK, None


def execute(memory: np.ndarray, op: int, src: int, dst: int, length: int, pattern: int, *, base: int = 0) -> None:
    """Apply an accepted command to ``memory`` (a uint8 array holding card memory from ``base``)."""
    d = dst - base
    if op == OP_COPY:
        s = src - base
        memory[d:d + length] = memory[s:s + length]
    else:
        memory[d:d + length] = np.frombuffer(int(pattern).to_bytes(4, "little") * (length // 4), dtype=np.uint8)
