"""`make bench`: every engine benchmark, then the report (docs/bench/, README results).

Runs, one after another with a progress bar (each step's output in
build/bench/<step>.log, its table echoed when it ends):

1. ``dma``: burst read/write engine efficiency vs memory latency and burst size
2. ``copy``: the dma_copy engine and host DMA through the driver on the simulated card
3. ``adam``: the Adam updater, dense and decompressing, vs PyTorch AdamW on this CPU
4. ``attention``: decode attention vs context and group size, vs PyTorch SDPA
5. ``sg``: the scatter-gather unit, row gathers vs line reads at several densities
6. ``graph``: the graph engine in Piccolo and baseline modes on Kronecker, uniform and real graphs
7. ``scaling``: N = 1, 2, 4, 8 attention and Adam instances at once, each on its own memory region;
   ``graph_scaling@hbm2_pc``: one graph split by rows over N = 1, 2, 4, 8 graph instances (on the
   HBM preset only: eight 512-bit graph engines simulate slowly)
8. ``<bench>@<preset>``: the benchmarks again on their boards' DRAM presets (:data:`BOARD_PRESETS`)
9. ``sim_speed``: ``tb.mem.sim_speed``, the simulated card's speed on each memory
10. ``report``: ``ndpkit_tools.bench.report`` (Markdown, plots, JSON, README section)
11. ``presets``: ``tb.mem.preset_report`` (docs/bench/memory_presets.md, the runs in docs/bench/presets/)

``--quick`` (``make bench QUICK=1``): smaller problems and the 128-bit engines, a few
minutes once the Verilator builds are cached (the first run builds them).
``--steps adam,adam@ddr4_2400,report`` runs a subset (the report uses whatever JSON is present).
"""
from __future__ import annotations


def logs_dir():
    """Where each step's log goes."""
    return build_root() / "bench"


import argparse
import os
import subprocess
import sys
import time

from ndpkit_tools.paths import build_root, source_root

TAIL_LINES = 45


def engine_benches() -> dict[str, str]:
    """Engine name -> its benchmark module (``tb/engines/<name>/<name>_bench.py``), for
    every engine of the registry that has one."""
    from ndpkit_spec.registry import REGISTRY
    root = source_root()
    return {name: f"tb.engines.{name}.{name}_bench" for name in REGISTRY
            if (root / "tb" / "engines" / name / f"{name}_bench.py").exists()}


#: the DRAM presets each benchmark also runs on: its boards' memories (attention, sg and
#: graph on the HBM cards, Adam on the U280's HBM and the SmartSSD's DDR4, the copy and
#: the instance scaling on the U55C's pseudo-channels)
BOARD_PRESETS = {"dma_copy": ("hbm2_pc",), "adam": ("hbm2_pc", "ddr4_2400"), "attention": ("hbm2_pc",),
                 "sg": ("hbm2_pc",), "graph": ("hbm2_pc",), "scaling": ("hbm2_pc",), "graph_scaling": ("hbm2_pc",)}
#: benchmarks that run on their presets only (not on the ideal memory)
PRESETS_ONLY = {"graph_scaling"}


def steps(quick: bool) -> dict[str, tuple[list[str], dict]]:
    """Step name -> (command, extra environment); ``<bench>@<preset>`` runs a benchmark on
    a DRAM preset (``MEMORY=<preset>``)."""
    py = sys.executable
    plain = {
        "dma": [py, "-m", "tb.bus.dma_perf_report", "--jobs", "2"] + (["--quick"] if quick else []),
        **{name: [py, "-m", module] for name, module in engine_benches().items()},
        "scaling": [py, "-m", "tb.device.scaling_bench"],
        "graph_scaling": [py, "-m", "tb.engines.graph.graph_scaling"],
    }
    todo = {}
    for name, cmd in plain.items():
        if name not in PRESETS_ONLY:
            todo[name] = (cmd, {})
        for memory in BOARD_PRESETS.get(name, ()):
            todo[f"{name}@{memory}"] = (cmd, {"MEMORY": memory})
    todo["sim_speed"] = ([py, "-m", "tb.mem.sim_speed"], {})            # the simulated card on each memory
    todo["report"] = ([py, "-m", "ndpkit_tools.bench.report"], {})
    todo["presets"] = ([py, "-m", "tb.mem.preset_report"], {})        # reads the report's bench.json
    return todo


def main(argv=None) -> int:
    from tqdm import tqdm
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--steps", default="", help="comma-separated subset of: dma, the engines with a benchmark, scaling, report")
    args = ap.parse_args(argv)
    todo = steps(args.quick)
    if args.steps:
        chosen = args.steps.split(",")
        unknown = [s for s in chosen if s not in todo]
        if unknown:
            ap.error(f"--steps: unknown {', '.join(unknown)} (known: {', '.join(todo)})")
        todo = {k: v for k, v in todo.items() if k in chosen}
    logs_dir().mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, QUICK="1" if args.quick else "0")
    failed = []
    with tqdm(total=len(todo), unit="step", desc="make bench", dynamic_ncols=True) as bar:
        for name, (cmd, extra) in todo.items():
            bar.set_postfix_str(f"{name} (log: {logs_dir() / (name + '.log')})")
            log = logs_dir() / f"{name.replace('@', '-')}.log"
            t0 = time.monotonic()
            with open(log, "w") as f:
                code = subprocess.call(cmd, cwd=source_root(), env=env | extra, stdout=f, stderr=subprocess.STDOUT)
            tail = "\n".join(log.read_text().splitlines()[-TAIL_LINES:])     # a step's tables come last
            bar.write(f"\n== {name}: {'ok' if code == 0 else f'FAILED (exit {code})'} in "
                      f"{time.monotonic() - t0:.0f} s ==\n{tail}")
            if code:
                failed.append(name)
            bar.update()
    if failed:
        print(f"make bench: {', '.join(failed)} failed; logs in {logs_dir()}", file=sys.stderr)
        return 1
    return 0


def list_benches() -> None:
    """Print the engine benchmark modules, one a line (``make perf`` runs them)."""
    print("\n".join(engine_benches().values()))


if __name__ == "__main__":
    raise SystemExit(main())
