"""Driver of the ``dma_copy`` engine: ``Device.copy`` and ``Device.fill``."""
from __future__ import annotations

from ndpkit.engine import Command, EngineClient
from ndpkit.engines.dma_copy import golden

__all__ = ["DmaCopyClient"]


class DmaCopyClient(EngineClient):
    name = "dma_copy"

    def copy(self, dst: int, src: int, length: int) -> Command:
        return self.submit({"op": golden.OP_COPY, "src": src, "dst": dst, "length": length, "pattern": 0},
                           work_bytes=length)

    def fill(self, dst: int, pattern: int, length: int) -> Command:
        return self.submit({"op": golden.OP_FILL, "src": 0, "dst": dst, "length": length, "pattern": pattern},
                           work_bytes=length)
