"""What the registry knows of one engine: :class:`EngineSpec`.

An engine is found from its name in five mirrored places (``docs/architecture.md``):
its specification ``ndpkit_spec.engines.<name>`` (this entry, its register block and
constants), its gateware ``ndpkit_hw.engines.<name>``, its golden model and host client
``ndpkit.engines.<name>``, its benches ``tb/engines/<name>/`` and its document
``docs/engines/<name>.md``.  Every consumer (the device top level, the model card, the
driver, the register document, FuseSoC, the lint and implementation tools, the board
builds) reads the entry; none keeps a list of engine names of its own.

References into the other packages are strings (``"module:attribute"``) so that this
package imports none of them.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType

from ndpkit_spec.regs import Access, RegisterBlock
from ndpkit_spec.shell import IRQ_LINES

__all__ = ["EngineSpec", "resolve"]


def resolve(reference: str):
    """The object a ``"package.module:attribute"`` (or ``"package.module"``) reference names."""
    module, _, attribute = reference.partition(":")
    obj = importlib.import_module(module)
    return getattr(obj, attribute) if attribute else obj


@dataclass(frozen=True)
class EngineSpec:
    """One engine's registry entry.

    >>> from ndpkit_spec.registry import REGISTRY
    >>> spec = REGISTRY["dma_copy"]
    >>> spec.kind, spec.block.name, spec.gateware
    (1, 'dma_copy', 'ndpkit_hw.engines.dma_copy:DmaCopy')
    """
    #: the engine's name: its folder in every tree and its attribute on a ``Device``
    name: str
    #: BAR0 block index (register block at ``kind * 0x1000``), interrupt line and bit of ``engines``
    kind: int
    #: the register block (the shared command protocol, then the engine's arguments)
    block: RegisterBlock
    #: one line: what the engine does
    summary: str
    #: the gateware class, ``"ndpkit_hw.engines.<name>:<Class>"``; constructed with
    #: ``addr_width``, ``data_width``, ``max_burst_bytes``, ``max_outstanding`` and ``params``
    gateware: str
    #: the golden module: ``check(cmd, *, word_bytes, window_base, window_size)`` and
    #: ``execute(memory, cmd, *, base, word_bytes, window_base, window_size)``
    golden: str
    #: the driver's client class, ``"ndpkit.engines.<name>.client:<Class>"``
    client: str
    #: commands the engine takes before it completes the first (the model card's queue)
    max_in_flight: int = 1
    #: the narrowest memory bus (bits) the gateware builds for
    min_data_width: int = 32
    #: device-level parameters passed to the gateware: ``{device keyword: engine keyword}``
    device_params: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    #: named build configurations (implementation report, FuseSoC): ``{name: constructor keywords}``;
    #: ``"default"`` is the simulated cards' configuration
    configs: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    #: how a configuration reads in a report: a format string over its keywords and
    #: ``fp32_lanes`` / ``fp16_lanes`` (the bus word's elements), or a function of the
    #: keywords for what a format string cannot say
    config_label: str | Callable[[dict], str] = "{data_width}-bit"
    #: the default build's read-only argument registers (build constants the driver reads,
    #: the graph engine's ``window_capacity``): ``{register: value}``; the model card reports
    #: these, the gateware its own (``core.constants``)
    constants: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self):
        if self.block.name != self.name:
            raise ValueError(f"engine {self.name!r}: its register block is named {self.block.name!r}")
        if not 1 <= self.kind < IRQ_LINES:
            raise ValueError(f"engine {self.name!r}: kind {self.kind} outside 1..{IRQ_LINES - 1} (one interrupt "
                             f"line each)")
        object.__setattr__(self, "device_params", MappingProxyType(dict(self.device_params)))
        object.__setattr__(self, "constants", MappingProxyType(dict(self.constants)))
        for name in self.constants:
            if self.block.register(name).fields[0].access is not Access.RO:
                raise ValueError(f"engine {self.name!r}: constant {name!r} is not a read-only register")
        object.__setattr__(self, "configs", MappingProxyType({k: MappingProxyType(dict(v))
                                                              for k, v in dict(self.configs).items()}))
        if "default" not in self.configs:
            raise ValueError(f"engine {self.name!r}: no 'default' configuration")

    def describe(self, config: str = "default") -> str:
        """Configuration ``config`` in words (its ``config_label``).

        >>> from ndpkit_spec.registry import REGISTRY
        >>> REGISTRY["attention"].describe("max"), REGISTRY["adam"].describe()
        ('32 MAC lanes', '128-bit, 1 lane')
        """
        params = dict(self.configs[config])
        if callable(self.config_label):
            return self.config_label(params)
        width = params.get("data_width", 512)
        return self.config_label.format(fp32_lanes=width // 32, fp16_lanes=width // 16, **params)

    @property
    def doc_path(self) -> str:
        """The engine's document, relative to the repository root."""
        return f"docs/engines/{self.name}.md"

    def gateware_class(self):
        """The gateware class (imports ``ndpkit_hw``)."""
        return resolve(self.gateware)

    def golden_module(self):
        """The golden module (imports ``ndpkit`` and NumPy)."""
        return resolve(self.golden)

    def client_class(self):
        """The driver's client class (imports ``ndpkit``)."""
        return resolve(self.client)
