"""`make bitstream BOARD=<name>`: build the device for a board.

It sits above both packages it drives (``ndpkit_tools.boards`` and ``ndpkit_tools.impl``,
which imports ``boards``, never the other way).
ECP5: a real bitstream with the yowasp tools (tools/ndpkit_tools/impl/ecp5_build.py); exit 1
if it misses its timing constraint.  Xilinx boards: generate the Vivado project (tools/ndpkit_tools/boards/vivado.py), check it with
the Tcl stubs, and run Vivado if it is on PATH; otherwise stop after generating,
say so, and exit with status 3.  Every check runs before any long step; a bad board
name or parameter exits with status 2 and a message naming it.

    python -m ndpkit_tools.bitstream alveo_u280 [--engines dma_copy,adam] [--memory-ports 4] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

EXIT_NO_VIVADO = 3


def main(argv=None) -> int:
    from ndpkit_tools.boards import BoardError, board_names, device_options, load_board
    from ndpkit_tools.paths import build_root
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("board", help=f"one of: {', '.join(board_names())}")
    ap.add_argument("--engines", help="comma list (default: the board's)")
    ap.add_argument("--attention-lanes", type=int)
    ap.add_argument("--memory-ports", type=int)
    ap.add_argument("--data-width", type=int)
    ap.add_argument("--clock-mhz", type=int)
    ap.add_argument("--out", type=Path, help="output folder (default <build root>/boards/<board>)")
    args = ap.parse_args(argv)
    try:
        board = load_board(args.board)
        options = device_options(board, engines=args.engines, attention_lanes=args.attention_lanes,
                                 memory_ports=args.memory_ports, data_width=args.data_width,
                                 clock_mhz=args.clock_mhz)
        out = args.out or build_root() / "boards" / board.name
        if board.vendor == "xilinx":
            _print_resources(board, options)
        if board.vendor == "xilinx":
            return _xilinx(board, options, out)
        return _ecp5(board, options, out)
    except BoardError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _print_resources(board, options) -> None:
    """The configuration and its resource totals by the resource model."""
    from ndpkit_tools.boards.resources import BUDGET, RESOURCES, totals
    res = totals(board, options)
    print(f"{board.name} ({board.part}): engines {', '.join(options['engines'])}; {options['data_width']}-bit; "
          f"attention_lanes {options['attention_lanes']}; {options['memory_ports']} memory port(s); "
          f"{options['clock_mhz']} MHz")
    print(f"  {'block':<12}" + "".join(f"{r.upper():>12}" for r in RESOURCES))
    for block, used in res.items():
        print(f"  {block:<12}" + "".join(f"{used[r]:>12,.0f}" for r in RESOURCES))
    print(f"  {'of the part':<12}" + "".join(
        f"{res['total'][r] / board.resources[r]:>12.0%}" if board.resources.get(r) else f"{'-':>12}"
        for r in RESOURCES) + f"   (budget {BUDGET:.0%}; engines: impl report, shell: stated estimate)")


def _ecp5(board, options, out: Path) -> int:
    from ndpkit_tools.impl.ecp5_build import build
    print(f"{board.name}: synthesis, place and route, pack (yowasp) in {out} ...", flush=True)
    r = build(board, options, out)
    print(f"  device: {', '.join(options['engines'])}; {options['data_width']}-bit; UART card, "
          f"{board.memory['size']} block RAM")
    print(f"  timing: {r['sync_fmax_mhz']} MHz achieved for the {r['constraint_mhz']:.0f} MHz constraint -> "
          f"{'met' if r['meets_timing'] else 'NOT MET'}")
    print("  used: " + ", ".join(f"{k} {v}/{r['available'][k]}" for k, v in r["used"].items()))
    print(f"bitstream: {r['bitstream']}")
    return 0 if r["meets_timing"] else 1


def _xilinx(board, options, out: Path) -> int:
    from ndpkit_tools.boards.tclcheck import check_project
    from ndpkit_tools.boards.vivado import generate, local_settings, vivado
    local_settings(board)                       # a board whose pinout is not public: fail now
    print(f"{board.name}: generating the Vivado project in {out} ...", flush=True)
    plan = generate(board, options, out)
    summary = check_project(out)
    print(f"  device: {', '.join(options['engines'])}; {options['data_width']}-bit; "
          f"{len(plan['memory_ports'])} memory port(s), one region each:")
    for k, region in enumerate(plan["regions"]):
        channels = plan["hbm_pseudo_channels"][k] if "hbm_pseudo_channels" in plan else None
        print(f"    {region['port']:<12} [{region['base']:#011x}, +{region['size']:#x})"
              + (f" HBM pseudo-channel(s) {', '.join(map(str, channels))}" if channels else "")
              + f": {', '.join(region['instances'])}")
    if "hbm_pseudo_channels" in plan:
        used = sum(len(c) for c in plan["hbm_pseudo_channels"])
        total = plan["memory"]["pseudo_channels"]
        print(f"  card memory: {plan['memory']['card_bytes'] >> 20} MiB on {used} of the {total} pseudo-channels"
              + (f" (channels {used}-{total - 1} unused: no instance to sit next to them)" if used < total else ""))
    print(f"  Tcl check: {len(summary['cells'])} cells, {summary['nets']} nets, every device interface "
          f"connected, clocks as stated, each memory port mapped to exactly its region"
          f"{' (its pseudo-channels)' if 'hbm_pseudo_channels' in plan else ''}, "
          f"XDC ports all exist ({len(summary['constrained_ports'])} constrained)")
    tool = vivado()
    if tool is None:
        print(f"Vivado is not on PATH: the project is generated and checked, not built.  To build it:\n"
              f"  cd {out} && vivado -mode batch -source project.tcl && vivado -mode batch -source build.tcl")
        return EXIT_NO_VIVADO
    for script in ("project.tcl", "build.tcl"):
        subprocess.run([tool, "-mode", "batch", "-source", script], cwd=out, check=True)
    print(f"bitstream: {out / f'ndpkit_{board.name}.bit'}; flash image: {out / f'ndpkit_{board.name}.mcs'}")
    (out / "result.json").write_text(json.dumps({"board": board.name, "built": True}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
