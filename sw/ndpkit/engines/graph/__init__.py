"""The graph engine's host side: golden model (``golden``), driver client (``client``) and integrations (docs/engines/graph.md)."""
