"""A few-pin wrapper for measuring a block's resources and Fmax on its own.

A block with hundreds of input and output bits does not fit a package's pins.  The
wrapper loads the block's input payload from a shift register fed by one pin,
registers its output and XOR-reduces it to one pin (every output bit reaches the pin,
so synthesis keeps all the logic).  The wrapper adds one flip-flop per input and
output bit and a small XOR tree; reports say so.
"""

from amaranth.hdl import Module, Signal, Cat, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["ImplWrapper"]


class ImplWrapper(wiring.Component):
    din: In(1)
    din_valid: In(1)
    dout: Out(1)
    dout_valid: Out(1)

    def __init__(self, block):
        self.block = block
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.submodules.block = block = self.block
        width_in = len(Value.cast(block.i.payload))
        shift = Signal(width_in)
        m.d.sync += shift.eq(Cat(self.din, shift[:-1]))
        valid = Signal()
        m.d.sync += valid.eq(self.din_valid)
        m.d.comb += [block.i.payload.eq(shift), block.i.valid.eq(valid)]
        result = Signal(len(Value.cast(block.o.payload)))
        result_valid = Signal()
        m.d.sync += [result.eq(block.o.payload), result_valid.eq(block.o.valid)]
        m.d.sync += [self.dout.eq(result.xor()), self.dout_valid.eq(result_valid)]
        return m
