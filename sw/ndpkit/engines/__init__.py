"""One driver module per engine; ``CLIENTS`` maps engine names to their client class."""
from .dma_copy import DmaCopyClient

CLIENTS = {"dma_copy": DmaCopyClient}

__all__ = ["CLIENTS", "DmaCopyClient"]
