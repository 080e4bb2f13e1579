"""One driver module per engine; ``CLIENTS`` maps engine names to their client class."""
from .adam import AdamClient, DecompClient
from .dma_copy import DmaCopyClient

CLIENTS = {"dma_copy": DmaCopyClient, "adam": AdamClient, "decomp": DecompClient}

__all__ = ["CLIENTS", "DmaCopyClient", "AdamClient", "DecompClient"]
