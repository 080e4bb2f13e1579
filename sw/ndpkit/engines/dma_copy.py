"""Driver of the ``dma_copy`` engine: ``Device.copy`` and ``Device.fill``."""
from __future__ import annotations

from ..engine import Command, EngineClient
from ..golden import dma_copy as golden

__all__ = ["DmaCopyClient"]


class DmaCopyClient(EngineClient):
    name = "dma_copy"

    def blame(self, args, code):
        d = self.device
        _, field = golden.check(args["op"], args["src"], args["dst"], args["length"], word_bytes=d.word_bytes,
                                window_base=self.window[0], window_size=self.window[1])
        return field

    def copy(self, dst: int, src: int, length: int) -> Command:
        return self.submit({"op": golden.OP_COPY, "src": src, "dst": dst, "length": length, "pattern": 0},
                           work_bytes=length)

    def fill(self, dst: int, pattern: int, length: int) -> Command:
        return self.submit({"op": golden.OP_FILL, "src": 0, "dst": dst, "length": length, "pattern": pattern},
                           work_bytes=length)
