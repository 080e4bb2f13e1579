"""One declaration of a register block, from which everything else is generated.

A :class:`RegisterBlock` lists 32-bit registers at byte offsets, each made of
fields with an access type:

====== ==========================================================================
RW     software reads and writes; the value drives the hardware
RO     software reads; the hardware drives the value; writes are ignored
W1C    the hardware sets bits with a one-cycle ``<reg>_<field>_set`` pulse (set
       wins over a clear in the same cycle); software clears a bit by writing 1
       (hardware can also clear with ``<reg>_<field>_clear``)
W1S    software writes 1 to send a one-cycle pulse to the hardware; reads as 0
====== ==========================================================================

From the same object come the AXI4-Lite CSR block in gateware
(:class:`ndpkit_hw.shell.csr.CSRBlock`), the driver's accessors
(:class:`ndpkit.regs.access.RegisterFile`), a behavioural model
(:class:`ndpkit.regs.model.RegisterModel`), a C header and Markdown
(:mod:`ndpkit_tools.regs_doc`).
"""
from __future__ import annotations

import enum
import keyword
import re
from dataclasses import dataclass, field as dc_field

__all__ = ["Access", "Field", "Register", "RegisterBlock"]

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class Access(enum.Enum):
    RW = "rw"
    RO = "ro"
    W1C = "w1c"
    W1S = "w1s"


def _check_name(kind: str, name: str) -> None:
    if not _NAME.match(name) or keyword.iskeyword(name) or "__" in name:
        raise ValueError(f"{kind} name {name!r} must be lower_snake_case (a-z, 0-9, _)")


@dataclass(frozen=True)
class Field:
    name: str
    lsb: int
    width: int
    access: Access
    reset: int = 0
    doc: str = ""

    def __post_init__(self):
        _check_name("field", self.name)
        if not (0 <= self.lsb and self.width >= 1 and self.lsb + self.width <= 32):
            raise ValueError(f"field {self.name}: bits [{self.lsb + self.width - 1}:{self.lsb}] outside 0..31")
        if not 0 <= self.reset < (1 << self.width):
            raise ValueError(f"field {self.name}: reset {self.reset:#x} does not fit in {self.width} bits")
        if self.access is Access.W1S and self.reset:
            raise ValueError(f"field {self.name}: a W1S pulse field has no reset value")

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.lsb

    @property
    def msb(self) -> int:
        return self.lsb + self.width - 1


@dataclass(frozen=True)
class Register:
    name: str
    offset: int
    fields: tuple[Field, ...]
    doc: str = ""

    def __init__(self, name: str, offset: int, fields, doc: str = ""):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "fields", tuple(fields))
        object.__setattr__(self, "doc", doc)
        _check_name("register", name)
        if offset % 4 or offset < 0:
            raise ValueError(f"register {name}: offset {offset:#x} is not a multiple of 4")
        if not self.fields:
            raise ValueError(f"register {name} has no fields")
        used = 0
        names = set()
        for f in self.fields:
            if f.mask & used:
                raise ValueError(f"register {name}: field {f.name} overlaps another field")
            if f.name in names:
                raise ValueError(f"register {name}: two fields named {f.name}")
            used |= f.mask
            names.add(f.name)

    @classmethod
    def single(cls, name: str, offset: int, access: Access, width: int = 32, reset: int = 0, doc: str = ""):
        """A register holding one field called ``value``."""
        return cls(name, offset, [Field("value", 0, width, access, reset, doc)], doc)

    @property
    def reset(self) -> int:
        return sum(f.reset << f.lsb for f in self.fields)

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"register {self.name} has no field {name!r} "
                       f"(fields: {', '.join(f.name for f in self.fields)})")


@dataclass(frozen=True)
class RegisterBlock:
    name: str
    registers: tuple[Register, ...]
    doc: str = ""
    size: int = dc_field(default=0)

    def __init__(self, name: str, registers, doc: str = "", size: int | None = None):
        _check_name("block", name)
        registers = tuple(sorted(registers, key=lambda r: r.offset))
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "registers", registers)
        object.__setattr__(self, "doc", doc)
        if not registers:
            raise ValueError(f"block {name} has no registers")
        offsets, names = set(), set()
        for r in registers:
            if r.offset in offsets:
                raise ValueError(f"block {name}: two registers at offset {r.offset:#x}")
            if r.name in names:
                raise ValueError(f"block {name}: two registers named {r.name}")
            offsets.add(r.offset)
            names.add(r.name)
        needed = 1 << max(2, (registers[-1].offset + 4 - 1).bit_length())
        if size is None:
            size = needed
        if size < needed or size & (size - 1):
            raise ValueError(f"block {name}: size {size:#x} must be a power of two >= {needed:#x}")
        object.__setattr__(self, "size", size)

    @property
    def addr_width(self) -> int:
        return self.size.bit_length() - 1

    def register(self, name: str) -> Register:
        for r in self.registers:
            if r.name == name:
                return r
        raise KeyError(f"block {self.name} has no register {name!r}")

    def at(self, offset: int) -> Register | None:
        for r in self.registers:
            if r.offset == offset:
                return r
        return None

    def port_names(self):
        """(register, field, port name) for every field: the CSR block's hardware ports."""
        for r in self.registers:
            for f in r.fields:
                yield r, f, f"{r.name}_{f.name}"
