"""The engines behind the shell: ``ndpkit_hw.engines.<name>`` is engine ``<name>`` of
:data:`ndpkit_spec.registry.REGISTRY` (its entry names the class); :func:`build` makes
one from its name."""
from __future__ import annotations

__all__ = ["build"]


def build(name: str, **params):
    """Engine ``name``'s gateware with its constructor keywords (``addr_width``,
    ``data_width``, ``max_burst_bytes``, ``max_outstanding`` and the engine's own)."""
    from ndpkit_spec.registry import REGISTRY
    if name not in REGISTRY:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(REGISTRY)}")
    return REGISTRY[name].gateware_class()(**params)     # (each engine checks its own parameters)
