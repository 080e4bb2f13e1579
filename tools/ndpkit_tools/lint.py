"""`make lint`: ``verilator --lint-only -Wall`` on every generated top (ndpkit_tools.tops).

Waivers live in tools/ndpkit_tools/sim/verilator_waivers.vlt, each with its reason; any other warning
fails the run and is printed.
"""
from __future__ import annotations


def lint_dir():
    """Where lint runs go."""
    return build_root() / "lint"


import argparse
import re
import sys
from concurrent.futures import ThreadPoolExecutor

from ndpkit_tools.sim.runner import WAIVER_FILE, Design, verilog_for, verilog_library

from ndpkit_tools.paths import build_root
from ndpkit_tools.sim.verilator import run_verilator

_WARNING = re.compile(r"^%(Warning|Error)(-[A-Z0-9_]+)?:")


def lint_top(name: str, factory) -> list[str]:
    source = verilog_for(Design(factory(), name), lint_dir())
    proc = run_verilator(["--lint-only", "-Wall", "--top-module", name, str(WAIVER_FILE), *map(str, verilog_library(source.read_text())), str(source)],
                         capture_output=True, text=True)
    lines = (proc.stdout + proc.stderr).splitlines()
    problems = [line for line in lines if _WARNING.match(line)]
    if proc.returncode != 0 and not problems:
        problems = lines[-20:] or [f"verilator exited with {proc.returncode}"]
    return problems


def main(argv=None) -> int:
    from ndpkit_tools.tops import TOPS
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("tops", nargs="*", help="names from ndpkit_tools.tops (default: all)")
    args = ap.parse_args(argv)
    names = args.tops or list(TOPS)
    unknown = [n for n in names if n not in TOPS]
    if unknown:
        ap.error(f"unknown tops {unknown}; known: {', '.join(TOPS)}")
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(names, pool.map(lambda n: lint_top(n, TOPS[n]), names)))
    failed = 0
    for name, problems in results.items():
        print(f"{'FAIL' if problems else 'ok  '} {name}" + (f" ({len(problems)} warnings)" if problems else ""))
        for line in problems[:30]:
            print("     " + line)
        failed += bool(problems)
    print(f"lint: {len(names) - failed} clean, {failed} with new warnings (waivers: {WAIVER_FILE})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
