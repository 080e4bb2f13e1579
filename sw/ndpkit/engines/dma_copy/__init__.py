"""The dma_copy engine's host side: golden model (``golden``), driver client (``client``) and integrations (docs/engines/dma_copy.md)."""
