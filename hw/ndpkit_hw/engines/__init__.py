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
    spec = REGISTRY[name]
    width = params.get("data_width")
    if width is not None and width < spec.min_data_width:
        raise ValueError(f"engine {name!r} needs data_width >= {spec.min_data_width}, not {width}")
    return spec.gateware_class()(**params)
