"""Golden model of the ``dma_copy`` engine (gateware: ndpkit_hw/engines/dma_copy).

:func:`check` is the hardware's validation order; :func:`execute` what an accepted
command does to card memory (the contract every golden module has; :func:`check_args`
and :func:`apply` are the same with the arguments spelt out).  The model transport
runs these, and the device tests compare the simulated card against them.
"""
from __future__ import annotations

import numpy as np

from ndpkit_spec.codes import ErrorCode
from ndpkit_spec.engines.dma_copy import OP_COPY, OP_FILL
from ndpkit.transfer import transfer_check

__all__ = ["OP_COPY", "OP_FILL", "check", "execute", "command_ranges", "check_args", "apply"]

def check_args(op: int, src: int, dst: int, length: int, *, word_bytes: int, window_base: int,
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


def apply(memory: np.ndarray, op: int, src: int, dst: int, length: int, pattern: int, *, base: int = 0) -> None:
    """Apply an accepted command to ``memory`` (a uint8 array holding card memory from ``base``)."""
    d = dst - base
    if op == OP_COPY:
        s = src - base
        memory[d:d + length] = memory[s:s + length]
    else:
        memory[d:d + length] = np.frombuffer(int(pattern).to_bytes(4, "little") * (length // 4), dtype=np.uint8)


def command_ranges(cmd: dict, word_bytes: int) -> dict[str, tuple[int, int]]:
    """(address, bytes) of what a command writes and (copy) reads."""
    ranges = {"dst": (cmd["dst"], cmd["length"])}
    if cmd["op"] == OP_COPY:
        ranges["src"] = (cmd["src"], cmd["length"])
    return ranges


def check(cmd: dict, *, word_bytes: int, window_base: int, window_size: int) -> tuple[ErrorCode, str | None]:
    """(error code, offending argument) of a command (its register fields by name)."""
    return check_args(cmd["op"], cmd["src"], cmd["dst"], cmd["length"], word_bytes=word_bytes,
                      window_base=window_base, window_size=window_size)


def execute(memory: np.ndarray, cmd: dict, *, word_bytes: int, base: int = 0, window_base: int = 0,
            window_size: int | None = None) -> tuple[int, int, int, int]:
    """Run an accepted command on ``memory`` (uint8 from card address ``base``); returns
    (error, bytes read, bytes written, aux = 0).  ``word_bytes`` and the window are not
    needed: :func:`check` passed every range."""
    apply(memory, cmd["op"], cmd["src"], cmd["dst"], cmd["length"], cmd["pattern"], base=base)
    return 0, (cmd["length"] if cmd["op"] == OP_COPY else 0), cmd["length"], 0
