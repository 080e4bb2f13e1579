"""decomp: scatter-mode gradient decompression (Smart-Infinity compatible;
docs/engines/decomp.md)."""
from __future__ import annotations

from ndpkit_spec.engine import EngineSpec
from ndpkit_spec.regs import Access, Field, Register
from ndpkit_spec.shell import engine_block

__all__ = ["BLOCK", "ENGINE", "SENTINEL"]

#: an index that marks padding: skipped by the scatter
SENTINEL = 0xFFFF_FFFF

BLOCK = engine_block("decomp", [
    Register("format", 0x40, [Field("value", 0, 2, Access.RW, doc="Value (and destination) format: 0 fp32, 1 fp16, "
                                                                  "2 bf16.")]),
    Register.single("count", 0x44, Access.RW, doc="Elements n of the dense destination (n >= 1)."),
    Register.single("pairs", 0x48, Access.RW, doc="Pairs k (k >= 1; any order, repeats and sentinels allowed)."),
    Register.single("idx", 0x4C, Access.RW, doc="uint32 indices (word aligned); 0xFFFFFFFF is padding, skipped."),
    Register.single("val", 0x50, Access.RW, doc="Values in the `format.value` format (word aligned)."),
    Register.single("dst", 0x54, Access.RW, doc="Dense destination, n elements in the value format (word aligned)."),
], doc="Scatter-mode gradient decompression (Smart-Infinity compatible): zero-fill the n-element destination, "
       "then write the k pairs in array order (a repeated index keeps the last value; index 0xFFFFFFFF is "
       "skipped). An index >= n (not the sentinel) stops the command with OUT_OF_WINDOW after the pairs before "
       "it were written. cpl_aux counts the pairs written.")

ENGINE = EngineSpec(
    name="decomp", kind=6, block=BLOCK,
    summary="zero-fill a dense array, then scatter (index, value) pairs into it",
    gateware="ndpkit_hw.engines.decomp:DecompEngine",
    golden="ndpkit.engines.decomp.golden",
    client="ndpkit.engines.decomp.client:DecompClient",
    configs={"default": {"data_width": 128}, "max": {"data_width": 512}},
    config_label="{fp32_lanes} fp32 lanes",
)
