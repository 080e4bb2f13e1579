"""Driver of the ``dma_copy`` engine: ``Device.copy`` and ``Device.fill``."""
from __future__ import annotations

from ndpkit.engine import Command, EngineClient
from ndpkit.engines.dma_copy import golden
from ndpkit.memory import address_of

__all__ = ["DmaCopyClient"]


class DmaCopyClient(EngineClient):
    name = "dma_copy"
    size_arguments = "nbytes"

    def copy(self, dst, src, length: int) -> Command:
        """Copy ``length`` bytes ``src -> dst`` (Buffers or card addresses); split over
        the instances working in their region where there are several."""
        args = {"op": golden.OP_COPY, "src": address_of(src, "src"), "dst": address_of(dst, "dst"), "length": length,
                "pattern": 0}
        return self.submit_split(args, total=length, unit=self.device.word_bytes, work_bytes=length,
                                 buffers={"dst": dst, "src": src}, piece=lambda first, count: dict(
                                     args, src=args["src"] + first, dst=args["dst"] + first, length=count))

    def fill(self, dst, pattern: int, length: int) -> Command:
        """Fill ``length`` bytes at ``dst`` (a Buffer or card address) with ``pattern``."""
        args = {"op": golden.OP_FILL, "src": 0, "dst": address_of(dst, "dst"), "length": length, "pattern": pattern}
        return self.submit_split(args, total=length, unit=self.device.word_bytes, work_bytes=length,
                                 buffers={"dst": dst}, piece=lambda first, count: dict(
                                     args, dst=args["dst"] + first, length=count))
