"""Constants of the block-float sums (``ndpkit.arith.blockfloat`` is their golden model,
``ndpkit_hw.arith.blockfloat`` their gateware)."""

__all__ = ["GUARD", "PARTIALS"]

#: bits of the window below the largest term's least significant bit
GUARD = 16
#: running sums a long sum is split into (term j -> partial j mod PARTIALS), so the
#: hardware revisits a partial's state no sooner than it can update it
PARTIALS = 4
