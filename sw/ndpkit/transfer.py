"""The transfer rule every engine's command checks share (the gateware's is
``ndpkit_hw.bus.dma.transfer_error``): a range is non-empty, word aligned and inside
the engine's window; a command's ranges do not overlap."""
from __future__ import annotations

from ndpkit_spec.codes import ErrorCode

__all__ = ["transfer_check", "check_ranges", "default_window"]


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


def default_window(memory, base: int, window_base: int | None, window_size: int | None) -> tuple[int, int]:
    """The (base, size) a golden ``execute`` checks per-request ranges against: the
    window given, or all of ``memory`` (card memory from ``base``) when none is."""
    if window_size is None:
        return base, len(memory)
    return (base if window_base is None else window_base), window_size
