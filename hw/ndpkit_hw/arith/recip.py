"""Binary32 reciprocal ``1 / x``, RNE, subnormals, one quotient bit a cycle: a unit for a
rare operation (the attention epilogue's ``1 / l`` once a query head), a few hundred
LUTs where the pipelined divider (:mod:`~ndpkit_hw.arith.div`) is a thousand.

Bit for bit ``ndpkit.arith.fp.div(1.0, x)``: a subnormal ``x``'s significand is shifted
up a place a cycle; the 27-bit quotient ``floor(2**26 / sig)`` of the normalised
significand (``sig`` in [1, 2) as a 24-bit integer) comes a bit a cycle by restoring
division, the last remainder giving the sticky bit; a result below the normal range is
shifted down a place a cycle (the places shifted out into the sticky bit); then one
rounding to nearest even, whose carry runs into the exponent (to infinity too).  ``x``
NaN: the canonical quiet NaN; ±0: ±infinity; ±infinity: ±0.  About 30 cycles for a
normal ``x`` (up to 56 for the smallest subnormal).
"""
from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["SerialReciprocal"]

QUOTIENT_BITS = 27
QNAN = 0x7FC0_0000


class SerialReciprocal(wiring.Component):
    """``start`` (a cycle, while ``busy`` is low) takes ``x``; ``done`` pulses with
    ``result`` (held until the next start)."""

    start: In(1)
    x: In(32)
    busy: Out(1)
    done: Out(1)
    result: Out(32)

    def elaborate(self, platform):
        m = Module()
        sign = Signal()
        sig = Signal(24)                                  # the significand, its top bit set once normalised
        exp = Signal(signed(10))                          # x's unbiased exponent (of sig's top bit)
        rem = Signal(26)
        quotient = Signal(QUOTIENT_BITS)
        count = Signal(range(QUOTIENT_BITS + 1))
        biased = Signal(signed(11))                       # the result's biased exponent, of norm's top bit
        norm = Signal(QUOTIENT_BITS)
        sticky = Signal()
        field, frac = self.x[23:31], self.x[:23]
        diff = Signal(27)
        m.d.comb += diff.eq(Cat(rem, Const(0, 1)) - sig)     # (rem - sig: bit 26 set when negative)
        with m.FSM(name="recip") as fsm:
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [sign.eq(self.x[31]), sig.eq(Cat(frac, field != 0)),
                                 exp.eq(Mux(field == 0, 1, field) - 127)]
                    with m.If((field == 0xFF) & (frac != 0)):
                        m.d.sync += self.result.eq(QNAN)
                        m.next = "DONE"
                    with m.Elif(field == 0xFF):                 # 1 / ±inf = ±0
                        m.d.sync += self.result.eq(Cat(Const(0, 31), self.x[31]))
                        m.next = "DONE"
                    with m.Elif((field == 0) & (frac == 0)):    # 1 / ±0 = ±inf
                        m.d.sync += self.result.eq(Cat(Const(0xFF << 23, 31), self.x[31]))
                        m.next = "DONE"
                    with m.Else():
                        m.next = "NORMALISE"
            with m.State("NORMALISE"):                          # a subnormal's significand up a place a cycle
                with m.If(sig[23]):
                    m.d.sync += [rem.eq(1 << 23), count.eq(QUOTIENT_BITS)]   # 1.0 in sig's fixed point
                    m.next = "DIVIDE"
                with m.Else():
                    m.d.sync += [sig.eq(sig << 1), exp.eq(exp - 1)]
            with m.State("DIVIDE"):                             # a quotient bit a cycle: rem >= sig
                take = ~diff[26]
                m.d.sync += [quotient.eq(Cat(take, quotient)), rem.eq(Mux(take, diff[:26], rem) << 1),
                             count.eq(count - 1)]
                with m.If(count == 1):
                    m.next = "PLACE"
            with m.State("PLACE"):
                # quotient bit 26 weighs 2**-exp: set when sig is 1.0, else bit 25 is
                top = quotient[-1]
                m.d.sync += [norm.eq(Mux(top, quotient, quotient << 1)), sticky.eq(rem != 0),
                             biased.eq(127 - exp - ~top)]
                m.next = "DENORMALISE"
            with m.State("DENORMALISE"):                        # below the normal range: down a place a cycle
                with m.If(biased >= 255):
                    m.d.sync += self.result.eq(Cat(Const(0xFF << 23, 31), sign))
                    m.next = "DONE"
                with m.Elif(biased < 1):
                    m.d.sync += [norm.eq(norm >> 1), sticky.eq(sticky | norm[0]), biased.eq(biased + 1)]
                with m.Else():
                    m.next = "ROUND"
            with m.State("ROUND"):
                # (biased - 1) << 23 plus the 24-bit significand with its leading bit: a normal
                # number's fields, or a subnormal's (leading bit 0, biased 1); the rounding's carry
                # runs on into the exponent
                lsb, guard, rest = norm[3], norm[2], norm[1] | norm[0] | sticky
                up = guard & (rest | lsb)
                magnitude = Signal(31)
                m.d.comb += magnitude.eq(((biased - 1).as_unsigned()[:8] << 23) + norm[3:] + up)
                m.d.sync += self.result.eq(Cat(magnitude, sign))
                m.next = "DONE"
            with m.State("DONE"):
                m.d.comb += self.done.eq(1)
                m.next = "IDLE"
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE"))
        return m
