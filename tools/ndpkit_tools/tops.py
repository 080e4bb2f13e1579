"""Every top level the project generates, with representative parameters.

`make lint` lints each of them; a new engine or shell adds its tops here.
"""
from __future__ import annotations

from typing import Callable

__all__ = ["TOPS"]


def _reader():
    from ndpkit_hw.bus.dma import BurstReader
    return BurstReader(data_width=512, max_burst_bytes=4096, max_outstanding=8)


def _writer():
    from ndpkit_hw.bus.dma import BurstWriter
    return BurstWriter(data_width=512, max_burst_bytes=4096, max_outstanding=8)


def _interconnect():
    from ndpkit_hw.bus.interconnect import AxiInterconnect
    return AxiInterconnect(num_masters=3, data_width=512, id_width=4)


def _decoder():
    from ndpkit_hw.bus.axil_decoder import AxiLiteDecoder
    return AxiLiteDecoder(addr_width=16, regions=[(0x0000, 0x1000), (0x4000, 0x4000)])


def _csr():
    from ndpkit_spec.shell import GLOBAL
    from ndpkit_hw.shell.csr import CSRBlock
    return CSRBlock(GLOBAL)


def _engine_frontend():
    from ndpkit_spec.registry import EngineKind
    from ndpkit_spec.engines.dma_copy import BLOCK as DMA_COPY
    from ndpkit_hw.shell.engine_frontend import EngineFrontend
    return EngineFrontend(DMA_COPY, EngineKind.DMA_COPY, queue_depth=4, max_in_flight=2)


def _dma_copy():
    from ndpkit_hw.engines.dma_copy.engine import DmaCopy
    return DmaCopy()


def _sg_engine():
    from ndpkit_hw.engines.sg.engine import SgEngine
    return SgEngine()


def _graph_engine():
    from ndpkit_hw.engines.graph.engine import GraphEngine
    return GraphEngine()


def _device():
    from ndpkit_hw.device import Device
    return Device(mem_size=1 << 30)


def _device_hbm():
    """Every engine over four memory regions of 256 MiB (HBM pseudo-channels), the host
    reaching each through the region router."""
    from ndpkit_hw.device import Device
    from ndpkit_spec.registry import REGISTRY
    return Device(mem_size=1 << 30, engines=tuple(REGISTRY), memory_ports=4)


def _memory():
    from ndpkit_hw.mem.memory_model import AxiMemoryModel
    return AxiMemoryModel(size=1 << 16, data_width=512, stall_per_256=16, bytes_per_cycle=48)


def _sim_card():
    from ndpkit_hw.sim_card import SimCard
    return SimCard(mem_size=1 << 20)


def _fp_units():
    """Every floating-point unit with two lanes (four for the reduction trees)."""
    from ndpkit_hw.arith import UNIT_CLASSES, build_unit
    return {f"fp_{name}": (lambda name=name: build_unit(name, 4 if "reduce" in cls or "Dot" in cls else 2))
            for name, (cls, _) in UNIT_CLASSES.items()}


TOPS: dict[str, Callable] = {
    "burst_reader": _reader,
    "burst_writer": _writer,
    "sg_engine": _sg_engine,
    "graph_engine": _graph_engine,
    "interconnect": _interconnect,
    "axil_decoder": _decoder,
    "csr_shell": _csr,
    "memory_model": _memory,
    "engine_frontend": _engine_frontend,
    "dma_copy": _dma_copy,
    "device": _device,
    "device_hbm": _device_hbm,
    "sim_card": _sim_card,
    **_fp_units(),
}
