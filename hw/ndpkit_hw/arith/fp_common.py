"""Shared pieces of the floating-point units: formats, unpacking, normalisation and
IEEE round-to-nearest-even packing, and the lane/pipeline scaffolding.

Every unit computes an exact (or exactly-stickied) intermediate ``sign, exp, sig``
where ``sig``'s most significant bit has weight ``2**(exp - bias)``, then calls
:func:`normalize` and :func:`round_pack`.  That one rounding path gives every unit
the same subnormal, overflow and tie behaviour, which is what the golden functions in
:mod:`ndpkit.arith.fp` specify.
"""
from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Module, Signal, Cat, Const, Mux, Value, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["FloatFormat", "F32", "F16", "BF16", "Unpacked", "unpack", "leading_zeros", "normalize", "normalize_into_range",
           "round_bits", "round_prepare", "round_finish", "round_pack", "staged_product", "multiplier_shape", "large_memory_attrs",
           "select_result", "Pipeline", "FpUnit"]


@dataclass(frozen=True)
class FloatFormat:
    exp_bits: int
    frac_bits: int

    @property
    def width(self) -> int:
        return 1 + self.exp_bits + self.frac_bits

    @property
    def bias(self) -> int:
        return (1 << (self.exp_bits - 1)) - 1

    @property
    def exp_all_ones(self) -> int:
        return (1 << self.exp_bits) - 1

    @property
    def qnan(self) -> int:
        """The canonical quiet NaN every unit produces."""
        return (self.exp_all_ones << self.frac_bits) | (1 << (self.frac_bits - 1))

    def inf(self, sign) -> Cat:
        return Cat(Const(0, self.frac_bits), Const(self.exp_all_ones, self.exp_bits), sign)

    def zero(self, sign) -> Cat:
        return Cat(Const(0, self.frac_bits + self.exp_bits), sign)


F32 = FloatFormat(8, 23)
F16 = FloatFormat(5, 10)
BF16 = FloatFormat(8, 7)


class Unpacked:
    """Fields of one operand: ``sig`` carries the implicit bit; subnormals have exp 1."""

    def __init__(self, fmt: FloatFormat, name: str):
        self.fmt = fmt
        self.sign = Signal(name=f"{name}_sign")
        self.exp = Signal(fmt.exp_bits, name=f"{name}_exp")
        self.sig = Signal(fmt.frac_bits + 1, name=f"{name}_sig")
        self.is_zero = Signal(name=f"{name}_is_zero")
        self.is_inf = Signal(name=f"{name}_is_inf")
        self.is_nan = Signal(name=f"{name}_is_nan")


def unpack(m: Module, value, fmt: FloatFormat, name: str) -> Unpacked:
    u = Unpacked(fmt, name)
    frac = value[:fmt.frac_bits]
    exp = value[fmt.frac_bits:fmt.frac_bits + fmt.exp_bits]
    subnormal = exp == 0
    m.d.comb += [
        u.sign.eq(value[fmt.width - 1]),
        u.exp.eq(Mux(subnormal, 1, exp)),
        u.sig.eq(Cat(frac, ~subnormal)),
        u.is_zero.eq(subnormal & (frac == 0)),
        u.is_inf.eq((exp == fmt.exp_all_ones) & (frac == 0)),
        u.is_nan.eq((exp == fmt.exp_all_ones) & (frac != 0)),
    ]
    return u


def leading_zeros(m: Module, value, name: str) -> Signal:
    """Count of leading zeros of ``value`` (its width when it is zero), as a log-depth tree."""
    width = len(value)
    size = 1 << max(0, (width - 1).bit_length())
    # pad with ones *below* the value: they never add leading zeros beyond `width`
    padded = value if size == width else Cat(Const((1 << (size - width)) - 1, size - width), value)

    def count(bits, lo, n):
        """(zero count of bits[lo:lo+n] from the top, all-zero flag) for a power-of-two n."""
        if n == 1:
            return Const(0, 1), ~bits[lo]
        half = n // 2
        hi_count, hi_zero = count(bits, lo + half, half)
        lo_count, lo_zero = count(bits, lo, half)
        width_bits = (n - 1).bit_length()
        merged = Signal(width_bits, name=f"{name}_lz{lo}_{n}")
        m.d.comb += merged.eq(Mux(hi_zero, half + lo_count, hi_count))
        return merged, hi_zero & lo_zero

    tree_count, all_zero = count(padded, 0, size)
    result = Signal(range(width + 1), name=f"{name}_lz")
    m.d.comb += result.eq(Mux(all_zero, width, tree_count))
    return result


