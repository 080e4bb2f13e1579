"""One driver module per engine; ``CLIENTS`` maps engine names to their client class."""
from .adam import AdamClient, DecompClient
from .attention import AttentionClient
from .dma_copy import DmaCopyClient
from .graph import GraphClient
from .sg import SgClient

CLIENTS = {"dma_copy": DmaCopyClient, "adam": AdamClient, "decomp": DecompClient, "attention": AttentionClient,
           "sg": SgClient, "graph": GraphClient}

__all__ = ["CLIENTS", "DmaCopyClient", "AdamClient", "DecompClient", "AttentionClient", "SgClient", "GraphClient"]
