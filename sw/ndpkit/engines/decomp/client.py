"""Driver of the decomp engine: ``dev.decomp.scatter(...)`` on card buffers."""
from __future__ import annotations

from ndpkit_spec.codes import ErrorCode
from ndpkit.engine import EngineClient
from ndpkit.engines.common import element_format
from ndpkit.memory import Buffer, address_of

__all__ = ["DecompClient"]


class DecompClient(EngineClient):
    """Scatter-mode decompression into a dense card buffer (Smart-Infinity compatible)."""
    name = "decomp"
    argument_names = {"idx": "indices", "val": "values"}
    size_arguments = "n or pairs"

    def blame_run(self, args, code):
        return "indices" if code == ErrorCode.OUT_OF_WINDOW else None

    def scatter(self, dst, indices, values, *, n: int, pairs: int | None = None, fmt="fp32", wait: bool = True):
        """Zero-fill ``n`` elements at ``dst`` (in ``fmt``: 'fp32', 'fp16' or 'bf16'),
        then write the ``pairs`` (index, value) pairs at ``indices``/``values`` in array
        order: a repeated index keeps the last value, index 0xFFFFFFFF is skipped.
        ``pairs`` defaults to the indices uploaded (the Buffer's ``nbytes`` / 4, not
        its padding to whole bus words).  Returns the Completion
        (``aux`` = pairs written) or, with ``wait=False``, the Command."""
        if pairs is None:
            if not isinstance(indices, Buffer):
                raise TypeError("pairs is required when indices is a card address")
            pairs = indices.nbytes // 4
        args = {"format": element_format(fmt, "fmt"), "count": int(n), "pairs": int(pairs),
                "idx": address_of(indices, "indices"), "val": address_of(values, "values"), "dst": address_of(dst, "dst")}
        cmd = self.submit(args, work_bytes=4 * int(n) + 8 * int(pairs),
                          buffers={"dst": dst, "idx": indices, "val": values})
        return cmd.wait() if wait else cmd
