"""Every top level the project generates, with representative parameters.

`make lint` lints each of them; a new engine or shell adds its tops here.
"""
from __future__ import annotations

from typing import Callable

__all__ = ["TOPS"]


def _reader():
    from .bus.dma import BurstReader
    return BurstReader(data_width=512, max_burst_bytes=4096, max_outstanding=8)


def _writer():
    from .bus.dma import BurstWriter
    return BurstWriter(data_width=512, max_burst_bytes=4096, max_outstanding=8)


def _interconnect():
    from .bus.interconnect import AxiInterconnect
    return AxiInterconnect(num_masters=3, data_width=512, id_width=4)


def _decoder():
    from .bus.axil_decoder import AxiLiteDecoder
    return AxiLiteDecoder(addr_width=16, regions=[(0x0000, 0x1000), (0x4000, 0x4000)])


def _csr():
    from ndpkit.regs.blocks import COPY_DEMO
    from .shell.csr import CSRBlock
    return CSRBlock(COPY_DEMO)


def _memory():
    from .mem.memory_model import AxiMemoryModel
    return AxiMemoryModel(size=1 << 16, data_width=512, stall_per_256=16, bytes_per_cycle=48)


def _copy_demo():
    from .demo import CopyDemo
    return CopyDemo(mem_size=1 << 16)


def _fp_units():
    """Every floating-point unit with two lanes (four for the trees)."""
    import importlib
    tops = {}
    for name, cls, kwargs, lanes in [
        ("fp_add", "add:FpAdd", {}, 2), ("fp_mul", "mul:FpMul", {}, 2), ("fp_fma", "fma:FpFma", {}, 2),
        ("fp_div", "div:FpDiv", {}, 2), ("fp_sqrt", "sqrt:FpSqrt", {}, 2), ("fp_exp", "exp:FpExp", {}, 2),
        ("fp_minmax", "minmax:FpMinMax", {}, 2), ("fp_compare", "minmax:FpCompare", {}, 2),
        ("fp_fp16_to_fp32", "convert:Fp16ToFp32", {}, 2), ("fp_fp32_to_bf16", "convert:Fp32ToBf16", {}, 2),
        ("fp_int32_to_fp32", "convert:Int32ToFp32", {}, 2), ("fp_fp32_to_int32", "convert:Fp32ToInt32", {}, 2),
        ("fp_reduce_sum", "reduce:FpReduce", {"op": "sum"}, 4), ("fp_dot", "reduce:FpDotProduct", {}, 4),
    ]:
        module, attr = cls.split(":")
        tops[name] = (lambda module=module, attr=attr, kwargs=kwargs, lanes=lanes:
                      getattr(importlib.import_module(f"ndpkit_hw.arith.{module}"), attr)(lanes=lanes, **kwargs))
    return tops


TOPS: dict[str, Callable] = {
    "burst_reader": _reader,
    "burst_writer": _writer,
    "interconnect": _interconnect,
    "axil_decoder": _decoder,
    "csr_copy_demo": _csr,
    "memory_model": _memory,
    "copy_demo": _copy_demo,
    **_fp_units(),
}
