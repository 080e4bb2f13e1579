"""What several engines' drivers share, so that no engine's client imports another's.

- :func:`element_format`: an element-format argument (``'fp32'``, ``'fp16'``, ``'bf16'``)
  as the code adam's gradient and copy formats and decomp's element format both take
  (:class:`ndpkit_spec.engines.adam.Format`).

Card addresses and Buffers are :mod:`ndpkit.memory`'s (:func:`ndpkit.memory.address_of`).
"""
from __future__ import annotations

from ndpkit_spec.engines.adam import Format

__all__ = ["ELEMENT_FORMATS", "element_format"]

#: argument value -> format code (``None``: no format, where an argument allows it)
ELEMENT_FORMATS = {None: 0, "fp32": Format.FP32, "fp16": Format.FP16, "bf16": Format.BF16}


def element_format(value, name: str, allow_none: bool = False) -> int:
    """The format code of ``value`` (a :class:`~ndpkit_spec.engines.adam.Format`, or
    ``'fp32'``/``'fp16'``/``'bf16'``; ``None`` -> 0 with ``allow_none``); anything else
    raises ``ValueError`` naming the argument ``name``."""
    if isinstance(value, Format):
        return int(value)
    try:
        if value is None and not allow_none:
            raise KeyError
        return int(ELEMENT_FORMATS[value])
    except (KeyError, TypeError):
        raise ValueError(f"{name} must be one of 'fp32', 'fp16', 'bf16'{' or None' if allow_none else ''}, "
                         f"not {value!r}") from None
