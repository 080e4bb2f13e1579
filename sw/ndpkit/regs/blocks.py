"""The register blocks of the project's gateware, declared once.

``ALL_BLOCKS`` is what ``make regs`` documents (docs/registers.md) and turns into C
headers.  Later shells and engines add their blocks here.
"""
from __future__ import annotations

from .declare import Access, Field, Register, RegisterBlock

__all__ = ["COPY_DEMO", "ALL_BLOCKS", "NDPKIT_MAGIC"]

NDPKIT_MAGIC = 0x4E44504B   # "NDPK"

COPY_DEMO = RegisterBlock("copy_demo", [
    Register.single("id", 0x00, Access.RO, doc="Reads 0x4E44504B ('NDPK')."),
    Register("ctrl", 0x04, [Field("start", 0, 1, Access.W1S, doc="Write 1 to start a copy (ignored while busy).")]),
    Register.single("src", 0x08, Access.RW, doc="Source byte address in card memory (bus-word aligned)."),
    Register.single("dst", 0x0C, Access.RW, doc="Destination byte address in card memory (bus-word aligned)."),
    Register.single("length", 0x10, Access.RW, doc="Bytes to copy: non-zero, a multiple of the bus word."),
    Register("status", 0x14, [
        Field("busy", 0, 1, Access.RO, doc="A copy is running."),
        Field("error", 4, 4, Access.RO, doc="ErrorCode of the last copy (0 = OK); see ndpkit.codes."),
    ]),
    Register("irq", 0x18, [Field("done", 0, 1, Access.W1C, doc="A copy finished (with or without error).")],
             doc="Drives the `irq` output while any bit is set."),
    Register.single("cycles", 0x1C, Access.RO, doc="Cycles the last copy took, start to completion."),
    Register.single("bytes_read", 0x20, Access.RO, doc="Bytes the read engine moved (since the last start)."),
    Register.single("bytes_written", 0x24, Access.RO, doc="Bytes the write engine moved (since the last start)."),
], doc="The foundation's memory-to-memory copy demo: burst reader -> burst writer through the "
       "interconnect into card memory.")

ALL_BLOCKS = (COPY_DEMO,)
