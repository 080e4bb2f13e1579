"""adam: the near-storage Adam/AdamW updater with fused stream-mode gradient
decompression (after Smart-Infinity; docs/engines/adam.md)."""
from __future__ import annotations

import enum

from ndpkit_spec.engine import EngineSpec
from ndpkit_spec.regs import Access, Field, Register
from ndpkit_spec.shell import engine_block

__all__ = ["BLOCK", "ENGINE", "Mode", "Format", "SCALARS", "port_lanes"]


class Mode(enum.IntEnum):
    ADAMW = 0       # decoupled weight decay (torch.optim.AdamW, DeepSpeed adamw_mode=True)
    ADAM = 1        # L2 regularisation folded into the gradient (torch.optim.Adam)


class Format(enum.IntEnum):
    FP32 = 0
    FP16 = 1
    BF16 = 2


_SCALAR_DOCS = {
    "grad_scale": "float32: every gradient is multiplied by it first (loss-scale unscale or clip factor; 1.0 = none).",
    "weight_decay": "float32: Adam (L2) mode: g = fma(p, weight_decay, g); 0 skips the step.",
    "beta1": "float32: m = m * beta1 ...",
    "one_minus_beta1": "float32: ... m = fma(g, one_minus_beta1, m).",
    "beta2": "float32: v = v * beta2 ...",
    "one_minus_beta2": "float32: ... v = fma(g*g, one_minus_beta2, v).",
    "bias_correction2": "float32: 1 / sqrt(1 - beta2**t): d = fma(sqrt(v), bias_correction2, eps).",
    "eps": "float32: the epsilon added to the corrected sqrt(v).",
    "decay": "float32: AdamW mode: p = fma(p, decay, p) with decay = -lr * weight_decay; 0 skips the step.",
    "step_size": "float32: p = fma(m / d, step_size, p) with step_size = -lr / (1 - beta1**t).",
}

BLOCK = engine_block("adam", [
    Register("format", 0x40, [
        Field("mode", 0, 2, Access.RW, doc="0 = AdamW (decoupled decay), 1 = Adam (L2 decay into the gradient)."),
        Field("grad", 4, 2, Access.RW, doc="Gradient format: 0 fp32, 1 fp16, 2 bf16."),
        Field("copy", 8, 2, Access.RW, doc="16-bit parameter copy: 0 none, 1 fp16, 2 bf16 (RNE)."),
        Field("sparse", 12, 1, Access.RW, doc="1 = the gradient is `pairs` (index, value) pairs, indices strictly "
              "ascending (stream-mode decompression fused into the update; values at `g` in the `format.grad` "
              "format, indices at `idx`)."),
    ]),
    Register.single("count", 0x44, Access.RW, doc="Elements n (any n >= 1; arrays occupy whole bus words)."),
    Register.single("p", 0x48, Access.RW, doc="fp32 parameters, read and written in place (word aligned)."),
    Register.single("m", 0x4C, Access.RW, doc="fp32 first moments, in place."),
    Register.single("v", 0x50, Access.RW, doc="fp32 second moments, in place."),
    Register.single("g", 0x54, Access.RW, doc="Gradients in the `format.grad` format (read only)."),
    Register.single("copy", 0x58, Access.RW, doc="16-bit parameter copy destination (when format.copy != 0)."),
    Register.single("pairs", 0x5C, Access.RW, doc="Sparse mode: number of (index, value) pairs k, 1 <= k <= count."),
] + [Register.single(name, 0x60 + 4 * i, Access.RW, doc=doc) for i, (name, doc) in enumerate(_SCALAR_DOCS.items())]
  + [Register.single("idx", 0x88, Access.RW, doc="Sparse mode: uint32 indices of the pairs (word aligned).")],
    doc="Adam/AdamW update of fp32 p, m, v in card memory from fp32/fp16/bf16 gradients (DeepSpeed CPU Adam "
        "operation order, bit-exact to ndpkit.engines.adam.golden), with an optional fp16/bf16 copy of p. Arrays must not "
        "overlap each other (OVERLAP); a bad format or mode is BAD_FIELD; cpl_aux counts non-finite gradients. "
        "Sparse mode: k = 0 is ZERO_LENGTH, k > count BAD_FIELD; a pair found out of order (BAD_FIELD) or with "
        "index >= count (OUT_OF_WINDOW) stops the update before the bus word being built: cpl_aux then gives "
        "the elements updated (a multiple of the bus word's fp32 elements).")

def port_lanes(data_width: int) -> int:
    """The elements per cycle a ``data_width``-bit port feeds (p, m, v and an fp32 gradient
    read: 16 bytes an element): the engine's lanes, since more would wait on the port.

    >>> port_lanes(512), port_lanes(128), port_lanes(64)
    (4, 1, 1)
    """
    return max(1, data_width // 128)


#: the ten float32 scalars of a step, in register order
SCALARS = tuple(_SCALAR_DOCS)

ENGINE = EngineSpec(
    name="adam", kind=2, block=BLOCK,
    summary="Adam/AdamW update of fp32 p, m, v with fused top-k gradient decompression",
    gateware="ndpkit_hw.engines.adam:AdamEngine",
    golden="ndpkit.engines.adam.golden",
    client="ndpkit.engines.adam.client:AdamClient",
    # lanes: the port's element rate (port_lanes), so a configuration is its bus width
    configs={"default": {"data_width": 128}, "max": {"data_width": 512}},
    config_label=lambda p: f"{p['data_width']}-bit, {port_lanes(p['data_width'])} lane"
                           f"{'s' if port_lanes(p['data_width']) > 1 else ''}",
)
