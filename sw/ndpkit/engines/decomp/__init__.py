"""The decomp engine: golden model and client (docs/engines/decomp.md)."""
