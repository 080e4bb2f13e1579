"""Where the tools read and write, with no path derived from where a module sits.

- :func:`build_root`: build products (Verilator builds, converted Verilog, lint and
  implementation runs, benchmark JSON): ``$NDPKIT_BUILD_DIR``, else the user's cache
  (``$XDG_CACHE_HOME/ndpkit`` or ``~/.cache/ndpkit``).  The Makefile sets it to the
  checkout's ``build/``.
- :func:`source_root`: the ndpkit checkout, for the tools that rewrite its documents
  (register document, implementation and benchmark reports): ``$NDPKIT_SOURCE_DIR``, else
  the current directory or a parent of it holding ndpkit's ``pyproject.toml``.
- :func:`package_file`: a data file shipped inside a package (works installed).
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

__all__ = ["build_root", "source_root", "package_file", "NotACheckout"]


class NotACheckout(RuntimeError):
    """A tool that writes the project's documents ran outside an ndpkit checkout."""


def build_root() -> Path:
    env = os.environ.get("NDPKIT_BUILD_DIR")
    if env:
        return Path(env).resolve()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "ndpkit"


def _is_checkout(path: Path) -> bool:
    project = path / "pyproject.toml"
    return project.is_file() and 'name = "ndpkit"' in project.read_text() and (path / "docs").is_dir()


def source_root() -> Path:
    env = os.environ.get("NDPKIT_SOURCE_DIR")
    if env:
        path = Path(env).resolve()
        if not _is_checkout(path):
            raise NotACheckout(f"NDPKIT_SOURCE_DIR={env} is not an ndpkit checkout (no pyproject.toml naming ndpkit)")
        return path
    here = Path.cwd().resolve()
    for path in (here, *here.parents):
        if _is_checkout(path):
            return path
    raise NotACheckout("this tool writes the project's documents: run it inside an ndpkit checkout "
                       "(or set NDPKIT_SOURCE_DIR)")


def package_file(package: str, *parts: str) -> Path:
    """``parts`` inside ``package``'s folder, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(package)
    return Path(next(iter(spec.submodule_search_locations)), *parts)
