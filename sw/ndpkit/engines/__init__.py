"""One driver module per engine; ``CLIENTS`` maps engine names to their client class."""
from .adam import AdamClient, DecompClient
from .attention import AttentionClient
from .dma_copy import DmaCopyClient

CLIENTS = {"dma_copy": DmaCopyClient, "adam": AdamClient, "decomp": DecompClient, "attention": AttentionClient}

__all__ = ["CLIENTS", "DmaCopyClient", "AdamClient", "DecompClient", "AttentionClient"]
