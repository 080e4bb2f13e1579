"""The transport interface: what the driver needs from a card, and nothing more.

A transport moves 32-bit words to and from BAR0, bytes to and from card memory
(host DMA), and waits for user interrupts.  ``model``, ``sim`` and ``xdma``
implement it; :class:`ndpkit.device.Device` is written only against this class.
"""
from __future__ import annotations

import abc

__all__ = ["Transport"]


class Transport(abc.ABC):
    #: a short name: "model", "sim", "xdma"
    kind: str = ""

    @abc.abstractmethod
    def read32(self, address: int) -> int:
        """Read the BAR0 word at ``address``; an AXI error raises RegisterAccessError."""

    @abc.abstractmethod
    def write32(self, address: int, value: int) -> None:
        """Write the BAR0 word at ``address``; an AXI error raises RegisterAccessError."""

    @abc.abstractmethod
    def dma_write(self, address: int, data: bytes) -> None:
        """Host -> card DMA of ``data`` to card address ``address`` (any alignment)."""

    @abc.abstractmethod
    def dma_read(self, address: int, length: int) -> bytes:
        """Card -> host DMA of ``length`` bytes from card address ``address``."""

    @abc.abstractmethod
    def wait_irq(self, mask: int, timeout: float) -> int:
        """Wait until an interrupt line in ``mask`` is asserted, at most ``timeout``
        seconds of device time; returns the asserted lines (0 on timeout)."""

    def p2p_write(self, address: int, data: bytes) -> None:
        """Storage -> card peer-to-peer transfer (an SSD beside the card writes card
        memory without crossing the host link).  Transports with no such path fall back
        to host DMA."""
        self.dma_write(address, data)

    def p2p_read(self, address: int, length: int) -> bytes:
        """Card -> storage peer-to-peer transfer (see :meth:`p2p_write`)."""
        return self.dma_read(address, length)

    #: whether p2p_* take a path apart from the host link (sim: a modelled SSD link)
    p2p_native: bool = False

    def cycles(self) -> int | None:
        """Device cycles elapsed, when the transport knows them (sim, model)."""
        return None

    def close(self) -> None:
        """Release the card; later calls raise TransportClosed."""

    def describe(self) -> dict:
        """What the transport is connected to (shown by ``ndpkit info``)."""
        return {"transport": self.kind}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
