"""Constants of the fixed-point exp algorithm (``ndpkit.arith.exp`` is its golden
model, ``ndpkit_hw.arith.exp`` its gateware)."""
import math

__all__ = ["LOG2E_Q39", "LN2_Q32", "TABLE", "FRACTION_BITS"]

LOG2E_Q39 = round(math.log2(math.e) * 2 ** 39)
LN2_Q32 = round(math.log(2.0) * 2 ** 32)
#: T[i] = round(2**(i/256) * 2**31)
TABLE = tuple(round(2.0 ** (i / 256) * 2 ** 31) for i in range(256))
FRACTION_BITS = 40
