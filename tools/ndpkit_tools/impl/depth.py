"""Logic depth between registers of a ``synth_xilinx`` netlist, counted as Vivado counts
logic levels: one per LUT, MUXF7/8/9 and CARRY8.

Yosys' ``ltp`` does not serve here: it walks through the Xilinx flip-flop primitives
(``-noff`` knows only Yosys' own FF cells) and, given a selection, finds no path.  So this
walks the JSON netlist (``write_json``) itself:

- start and end points: flip-flops, shift-register LUTs, block/UltraRAM, I/O buffers,
  module ports, constants;
- one level per LUT1..6 / LUT6_2 / INV and per MUXF7..9;
- carry chains: Yosys 0.70 maps UltraScale+ carries to CARRY4 (four bits); Vivado uses
  CARRY8 (eight bits) and counts each as one level, so a CARRY4 counts half a level
  (a 48-bit adder: 12 CARRY4 = 6 levels, as its 6 CARRY8 would);
- distributed RAM (RAM32M, RAM32M16, RAM64M8, RAM64X1D, ...): its read is asynchronous,
  one level from the read address to the data out, as Vivado counts it; its write
  inputs (data, write enable) end paths as a register's do;
- DSP48E2: Yosys 0.70 does not pack registers into a DSP48E2 (it does for DSP48E1), so
  a DSP whose every input comes from a flip-flop or a constant and whose every output
  goes only to flip-flops is the register stage Vivado makes of it (AREG/BREG and
  MREG/PREG) and bounds paths; any other DSP counts as one level and is listed in
  ``unregistered_dsps`` (its real delay is several LUT levels: a design should not
  have one).
"""
from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from pathlib import Path

__all__ = ["logic_depth", "DEPTH_TARGET", "levels_text"]

DEPTH_TARGET = 8          # levels register to register: about 250 MHz on UltraScale+ (0.27 ns/level with routing)

def levels_text(levels: float) -> str:
    """Levels as a report shows them, marked when over :data:`DEPTH_TARGET`.

    >>> levels_text(8), levels_text(12)
    ('8', '12 (over)')
    """
    return f"{levels:g}" + ("" if levels <= DEPTH_TARGET else " (over)")


_LEVEL = re.compile(r"(LUT[1-6](_2)?|INV|MUXF[789])$")
_CARRY = {"CARRY4": 0.5, "CARRY8": 1.0}


_DISTRIBUTED_RAM = re.compile(r"RAM(32|64|128|256|512)(M|M16|M8|X\d+[SD])$")
_READ_ADDRESS = re.compile(r"ADDR[A-H]|A\d*|DPRA\d*")


def _is_sequential(cell_type: str) -> bool:
    return (cell_type.startswith(("FD", "SRL", "RAMB", "URAM", "IBUF", "OBUF", "BUFG", "FIFO"))
            or (cell_type.startswith("RAM") and not _DISTRIBUTED_RAM.match(cell_type))
            or cell_type in ("GND", "VCC"))


def logic_depth(netlist: Path | str | dict, top: str = "top") -> dict:
    """``{"levels": n, "path": [cell types along the deepest path], "between": [the nets of
    the register it starts from, the register it ends at], "unregistered_dsps": k}``
    for the module ``top`` of a Yosys JSON netlist (a path, its text or the parsed dict)."""
    if isinstance(netlist, dict):
        design = netlist
    else:
        text = Path(netlist).read_text() if not str(netlist).lstrip().startswith("{") else str(netlist)
        design = json.loads(text)
    module = design["modules"][top]
    cells = module["cells"]

    driver = {}                                  # bit -> (cell name, output port)
    readers = defaultdict(list)                  # bit -> cell names reading it
    for name, cell in cells.items():
        directions = cell.get("port_directions", {})
        for port, bits in cell["connections"].items():
            for bit in bits:
                if isinstance(bit, str):         # "0" / "1" / "x": constants
                    continue
                if directions.get(port) == "output":
                    driver[bit] = name
                else:
                    readers[bit].append(name)

    def inputs(cell):
        """The input bits a path runs through: a distributed RAM's read address only."""
        directions = cell.get("port_directions", {})
        ram = _DISTRIBUTED_RAM.match(cell["type"])
        return [b for p, bits in cell["connections"].items() if directions.get(p) != "output"
                and (not ram or _READ_ADDRESS.fullmatch(p)) for b in bits if not isinstance(b, str)]

    def outputs(cell):
        directions = cell.get("port_directions", {})
        return [b for p, bits in cell["connections"].items() if directions.get(p) == "output"
                for b in bits if not isinstance(b, str)]

    def boundary_dsp(name):
        cell = cells[name]
        from_regs = all(b not in driver or _is_sequential(cells[driver[b]]["type"]) for b in inputs(cell))
        to_regs = all(_is_sequential(cells[r]["type"]) for b in outputs(cell) for r in readers[b])
        return from_regs and to_regs

    weight, is_boundary = {}, {}
    unregistered = 0
    for name, cell in cells.items():
        kind = cell["type"]
        if _LEVEL.match(kind) or _DISTRIBUTED_RAM.match(kind):
            weight[name] = 1.0
        elif kind in _CARRY:
            weight[name] = _CARRY[kind]
        elif kind.startswith("DSP48"):
            if boundary_dsp(name):
                is_boundary[name] = True
            else:
                weight[name] = 1.0
                unregistered += 1
        else:
            is_boundary[name] = True

    depth, via = {}, {}                          # combinational cell -> (depth at its output, predecessor)

    def arrival(name):
        # iterative DFS: netlists of whole engines are deep enough to overflow recursion
        stack = [name]
        while stack:
            current = stack[-1]
            if current in depth:
                stack.pop()
                continue
            pending = [driver[b] for b in inputs(cells[current])
                       if b in driver and driver[b] not in is_boundary and driver[b] not in depth]
            if pending:
                stack.extend(pending)
                continue
            best, best_from = 0.0, None
            for b in inputs(cells[current]):
                source = driver.get(b)
                if source is not None and source not in is_boundary and depth[source] > best:
                    best, best_from = depth[source], source
            depth[current] = best + weight[current]
            via[current] = best_from
            stack.pop()
        return depth[name]

    deepest, end = 0.0, None
    for name in weight:
        if arrival(name) > deepest:
            deepest, end = depth[name], name
    chain = []
    while end is not None:
        chain.append(end)
        end = via[end]
    chain.reverse()
    return {"levels": math.ceil(deepest), "path": [cells[c]["type"] for c in chain],
            "between": _endpoints(module, cells, chain, driver, readers, is_boundary, inputs, outputs),
            "unregistered_dsps": unregistered}


def _endpoints(module, cells, chain, driver, readers, is_boundary, inputs, outputs) -> list[str]:
    """The registers (or ports) a path starts from and ends at, by the nets they drive:
    the names Amaranth gave the signals, so a deep path can be found in the source."""
    if not chain:
        return []
    names = {}
    for net, info in sorted(module.get("netnames", {}).items(), key=lambda kv: kv[1].get("hide_name", 0)):
        for bit in info["bits"]:
            if not isinstance(bit, str):
                names.setdefault(bit, net)
    start = next((names[b] for b in inputs(cells[chain[0]])
                  if b in names and (b not in driver or driver[b] in is_boundary)), "?")
    ends = [r for b in outputs(cells[chain[-1]]) for r in readers[b]
            if r in is_boundary or _DISTRIBUTED_RAM.match(cells[r]["type"])]
    finish = next((names[b] for r in ends for b in outputs(cells[r]) if b in names), "?")
    return [start, finish]
