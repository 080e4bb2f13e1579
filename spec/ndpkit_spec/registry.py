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

__all__ = ["REGISTRY", "EngineKind", "ENGINE_BLOCKS", "ALL_BLOCKS", "by_kind"]

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
