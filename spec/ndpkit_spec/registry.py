"""Every engine, one entry each: the one list of engines in the project.

Adding an engine is its folders (``docs/architecture.md``, "Adding an engine") and one
line below.  Everything else derives from :data:`REGISTRY`:

>>> from ndpkit_spec.registry import REGISTRY, EngineKind
>>> list(REGISTRY)
['dma_copy', 'adam', 'attention', 'sg', 'graph', 'decomp']
>>> EngineKind.ATTENTION, REGISTRY["attention"].block.name
(<EngineKind.ATTENTION: 3>, 'attention')
"""
from __future__ import annotations

import enum

from ndpkit_spec.engine import EngineSpec
from ndpkit_spec.engines import adam, attention, decomp, dma_copy, graph, sg
from ndpkit_spec.shell import GLOBAL

__all__ = ["REGISTRY", "EngineKind", "ENGINE_BLOCKS", "ALL_BLOCKS", "by_kind", "instance_counts", "engines_text"]

#: engine name -> its entry, in kind order
REGISTRY: dict[str, EngineSpec] = {spec.name: spec for spec in sorted((
    dma_copy.ENGINE,
    adam.ENGINE,
    decomp.ENGINE,
    attention.ENGINE,
    sg.ENGINE,
    graph.ENGINE,
), key=lambda spec: spec.kind)}

if len({spec.kind for spec in REGISTRY.values()}) != len(REGISTRY):
    raise ValueError("two engines share a kind")

#: engine identifiers: engine ``k``'s register block sits at BAR0 offset ``k * 0x1000``,
#: its interrupt is ``usr_irq_req[k]``, and bit ``k`` of the shell's ``engines``
#: register says whether the build contains it
EngineKind = enum.IntEnum("EngineKind", {name.upper(): spec.kind for name, spec in REGISTRY.items()},
                          module=__name__)

#: engine name -> register block
ENGINE_BLOCKS = {name: spec.block for name, spec in REGISTRY.items()}
#: every register block of a device (what ``make regs`` documents)
ALL_BLOCKS = (GLOBAL, *ENGINE_BLOCKS.values())


def by_kind(kind: int) -> EngineSpec:
    """The entry of engine kind ``kind``."""
    for spec in REGISTRY.values():
        if spec.kind == kind:
            return spec
    raise KeyError(f"no engine has kind {kind}")


def instance_counts(engines) -> dict[str, int]:
    """Engine name -> instance count, in kind order, from a list of names in which
    a name may repeat or carry a count (``"attention*4"``), a comma-separated string of
    those, or such a dict.  Unknown names and counts below 1 raise ValueError.

    >>> instance_counts("attention*2,dma_copy")
    {'dma_copy': 1, 'attention': 2}
    >>> instance_counts(["adam", "adam", "dma_copy"])
    {'dma_copy': 1, 'adam': 2}
    """
    if isinstance(engines, str):
        engines = [e.strip() for e in engines.split(",") if e.strip()]
    items = engines.items() if isinstance(engines, dict) else [
        (e.partition("*")[0].strip(), e.partition("*")[2].strip() or 1) if isinstance(e, str) else (e, 1)
        for e in engines]
    counts: dict[str, int] = {}
    for name, count in items:
        if not isinstance(name, str) or name not in REGISTRY:
            raise ValueError(f"unknown engine {name!r}; known: {', '.join(REGISTRY)}")
        try:
            count = int(count)
        except (TypeError, ValueError):
            raise ValueError(f"engine {name!r}: instance count {count!r} is not an integer") from None
        if count < 1:
            raise ValueError(f"engine {name!r}: instance count {count} is below 1")
        counts[name] = counts.get(name, 0) + count
    return {name: counts[name] for name in REGISTRY if name in counts}


def engines_text(counts: dict[str, int]) -> str:
    """The comma list :func:`instance_counts` reads back (``"dma_copy,attention*2"``)."""
    return ",".join(name if n == 1 else f"{name}*{n}" for name, n in counts.items())