def normalize(m: Module, sig, exp, name: str, pipe=None, carry=(), keep: int | None = None,
              min_exp: int | None = None):
    """Shift ``sig`` left so its top bit is set; returns (sig, exp - shift, is_zero).

    With ``pipe``, the leading-zero count is registered before the shift (one stage:
    the count and the wide shift together are the longest path of the adders and
    multipliers), the values in ``carry`` travel along, and the function returns
    ``(sig, exp, is_zero, carried values)``.

    With ``keep``, only the top ``keep`` bits are shifted into place (a narrower
    shifter); every bit that would land below them is ORed into one sticky bit returned
    as the LSB of the ``keep + 1``-bit result.  Rounding (:func:`round_pack`) folds
    everything below its guard and round bits into its sticky anyway, so the result
    rounds the same: pass ``keep=`` :func:`round_bits` of the format.

    With ``min_exp``, the shift stops where the exponent reaches ``min_exp``: a value
    below the normal range comes out subnormal-formatted (exponent ``min_exp``, top bit
    clear) instead of normalised, so a unit whose results below the normal range are
    exact (an adder's cancellation, a widening conversion) rounds with
    ``round_pack(..., underflow=False)`` and needs no right shift.
    """
    width = len(sig)
    if min_exp is not None:
        # a marker bit where the exponent would reach min_exp stops the leading-zero count
        # there (one OR in front of the count, not a compare and a select behind it); each
        # marker bit compares exp with a constant (no subtraction: that carry chain was
        # the adder's longest path on ECP5)
        marker = Signal(width, name=f"{name}_marker")
        m.d.comb += marker.eq(Cat(*[exp == min_exp + width - 1 - i for i in range(width - 1)],
                                  (exp == min_exp) | (exp < min_exp)))
        lz = leading_zeros(m, sig | marker, name)
    else:
        lz = leading_zeros(m, sig, name)
    is_zero = Signal(name=f"{name}_sig_zero")
    m.d.comb += is_zero.eq(sig == 0)
    if pipe is not None:
        staged = pipe.stage(sig, exp, lz, is_zero, *carry)
        sig, exp, lz, is_zero = staged[:4]
        carry = list(staged[4:])
    shift = lz
    e = Signal(signed(len(exp) + 2), name=f"{name}_norm_exp")
    m.d.comb += e.eq(exp - shift)
    if keep is None or keep >= width:
        norm = Signal(width, name=f"{name}_norm")
        m.d.comb += norm.eq(sig << shift)
    else:
        below = width - keep
        norm = Signal(keep + 1, name=f"{name}_norm")
        # bit i of sig lands below the kept bits when i + shift < below
        sticky = (sig[:below] & Cat(shift < below - i for i in range(below))) != 0
        m.d.comb += norm.eq(Cat(sticky, (sig << shift)[below:width]))
    if pipe is not None:
        return norm, e, is_zero, carry
    return norm, e, is_zero


