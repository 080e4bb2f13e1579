"""Register accessors for the driver, built from the block declaration."""
from __future__ import annotations

from typing import Callable

from ndpkit_spec.regs import Access, RegisterBlock

__all__ = ["RegisterFile", "decode_fields"]


def decode_fields(block: RegisterBlock, reg: str, value: int) -> dict[str, int]:
    """Split a register's 32-bit value into its named fields."""
    return {f.name: (value & f.mask) >> f.lsb for f in block.register(reg).fields}


class RegisterFile:
    """Named access to one register block at ``base`` through ``read32``/``write32``.

    >>> from ndpkit_spec.regs import Access, Field, Register, RegisterBlock
    >>> block = RegisterBlock("demo", [Register("ctrl", 0x0, [Field("start", 0, 1, Access.RW),
    ...                                                      Field("mode", 4, 2, Access.RW)])])
    >>> words = {}
    >>> regs = RegisterFile(block, lambda a: words.get(a, 0), words.__setitem__, base=0x1000)
    >>> regs.write("ctrl", mode=2)
    >>> regs.write("ctrl", start=1)          # other RW fields keep their value
    >>> hex(words[0x1000]), regs.field("ctrl", "mode")
    ('0x21', 2)
    """

    def __init__(self, block: RegisterBlock, read32: Callable[[int], int],
                 write32: Callable[[int, int], None], base: int = 0):
        self.block, self.base = block, base
        self._read32, self._write32 = read32, write32

    def address(self, reg: str) -> int:
        return self.base + self.block.register(reg).offset

    def read(self, reg: str) -> int:
        return self._read32(self.address(reg))

    def fields(self, reg: str) -> dict[str, int]:
        return decode_fields(self.block, reg, self.read(reg))

    def field(self, reg: str, field: str) -> int:
        f = self.block.register(reg).field(field)
        return (self.read(reg) & f.mask) >> f.lsb

    def write(self, reg: str, value: int | None = None, **fields: int) -> None:
        """Write a whole value, or named fields.

        With fields, RW fields not named keep their current value (read first), and
        W1C/W1S fields not named are written 0 (no effect).
        """
        r = self.block.register(reg)
        if value is not None and fields:
            raise TypeError("give either a whole value or fields, not both")
        if value is None:
            for name in fields:
                f = r.field(name)
                if f.access is Access.RO:
                    raise ValueError(f"{reg}.{name} is read-only")
                if not 0 <= fields[name] < (1 << f.width):
                    raise ValueError(f"{reg}.{name}={fields[name]} does not fit in {f.width} bits")
            keep = [f for f in r.fields if f.access is Access.RW and f.name not in fields]
            value = self.read(reg) & sum(f.mask for f in keep) if keep else 0
            for name, v in fields.items():
                value |= v << r.field(name).lsb
        elif not 0 <= value < 1 << 32:
            raise ValueError(f"{reg}: value {value:#x} is not a 32-bit word")
        self._write32(self.address(reg), value)
