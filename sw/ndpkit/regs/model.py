"""Behavioural model of a CSR block: what the gateware does, in Python.

The CSR bench checks the gateware against it, and the model transport of the host
driver uses it to honour the same register semantics as the real device.
"""
from __future__ import annotations

from ndpkit_spec.regs import Access, RegisterBlock

__all__ = ["RegisterModel", "UnmappedRegister"]


class UnmappedRegister(LookupError):
    """An access to an offset where the block declares no register (SLVERR on the bus)."""


class RegisterModel:
    def __init__(self, block: RegisterBlock):
        self.block = block
        self._stored = {r.name: r.reset for r in block.registers}   # RW and W1C bits
        self._inputs = {r.name: 0 for r in block.registers}          # RO bits, from "hardware"

    def reset(self) -> None:
        self.__init__(self.block)

    # -- the hardware side ------------------------------------------------------
    def set_input(self, reg: str, field: str, value: int) -> None:
        f = self.block.register(reg).field(field)
        if f.access is not Access.RO:
            raise ValueError(f"{reg}.{field} is {f.access.name}, not RO")
        self._inputs[reg] = (self._inputs[reg] & ~f.mask) | ((value << f.lsb) & f.mask)

    def set_bits(self, reg: str, field: str, bits: int) -> None:
        """A ``_set`` pulse on a W1C field."""
        f = self.block.register(reg).field(field)
        if f.access is not Access.W1C:
            raise ValueError(f"{reg}.{field} is {f.access.name}, not W1C")
        self._stored[reg] |= (bits << f.lsb) & f.mask

    def clear_bits(self, reg: str, field: str, bits: int) -> None:
        """A ``_clear`` pulse on a W1C field (a clear from the hardware side)."""
        f = self.block.register(reg).field(field)
        if f.access is not Access.W1C:
            raise ValueError(f"{reg}.{field} is {f.access.name}, not W1C")
        self._stored[reg] &= ~((bits << f.lsb) & f.mask)

    def output(self, reg: str, field: str) -> int:
        """The value the hardware sees on an RW or W1C field's output."""
        f = self.block.register(reg).field(field)
        return (self._stored[reg] & f.mask) >> f.lsb

    # -- the bus side -------------------------------------------------------------
    def _register(self, offset: int):
        r = self.block.at(offset % self.block.size)
        if r is None:
            raise UnmappedRegister(f"{self.block.name}: no register at offset {offset:#x}")
        return r

    def read(self, offset: int) -> int:
        r = self._register(offset)
        value = 0
        for f in r.fields:
            if f.access in (Access.RW, Access.W1C):
                value |= self._stored[r.name] & f.mask
            elif f.access is Access.RO:
                value |= self._inputs[r.name] & f.mask
        return value

    def write(self, offset: int, value: int, strb: int = 0xF) -> dict[str, int]:
        """Apply a bus write; returns the W1S pulses it sends, by ``<reg>_<field>`` name."""
        r = self._register(offset)
        byte_mask = sum(0xFF << (8 * i) for i in range(4) if strb >> i & 1)
        written = value & byte_mask
        pulses = {}
        for f in r.fields:
            mask = f.mask & byte_mask
            if f.access is Access.RW:
                self._stored[r.name] = (self._stored[r.name] & ~mask) | (written & mask)
            elif f.access is Access.W1C:
                self._stored[r.name] &= ~(written & mask)
            elif f.access is Access.W1S and written & mask:
                pulses[f"{r.name}_{f.name}"] = (written & mask) >> f.lsb
        return pulses