def normalize_into_range(m: Module, sig, exp, name: str, keep: int, pipe=None, carry=(), split: bool = False,
                         low_count=None):
    """Normalise ``sig`` (top bit weighing ``2**(exp - bias)``) into the range of a
    format's exponent: shift left until the top bit is set but never below exponent 1,
    and shift a value whose exponent is already below 1 right up to it.  One shifter does
    both (the separate normalisation and subnormal shifts of :func:`normalize` and
    :func:`round_pack` cost twice the logic); its result rounds with
    ``round_pack(..., underflow=False)``.

    Returns ``(norm, exp, is_zero, carried values)``: ``norm`` is ``keep + 1`` bits, the
    top ``keep`` in place and every bit below them ORed into the LSB (as with
    :func:`normalize`'s ``keep``).  ``pipe`` is required: the shift amount (the
    leading-zero count within the exponent's limits) is registered before the shift.
    With ``split`` the count and the limits are registered first and the amount chosen
    from them a stage later (one more stage: for a wide ``sig``, whose count tree and
    limit compare in one cycle are the longest path, as in the block-float sums).

    With ``low_count = (n, count)``, ``count`` is what the count would be were ``sig``'s
    bits above its low ``n`` all zero (``keep``, those ``len(sig) - n`` zeros and the
    leading zeros of the low ``n`` bits), computed by the caller a stage
    ahead where the low bits were known sooner (an adder's registered low half): only
    the high bits are counted here, a shorter tree.
    """
    width = len(sig)
    if low_count is None:
        # keep zeros on top: the count comes out as lz + keep with no adder behind the tree
        lz_plus_keep = leading_zeros(m, Cat(sig, Const(0, keep)), name)
    else:
        n, count = low_count
        high = sig[n:]
        lz_plus_keep = Signal(range(width + keep + 1), name=f"{name}_lz_plus_keep")
        m.d.comb += lz_plus_keep.eq(Mux(high == 0, count, leading_zeros(m, Cat(high, Const(0, keep)), f"{name}_high")))
    is_zero = Signal(name=f"{name}_sig_zero")
    m.d.comb += is_zero.eq(sig == 0)
    # the shift is left by u - keep: u = keep + min(lz, exp - 1) for exp >= 1, else
    # keep - min(1 - exp, keep) (at keep places right every bit is below the kept ones)
    shift_bits = (width + keep).bit_length()
    up = Signal(name=f"{name}_up")
    lz_k, room_k, right_k = (Signal(shift_bits, name=f"{name}_{what}") for what in ("lz_k", "room_k", "right_k"))
    exp_k = Signal(signed(len(exp) + 2), name=f"{name}_exp_k")
    m.d.comb += [
        up.eq(exp >= 1),
        lz_k.eq(lz_plus_keep),
        # one adder with both limits beside it, not a compare, a select and an add in a row
        exp_k.eq(exp + (keep - 1)),
        room_k.eq(Mux(exp > width, width + keep, exp_k)),
        right_k.eq(Mux(exp <= -keep, 0, exp_k)),
    ]
    if split:
        staged = pipe.stage(sig, exp, is_zero, up, lz_k, room_k, right_k, *carry)
        sig, exp, is_zero, up, lz_k, room_k, right_k = staged[:7]
        carry = list(staged[7:])
    # the shift amount is chosen before the register: behind it, the compare and select
    # ahead of the shifter were the multiplier's longest ECP5 path (mul 106 -> 136 MHz)
    u = Signal(shift_bits, name=f"{name}_u")
    m.d.comb += u.eq(Mux(up, Mux(lz_k > room_k, room_k, lz_k), right_k))
    staged = pipe.stage(sig, exp, is_zero, up, u, *carry)
    sig, exp, is_zero, up, u = staged[:5]
    carry = list(staged[5:])
    e = Signal(signed(max(len(exp), shift_bits) + 2), name=f"{name}_norm_exp")
    m.d.comb += e.eq(Mux(up, exp + keep - u, 1))
    # sig's bit i lands at i + u; the kept bits are [width, width + keep)
    norm = Signal(keep + 1, name=f"{name}_norm")
    sticky = (sig & Cat(u < width - i for i in range(width))) != 0
    m.d.comb += norm.eq(Cat(sticky, (sig << u)[width:width + keep]))
    return norm, e, is_zero, carry


def round_bits(fmt: FloatFormat) -> int:
    """The significand bits rounding to ``fmt`` looks at: precision, guard and round
    (anything below only matters as a sticky bit)."""
    return fmt.frac_bits + 3


def _round_inputs(fmt: FloatFormat, norm, sticky):
    """Keep the top precision + 2 bits of ``norm``; the rest folds into ``sticky``."""
    precision = fmt.frac_bits + 1
    if len(norm) < precision + 2:
        return Cat(Const(0, precision + 2 - len(norm)), norm), sticky
    cut = len(norm) - (precision + 2)
    if cut:
        sticky = sticky | (norm[:cut] != 0)
    return norm[cut:], sticky


