"""A few-pin wrapper for measuring a block's resources and Fmax on its own.

A block with hundreds of input and output bits does not fit a package's pins.  The
wrapper loads every input port of the block from a shift register fed by one pin,
registers every output port and XOR-reduces them to one pin (every output bit
reaches the pin, so synthesis keeps all the logic).  The wrapper adds one flip-flop
per input and output bit and a small XOR tree; reports say so.

Works for any ``wiring.Component``: an FP unit's ``i``/``o`` streams or an engine's
command, completion and AXI ports alike.
"""

from amaranth.hdl import Module, Signal, Cat, Const, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["ImplWrapper"]


class ImplWrapper(wiring.Component):
    din: In(1)
    dout: Out(1)

    def __init__(self, block):
        self.block = block
        super().__init__()

    def _ports(self):
        inputs, outputs = [], []
        for _, member, value in self.block.signature.flatten(self.block):
            value = Value.cast(value)
            if isinstance(value, Const):       # an always-ready stream's ready: nothing to drive
                continue
            (inputs if member.flow == In else outputs).append(value)
        return inputs, outputs

    def elaborate(self, platform):
        m = Module()
        m.submodules.block = block = self.block
        inputs, outputs = self._ports()
        width_in = sum(len(v) for v in inputs)
        shift = Signal(max(1, width_in))
        m.d.sync += shift.eq(Cat(self.din, shift[:-1]))
        offset = 0
        for value in inputs:
            m.d.comb += value.eq(shift[offset:offset + len(value)])
            offset += len(value)
        result = Signal(max(1, sum(len(v) for v in outputs)))
        m.d.sync += [result.eq(Cat(*outputs)), self.dout.eq(result.xor())]
        return m


def wrapper_cells(netlist) -> dict:
    """The wrapper's own cells in a flattened ``synth_xilinx`` netlist (``write_json``; a
    path or the loaded dict): the LUTs of its XOR tree (every LUT between the registered
    outputs, ``result``, and the ``dout`` flip-flop) and those flip-flops.  In a card build
    an engine's outputs go straight to the shell's ports, so an engine's own figures are
    the netlist's less these.  (The input shift register's flip-flops stay counted: where
    the engine registers an input unconditionally, synthesis merges the two.)"""
    import json
    import re
    from pathlib import Path
    if not isinstance(netlist, dict):
        netlist = json.loads(Path(netlist).read_text())
    top = netlist["modules"]["top"]
    cells, names = top["cells"], top["netnames"]
    driver = {}
    for name, cell in cells.items():
        for port, bits in cell["connections"].items():
            if cell["port_directions"].get(port) == "output":
                for bit in bits:
                    driver[bit] = name
    flip_flop = {"FDRE", "FDSE", "FDCE", "FDPE"}

    def inputs(name):
        cell = cells[name]
        return [b for p, bits in cell["connections"].items() if cell["port_directions"].get(p) == "input"
                for b in bits]

    # dout's flip-flop (behind its output buffer)
    name = driver[names["dout"]["bits"][0]]
    while cells[name]["type"] not in flip_flop:
        name = driver[inputs(name)[0]]
    dout_ff = name
    luts, seen, stack = 0, set(), list(cells[dout_ff]["connections"]["D"])
    while stack:
        bit = stack.pop()
        name = driver.get(bit)
        if name is None or name in seen:
            continue
        seen.add(name)
        if re.fullmatch(r"LUT[1-6]|INV", cells[name]["type"]):
            luts += 1
            stack += inputs(name)
    result_ffs = {driver[b] for b in names["result"]["bits"] if b in driver
                  and cells[driver[b]]["type"] in flip_flop} if "result" in names else set()
    return {"LUT": luts, "FF": len(result_ffs) + 1}
