"""ndpkit works installed from its wheel, outside the source tree.

The wheel is built from this checkout and installed into a fresh virtual environment
(its dependencies from the package index, as a user's ``pip install`` would get them,
minus PyTorch); then, from a folder outside the checkout, every module of the four
packages is imported, a model card opens with every engine of the registry and runs a
command, and every engine's gateware elaborates.  In ``make sim`` the same environment
also builds and runs a simulated card (Verilator) from the installed package.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = "sim,graph,uart"

CHECK = textwrap.dedent("""
    import importlib, pkgutil, sys, os
    import numpy as np
    here = os.getcwd()
    for package in ("ndpkit_spec", "ndpkit_hw", "ndpkit", "ndpkit_tools"):
        root = importlib.import_module(package)
        assert "site-packages" in root.__file__, root.__file__
        for info in pkgutil.walk_packages(root.__path__, package + "."):
            if info.name.endswith((".torch", ".hf", ".vllm.backend")):
                continue    # the PyTorch / transformers / vLLM glue: the torch, llm, vllm extras
            importlib.import_module(info.name)
    from amaranth.hdl import Fragment
    from ndpkit_spec.registry import REGISTRY
    from ndpkit_hw.engines import build
    import ndpkit
    for name, spec in REGISTRY.items():
        Fragment.get(build(name, **dict(spec.configs["default"])), None)
    with ndpkit.open("model", engines=tuple(REGISTRY), mem_size=1 << 20) as dev:
        assert sorted(dev.engines) == sorted(REGISTRY)
        src = dev.upload(np.arange(4096, dtype=np.uint8))
        dst = dev.alloc(4096)
        dev.copy(dst, src)
        assert (dst.download(np.uint8) == np.arange(4096) % 256).all()
    print("installed ok", len(REGISTRY))
""")

SIM = textwrap.dedent("""
    import numpy as np, ndpkit
    with ndpkit.open("sim", data_width=128, mem_size=1 << 20) as dev:
        src = dev.upload(np.arange(8192, dtype=np.uint8))
        dst = dev.alloc(8192)
        done = dev.copy(dst, src)
        assert done.cycles > 0 and (dst.download(np.uint8) == np.arange(8192) % 256).all()
    print("sim ok")
""")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(python of a fresh venv holding the installed wheel, a folder outside the checkout)."""
    work = tmp_path_factory.mktemp("wheel")
    dist = work / "dist"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(dist), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout + build.stderr
    wheel = next(dist.glob("ndpkit-*.whl"))
    env_dir = work / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", f"{wheel}[{EXTRAS}]"],
                             capture_output=True, text=True, timeout=1200)
    assert install.returncode == 0, install.stdout + install.stderr
    outside = work / "elsewhere"
    outside.mkdir()
    return python, outside


def _run(python, cwd, code, env=None, timeout=600):
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NDPKIT_SOURCE_DIR")}
    clean.update(env or {})
    return subprocess.run([str(python), "-c", code], cwd=cwd, env=clean, capture_output=True, text=True,
                          timeout=timeout)


def test_wheel_holds_every_package_and_its_data(installed):
    python, outside = installed
    run = _run(python, outside, textwrap.dedent("""
        from ndpkit_tools.paths import package_file
        from ndpkit_tools.boards import board_names
        assert package_file("ndpkit_hw", "verilog", "ndpkit_sim_ram.v").is_file()
        assert package_file("ndpkit_tools", "sim", "verilator_waivers.vlt").is_file()
        print(board_names())
    """))
    assert run.returncode == 0, run.stderr
    assert "alveo_u280" in run.stdout and "ecp5_5g" in run.stdout


def test_installed_package_imports_opens_and_elaborates(installed, tmp_path):
    python, outside = installed
    run = _run(python, outside, CHECK, env={"NDPKIT_BUILD_DIR": str(tmp_path / "build")})
    assert run.returncode == 0, run.stdout + run.stderr
    assert "installed ok" in run.stdout


@pytest.mark.long
def test_installed_package_runs_a_sim_card(installed, tmp_path):
    python, outside = installed
    run = _run(python, outside, SIM, env={"NDPKIT_BUILD_DIR": str(tmp_path / "build")}, timeout=3600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "sim ok" in run.stdout
    assert (tmp_path / "build" / "sim").is_dir()          # built in the build root, not in site-packages
