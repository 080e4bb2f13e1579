"""Decode attention engine (see docs/attention.md)."""