def round_shift_amount(m: Module, width: int, exp, name: str) -> Signal:
    """Right shift that moves a result below the normal range into the subnormals."""
    below = Signal(range(width + 3), name=f"{name}_denorm_shift")
    with m.If(exp >= 1):
        m.d.comb += below.eq(0)
    with m.Elif(exp < 1 - (width + 1)):
        m.d.comb += below.eq(width + 2)
    with m.Else():
        m.d.comb += below.eq(1 - exp)
    return below


def round_prepare(m: Module, fmt: FloatFormat, norm, exp, sticky, name: str, below=None):
    """First half of :func:`round_pack`: subnormal shift and the rounding decision.

    Returns ``(base, round_up, is_zero, overflow)`` to hand to :func:`round_finish`
    (possibly through a pipeline register).  ``below`` is the precomputed
    :func:`round_shift_amount` when the caller registered it.
    """
    precision = fmt.frac_bits + 1
    norm, sticky = _round_inputs(fmt, norm, sticky)
    width = len(norm)
    if below is None:
        below = round_shift_amount(m, width, exp, name)
    # the bits shifted out by one wider shifter: on ECP5 this is faster than a mask of
    # per-bit compares with the shift amount (fp32_to_bf16 ~150 MHz against ~135 over
    # three seeds) and no larger on UltraScale+
    wide = Signal(2 * width + 2, name=f"{name}_wide")
    m.d.comb += wide.eq(Cat(Const(0, width + 2), norm) >> below)
    shifted = wide[width + 2:]
    lost = wide[:width + 2] != 0
    kept = shifted[width - precision:]
    guard = shifted[width - precision - 1]
    rest = (shifted[:width - precision - 1] != 0) | lost | sticky
    field_bits = fmt.exp_bits + fmt.frac_bits
    # the exponent field (biased - 1, i.e. 0 for subnormals) plus the kept bits with their
    # implicit one: adding the rounding increment then carries correctly everywhere
    base = Signal(field_bits + 1, name=f"{name}_base")
    m.d.comb += base.eq((Mux(exp >= 1, exp - 1, 0)[:fmt.exp_bits + 1] << fmt.frac_bits) + kept)
    round_up = Signal(name=f"{name}_round_up")
    m.d.comb += round_up.eq(guard & (rest | kept[0]))
    is_zero = Signal(name=f"{name}_is_zero")
    overflow = Signal(name=f"{name}_overflow")
    m.d.comb += [is_zero.eq((norm == 0) & ~sticky), overflow.eq(exp > fmt.exp_all_ones - 1)]
    return base, round_up, is_zero, overflow


def round_finish(m: Module, fmt: FloatFormat, sign, base, round_up, is_zero, overflow, name: str) -> Signal:
    """Second half of :func:`round_pack`: the increment, and zero/infinity selection."""
    field_bits = fmt.exp_bits + fmt.frac_bits
    magnitude = Signal(field_bits + 1, name=f"{name}_magnitude")
    m.d.comb += magnitude.eq(base + round_up)
    result = Signal(fmt.width, name=f"{name}_packed")
    with m.If(is_zero):
        m.d.comb += result.eq(fmt.zero(sign))
    with m.Elif(overflow):
        m.d.comb += result.eq(fmt.inf(sign))
    with m.Else():
        m.d.comb += result.eq(Cat(magnitude[:field_bits], sign))
    return result


