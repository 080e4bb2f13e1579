"""dma_copy: memory-to-memory copy and pattern fill (docs/engines/dma_copy.md)."""
from __future__ import annotations

from ndpkit_spec.engine import EngineSpec
from ndpkit_spec.regs import Access, Field, Register
from ndpkit_spec.shell import engine_block

__all__ = ["BLOCK", "ENGINE", "OP_COPY", "OP_FILL"]

OP_COPY, OP_FILL = 0, 1

BLOCK = engine_block("dma_copy", [
    Register("op", 0x40, [Field("op", 0, 4, Access.RW, doc="0 = copy src -> dst, 1 = fill dst with pattern.")]),
    Register.single("src", 0x44, Access.RW, doc="Source byte address (copy): word aligned, inside card memory."),
    Register.single("dst", 0x48, Access.RW, doc="Destination byte address: word aligned, inside card memory."),
    Register.single("length", 0x4C, Access.RW, doc="Bytes: non-zero multiple of the bus word."),
    Register.single("pattern", 0x50, Access.RW, doc="Fill: this 32-bit word repeated over the destination."),
], doc="Memory-to-memory copy and pattern fill over the burst engines. Copy ranges must not overlap "
       "(ErrorCode.OVERLAP).")

ENGINE = EngineSpec(
    name="dma_copy", kind=1, block=BLOCK,
    summary="copy and pattern fill over the burst engines",
    gateware="ndpkit_hw.engines.dma_copy:DmaCopy",
    golden="ndpkit.engines.dma_copy.golden",
    client="ndpkit.engines.dma_copy.client:DmaCopyClient",
    max_in_flight=2,
    configs={"default": {"data_width": 128}, "max": {"data_width": 512}},
)
