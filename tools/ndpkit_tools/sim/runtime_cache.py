"""The Verilator runtime's objects, compiled once and shared by every build.

Each Verilator build compiles, besides the design, the same runtime files: Verilator's
``verilated*.cpp``, its global classes (about 7 s of compiling a build).  With dozens
of parameter sets (``make test`` builds about fifty) that is minutes of compiling the
same sources with the same flags.  (cocotb's ``verilator.cpp`` main is not shared: it
includes the design's ``Vtop.h``.)  The runner
(:mod:`ndpkit_tools.sim.runner`) calls this module around the build's ``make``:

    python -m ndpkit_tools.sim.runtime_cache restore <build dir> <make variables...>
    python -m ndpkit_tools.sim.runtime_cache save <build dir> <make variables...>

``restore`` copies cached objects into the build folder (newer than their sources, so
``make`` keeps them); ``save`` stores what ``make`` compiled.  The cache is keyed by
the compile commands themselves (``make -n`` of those objects: compiler, flags,
defines, include and source paths), so a different Verilator, cocotb, compiler or
trace option never shares an object.  A missing or partial cache entry costs only
the compile it would have saved.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["runtime_objects", "cache_key", "restore", "save"]


def runtime_objects(build_dir: Path) -> list[str]:
    """The build's runtime object files: Verilator's global classes (``VM_GLOBAL_FAST``
    / ``VM_GLOBAL_SLOW``), which include nothing of the design."""
    text = (Path(build_dir) / "Vtop_classes.mk").read_text()
    names = []
    for var in ("VM_GLOBAL_FAST", "VM_GLOBAL_SLOW"):
        for block in re.findall(rf"^{var} \+= \\\n((?:  \S+ \\\n)*)", text, re.M):
            names += re.findall(r"^  (\S+) \\$", block, re.M)
    return [f"{name}.o" for name in dict.fromkeys(names)]


def cache_key(build_dir: Path, make_vars: list[str], objects: list[str]) -> str:
    """A hash of the commands ``make`` would run to compile ``objects``."""
    plan = subprocess.run(["make", "-n", "-B", "-f", "Vtop.mk", *make_vars, *objects], cwd=build_dir,
                          capture_output=True, text=True, check=True).stdout
    return hashlib.sha256(plan.encode()).hexdigest()[:16]


def _cache_dir(build_dir: Path, key: str) -> Path:
    return Path(build_dir).parent / "_verilator_runtime" / key


def restore(build_dir: Path, make_vars: list[str]) -> bool:
    """Copy the cached runtime objects into ``build_dir``; True when all were there."""
    build_dir = Path(build_dir)
    objects = runtime_objects(build_dir)
    cached = _cache_dir(build_dir, cache_key(build_dir, make_vars, objects))
    if not all((cached / o).exists() for o in objects):
        return False
    for o in objects:
        for f in (o, o[:-2] + ".d"):
            if (cached / f).exists():
                shutil.copyfile(cached / f, build_dir / f)
                os.utime(build_dir / f)              # newer than every source: make keeps it
    return True


def save(build_dir: Path, make_vars: list[str]) -> None:
    """Store ``build_dir``'s compiled runtime objects (atomically: parallel builds race
    harmlessly, the first complete entry stays)."""
    build_dir = Path(build_dir)
    objects = runtime_objects(build_dir)
    if not all((build_dir / o).exists() for o in objects):
        return
    cached = _cache_dir(build_dir, cache_key(build_dir, make_vars, objects))
    if cached.exists():
        return
    cached.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=cached.parent))
    for o in objects:
        for f in (o, o[:-2] + ".d"):
            if (build_dir / f).exists():
                shutil.copyfile(build_dir / f, staging / f)
    try:
        staging.rename(cached)
    except OSError:                                   # another build stored it first
        shutil.rmtree(staging, ignore_errors=True)


def main(argv: list[str]) -> int:
    action, build_dir, *make_vars = argv
    try:
        (restore if action == "restore" else save)(Path(build_dir), make_vars)
    except (OSError, subprocess.CalledProcessError) as e:   # never fail a build over its cache
        print(f"ndpkit runtime cache ({action}): {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