def round_pack(m: Module, fmt: FloatFormat, sign, norm, exp, sticky, name: str, pipe=None, carry=(),
               underflow: bool = True):
    """Round a normalised significand to ``fmt`` (RNE) and pack it with ``sign``.

    ``norm`` has its top bit set (or is zero, giving a signed zero) and that bit weighs
    ``2**(exp - bias)``.  Results below the normal range are shifted into subnormals
    (with everything shifted out folded into the sticky bit) before rounding, so
    rounding happens once, at the right place; rounding up may carry into the
    exponent, including from the largest subnormal to the smallest normal and from
    the largest finite to infinity.  Exponents above the range give infinity.

    With ``pipe``, two register stages split it (shift amount | shift and rounding
    decision | increment and selection), and the values in ``carry`` travel along;
    the function then returns ``(result, carried values)``.

    ``underflow=False``: the caller guarantees ``exp >= 1`` (a result below the normal
    range comes subnormal-formatted, exponent 1: :func:`normalize` with ``min_exp=1``),
    so there is no subnormal right shift at all.
    """
    no_shift = None if underflow else Const(0, 1)
    if pipe is None:
        base, round_up, is_zero, overflow = round_prepare(m, fmt, norm, exp, sticky, name, below=no_shift)
        return round_finish(m, fmt, sign, base, round_up, is_zero, overflow, name)
    # stage 1: the subnormal shift amount (comparisons on the exponent);
    # stage 2: shift, rounding decision; then the increment and the selection
    norm, sticky = _round_inputs(fmt, norm, sticky)
    below = round_shift_amount(m, len(norm), exp, name) if underflow else no_shift
    staged = pipe.stage(norm, sticky, exp, below, sign, *carry)
    norm, sticky, exp, below, sign = staged[:5]
    carry = staged[5:]
    base, round_up, is_zero, overflow = round_prepare(m, fmt, norm, exp, sticky, name, below=below)
    staged = pipe.stage(base, round_up, is_zero, overflow, sign, *carry)
    base, round_up, is_zero, overflow, sign = staged[:5]
    return round_finish(m, fmt, sign, base, round_up, is_zero, overflow, name), list(staged[5:])


def select_result(m: Module, width: int, default, cases) -> Signal:
    """``cases`` is a list of (condition, value) in priority order; ``default`` otherwise.
    The special-value selection (NaN, infinity, exact zero) every unit ends with."""
    result = Signal(width)
    m.d.comb += result.eq(default)
    for condition, value in reversed(cases):    # later assignments win: highest priority last
        with m.If(condition):
            m.d.comb += result.eq(value)
    return result


# DSP48E2 multiplies 27x18 signed: 26x17 unsigned bits; ECP5's MULT18X18D 18x18: 17x17.
DSP48E2_SHAPE, MULT18_SHAPE = (26, 17), (17, 17)


def multiplier_shape(platform) -> tuple[int, int]:
    """The unsigned operand slices one hard multiplier of ``platform``'s device takes:
    ECP5 (an Amaranth platform or anything with ``device = "LFE5..."``) 17x17, otherwise
    (UltraScale+, the simulators) the DSP48E2's 26x17."""
    return MULT18_SHAPE if str(getattr(platform, "device", "")).startswith("LFE5") else DSP48E2_SHAPE


def large_memory_attrs(platform) -> dict:
    """Attributes of a large memory for ``platform``'s device: on UltraScale+ (anything
    but ECP5, as :func:`multiplier_shape`) an UltraRAM (``ram_style = "ultra"``, which
    Vivado and Yosys honour; a URAM288 is 72 bits x 4096, so a wide, shallow memory
    costs as many URAMs as block RAMs but leaves the block RAM to the rest), none on
    ECP5 (which has no such RAM; Yosys refuses the style there)."""
    return {} if str(getattr(platform, "device", "")).startswith("LFE5") else {"ram_style": "ultra"}


