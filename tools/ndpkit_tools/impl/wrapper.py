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
