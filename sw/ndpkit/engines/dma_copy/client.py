"""Driver of the ``dma_copy`` engine: ``Device.copy`` and ``Device.fill``."""
from __future__ import annotations

from ndpkit.engine import Command, EngineClient
from ndpkit.engines.dma_copy import golden

__all__ = ["DmaCopyClient"]


class DmaCopyClient(EngineClient):
    name = "dma_copy"
    size_arguments = "nbytes"

    def copy(self, dst, src, length: int) -> Command:
        """Copy ``length`` bytes ``src -> dst`` (Buffers or card addresses)."""
        from ndpkit.device import _address
        return self.submit({"op": golden.OP_COPY, "src": _address(src, "src"), "dst": _address(dst, "dst"),
                            "length": length, "pattern": 0}, work_bytes=length, buffers={"dst": dst, "src": src})

    def fill(self, dst, pattern: int, length: int) -> Command:
        """Fill ``length`` bytes at ``dst`` (a Buffer or card address) with ``pattern``."""
        from ndpkit.device import _address
        return self.submit({"op": golden.OP_FILL, "src": 0, "dst": _address(dst, "dst"), "length": length,
                            "pattern": pattern}, work_bytes=length, buffers={"dst": dst})
