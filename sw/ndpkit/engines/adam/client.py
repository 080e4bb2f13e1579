"""Driver of the adam engine: ``dev.adam.step(...)`` (dense or sparse gradients) on card buffers."""
from __future__ import annotations

from ndpkit_spec.codes import ErrorCode
from ndpkit.engine import Command, EngineClient
from ndpkit.engines.adam.golden import AdamScalars, Mode
from ndpkit.engines.common import element_format
from ndpkit.memory import Buffer, address_of

__all__ = ["AdamClient"]


class AdamClient(EngineClient):
    name = "adam"
    argument_names = {"idx": "indices"}
    size_arguments = "n (pairs in sparse mode)"

    def blame_run(self, args, code):
        # a command that passed the checks and failed anyway met a bad pair mid-stream
        stream_error = code in (ErrorCode.BAD_FIELD, ErrorCode.OUT_OF_WINDOW)
        return "indices" if args.get("format_sparse") and stream_error else None

    def submit_step(self, *, n: int, p: int, m: int, v: int, g: int, scalars: AdamScalars, mode: Mode = Mode.ADAMW,
                    grad_format="fp32", copy: int = 0, copy_format=None, indices: int = 0,
                    pairs: int = 0, buffers: dict | None = None) -> Command:
        """Queue one update of ``n`` elements at card addresses ``p``, ``m``, ``v`` (fp32,
        in place), ``g`` (gradient format) and optionally ``copy`` (16-bit copy of p).
        With ``pairs`` > 0 the gradient is sparse: ``pairs`` values at ``g`` and their
        strictly ascending uint32 indices at ``indices`` (stream-mode decompression)."""
        args = {"format_mode": int(mode), "format_grad": element_format(grad_format, "grad_format"),
                "format_copy": element_format(copy_format, "copy_format", allow_none=True),
                "format_sparse": int(pairs > 0),
                "count": n, "p": p, "m": m, "v": v, "g": g, "copy": copy, "pairs": pairs, "idx": indices,
                **scalars.bits()}
        if pairs:          # a sparse gradient's pairs do not split by element range: one command
            return self.submit(args, work_bytes=16 * n, buffers=buffers)
        g_bytes = 4 if args["format_grad"] == 0 else 2

        def piece(first, count):
            return dict(args, count=count, p=p + 4 * first, m=m + 4 * first, v=v + 4 * first, g=g + g_bytes * first,
                        copy=copy + 2 * first if copy else 0)
        # (a 16-bit array's piece starts on a bus word when pieces are whole half-words' elements)
        return self.submit_split(args, total=n, unit=self.device.word_bytes // 2, piece=piece, work_bytes=16 * n,
                                 buffers=buffers)

    def step(self, p, m, v, g, *, scalars: AdamScalars, mode: Mode = Mode.ADAMW, grad_format="fp32",
             copy=None, copy_format=None, n: int | None = None, indices=None, pairs: int | None = None,
             wait: bool = True):
        """Adam/AdamW step on card Buffers (or addresses) ``p``, ``m``, ``v``, ``g``.
        ``n`` defaults to ``p``'s size / 4.  Sparse gradient: ``indices`` (a Buffer or
        address of strictly ascending uint32 indices) and ``pairs`` (k; defaults to the
        indices Buffer's size / 4), with the k values at ``g``.  Returns the Completion
        (``aux`` = non-finite gradients) or, with ``wait=False``, the Command."""
        if n is None:
            if not isinstance(p, Buffer):
                raise TypeError("n is required when p is a card address")
            n = p.size // 4
        if copy_format is not None and copy is None:
            raise ValueError("copy_format given without a copy buffer")
        if indices is not None and pairs is None:
            if not isinstance(indices, Buffer):
                raise TypeError("pairs is required when indices is a card address")
            pairs = indices.size // 4
        if indices is None and pairs:
            raise ValueError("pairs given without indices")
        if indices is not None and not pairs:
            raise ValueError("pairs must be at least 1 for a sparse gradient")
        cmd = self.submit_step(n=int(n), p=address_of(p, "p"), m=address_of(m, "m"), v=address_of(v, "v"),
                               g=address_of(g, "g"), copy=0 if copy is None else address_of(copy, "copy"),
                               scalars=scalars, mode=Mode(mode), grad_format=grad_format, copy_format=copy_format,
                               indices=0 if indices is None else address_of(indices, "indices"),
                               pairs=int(pairs or 0),
                               buffers={"p": p, "m": m, "v": v, "g": g, "copy": copy, "idx": indices})
        return cmd.wait() if wait else cmd
