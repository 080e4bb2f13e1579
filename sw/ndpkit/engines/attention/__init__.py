"""The attention engine's host side: golden model (``golden``), driver client (``client``) and integrations (docs/engines/attention.md)."""
