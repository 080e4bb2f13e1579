"""Golden model of the ``adam`` engine: DeepSpeed CPU Adam's operation order, in binary32,
bit for bit what the hardware computes (gateware: ``ndpkit_hw/engines/adam``).

Per element, with the float32 scalars of :class:`AdamScalars` (computed by the host
once per step; the hardware does not recompute them):

1. ``g = grad * grad_scale``                       (always; a scale of 1 changes nothing)
2. Adam (L2) mode, weight_decay != 0: ``g = fma(p, weight_decay, g)``
3. ``m = m * beta1``;  ``m = fma(g, one_minus_beta1, m)``
4. ``v = v * beta2``;  ``g2 = g * g``;  ``v = fma(g2, one_minus_beta2, v)``
5. ``d = sqrt(v)``;  ``d = fma(d, bias_correction2, eps)``
6. ``u = m / d``
7. AdamW mode, decay != 0: ``p = fma(p, decay, p)``       (decay = -lr * weight_decay)
8. ``p = fma(u, step_size, p)``                           (step_size = -lr / (1 - beta1**t))

Steps 2 and 7 are skipped when their scalar is zero (DeepSpeed applies weight decay
only when it is positive; skipping keeps ``-0`` gradients and infinite parameters
from meeting a multiplication by zero).  Gradients arrive as fp32, fp16 or bf16
(converted exactly); the optional parameter copy is fp16 or bf16 (RNE).  A
gradient that is not finite is counted (``nonfinite``) and propagates per IEEE:
nothing is clamped.  Every operation is one of :mod:`ndpkit.arith.fp`'s, so every
NaN produced is the canonical quiet NaN.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from ndpkit_spec.codes import ErrorCode
from ndpkit.arith import fp
from ndpkit.engines.decomp.golden import densify, good_prefix, stream_stop
from ndpkit.transfer import check_ranges
from ndpkit_spec.engines.adam import SCALARS, Format, Mode

__all__ = ["Mode", "Format", "AdamScalars", "adam_step", "scalars_for_step", "check", "execute",
           "command_ranges"]


@dataclass(frozen=True)
class AdamScalars:
    """The ten float32 scalars of one step, as bit patterns (uint32) or floats."""
    grad_scale: float = 1.0
    weight_decay: float = 0.0       # Adam (L2) mode
    beta1: float = 0.9
    one_minus_beta1: float = 0.1
    beta2: float = 0.999
    one_minus_beta2: float = 0.001
    bias_correction2: float = 1.0   # 1 / sqrt(1 - beta2**t)
    eps: float = 1e-8
    decay: float = 0.0              # AdamW mode: -lr * weight_decay
    step_size: float = -1e-3        # -lr / (1 - beta1**t)

    def bits(self) -> dict[str, int]:
        """Every scalar rounded once to float32, as its bit pattern."""
        return {f.name: int(np.float32(getattr(self, f.name)).view(np.uint32)) for f in fields(self)}


if tuple(f.name for f in fields(AdamScalars)) != SCALARS:       # the register order of the spec
    raise ImportError("AdamScalars does not list the scalars in the order of ndpkit_spec.engines.adam.SCALARS")


def scalars_for_step(step: int, *, lr: float, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
                     weight_decay: float = 0.0, mode: Mode = Mode.ADAMW, grad_scale: float = 1.0) -> AdamScalars:
    """The host's per-step scalars (computed in double, rounded once to float32), as
    DeepSpeed computes them; ``step`` counts from 1."""
    if step < 1:
        raise ValueError(f"step counts from 1, not {step}")
    bias_correction1 = 1 - beta1 ** step
    return AdamScalars(
        grad_scale=grad_scale,
        weight_decay=weight_decay if mode == Mode.ADAM else 0.0,
        beta1=beta1, one_minus_beta1=1 - beta1, beta2=beta2, one_minus_beta2=1 - beta2,
        bias_correction2=1 / math.sqrt(1 - beta2 ** step),
        eps=eps,
        decay=-lr * weight_decay if mode == Mode.ADAMW else 0.0,
        step_size=-lr / bias_correction1,
    )


def _grad_to_fp32(grad, fmt: Format) -> np.ndarray:
    if fmt == Format.FP32:
        return fp.canonical(fp.bits(grad) if np.asarray(grad).dtype != np.uint32 else grad)
    raw = np.asarray(grad)
    if raw.dtype == np.float16:
        raw = raw.view(np.uint16)
    if fmt == Format.FP16:
        return fp.fp16_to_fp32(raw)
    return fp.bf16_to_fp32(raw)


def _is_zero(bits: int) -> bool:
    return (bits & 0x7FFF_FFFF) == 0


def adam_step(p, m, v, grad, scalars: AdamScalars, *, mode: Mode = Mode.ADAMW, grad_format: Format = Format.FP32,
              copy_format: Format | None = None):
    """One step.  ``p``, ``m``, ``v``: float32 arrays (or uint32 bit patterns); ``grad``:
    float32/uint32 for FP32, uint16 bit patterns (or float16) for FP16/BF16.

    Returns ``(p, m, v, copy, nonfinite)``: uint32 bit patterns, the 16-bit copy of p
    (uint16) or None, and the number of non-finite gradients.
    """
    def u32(x):
        x = np.asarray(x)
        return x.astype(np.uint32) if x.dtype == np.uint32 else fp.bits(x)

    p, m, v = u32(p), u32(m), u32(v)
    s = {name: np.uint32(value) for name, value in scalars.bits().items()}
    g_in = _grad_to_fp32(grad, Format(grad_format))
    if not (p.shape == m.shape == v.shape == g_in.shape):
        raise ValueError(f"p, m, v and grad must have one shape, not {p.shape}, {m.shape}, {v.shape}, {g_in.shape}")
    nonfinite = int(np.count_nonzero((g_in & 0x7F80_0000) == 0x7F80_0000))

    g = fp.mul(g_in, s["grad_scale"])                                            # 1
    if mode == Mode.ADAM and not _is_zero(int(s["weight_decay"])):
        g = fp.fma(p, s["weight_decay"], g)                                      # 2
    m = fp.fma(g, s["one_minus_beta1"], fp.mul(m, s["beta1"]))                   # 3
    v = fp.fma(fp.mul(g, g), s["one_minus_beta2"], fp.mul(v, s["beta2"]))        # 4
    d = fp.fma(fp.sqrt(v), s["bias_correction2"], s["eps"])                      # 5
    u = fp.div(m, d)                                                             # 6
    if mode == Mode.ADAMW and not _is_zero(int(s["decay"])):
        p = fp.fma(p, s["decay"], p)                                             # 7
    p = fp.fma(u, s["step_size"], p)                                             # 8
    copy = None
    if copy_format is not None:
        copy = fp.fp32_to_fp16(p) if copy_format == Format.FP16 else fp.fp32_to_bf16(p)
    return p, m, v, copy, nonfinite


# ---- the engine's command: validation order and effect on card memory -------------------

ARRAYS = ("p", "m", "v", "g", "copy")


def command_ranges(cmd: dict, word_bytes: int) -> dict[str, tuple[int, int]]:
    """(address, byte length) of every array a command uses; lengths are whole words:
    ``lanes = word_bytes // 4`` elements per vector, 16-bit arrays pack two vectors a word.
    In sparse mode ``g`` holds the ``pairs`` values and ``idx`` their indices."""
    lanes = word_bytes // 4

    def words(elements, size):
        return -(-elements * size // word_bytes) * word_bytes

    vectors = -(-cmd["count"] // lanes)
    len32, len16 = vectors * word_bytes, -(-vectors // 2) * word_bytes
    ranges = {"p": (cmd["p"], len32), "m": (cmd["m"], len32), "v": (cmd["v"], len32),
              "g": (cmd["g"], len16 if cmd["format_grad"] else len32)}
    if cmd["format_copy"]:           # (no copy format: the copy address is not used)
        ranges["copy"] = (cmd["copy"], len16)
    if cmd.get("format_sparse"):
        k = cmd["pairs"]
        ranges["g"] = (cmd["g"], words(k, 2 if cmd["format_grad"] else 4))
        ranges["idx"] = (cmd["idx"], words(k, 4))
    return ranges


def check(cmd: dict, *, word_bytes: int, window_base: int, window_size: int) -> tuple[int, str | None]:
    """(ErrorCode, offending argument) in the hardware's order (ndpkit_hw/engines/adam/engine.py).
    Only what is checked before the update starts: sparse-mode pairs are checked as they
    stream (:func:`ndpkit.engines.decomp.golden.stream_stop`)."""
    if cmd["format_mode"] > 1:
        return ErrorCode.BAD_FIELD, "mode"
    if cmd["format_grad"] > 2:
        return ErrorCode.BAD_FIELD, "grad_format"
    if cmd["format_copy"] > 2:
        return ErrorCode.BAD_FIELD, "copy_format"
    if cmd["count"] == 0:
        return ErrorCode.ZERO_LENGTH, "n"
    sparse = bool(cmd.get("format_sparse"))
    if sparse and cmd["pairs"] == 0:
        return ErrorCode.ZERO_LENGTH, "pairs"
    if sparse and cmd["pairs"] > cmd["count"]:
        return ErrorCode.BAD_FIELD, "pairs"
    ranges = command_ranges(cmd, word_bytes)
    if ranges["p"][1] >= 1 << 32:
        return ErrorCode.OUT_OF_WINDOW, "n"
    return check_ranges(ranges, word_bytes, window_base, window_size)


def execute(memory: np.ndarray, cmd: dict, *, word_bytes: int, base: int = 0, window_base: int | None = None,
            window_size: int | None = None) -> tuple[int, int, int, int]:
    """Apply an accepted command to ``memory`` (uint8, card memory from ``base``); returns
    (error, bytes read, bytes written, aux): aux = non-finite gradients, or after a
    sparse-mode pair error the number of elements updated before it (the rest untouched)."""
    n = cmd["count"]
    ranges = command_ranges(cmd, word_bytes)

    def view(name, dtype, count):
        start = cmd[name] - base
        return memory[start:start + count * np.dtype(dtype).itemsize].view(dtype)

    fmt = Format(cmd["format_grad"])
    gtype = np.uint32 if fmt == Format.FP32 else np.uint16
    error, updated = 0, n
    if cmd.get("format_sparse"):
        k = cmd["pairs"]
        indices = view("idx", np.uint32, k)
        error, _, updated = stream_stop(indices, n, word_bytes // 4)
        good = good_prefix(indices, n)      # pairs before a bad one were decompressed
        grad = densify(indices[:good], view("g", gtype, k)[:good], n)
    else:
        grad = view("g", gtype, n)
    scalars = AdamScalars(**{f.name: float(np.uint32(cmd[f.name]).view(np.float32)) for f in fields(AdamScalars)})
    copy_fmt = Format(cmd["format_copy"]) if cmd["format_copy"] else None
    u = updated
    p, m, v, copy, nonfinite = adam_step(view("p", np.uint32, n)[:u], view("m", np.uint32, n)[:u],
                                         view("v", np.uint32, n)[:u], grad[:u], scalars,
                                         mode=Mode(cmd["format_mode"]), grad_format=fmt, copy_format=copy_fmt)
    view("p", np.uint32, u)[:] = p
    view("m", np.uint32, u)[:] = m
    view("v", np.uint32, u)[:] = v
    if copy is not None:
        view("copy", np.uint16, u)[:] = copy
    read = sum(length for name, (_, length) in ranges.items() if name != "copy")
    written = 3 * ranges["p"][1] + (ranges["copy"][1] if copy is not None else 0)
    return int(error), read, written, (updated if error else nonfinite)
