"""One driver module per engine; ``CLIENTS`` maps engine names to their client class."""
from .adam import AdamClient
from .dma_copy import DmaCopyClient

CLIENTS = {"dma_copy": DmaCopyClient, "adam": AdamClient}

__all__ = ["CLIENTS", "DmaCopyClient", "AdamClient"]
