"""The four packages import in one direction only:

    ndpkit_spec  <-  ndpkit_hw  <-  ndpkit_tools
         ^                              |
         +-------  ndpkit  <------------+

``ndpkit_spec`` (the specification) imports none of the others and no NumPy;
``ndpkit_hw`` (gateware) imports only the specification (no NumPy, no driver);
``ndpkit`` (driver, golden models) never imports the gateware or the tools.  Each
check runs in a fresh interpreter, importing every module of the package.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent("""
    import importlib, pkgutil, sys
    package, skip = sys.argv[1], tuple(sys.argv[2].split(",")) if sys.argv[2] else ()
    root = importlib.import_module(package)
    names = [n.name for n in pkgutil.walk_packages(root.__path__, package + ".")]
    for name in names:
        if not name.startswith(skip or ("\\0",)):
            importlib.import_module(name)
    print(len(names), " ".join(sorted({m.split(".")[0] for m in sys.modules})))
""")


def _loaded(package: str, skip: str = "") -> tuple[int, set[str]]:
    run = subprocess.run([sys.executable, "-c", PROBE, package, skip], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    count, modules = run.stdout.split(maxsplit=1)
    return int(count), set(modules.split())


def test_spec_is_a_leaf():
    count, loaded = _loaded("ndpkit_spec")
    assert count >= 9
    assert not loaded & {"numpy", "amaranth", "ndpkit", "ndpkit_hw", "ndpkit_tools"}


def test_gateware_loads_neither_numpy_nor_the_driver():
    count, loaded = _loaded("ndpkit_hw")
    assert count >= 30
    assert not loaded & {"numpy", "ndpkit", "ndpkit_tools"}
    assert {"amaranth", "ndpkit_spec"} <= loaded


GLUE = "ndpkit.engines.adam.torch,ndpkit.engines.attention.torch,ndpkit.torch,ndpkit.engines.attention.hf,ndpkit.hf"


@pytest.mark.parametrize("skip", [GLUE, ""], ids=["without-torch-glue", "with-torch-glue"])
def test_driver_loads_neither_gateware_nor_tools(skip):
    """With and without the PyTorch and transformers glue (the torch and llm extras)."""
    if not skip:
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
    count, loaded = _loaded("ndpkit", skip)
    assert count >= 30
    assert not loaded & {"amaranth", "ndpkit_hw", "ndpkit_tools", "cocotb"}


def test_import_ndpkit_hw_alone_is_light():
    run = subprocess.run([sys.executable, "-c", "import sys, ndpkit_hw, ndpkit_hw.device; "
                          "print(sorted(m for m in ('numpy', 'ndpkit') if m in sys.modules))"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
