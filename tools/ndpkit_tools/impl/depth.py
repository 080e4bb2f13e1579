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
- DSP48E2: its delay in levels of the depth model (:data:`DSP_LEVELS`, from AMD DS923's
  DSP48 figures below).  Yosys 0.70 packs no register into a DSP48E2 (it does for
  DSP48E1), so the registers a DSP would have are read off its neighbours, as Vivado
  packs them when it synthesises the design: an input port fed only by flip-flops (or
  constants) has its AREG/BREG/CREG/..., outputs read only by flip-flops have the PREG.
  A shift register (SRL16E/SRLC32E) counts as flip-flops there: Yosys made it of a chain
  of the design's registers, and Vivado takes the chain's register next to the DSP into
  the DSP.  A block RAM's or UltraRAM's read port does not: no DSP register takes it.  A
  register the cell's own parameters enable (AREG, BREG, CREG, DREG, MREG, PREG, ...)
  counts as well.  Then a DSP is

  * **register-bounded** (every input port registered, the outputs too): a stage of its
    own, on no fabric path;
  * **inputs unregistered** (outputs registered): a path ends inside it, at the PREG,
    after the delay of the port it enters by (A/B: multiplier and ALU);
  * **outputs unregistered** (inputs registered): a path starts inside it, at the input
    registers, with the port's delay to the P output, and runs on into the fabric;
  * **combinational** (neither): the port's delay on a fabric path.

  A path from one of the DSP's own registers to another (AREG/BREG -> PREG without MREG,
  through the pre-adder, MREG -> PREG) is no fabric path: it supports the clock DS923
  gives for it, ``dsp_clock_mhz`` the slowest; when that is below the clock of the
  fabric's deepest path, the DSP's path is the result (``limit == "dsp"``, its levels the
  fabric path that supports the same clock, :func:`dsp_clock_levels`).  A DSP feeding
  another (the cascade PCOUT -> PCIN, or P routed into the next DSP's A, B or C) is not
  output-registered and the next not input-registered: the path runs on through the
  chain, each DSP adding the delay of the port it is entered by (PCIN, C: the ALU's; A,
  B: the multiplier's).  ``unregistered_dsps`` counts the DSPs that are not
  register-bounded, ``dsps`` each kind, ``dsp_path_levels`` is the deepest path through
  or into a DSP.

DSP48E2 figures: AMD DS923, *Virtex UltraScale+ FPGA Data Sheet: DC and AC Switching
Characteristics* (v1.20, 2024-08-09), table "DSP48 Slice Switching Characteristics",
-2 speed grade at VCCINT = 0.85 V (the U55C's and U280's -2L parts run at the -2 figures
there): FMAX with every register 775 MHz, FMAX_MULT_NOMREG (two-register multiply
without MREG) 544 MHz, FMAX_PREADD_NOADREG (without ADREG) 565 MHz, FMAX_NOPIPELINEREG
(without MREG and ADREG) 410 MHz.  That revision publishes no combinational pin-to-pin
delays (no TDSPDO_* figures), only these register-to-register maxima, so each
combinational delay here is an estimate, conservative: the *whole* period of the
register-to-register path it is part of (the DSP's own clock-to-out and setup, inside
that period, stand for the routing into and out of the DSP column, and the depth
model's :data:`~ndpkit_tools.depth_clock.FIXED_NS` counts the path's registers again):

- multiplier ports (A, B, ACIN, BCIN, INMODE): A/B -> multiplier -> ALU -> P, the
  period at 544 MHz, 1.838 ns: 7 levels;
- with the pre-adder in use (USE_DPORT, AMULTSEL = "AD"; D and the multiplier ports):
  A/D -> pre-adder -> multiplier -> ALU -> P, at 410 MHz, 2.439 ns: 10 levels;
- ALU ports (C, PCIN, CARRYIN, CARRYCASCIN, MULTSIGNIN, OPMODE, ALUMODE, CARRYINSEL;
  A and B when the multiplier is not used), and MREG -> P: at most the slowest stage of
  the fully pipelined slice, at 775 MHz, 1.290 ns: 5 levels;
- with the MREG used, A/B -> multiplier -> MREG: 1.290 ns, 5 levels (1.770 ns at 565 MHz
  with the pre-adder and no ADREG: 7 levels).

(levels: ns / :data:`~ndpkit_tools.depth_clock.NS_PER_LEVEL`, rounded up.)  A cascade
through ACOUT -> ACIN is counted as if ACOUT came after the multiplier (it comes
straight from A): conservative too.  A cell parameter the netlist omits counts as 0 (no
register); Yosys writes every one.
"""
from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ndpkit_tools.depth_clock import FIXED_NS, NS_PER_LEVEL, depth_clock_mhz

__all__ = ["logic_depth", "DEPTH_TARGET", "levels_text", "DSP_FMAX_MHZ", "DSP_NS", "DSP_LEVELS",
           "dsp_clock_levels"]

DEPTH_TARGET = 8          # levels register to register: about 250 MHz on UltraScale+ (0.27 ns/level with routing)

#: DS923 v1.20, "DSP48 Slice Switching Characteristics", -2 at VCCINT = 0.85 V (MHz)
DSP_FMAX_MHZ = {
    "all_registers": 775,        # FMAX: AREG/BREG, MREG and PREG used
    "mult_no_mreg": 544,         # FMAX_MULT_NOMREG: two-register multiply without MREG
    "preadd_no_adreg": 565,      # FMAX_PREADD_NOADREG: pre-adder without ADREG
    "no_pipeline": 410,          # FMAX_NOPIPELINEREG: without the pipeline registers MREG and ADREG
}
#: the delay (ns) of each DSP path class: the period of the register-to-register path it
#: belongs to (conservative: the module docstring)
DSP_NS = {
    "mult": 1000 / DSP_FMAX_MHZ["mult_no_mreg"],          # A/B -> multiplier -> ALU -> P
    "preadd": 1000 / DSP_FMAX_MHZ["no_pipeline"],         # A/D -> pre-adder -> multiplier -> ALU -> P
    "alu": 1000 / DSP_FMAX_MHZ["all_registers"],          # C/PCIN/... -> ALU -> P; MREG -> P
    "mult_stage": 1000 / DSP_FMAX_MHZ["all_registers"],   # A/B -> multiplier -> MREG
    "preadd_stage": 1000 / DSP_FMAX_MHZ["preadd_no_adreg"],  # A/D -> pre-adder -> multiplier -> MREG
}


def _ns_levels(ns: float) -> int:
    """A delay in levels of the depth model, rounded up."""
    return math.ceil(ns / NS_PER_LEVEL - 1e-9)


#: the same in levels of the depth model (ns / NS_PER_LEVEL, rounded up): mult 7, preadd 10, alu 5, ...
DSP_LEVELS = {kind: _ns_levels(ns) for kind, ns in DSP_NS.items()}
#: the clock a path of each class supports between the DSP's own registers (DS923's figure)
_DSP_CLASS_MHZ = {"mult": DSP_FMAX_MHZ["mult_no_mreg"], "preadd": DSP_FMAX_MHZ["no_pipeline"],
                  "alu": DSP_FMAX_MHZ["all_registers"], "mult_stage": DSP_FMAX_MHZ["all_registers"],
                  "preadd_stage": DSP_FMAX_MHZ["preadd_no_adreg"]}


def dsp_clock_levels(mhz: float) -> int:
    """The levels of a fabric path that supports the clock ``mhz`` does, by the depth model
    (rounded up; 0 for any clock the model's registers alone allow): how a register-bounded
    DSP's internal path compares with the fabric's."""
    return max(0, math.ceil((1000 / mhz - FIXED_NS) / NS_PER_LEVEL - 1e-9))


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


# ---- DSP48E2 ports --------------------------------------------------------------------------
_DSP_MULT_PORTS = {"A", "B", "ACIN", "BCIN", "D", "INMODE"}
_DSP_ALU_PORTS = {"C", "PCIN", "CARRYIN", "CARRYCASCIN", "MULTSIGNIN", "OPMODE", "ALUMODE", "CARRYINSEL"}
_DSP_CASCADE_PORTS = {"ACIN", "BCIN", "PCIN", "CARRYCASCIN", "MULTSIGNIN"}
# the register (cell parameter) in front of each port, where it has one
_DSP_PORT_REGISTER = {"A": "AREG", "ACIN": "AREG", "B": "BREG", "BCIN": "BREG", "C": "CREG", "D": "DREG",
                      "INMODE": "INMODEREG", "OPMODE": "OPMODEREG", "ALUMODE": "ALUMODEREG",
                      "CARRYIN": "CARRYINREG", "CARRYINSEL": "CARRYINSELREG"}


def _parameter(cell: dict, name: str, default=0):
    """A cell parameter: an integer (Yosys writes them as binary strings) or a string."""
    value = cell.get("parameters", {}).get(name)
    if value is None:
        return default
    if isinstance(value, int):
        return value
    text = str(value).strip()
    return int(text, 2) if text and set(text) <= {"0", "1"} else text


@dataclass
class _Dsp:
    """What the depth walk knows of one DSP cell: its registers (its own and those Vivado
    would pack from its neighbours), each input port's path class, its kind."""
    registered: set = field(default_factory=set)     # input ports with a register in front
    classes: dict = field(default_factory=dict)      # input port -> DSP_LEVELS key (None: ends at a register only)
    mreg: bool = False
    out_registered: bool = False
    kind: str = ""                                   # register_bounded, inputs_unregistered, ...
    clock_mhz: float | None = None                   # its slowest path between its own registers


def _dsp_model(cell: dict) -> _Dsp:
    kind = str(_parameter(cell, "USE_MULT", "MULTIPLY"))
    multiplies = kind != "NONE"
    preadd = (str(_parameter(cell, "USE_DPORT", "FALSE")) == "TRUE"
              or "AD" in (str(_parameter(cell, "AMULTSEL", "A")), str(_parameter(cell, "BMULTSEL", "B"))))
    model = _Dsp(mreg=multiplies and bool(_parameter(cell, "MREG")))
    for port in cell["connections"]:
        if cell.get("port_directions", {}).get(port) == "output":
            continue
        if port in _DSP_MULT_PORTS:
            model.classes[port] = ("preadd" if preadd else "mult") if multiplies else "alu"
        elif port in _DSP_ALU_PORTS:
            model.classes[port] = "alu"
        else:
            model.classes[port] = None               # CLK, CE*, RST*: act at a register only
        register = _DSP_PORT_REGISTER.get(port)
        if register and _parameter(cell, register):
            model.registered.add(port)
    model.out_registered = bool(_parameter(cell, "PREG"))
    return model


def logic_depth(netlist: Path | str | dict, top: str = "top") -> dict:
    """The deepest register-to-register path of the module ``top`` of a Yosys JSON netlist
    (a path, its text or the parsed dict)::

        {"levels": n,                  # the result: the deepest path, or a DSP's internal one
         "path": [cell types along the deepest path; a DSP as "DSP48E2 A->P 7": the port it
                  is entered by and the levels it adds],
         "between": [the nets of the register it starts from, the register it ends at],
         "unregistered_dsps": k,       # DSPs that are not register-bounded
         "dsps": {kind: count},        # register_bounded (of them no_mreg), inputs_unregistered,
                                       # outputs_unregistered, combinational, cascaded
         "fabric_levels": n,           # the deepest path through the fabric (and unregistered DSPs)
         "dsp_path_levels": n | None,  # the deepest path that runs through (or into) a DSP
         "dsp_clock_mhz": f | None,    # the slowest path between a DSP's own registers
         "limit": "fabric" | "dsp",    # which of the two the result is
         "deep_paths": [{"levels", "between", "path"}, ...]}  # the deepest path into each register
                                       # signal within two levels of the fabric's deepest
    """
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

    weight, is_boundary, dsps = {}, {}, {}
    for name, cell in cells.items():
        kind = cell["type"]
        if _LEVEL.match(kind) or _DISTRIBUTED_RAM.match(kind):
            weight[name] = 1.0
        elif kind in _CARRY:
            weight[name] = _CARRY[kind]
        elif kind.startswith("DSP48"):
            dsps[name] = _dsp_model(cell)
        else:
            is_boundary[name] = True

    # the DSPs' registers Vivado packs from their neighbours: a port fed only by flip-flops
    # (or constants) has its input register, outputs read only by flip-flops the PREG.  A
    # shift register (SRL16E/SRLC32E) counts as flip-flops: Yosys made it of a chain of the
    # design's registers, and Vivado, synthesising the design, takes the chain's register
    # next to the DSP into the DSP (its AREG/BREG, or its PREG) before it maps the rest
    # to an SRL.  A block RAM's or UltraRAM's read port does not: no DSP register takes it.
    def register(cell_name):
        return cells[cell_name]["type"].startswith(("FD", "SRL"))

    def packable_from(bits):
        return all(b not in driver or register(driver[b]) for b in bits)

    counts = dict.fromkeys(("register_bounded", "no_mreg", "inputs_unregistered", "outputs_unregistered",
                            "combinational", "cascaded"), 0)
    for name, model in dsps.items():
        cell = cells[name]
        if not model.out_registered:
            model.out_registered = all(register(r) for b in outputs(cell) for r in readers[b])
        for port, bits in cell["connections"].items():
            if port in model.classes and packable_from([b for b in bits if not isinstance(b, str)]):
                model.registered.add(port)
    for name, model in dsps.items():
        cell = cells[name]
        driven = [p for p, c in model.classes.items() if c]
        # (a port fed by a DSP whose outputs are registered, its PREG, is registered too;
        # one fed by a block RAM or UltraRAM read port is not: no input register takes it)
        in_registered = all(p in model.registered or all(
            b not in driver or register(driver[b]) or (driver[b] in dsps and dsps[driver[b]].out_registered)
            for b in cell["connections"][p] if not isinstance(b, str)) for p in driven)
        model.kind = {(True, True): "register_bounded", (False, True): "inputs_unregistered",
                      (True, False): "outputs_unregistered", (False, False): "combinational"}[
                          (in_registered, model.out_registered)]
        counts[model.kind] += 1
        if any(b in driver and driver[b] in dsps for p in _DSP_CASCADE_PORTS & set(cell["connections"])
               for b in cell["connections"][p] if not isinstance(b, str)):
            counts["cascaded"] += 1
        if model.kind == "register_bounded":
            is_boundary[name] = True
            counts["no_mreg"] += not model.mreg and any(c in ("mult", "preadd") for c in model.classes.values())
    # cells whose outputs start paths: registers and the rest, and DSPs with their PREG
    starts = set(is_boundary) | {n for n, d in dsps.items() if d.out_registered}

    def terms(name):
        """Each way into the cell's output: (levels, input bits, starts at a register,
        label, ends inside at the MREG, path class).  A DSP's port of constants only is
        no path."""
        if name not in dsps:
            return [(weight[name], inputs(cells[name]), False, None, False, None)]
        model, out = dsps[name], []
        for port, bits in cells[name]["connections"].items():
            cls = model.classes.get(port)
            bits = [b for b in bits if not isinstance(b, str)]
            if cls is None or not bits:
                continue
            at_mreg = model.mreg and cls in ("mult", "preadd")
            if at_mreg:
                cls = "preadd_stage" if cls == "preadd" and not _parameter(cells[name], "ADREG") else "mult_stage"
            out.append((DSP_LEVELS[cls], bits, port in model.registered, port, at_mreg, cls))
        if model.mreg:
            out.append((DSP_LEVELS["alu"], [], True, "MREG", False, "alu"))
        return out or [(0, [], True, None, False, None)]

    def internal(name, way):
        """A way from one of the DSP's own registers to another (its MREG, or its PREG):
        no fabric path, but DS923's clock for it."""
        _, _, from_register, _, at_mreg, _ = way
        return from_register and (at_mreg or dsps[name].out_registered)

    for name, model in dsps.items():
        clocks = [_DSP_CLASS_MHZ[w[5]] for w in terms(name) if w[5] and internal(name, w)]
        model.clock_mhz = min(clocks) if clocks else None

    depth, via, label = {}, {}, {}               # cell -> depth at its output, predecessor, (DSP port, levels)
    through = {}                                 # cell -> the deepest path to its output through a DSP (or -1)
    inner, inner_via, inner_label = {}, {}, {}   # a DSP's path ending inside it, at its MREG

    def arrival(name):
        # iterative DFS: netlists of whole engines are deep enough to overflow recursion
        stack = [name]
        while stack:
            current = stack[-1]
            if current in depth:
                stack.pop()
                continue
            ways = [w for w in terms(current) if current not in dsps or not internal(current, w)]
            pending = [driver[b] for _, bits, from_register, *_ in ways if not from_register for b in bits
                       if b in driver and driver[b] not in starts and driver[b] not in depth]
            if pending:
                stack.extend(pending)
                continue
            best = {}                            # by "ends at the MREG": (depth, predecessor, (port, levels))
            through[current] = -1.0
            for levels, bits, from_register, port, at_mreg, _ in ways:
                base, base_from = 0.0, None
                if not from_register:
                    for b in bits:
                        source = driver.get(b)
                        if source is not None and source not in starts:
                            if depth[source] > base:
                                base, base_from = depth[source], source
                            if through[source] >= 0:
                                through[current] = max(through[current], through[source] + levels)
                if at_mreg not in best or base + levels > best[at_mreg][0]:
                    best[at_mreg] = (base + levels, base_from, (port, levels))
            depth[current], via[current], label[current] = best.get(False, (0.0, None, (None, 0)))
            if True in best:
                inner[current], inner_via[current], inner_label[current] = best[True]
            if current in dsps:
                through[current] = max(depth[current], inner.get(current, 0.0))
            stack.pop()
        return depth[name]

    deepest, end, end_inner = 0.0, None, False
    for name in [*weight, *(n for n, d in dsps.items() if d.kind != "register_bounded")]:
        if arrival(name) > deepest:
            deepest, end, end_inner = depth[name], name, False
        if inner.get(name, 0) > deepest:
            deepest, end, end_inner = inner[name], name, True
    chain = []
    node = end
    while node is not None:
        chain.append(node)
        node = inner_via[node] if end_inner and node == end and len(chain) == 1 else via[node]
    chain.reverse()

    def path_inputs(name):
        """The input bits a path through cell ``name`` comes by: a DSP's data and control
        ports (the one it was entered by first), not its clock, enables and resets."""
        if name not in dsps:
            return inputs(cells[name])
        entered = (label.get(name) or (None,))[0]
        ports = sorted((p for p, c in dsps[name].classes.items() if c), key=lambda p: p != entered)
        return [b for p in ports for b in cells[name]["connections"][p] if not isinstance(b, str)]

    def path_entry(name):
        kind = cells[name]["type"]
        if name not in dsps:
            return kind
        if end_inner and name == end:
            port, levels = inner_label[name]
            return f"{kind} {port}->MREG {levels:g}"
        port, levels = label[name]
        return f"{kind} {port}->P {levels:g}" if port else kind

    names = _net_names(module)
    fabric_levels = math.ceil(deepest)
    # every register fed by a deep path, by the signal it holds: what else is near the
    # deepest (a fix to the deepest path shows the next one without another synthesis)
    near = {}
    for name in weight:
        ends = [r for b in outputs(cells[name]) for r in readers[b] if r in starts]
        if not ends or depth[name] < fabric_levels - 2:
            continue
        for finish in {_signal(names[b]) for r in ends for b in outputs(cells[r]) if b in names}:
            if depth[name] > near.get(finish, (0.0,))[0]:
                near[finish] = (depth[name], name)
    # (registers of one array, numbered alike, count once: the deepest of them)
    alike = {}
    for finish, (levels, name) in near.items():
        key = re.sub(r"\d+", "#", finish)
        if levels > alike.get(key, (0.0,))[0]:
            alike[key] = (levels, name, finish)
    deep_paths = []
    for levels, name, finish in sorted(alike.values(), key=lambda v: -v[0])[:12]:
        walk, node = [], name
        while node is not None:
            walk.append(node)
            node = via[node]
        walk.reverse()
        start = _endpoints(module, cells, walk, driver, readers, starts, path_inputs, outputs)[0]
        deep_paths.append({"levels": math.ceil(levels), "between": [start, finish],
                           "path": [path_entry(c) for c in walk]})
    bounded = {n: d.clock_mhz for n, d in dsps.items() if d.clock_mhz is not None}
    dsp_mhz = min(bounded.values()) if bounded else None
    result = {"levels": fabric_levels, "path": [path_entry(c) for c in chain],
              "between": _endpoints(module, cells, chain, driver, readers, starts, path_inputs, outputs),
              "path_nets": _path_nets(module, chain, cells, outputs),
              "unregistered_dsps": len(dsps) - counts["register_bounded"], "dsps": counts,
              "fabric_levels": fabric_levels, "dsp_clock_mhz": dsp_mhz, "limit": "fabric",
              "deep_paths": deep_paths,
              "dsp_path_levels": math.ceil(max(through.values(), default=-1.0)) if any(
                  v >= 0 for v in through.values()) else None}
    if dsp_mhz is not None and dsp_mhz < depth_clock_mhz(fabric_levels):
        # a register-bounded DSP's own path (input registers -> PREG) supports less than the
        # fabric's deepest path: it is the result
        slowest = min(bounded, key=bounded.get)
        result.update(levels=max(fabric_levels, dsp_clock_levels(dsp_mhz)), limit="dsp",
                      path=[f"{cells[slowest]['type']} internal {dsp_mhz} MHz"],
                      path_nets=_path_nets(module, [slowest], cells, outputs),
                      between=_endpoints(module, cells, [slowest], driver, readers, starts, path_inputs, outputs))
    return result


def _signal(net: str) -> str:
    """A net's signal: its name without a bit or slice suffix."""
    return re.sub(r"\s*\[[0-9:]+\]$", "", net)


def _net_names(module) -> dict:
    """Bit -> the name of a net carrying it, Amaranth's names before Yosys's own."""
    names = {}
    for net, info in sorted(module.get("netnames", {}).items(), key=lambda kv: kv[1].get("hide_name", 0)):
        for bit in info["bits"]:
            if not isinstance(bit, str):
                names.setdefault(bit, net)
    return names


def _path_nets(module, chain, cells, outputs) -> list[str]:
    """The net each cell of the path drives: where the deep path runs in the source."""
    names = _net_names(module)
    return [next((names[b] for b in outputs(cells[c]) if b in names), "?") for c in chain]


def _endpoints(module, cells, chain, driver, readers, starts, inputs_of, outputs) -> list[str]:
    """The registers (or ports) a path starts from and ends at, by the nets they drive:
    the names Amaranth gave the signals, so a deep path can be found in the source."""
    if not chain:
        return []
    names = _net_names(module)
    start = next((names[b] for b in inputs_of(chain[0])
                  if b in names and (b not in driver or driver[b] in starts)), "?")
    ends = [r for b in outputs(cells[chain[-1]]) for r in readers[b]
            if r in starts or _DISTRIBUTED_RAM.match(cells[r]["type"])]
    finish = next((names[b] for r in ends for b in outputs(cells[r]) if b in names), "?")
    return [start, finish]
