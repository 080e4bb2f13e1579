"""Verilog conversion with flat, vendor-style top-level port names.

Amaranth names the ports of a converted component by joining the signature path
with ``__`` (``s_axi__awaddr``).  Vivado infers AXI interfaces, and cocotbext-axi's
``from_prefix`` binds them, only when the names read ``s_axi_awaddr``; so the top
level of everything we export is converted with single underscores.
"""
from __future__ import annotations

from amaranth.back import verilog
from amaranth.hdl import _ast, _ir
from amaranth.lib import wiring

__all__ = ["flat_ports", "to_verilog"]


def flat_ports(component: wiring.Component) -> dict:
    """Map ``<member>_<submember>...`` names to (value, direction) for every port."""
    ports = {}
    for path, member, value in component.signature.flatten(component):
        if isinstance(value, _ast.ValueCastable):
            value = value.as_value()
        if isinstance(value, _ast.Const):
            continue      # e.g. the READY of an always-ready stream: not a port
        direction = _ir.PortDirection.Input if member.flow == wiring.In else _ir.PortDirection.Output
        name = "_".join(map(str, path))
        if name in ports:
            raise NameError(f"two ports flatten to the same name {name!r}")
        ports[name] = (value, direction)
    return ports


def to_verilog(component: wiring.Component, name: str, platform=None) -> str:
    """Convert ``component`` to Verilog with module name ``name`` and flat port names;
    ``platform`` reaches every ``elaborate`` (the FP units shape their products to its
    multipliers: :func:`ndpkit_hw.arith.fp_common.multiplier_shape`)."""
    return verilog.convert(component, name=name, platform=platform, ports=flat_ports(component),
                           emit_src=False, strip_internal_attrs=True)
