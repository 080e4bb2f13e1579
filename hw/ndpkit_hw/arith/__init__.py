"""Binary32 floating-point units (see docs/arith.md)."""
import importlib

__all__ = ["UNIT_CLASSES", "build_unit", "unit_class", "unit_reduces"]

# name -> ("module:Class", constructor options); the bench (tb/arith/fp_units.py), `make lint`
# (ndpkit_tools.tops) and `make impl` all take the units from here.
UNIT_CLASSES = {
    "add": ("add:FpAdd", {}),
    "mul": ("mul:FpMul", {}),
    "fma": ("fma:FpFma", {}),
    "div": ("div:FpDiv", {}),
    "sqrt": ("sqrt:FpSqrt", {}),
    "exp": ("exp:FpExp", {}),
    "reduce_sum": ("reduce:FpReduce", {"op": "sum"}),
    "reduce_max": ("reduce:FpReduce", {"op": "max"}),
    "dot": ("reduce:FpDotProduct", {}),
    "minmax": ("minmax:FpMinMax", {}),
    "compare": ("minmax:FpCompare", {}),
    "fp16_to_fp32": ("convert:Fp16ToFp32", {}),
    "bf16_to_fp32": ("convert:Bf16ToFp32", {}),
    "fp32_to_fp16": ("convert:Fp32ToFp16", {}),
    "fp32_to_bf16": ("convert:Fp32ToBf16", {}),
    "int32_to_fp32": ("convert:Int32ToFp32", {}),
    "fp32_to_int32": ("convert:Fp32ToInt32", {}),
}


def unit_class(name: str):
    module, attr = UNIT_CLASSES[name][0].split(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), attr)


def unit_reduces(name: str) -> bool:
    """Whether the unit reduces its lanes (one result per vector, as the reduction trees
    and the dot product), not one result per lane."""
    return bool(getattr(unit_class(name), "reduces", False))


def build_unit(name: str, lanes: int):
    return unit_class(name)(lanes=lanes, **UNIT_CLASSES[name][1])
