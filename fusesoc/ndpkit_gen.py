"""FuseSoC generator: runs Amaranth to write the Verilog of an ndpkit top level.

FuseSoC calls ``python3 ndpkit_gen.py <gapi.yml>`` in a fresh directory; the GAPI
file names the requesting core (``vlnv``) and the ``parameters`` of its ``generate``
entry: ``top`` (``device`` or an engine of the registry) and any constructor argument of that top
(``data_width``, ``engines``, ``units``, ...).  The generator writes ``<top>.v``
(module ``ndpkit_<top>``, vendor-style flat AXI port names) and a core file listing
it, which FuseSoC then uses as if it were a dependency.  Run it under the project's
Python (``make fusesoc-lint`` puts ``.venv/bin`` first on PATH).
"""
from __future__ import annotations

import sys
from pathlib import Path

import yaml


def _device(**kw):
    from ndpkit_hw.device import Device
    return Device(**kw)


def _engine(name):
    def build(**kw):
        from ndpkit_hw.engines import build
        return build(name, **kw)
    return build


def _tops():
    from ndpkit_spec.registry import REGISTRY
    return {"device": _device, **{name: _engine(name) for name in REGISTRY}}


def generate(config: dict, out_dir: Path) -> Path:
    """Write the Verilog and the core file for one GAPI request; returns the core file."""
    from ndpkit_hw.convert import to_verilog
    params = dict(config.get("parameters") or {})
    top = params.pop("top", None)
    tops = _tops()
    if top not in tops:
        raise SystemExit(f"ndpkit generator: parameter 'top' must be one of {', '.join(tops)}, not {top!r}")
    if "engines" in params:
        params["engines"] = tuple(params["engines"])
    try:
        component = tops[top](**params)
    except TypeError as e:
        raise SystemExit(f"ndpkit generator: bad parameters for {top}: {e}") from None
    module = f"ndpkit_{top}"
    (out_dir / f"{top}.v").write_text(to_verilog(component, module))
    # the project's Verilator waivers (each with its reason) travel with the Verilog
    from ndpkit_tools.paths import package_file
    waivers = package_file("ndpkit_tools", "sim", "verilator_waivers.vlt")
    (out_dir / "ndpkit_waivers.vlt").write_text(waivers.read_text())
    vlnv = config.get("vlnv", f"ndpkit:ndpkit:{top}_gen:0")
    core = {"name": vlnv,
            "filesets": {"rtl": {"files": [f"{top}.v"], "file_type": "verilogSource"},
                         "waivers": {"files": ["ndpkit_waivers.vlt"], "file_type": "vlt"}},
            "targets": {"default": {"filesets": ["waivers", "rtl"], "toplevel": module}}}
    path = out_dir / f"{vlnv.split(':')[2]}.core"
    path.write_text("CAPI=2:\n" + yaml.safe_dump(core, sort_keys=False))
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: ndpkit_gen.py <gapi.yml> (FuseSoC runs this)")
    generate(yaml.safe_load(Path(sys.argv[1]).read_text()), Path.cwd())
