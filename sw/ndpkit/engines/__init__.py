"""One driver module per engine; ``CLIENTS`` maps engine names to their client class."""
from .adam import AdamClient, DecompClient
from .attention import AttentionClient
from .dma_copy import DmaCopyClient
from .sg import SgClient

CLIENTS = {"dma_copy": DmaCopyClient, "adam": AdamClient, "decomp": DecompClient, "attention": AttentionClient,
           "sg": SgClient}

__all__ = ["CLIENTS", "DmaCopyClient", "AdamClient", "DecompClient", "AttentionClient", "SgClient"]
