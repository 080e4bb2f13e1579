"""Constants of the block-float sums (``ndpkit.arith.blockfloat`` is their golden model,
``ndpkit_hw.arith.blockfloat`` their gateware)."""

__all__ = ["GUARD", "PARTIALS", "Q_BITS", "K_BITS", "DROP", "V_BITS", "W_BITS", "GROW", "TOTAL_FRAC", "SUM_BITS"]

#: bits of the window below the largest term's least significant bit
GUARD = 16
#: running sums a long sum is split into (term j -> partial j mod PARTIALS), so the
#: hardware revisits a partial's state no sooner than it can update it
PARTIALS = 4

#: the score side's block-fixed operands (two's complement, magnitude bits): a q row's
#: elements share its largest exponent in Q_BITS bits (a DSP48E2's 27-bit port; 19, so a
#: q bank word of 16 lanes, 16 x 22 bits, stays within five 72-bit block RAMs), a K row's in K_BITS (its
#: 18-bit port)
Q_BITS = 19
K_BITS = 17
#: low bits of each Q x K product dropped (floor) before the products are summed
DROP = 12

#: the value side's block-fixed operands: a V row's elements share its largest exponent
#: in V_BITS bits (a DSP48E2's 18-bit port: an fp16 element within 2**6 of its row's
#: largest, a bf16 one within 2**9, keeps every bit), a weight is aligned to its sum's
#: exponent in W_BITS bits; 32 products of 33 bits sum in 39, so a slot of 16 columns'
#: sums, the weights' sum and the exponent is 708 bits: ten 72-bit UltraRAMs a copy, not
#: the twelve of 48-bit sums (the weight's bits weigh on the accuracy table more than V's)
V_BITS = 17
W_BITS = 16
#: a weighted sum's bits (signed): 128 / PARTIALS products of an aligned weight
#: (< 2**W_BITS) and a V integer (|x| < 2**V_BITS); the floors only shrink it
SUM_BITS = 39
assert (128 // PARTIALS) << (W_BITS + V_BITS) <= 1 << (SUM_BITS - 1)
#: a weighted sum's exponent moves in steps of GROW (its lanes realign by a 4:1 select
#: of whole nibbles, then 4:1 of 16-bit steps, instead of a full shifter)
GROW = 4
#: fraction bits of the weights' own sum (the softmax denominator; weights are <= 1:
#: 32 terms stay below 2**38, within the sums' 39 bits)
TOTAL_FRAC = 32
assert (128 // PARTIALS) << TOTAL_FRAC < 1 << (SUM_BITS - 1)
