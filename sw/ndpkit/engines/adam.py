"""Driver of the ``adam`` engine: ``dev.adam.step(...)`` on card buffers."""
from __future__ import annotations


from ..engine import Command, EngineClient
from ..golden import adam as golden
from ..golden.adam import AdamScalars, Format, Mode

__all__ = ["AdamClient"]

_FORMATS = {None: 0, "fp32": Format.FP32, "fp16": Format.FP16, "bf16": Format.BF16}


def _fmt(value, name, allow_none=False):
    if isinstance(value, Format):
        return int(value)
    try:
        if value is None and not allow_none:
            raise KeyError
        return int(_FORMATS[value])
    except (KeyError, TypeError):
        raise ValueError(f"{name} must be one of 'fp32', 'fp16', 'bf16'{' or None' if allow_none else ''}, "
                         f"not {value!r}") from None


class AdamClient(EngineClient):
    name = "adam"

    def blame(self, args, code):
        d = self.device
        return golden.check_command(args, word_bytes=d.word_bytes, window_base=d.mem_base, window_size=d.mem_size)[1]

    def submit_step(self, *, n: int, p: int, m: int, v: int, g: int, scalars: AdamScalars, mode: Mode = Mode.ADAMW,
                    grad_format="fp32", copy: int = 0, copy_format=None) -> Command:
        """Queue one update of ``n`` elements at card addresses ``p``, ``m``, ``v`` (fp32,
        in place), ``g`` (gradient format) and optionally ``copy`` (16-bit copy of p)."""
        args = {"format_mode": int(mode), "format_grad": _fmt(grad_format, "grad_format"),
                "format_copy": _fmt(copy_format, "copy_format", allow_none=True), "count": n,
                "p": p, "m": m, "v": v, "g": g, "copy": copy, **scalars.bits()}
        return self.submit(args, work_bytes=16 * n)

    def step(self, p, m, v, g, *, scalars: AdamScalars, mode: Mode = Mode.ADAMW, grad_format="fp32",
             copy=None, copy_format=None, n: int | None = None, wait: bool = True):
        """Adam/AdamW step on card Buffers (or addresses) ``p``, ``m``, ``v``, ``g``.
        ``n`` defaults to ``p``'s size / 4.  Returns the Completion (``aux`` = non-finite
        gradients) or, with ``wait=False``, the Command."""
        from ..device import Buffer, _address
        if n is None:
            if not isinstance(p, Buffer):
                raise TypeError("n is required when p is a card address")
            n = p.size // 4
        if copy_format is not None and copy is None:
            raise ValueError("copy_format given without a copy buffer")
        cmd = self.submit_step(n=int(n), p=_address(p, "p"), m=_address(m, "m"), v=_address(v, "v"),
                               g=_address(g, "g"), copy=0 if copy is None else _address(copy, "copy"),
                               scalars=scalars, mode=Mode(mode), grad_format=grad_format, copy_format=copy_format)
        return cmd.wait() if wait else cmd
