"""sg: the memory-side scatter-gather unit (after Piccolo; docs/engines/sg.md)."""
from __future__ import annotations

import enum

from ndpkit_spec.engine import EngineSpec
from ndpkit_spec.regs import Access, Field, Register
from ndpkit_spec.shell import engine_block

__all__ = ["BLOCK", "ENGINE", "Op", "LINE", "HEADER_BYTES", "OFFSET_BYTES", "DEVICE_ROW_BYTES", "DEVICE_BANKS",
           "DESCRIPTOR_BYTES", "OP_READ", "OP_WRITE"]

LINE = 64
HEADER_BYTES = 8
OFFSET_BYTES = 2


class Op(enum.IntEnum):
    LINE_READ = 0
    LINE_WRITE = 1
    ROW_GATHER = 2
    ROW_SCATTER = 3


DEVICE_ROW_BYTES = 2048          # the DRAM row the device's sg engine assumes (a DDR4 x16 page)
DEVICE_BANKS = 16
DESCRIPTOR_BYTES = 128
OP_READ, OP_WRITE = 0, 1         # the command's op: read requests (responses to `out`) or writes

BLOCK = engine_block("sg", [
    Register("op", 0x40, [Field("op", 0, 4, Access.RW, doc="0 = read requests (line reads, row gathers: each "
                                                           "response to `out`), 1 = write requests (line writes, "
                                                           "row scatters).")]),
    Register.single("table", 0x44, Access.RW, doc="Request descriptors, 128 bytes each (docs/engines/sg.md): op, element "
                    "size and count, the line or row address, 16 uint16 element offsets, 64 data bytes."),
    Register.single("requests", 0x48, Access.RW, doc="Descriptors in the table (>= 1)."),
    Register.single("out", 0x4C, Access.RW, doc="Read commands: 64 bytes per request, the line or the packed "
                    "gathered elements (zero from a failed request on)."),
], doc="Memory-side scatter-gather (after Piccolo): a batch of 64-byte line reads/writes and row-local gathers/"
       "scatters of 4- or 8-byte elements through the scatter-gather unit and its modelled off-chip link "
       "(2 KiB DRAM rows). Whole-command checks (op, requests, table and out ranges) fail with nothing done; "
       "requests run in table order and the first bad one (its op of the other direction: BAD_FIELD; element size "
       "or count: BAD_FIELD; alignment, window, an offset outside the row: BAD_INDEX) stops the batch with its code. "
       "cpl_aux: the link bytes the command's requests moved.")

ENGINE = EngineSpec(
    name="sg", kind=4, block=BLOCK,
    summary="row-local gathers and scatters and line reads/writes behind a modelled off-chip link",
    gateware="ndpkit_hw.engines.sg:SgEngine",
    golden="ndpkit.engines.sg.golden",
    client="ndpkit.engines.sg.client:SgClient",
    min_data_width=512,          # a 64-byte DRAM column per bus beat
    configs={"default": {"data_width": 512}},
)