def staged_product(m: Module, pipe, a, b, carry=(), sum_stages: int = 1):
    """``a * b`` over two pipeline stages, shaped to the hard multipliers
    (``pipe.multiplier``, :func:`multiplier_shape`): on a DSP48E2 ``a`` in slices of at
    most 26 bits and ``b`` of 17 (a 24x24 significand product is two DSPs, not four), on
    ECP5 17x17 slices; every partial product is one multiplier's output and registered
    (the DSP's MREG/PREG), then summed.  Returns ``(product, carried values)``;
    ``carry`` travels alongside.  ``sum_stages=2``: the partial products summed in halves,
    registered, then the two halves (one stage more; wide products of four partials)."""
    def slices(v, piece):
        return [(lo, v[lo:min(lo + piece, len(v))]) for lo in range(0, len(v), piece)]
    a_bits, b_bits = pipe.multiplier
    if len(a) < len(b):
        a, b = b, a                                  # the wider operand takes the wider port
    partial = []
    for lo_a, part_a in slices(a, a_bits):
        for lo_b, part_b in slices(b, b_bits):
            p = Signal(len(part_a) + len(part_b))
            m.d.comb += p.eq(part_a * part_b)
            partial.append((lo_a + lo_b, p))
    staged = pipe.stage(*[p for _, p in partial], *carry)
    staged = staged if isinstance(staged, list) else [staged]
    registered, carried = staged[:len(partial)], list(staged[len(partial):])
    terms = [value << shift for (shift, _), value in zip(partial, registered)]
    if sum_stages == 2 and len(terms) > 2:
        half = (len(terms) + 1) // 2
        sums = [Signal(len(a) + len(b)) for _ in range(2)]
        m.d.comb += [sums[0].eq(sum(terms[1:half], terms[0])), sums[1].eq(sum(terms[half + 1:], terms[half]))]
        staged = pipe.stage(*sums, *carried)
        terms, carried = list(staged[:2]), list(staged[2:])
    product = Signal(len(a) + len(b))
    m.d.comb += product.eq(sum(terms[1:], terms[0]))
    return product, carried


class Pipeline:
    """Registers a lane's values stage by stage, with a valid bit travelling along."""

    def __init__(self, m: Module, valid, name: str, multiplier: tuple[int, int] = DSP48E2_SHAPE):
        self.m, self.valid, self.name, self.depth = m, valid, name, 0
        self.multiplier = multiplier         # operand slices of one hard multiplier (staged_product)

    def stage(self, *values):
        self.depth += 1
        out = []
        for i, value in enumerate(values):
            value = Value.cast(value)
            # data registers have no reset (only the valid bit does): a reset input on
            # every pipeline flip-flop costs routing and blocks the FF's set/reset pin
            reg = Signal(value.shape(), name=f"{self.name}_s{self.depth}_{i}", reset_less=True)
            self.m.d.sync += reg.eq(value)
            out.append(reg)
        valid = Signal(name=f"{self.name}_s{self.depth}_valid")
        self.m.d.sync += valid.eq(self.valid)
        self.valid = valid
        return out[0] if len(out) == 1 else out


class FpUnit(wiring.Component):
    """Lanes x one datapath, one result per lane per cycle (II=1), valid-only.

    ``i`` carries ``{<operand>: [lanes x width], ...}`` (plus any per-vector control
    fields), ``o`` carries ``[lanes x result width]``; ``o.valid`` follows ``i.valid``
    by ``latency`` cycles.  Subclasses define ``operands`` (name -> width),
    ``controls`` (name -> width, shared by the lanes), ``result_width`` and
    ``lane(m, pipe, inputs, controls) -> result`` and the constant ``latency`` (the
    number of ``pipe.stage`` calls ``lane`` makes; checked at elaboration).
    """

    operands: dict = {}
    controls: dict = {}
    result_width = 32
    latency: int = 0

    def __init__(self, *, lanes: int = 1):
        if lanes < 1:
            raise ValueError("lanes must be at least 1")
        self.lanes = lanes
        fields = {name: data.ArrayLayout(width, lanes) for name, width in self.operands.items()}
        fields.update(self.controls)
        super().__init__({
            "i": In(stream.Signature(data.StructLayout(fields), always_ready=True)),
            "o": Out(stream.Signature(data.ArrayLayout(self.result_width, lanes), always_ready=True)),
        })

    def lane(self, m, pipe, inputs, controls):  # pragma: no cover - abstract
        raise NotImplementedError

    def elaborate(self, platform):
        m = Module()
        controls = {n: getattr(self.i.payload, n) for n in self.controls}
        for lane in range(self.lanes):
            pipe = Pipeline(m, self.i.valid, f"lane{lane}", multiplier_shape(platform))
            inputs = {n: getattr(self.i.payload, n)[lane] for n in self.operands}
            result = self.lane(m, pipe, inputs, controls)
            assert pipe.depth == self.latency, f"{type(self).__name__}: {pipe.depth} stages, latency says {self.latency}"
            m.d.comb += self.o.payload[lane].eq(result)
            if lane == 0:
                m.d.comb += self.o.valid.eq(pipe.valid)
        return m
