"""The attention engine's sums of fp16/bf16 products: the hardware of
:mod:`ndpkit.arith.blockfloat` (read its docstring for the arithmetic), bit for bit.

- :func:`decompose` — a 16-bit float as a significand, the exponent of its last place
  and special flags (the format chosen at run time: one datapath serves fp16 and bf16).
- :func:`to_block_fixed` — one element as its row's block-fixed integer (the q loader's
  :data:`Q_BITS` and the K rows' :data:`K_BITS`).
- :class:`KeyAlign` — the score side's K rows as block-fixed integers: a first pass
  takes each row's largest exponent while its beats wait in a queue, the second turns
  the elements into integers (one for all the units that share the K beats).
- :class:`FixedDot` — a unit's dot products: ``lanes`` products of q and K integers a
  beat (one DSP48E2 a lane, 27 x 18 bits), their low bits dropped, summed by a tree,
  the row's beats by an accumulator, rounded once to binary32.
- :class:`WeightedSums` — the value side's sums: per slot (in a memory) the columns'
  sums sharing one exponent and the weights' sum; each beat's aligned weight times
  its block-fixed V integers added to its slot's sums (one DSP48E2 a lane); a flush
  port reads states out (for merging and rounding).
- :func:`sum_to_fp32` — the rounding: the shared normalise/round path of the FP units.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal, Cat, Const, Mux, signed
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ndpkit_spec.blockfloat import (DROP, GROW, GUARD, K_BITS, PARTIALS, Q_BITS, SUM_BITS, TOTAL_FRAC, V_BITS,
                                   W_BITS)
from ndpkit_hw.arith.fp_common import F32, Pipeline, large_memory_attrs, normalize_into_range, round_bits, \
    round_pack, select_result

__all__ = ["FLUSH_LATENCY", "Decomposed", "decompose", "decompose_tf32", "sum_to_fp32", "KeyAlign", "FixedDot",
           "QLane", "Q_FINITE", "Q_ZERO", "Q_INF", "Q_NAN", "q_lane", "KLane", "row_field", "largest_field",
           "field_exponent", "row_maximum", "to_block_fixed", "BLOCK_FIXED_LATENCY", "WeightedSums",
           "weighted_layout", "VLane", "X_LAG", "LaneSum", "SumState", "SUM_BITS", "EXP_SHAPE", "NO_TERM",
           "REVISIT", "ROOM_AHEAD", "MERGED_BITS", "MergedState", "MERGE_LATENCY", "merge_states"]

#: a 16-bit float's significand: 11 bits (bf16: 8, zero-extended)
SIG_BITS = 11
#: product exponents: bf16's range is -266 .. 240
EXP_SHAPE = signed(11)
#: the exponent of "no nonzero term" (below every product's)
NO_TERM = -(1 << 10)
#: a realignment's step count that leaves only the sign (:func:`_step_down`)
ALL_STEPS = 12
assert ALL_STEPS * GROW >= SUM_BITS
#: a running sum's state, as stored and as flushed
SumState = data.StructLayout({"sum": signed(SUM_BITS), "exp": EXP_SHAPE, "pos_inf": 1, "neg_inf": 1, "nan": 1})
#: beats between two updates of one slot, at least (the read-modify-write's length)
REVISIT = 6
#: KeyAlign.room promises this many beats of space
ROOM_AHEAD = 3


class Decomposed:
    """``value = (-1)**sign * sig * 2**exp``; ``zero``, ``inf``, ``nan`` flags; for a
    16-bit format also ``field``, ``exp + bias`` (the exponent field, 1 for a
    subnormal)."""

    def __init__(self, name: str):
        self.sig = Signal(SIG_BITS, name=f"{name}_sig")
        self.exp = Signal(signed(10), name=f"{name}_exp")
        self.sign = Signal(name=f"{name}_sign")
        self.zero = Signal(name=f"{name}_zero")
        self.inf = Signal(name=f"{name}_inf")
        self.nan = Signal(name=f"{name}_nan")


def field_exponent(field, bf16):
    """The last place's exponent of a 16-bit float with exponent field ``field`` (1 for a
    subnormal): fp16 ``field - 25``, bf16 ``field - 134``."""
    return field - Mux(bf16, 134, 25)


def row_maximum(m: Module, value, first, valid, name: str):
    """The largest ``value`` of a row so far, this one included (``first``: the row's
    first, which starts it again); kept when ``valid``."""
    held = Signal.like(value, name=f"{name}_held")
    largest = Signal.like(value, name=f"{name}_largest")
    m.d.comb += largest.eq(Mux(~first & (held > value), held, value))
    with m.If(valid):
        m.d.sync += held.eq(largest)
    return largest


def decompose(m: Module, h, bf16, name: str) -> Decomposed:
    """A 16-bit float ``h`` (fp16, or bf16 when ``bf16``) -> :class:`Decomposed`."""
    d = Decomposed(name)
    x16, f16 = h[10:15], h[:10]
    xb, fb = h[7:15], h[:7]
    x = Mux(bf16, xb, x16)
    f = Mux(bf16, fb, f16)
    top = Mux(bf16, xb == 0xFF, x16 == 0x1F)
    normal = x != 0
    m.d.comb += [
        d.sig.eq(Mux(bf16, Cat(fb, normal), Cat(f16, normal))),
        # the last place's exponent: fp16 max(x, 1) - 25, bf16 max(x, 1) - 134
        d.exp.eq(field_exponent(Mux(normal, x, 1), bf16)),
        d.sign.eq(h[15]),
        d.zero.eq(~normal & (f == 0)),
        d.inf.eq(top & (f == 0)),
        d.nan.eq(top & (f != 0)),
    ]
    # the exponent field (1 for a subnormal): exp + bias, for comparing a row's elements
    d.field = Signal(8, name=f"{name}_field")
    m.d.comb += d.field.eq(Mux(normal, x, 1))
    return d


def decompose_tf32(m: Module, u, name: str) -> Decomposed:
    """A TF32 value as its 19 bits (sign, 8 exponent, 10 fraction: a binary32 pattern's
    top 19) -> :class:`Decomposed`."""
    d = Decomposed(name)
    x, f = u[10:18], u[:10]
    normal = x != 0
    m.d.comb += [
        d.sig.eq(Cat(f, normal)),
        d.exp.eq(Mux(normal, x, 1) - 137),
        d.sign.eq(u[18]),
        d.zero.eq(~normal & (f == 0)),
        d.inf.eq((x == 0xFF) & (f == 0)),
        d.nan.eq((x == 0xFF) & (f != 0)),
    ]
    return d


def sum_to_fp32(m: Module, pipe: Pipeline, total, exp, nan, pos_inf, neg_inf, carry=()):
    """Binary32 of ``total * 2**(exp - GUARD)`` (``total`` signed, RNE, subnormals,
    overflow to infinity, 0 -> +0), NaN if ``nan`` or both infinities, else an
    infinity flag wins.  Six stages of ``pipe`` (the ~50-bit magnitude's leading-zero
    count and its limits a stage before the shift amount: together they were the
    attention engine's longest path); returns (bits, carried values)."""
    width = len(total) - 1
    magnitude = Signal(width, name=f"{pipe.name}_magnitude")
    negative = Signal(name=f"{pipe.name}_negative")
    m.d.comb += [negative.eq(total[-1]), magnitude.eq(Mux(total[-1], -total, total))]
    # the magnitude's top bit weighs 2**(exp - GUARD + width - 1): its biased exponent
    biased = Signal(signed(len(exp) + 2), name=f"{pipe.name}_biased")
    m.d.comb += biased.eq(exp + (width - 1 - GUARD + F32.bias))
    is_nan = nan | (pos_inf & neg_inf)
    staged = pipe.stage(magnitude, biased, negative, is_nan, pos_inf, neg_inf, *carry)
    magnitude, biased, negative, is_nan, pos_inf, neg_inf = staged[:6]
    carry = staged[6:]
    norm, norm_exp, zero, (negative, is_nan, pos_inf, neg_inf, *carry) = normalize_into_range(
        m, magnitude, biased, f"{pipe.name}_norm", round_bits(F32), pipe=pipe,
        carry=(negative, is_nan, pos_inf, neg_inf, *carry), split=True)
    staged = pipe.stage(norm, norm_exp, zero, negative, is_nan, pos_inf, neg_inf, *carry)
    norm, norm_exp, zero, negative, is_nan, pos_inf, neg_inf = staged[:7]
    carry = staged[7:]
    packed, (zero, is_nan, pos_inf, neg_inf, *carry) = round_pack(
        m, F32, negative & ~zero, norm, norm_exp, 0, f"{pipe.name}_round", pipe=pipe,
        carry=(zero, is_nan, pos_inf, neg_inf, *carry), underflow=False)
    result = select_result(m, 32, packed, [
        (is_nan, F32.qnan),
        (pos_inf, F32.inf(0)),
        (neg_inf, F32.inf(1)),
        (zero, 0),
    ])
    return result, list(carry)


def _fixed_lane(bits):
    return data.StructLayout({"x": signed(bits + 1), "sign": 1, "zero": 1, "inf": 1, "nan": 1})


def _magnitude_lane(bits):
    return data.StructLayout({"x": bits, "sign": 1, "zero": 1, "inf": 1, "nan": 1})


#: a q element as the q bank keeps it: its block-fixed integer (:data:`Q_BITS` magnitude
#: bits) and its class (:data:`Q_FINITE`, :data:`Q_ZERO`, :data:`Q_INF`, :data:`Q_NAN`).
#: The integer's sign is the element's (a tiny element's integer is 0 or -1: not zero;
#: an infinity's is 0 or -1 by its sign), so the products' specials need no more bits
QLane = data.StructLayout({"x": signed(Q_BITS + 1), "cls": 2})
Q_FINITE, Q_ZERO, Q_INF, Q_NAN = range(4)
#: a K element likewise (:data:`K_BITS`)
KLane = _fixed_lane(K_BITS)
#: stages of :func:`to_block_fixed`
BLOCK_FIXED_LATENCY = 3


def row_field(m: Module, d: Decomposed, name: str):
    """The exponent field an element contributes to its row's largest: its own, a
    special's the format's smallest (1, as a zero's)."""
    field = Signal(8, name=f"{name}_row_field")
    m.d.comb += field.eq(Mux(d.inf | d.nan, 1, d.field))
    return field


def largest_field(m: Module, pipe: Pipeline, elements, bf16, carry=()):
    """The largest :func:`row_field` of ``elements`` (16-bit patterns): the fields
    registered, then a tree of comparisons, registered every two levels.  Returns (the
    field, carried values); ``pipe.depth`` says how many stages it took."""
    name = pipe.name
    fields = [row_field(m, decompose(m, h, bf16, f"{name}_e{i}"), f"{name}_{i}") for i, h in enumerate(elements)]
    n = len(fields)
    staged = pipe.stage(*fields, *carry)
    staged = staged if isinstance(staged, list) else [staged]
    fields, carry = staged[:n], staged[n:]
    level = 0
    while len(fields) > 1:
        nxt = []
        for j in range(0, len(fields), 2):
            s = Signal(8, name=f"{name}_max{level}_{j}")
            m.d.comb += s.eq(Mux(fields[j] > fields[j + 1], fields[j], fields[j + 1]))
            nxt.append(s)
        fields, level = nxt, level + 1
        if level % 2 == 0 or len(fields) == 1:
            staged = pipe.stage(*fields, *carry)
            staged = staged if isinstance(staged, list) else [staged]
            fields, carry = staged[:len(fields)], staged[len(fields):]
    return fields[0], list(carry)


def q_lane(m: Module, fixed) -> Signal:
    """A :func:`to_block_fixed` element (:data:`Q_BITS`) as its :data:`QLane`."""
    lane = Signal(QLane, name="q_lane")
    m.d.comb += [lane.x.eq(Mux(fixed.inf & fixed.sign, -1, fixed.x)),
                 lane.cls.eq(Mux(fixed.nan, Q_NAN, Mux(fixed.inf, Q_INF, Mux(fixed.zero, Q_ZERO, Q_FINITE))))]
    return lane


def to_block_fixed(m: Module, pipe: Pipeline, d: Decomposed, row_field, bits: int, bf16, carry=(),
                   magnitude: bool = False):
    """The block-fixed integer of the element ``t * 2**e`` (:func:`ndpkit.arith.blockfloat.
    block_fixed`) against its row's largest exponent field: the magnitude ``|t| *
    2**(bits - SIG - distance)`` (SIG = 11, bf16 8) truncated, a negative element's
    ones' complement (the sign an XOR before the arithmetic shift), 0 for a special; a
    signed ``bits + 1``-bit integer with its :func:`_fixed_lane` flags.  With
    ``magnitude`` the magnitude alone (``bits`` bits, :data:`VLane`): the consumer
    negates a negative element's (``sign``) where it adds it, in its adder's carry.
    :data:`BLOCK_FIXED_LATENCY` stages of ``pipe``."""
    name = pipe.name
    # (the row's field is its elements' largest: the distance is never negative, and a
    # special's, whose field may be larger, places nothing)
    distance = Signal(8, name=f"{name}_distance")
    amount = Signal(range(bits + 1), name=f"{name}_amount")
    # a shift by ``bits`` leaves 0 or -1, as any longer one
    m.d.comb += [distance.eq(row_field - d.field), amount.eq(Mux(distance > bits, bits, distance))]
    special = d.inf | d.nan
    # the significand at the top of 11 bits (bf16's 8 three up), then placed: one 11-bit select
    top = Signal(SIG_BITS, name=f"{name}_top")
    m.d.comb += top.eq(Mux(special, 0, Mux(bf16, d.sig << 3, d.sig)))
    top_placed = Signal(bits, name=f"{name}_magnitude")
    m.d.comb += top_placed.eq(top << (bits - SIG_BITS))
    negative = d.sign & ~d.zero & ~special
    placed = Signal(signed(bits + 1), name=f"{name}_placed")
    # ones' complement: the sign an XOR before the arithmetic shift
    m.d.comb += placed.eq(Cat(top_placed, 0) if magnitude else Cat(top_placed, 0) ^ negative.replicate(bits + 1))
    flags = Cat(d.sign, d.zero, d.inf, d.nan)
    staged = pipe.stage(placed, amount, flags, *carry)
    placed, amount, flags = staged[:3]
    # the arithmetic right shift in two stages, the fine one first (while the significand
    # is still 11 bits wide the select spans fewer bits), then whole bytes
    half = Signal(signed(bits + 1), name=f"{name}_half")
    m.d.comb += half.eq(placed.as_signed() >> amount[:3])
    staged = pipe.stage(half, amount, flags, *staged[3:])
    half, amount, flags = staged[:3]
    layout = _magnitude_lane(bits) if magnitude else _fixed_lane(bits)
    lane = Signal(layout, name=f"{name}_fixed")
    m.d.comb += [lane.x.eq(half.as_signed() >> Cat(Const(0, 3), amount[3:])),
                 Cat(lane.sign, lane.zero, lane.inf, lane.nan).eq(flags)]
    staged = pipe.stage(lane, *staged[3:])
    staged = staged if isinstance(staged, list) else [staged]
    return data.View(layout, staged[0]), staged[1:]


class KeyAlign(wiring.Component):
    """K rows as block-fixed integers, like :func:`ndpkit.arith.blockfloat.block_fixed`
    with :data:`K_BITS`.

    ``i``: beats of ``lanes`` 16-bit patterns, ``last`` on a row's last beat, a ``tag``
    that travels with the beat.  A first pass takes the row's largest exponent while the
    beats wait in a queue (a row has at most ``max_row_beats`` beats; the queue holds two
    rows and the pass's latency); the second turns every element into its integer.
    ``o`` (valid only: the consumer always takes it): the beat's :data:`KLane` elements,
    the row's exponent ``exp``, ``last`` and ``tag``.  ``bf16`` (held): the format.
    ``room``: the queue takes at least :data:`ROOM_AHEAD` more beats (a producer that
    reads its operands from a memory decides a cycle ahead)."""

    def __init__(self, *, lanes: int = 16, max_row_beats: int = 8, tag_width: int = 8):
        if lanes < 1 or lanes & (lanes - 1):
            raise ValueError(f"lanes must be a power of two, not {lanes}")
        self.lanes, self.max_row_beats, self.tag_width = lanes, max_row_beats, tag_width
        beat = data.StructLayout({"k": data.ArrayLayout(16, lanes), "last": 1, "tag": tag_width})
        aligned = data.StructLayout({"k": data.ArrayLayout(KLane, lanes), "exp": EXP_SHAPE, "last": 1,
                                     "tag": tag_width})
        super().__init__({
            "i": In(stream.Signature(beat)),
            "o": Out(stream.Signature(aligned, always_ready=True)),
            "bf16": In(1),
            "room": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        C = self.lanes
        depth = 2 * self.max_row_beats + 8
        beats = fifo.SyncFIFOBuffered(width=len(self.i.payload.as_value()), depth=depth)
        rows = fifo.SyncFIFOBuffered(width=8, depth=depth)
        m.submodules.beats, m.submodules.rows = beats, rows
        m.d.comb += self.room.eq(beats.level < depth - ROOM_AHEAD)
        take = Signal()
        m.d.comb += [self.i.ready.eq(beats.w_rdy), take.eq(self.i.valid & self.i.ready),
                     beats.w_en.eq(take), beats.w_data.eq(self.i.payload.as_value())]

        # ---- pass 1: the row's largest exponent --------------------------------------------
        p1 = Pipeline(m, take, "pass1")
        largest, (last,) = largest_field(m, p1, list(self.i.payload.k), self.bf16, carry=(self.i.payload.last,))
        first = Signal(init=1)
        with m.If(p1.valid):
            m.d.sync += first.eq(last)
        new_max = row_maximum(m, largest, first, p1.valid, "p1_row")
        m.d.comb += [rows.w_en.eq(p1.valid & last), rows.w_data.eq(new_max)]

        # ---- pass 2: every element as its row's integer -------------------------------------
        beat = data.View(self.i.payload.shape(), beats.r_data)
        field_max = rows.r_data
        go = Signal()
        m.d.comb += [go.eq(beats.r_rdy & rows.r_rdy), beats.r_en.eq(go), rows.r_en.eq(go & beat.last)]
        lanes = []
        for lane in range(C):
            pipe = Pipeline(m, go, f"pass2_lane{lane}")
            k = decompose(m, beat.k[lane], self.bf16, f"p2k{lane}")
            fixed, _ = to_block_fixed(m, pipe, k, field_max, K_BITS, self.bf16)
            lanes.append(fixed)
        # the row's exponent (its largest field less the format's bias), once for the lanes
        row_exp = Signal(EXP_SHAPE)
        m.d.comb += row_exp.eq(field_exponent(field_max, self.bf16))
        carried = Cat(row_exp, beat.last, beat.tag)
        tag_pipe = Pipeline(m, go, "pass2_tag")
        for _ in range(BLOCK_FIXED_LATENCY):
            carried = tag_pipe.stage(carried)
        m.d.comb += [self.o.valid.eq(tag_pipe.valid), self.o.payload.exp.eq(carried[:EXP_SHAPE.width]),
                     self.o.payload.last.eq(carried[EXP_SHAPE.width]),
                     self.o.payload.tag.eq(carried[EXP_SHAPE.width + 1:])]
        for lane, fixed in enumerate(lanes):
            m.d.comb += self.o.payload.k[lane].eq(fixed)
        return m


#: a block-fixed product less its DROP low bits: |Q x K| < 2**(Q_BITS + K_BITS)
PRODUCT_BITS = Q_BITS + K_BITS - DROP + 1


class FixedDot(wiring.Component):
    """Rows of block-fixed products summed like :func:`ndpkit.arith.blockfloat.fixed_dot`,
    rounded to binary32.

    ``i`` (valid only): beats of ``lanes`` (:data:`QLane`, :data:`KLane`) pairs, the q
    row's and the K row's exponents (held over a row), ``last`` on a row's last beat and
    a ``tag``; ``o``: one binary32 sum a row, in row order, with the tag of its last beat
    (valid only).  ``bf16`` (held): the operands' format.  A row has at most
    ``max_row_beats`` beats.  Each lane is one 27 x 18 multiplier (a DSP48E2), its
    operands and product registered.

    ``partnered``: two FixedDots in step share a row (each its own beats of it): ``row``
    gives this one's row integer and special flags (registered, with the row's last
    beat), and with ``add_partner`` (held) the sum adds ``partner`` (the other's
    ``row``) before its one rounding, a stage later: integers, so the row's sum is the
    one a FixedDot of all its beats would round."""

    def __init__(self, *, lanes: int = 16, max_row_beats: int = 8, tag_width: int = 8, partnered: bool = False):
        if lanes < 1 or lanes & (lanes - 1):
            raise ValueError(f"lanes must be a power of two, not {lanes}")
        self.lanes, self.max_row_beats, self.tag_width = lanes, max_row_beats, tag_width
        self.partnered = partnered
        beat = data.StructLayout({"q": data.ArrayLayout(QLane, lanes), "k": data.ArrayLayout(KLane, lanes),
                                  "q_exp": EXP_SHAPE, "k_exp": EXP_SHAPE, "last": 1, "tag": tag_width})
        members = {
            "i": In(stream.Signature(beat, always_ready=True)),
            "o": Out(stream.Signature(data.StructLayout({"value": 32, "tag": tag_width}), always_ready=True)),
            "bf16": In(1),
        }
        if partnered:
            row = self.row_layout()
            members.update(row=Out(row), partner=In(row), add_partner=In(1))
        super().__init__(members)

    def row_bits(self) -> int:
        """The row integer's width: a whole row's terms (``lanes * max_row_beats``) summed."""
        return PRODUCT_BITS + (self.lanes * self.max_row_beats - 1).bit_length() + 1

    def row_layout(self) -> data.StructLayout:
        """A row's integer and its special flags (+inf, -inf, NaN), as ``row`` gives them."""
        return data.StructLayout({"sum": signed(self.row_bits()), "special": 3})

    def elaborate(self, platform):
        m = Module()
        C = self.lanes
        beat = self.i.payload
        # the row's exponent (the sum's, as sum_to_fp32 takes it) beside the lanes
        exp = Signal(EXP_SHAPE, name="row_exp")
        offset = DROP - Q_BITS - K_BITS + GUARD
        m.d.comb += exp.eq(beat.q_exp + beat.k_exp + Mux(self.bf16, offset + 2 * 8, offset + 2 * SIG_BITS))
        terms, flags = [], []
        for lane in range(C):
            pipe = Pipeline(m, self.i.valid, f"lane{lane}")
            q, k = beat.q[lane], beat.k[lane]
            q_nan, q_inf, q_zero, q_sign = q.cls == Q_NAN, q.cls == Q_INF, q.cls == Q_ZERO, q.x[-1]
            nan = Signal(name=f"lane{lane}_nan")
            inf = Signal(name=f"lane{lane}_inf")
            m.d.comb += [nan.eq(q_nan | k.nan | (q_inf & k.zero) | (q_zero & k.inf)),
                         inf.eq((q_inf | k.inf) & ~nan)]
            special = Cat(inf & ~(q_sign ^ k.sign), inf & (q_sign ^ k.sign), nan)
            # the DSP's A/B registers, then its M register
            a, b, special = pipe.stage(q.x, k.x, special)
            product = Signal(signed(len(a) + len(b)), name=f"lane{lane}_product")
            m.d.comb += product.eq(a * b)
            product, special = pipe.stage(product, special)
            term = Signal(signed(PRODUCT_BITS), name=f"lane{lane}_term")
            m.d.comb += term.eq(product >> DROP)
            terms.append(term)
            flags.append(special)
        carried = Cat(exp, beat.last, beat.tag)
        tag_pipe = Pipeline(m, self.i.valid, "tag")
        for _ in range(pipe.depth):
            carried = tag_pipe.stage(carried)
        # the lanes' specials registered before their OR
        tree = Pipeline(m, pipe.valid, "tree")
        staged = tree.stage(*terms, *flags, carried)
        terms, flags, carried = staged[:C], staged[C:2 * C], staged[2 * C]
        special = Signal(3, name="beat_special")
        m.d.comb += special.eq(Cat(*[Cat(*[f[i] for f in flags]).any() for i in range(3)]))
        level = 0
        while len(terms) > 1:
            level += 1
            sums = []
            for j in range(0, len(terms), 2):
                s = Signal(signed(PRODUCT_BITS + level), name=f"sum{level}_{j}")
                m.d.comb += s.eq(terms[j] + terms[j + 1])
                sums.append(s)
            staged = tree.stage(*sums, special, carried)
            terms, special, carried = staged[:len(sums)], staged[len(sums)], staged[len(sums) + 1]
        beat_sum = terms[0]
        exp = carried[:EXP_SHAPE.width].as_signed()
        last = carried[EXP_SHAPE.width]
        tag = carried[EXP_SHAPE.width + 1:]
        # the row's beats: an accumulator, emitted with the row's last beat
        row_bits = self.row_bits()
        total = Signal(signed(row_bits))
        row_special = Signal(3)
        row_first = Signal(init=1)
        row_sum = Signal(signed(row_bits))
        row_flags = Signal(3)
        m.d.comb += [row_sum.eq(Mux(row_first, 0, total) + beat_sum),
                     row_flags.eq(Mux(row_first, 0, row_special) | special)]
        with m.If(tree.valid):
            m.d.sync += [total.eq(row_sum), row_special.eq(row_flags), row_first.eq(last)]
        out_pipe = Pipeline(m, tree.valid & last, "round")
        row_sum, exp, row_flags, tag = out_pipe.stage(row_sum, exp, row_flags, tag)
        if self.partnered:
            m.d.comb += [self.row.sum.eq(row_sum), self.row.special.eq(row_flags)]
            both = Signal(signed(row_bits), name="pair_sum")
            both_flags = Signal(3, name="pair_special")
            m.d.comb += [both.eq(row_sum + Mux(self.add_partner, self.partner.sum, 0)),
                         both_flags.eq(row_flags | Mux(self.add_partner, self.partner.special, 0))]
            row_sum, exp, row_flags, tag = out_pipe.stage(both, exp, both_flags, tag)
        value, (tag,) = sum_to_fp32(m, out_pipe, row_sum, exp, row_flags[2], row_flags[0], row_flags[1],
                                    carry=(tag,))
        m.d.comb += [self.o.valid.eq(out_pipe.valid), self.o.payload.value.eq(value), self.o.payload.tag.eq(tag)]
        return m


#: cycles from a :class:`WeightedSums` flush to its state
FLUSH_LATENCY = 2


#: a V element as the value side takes it: its block-fixed magnitude (:data:`V_BITS`
#: bits) and its sign, which the sum's adder applies (negating in its carry: no
#: incrementer a lane)
VLane = _magnitude_lane(V_BITS)
#: a weighted sum's column as a :class:`WeightedSums` slot keeps it: NaN as both infinities
#: (the golden model's special code, closed under the sum's OR; a bit a column less:
#: 16 columns' slot is 708 bits, ten UltraRAMs' 720)
LaneSum = data.StructLayout({"sum": signed(SUM_BITS), "pos_inf": 1, "neg_inf": 1})
# a slot with no term yet keeps NO_TERM as its exponent: a multiple of GROW below every term's
assert NO_TERM % GROW == 0
#: cycles from a :class:`WeightedSums` beat to its elements
X_LAG = 2


def weighted_layout(lanes: int):
    """A :class:`WeightedSums` slot: its columns' sums, the weights' sum and the
    exponent the columns share."""
    return data.StructLayout({"lanes": data.ArrayLayout(LaneSum, lanes), "total": LaneSum, "exp": EXP_SHAPE})


def _step_down(m: Module, value, steps, sign, name: str):
    """``value >> (GROW * steps)`` (arithmetic; ``steps`` 0 .. 12, 12 leaving ``sign``
    in every bit): two 4:1 selects a bit (4-bit, then 16-bit steps)."""
    width = len(value)

    def select(sel, options):
        # a 4:1 select as two levels of 2:1 on the select's bits: six inputs a bit, one LUT6
        return Mux(sel[1], Mux(sel[0], options[3], options[2]), Mux(sel[0], options[1], options[0]))
    fine = Signal(signed(width), name=f"{name}_fine")
    m.d.comb += fine.eq(select(steps[:2], [value.as_signed() >> (GROW * k) for k in range(4)]))
    out = Signal(signed(width), name=f"{name}_down")
    m.d.comb += out.eq(select(steps[2:], [fine >> (4 * GROW * k) for k in range(3)] + [sign.replicate(width)]))
    return out


class WeightedSums(wiring.Component):
    """Weighted sums like :func:`ndpkit.arith.blockfloat.weigh` and
    :func:`~ndpkit.arith.blockfloat.weigh_total`, ``lanes`` columns a beat.

    ``i`` (valid only): a weight ``p`` (TF32, 19 bits, at most 1) and the row's exponent
    ``v_exp`` of a V row; ``total``: the beat also adds ``p`` to the slot's weights' sum
    (once a row); the ``slot`` and ``bank`` it updates; ``fresh``: the slot starts empty
    (its old state is ignored).  ``x``: the beat's ``lanes`` block-fixed elements
    (:data:`VLane`), :data:`X_LAG` cycles after the beat (where the lanes take them:
    a register chain of the elements would be a shift register, a LUT a bit).  A slot
    keeps its columns' sums, the exponent they share and the weights' sum
    (:func:`weighted_layout`).  Each lane is one multiplier (a DSP48E2) of the weight and
    the element's magnitude, whose product is added to its column's sum (subtracted for a
    negative element: the carry in), realigned by a step select when the exponent grows: the
    per-unit work (the exponent, the weight's alignment) is done once for the
    lanes.  The caller updates a slot at most once every :data:`REVISIT` beats (a
    read-modify-write).  ``flush`` (valid only) reads a slot of a bank the beats are not
    updating; ``state`` gives it two cycles later as ``lanes + 1`` SumState values
    (the columns' and, last, the weights' sum).  ``bf16`` (held): the values' format.

    ``shared_read``: the updates and the flushes take turns on one read port, so the
    memory is one copy, not two (a write and two reads a cycle are two copies of a
    simple dual-port RAM); the caller never flushes in a cycle a beat arrives.
    ``ultra``: on UltraScale+, the memory in UltraRAM (else block RAM).
    """

    def __init__(self, *, lanes: int = 16, slots: int = 512, split_banks: bool | None = None,
                 shared_read: bool = False, ultra: bool = True):
        if slots < 2 or slots & (slots - 1):
            raise ValueError(f"slots must be a power of two, not {slots}")
        self.lanes, self.slots = lanes, slots
        #: a memory per bank (block RAM targets) or one with two read ports (UltraRAM);
        #: None: by the platform (:func:`~ndpkit_hw.arith.fp_common.large_memory_attrs`)
        self.split_banks = split_banks
        self.shared_read, self.ultra = shared_read, ultra
        beat = data.StructLayout({"p": 19, "v_exp": EXP_SHAPE, "total": 1, "slot": range(slots), "bank": 1,
                                  "fresh": 1})
        where = data.StructLayout({"slot": range(slots), "bank": 1})
        super().__init__({
            "i": In(stream.Signature(beat, always_ready=True)),
            "x": In(data.ArrayLayout(VLane, lanes)),
            "flush": In(stream.Signature(where, always_ready=True)),
            "state": Out(stream.Signature(data.ArrayLayout(SumState, lanes + 1), always_ready=True)),
            "bf16": In(1),
        })

    def _states(self, m: Module, platform, update_at, write_at, write, flush_at, flush_valid):
        """The slots' memory, written at ``write_at`` with ``write`` (data, enable): (the
        updated slot's old state a cycle after ``update_at``, the flushed one a cycle after
        ``flush_at``)."""
        width = weighted_layout(self.lanes).size
        slot_bits = (self.slots - 1).bit_length()
        uram = large_memory_attrs(platform)
        split = not uram if self.split_banks is None else self.split_banks
        if not split:
            # UltraScale+: one memory in UltraRAM (or block RAM), the bank its top address bit, a
            # read port for the updates and one for the flushes, or one for both (shared_read)
            mem = Memory(shape=width, depth=2 * self.slots, init=[],
                         attrs=uram if self.ultra or not uram else {"ram_style": "block"})
            m.submodules.states = mem
            # (a read never meets a write of its address, REVISIT apart or of the other bank, so
            # transparency is free to choose: transparent in UltraRAM, where a non-transparent
            # port cost a register of the word a port; not in block RAM, whose simple dual-port
            # mode Yosys makes transparent with a soft bypass, 1.2k LUT at 32 lanes)
            wp = mem.write_port()
            m.d.comb += [wp.addr.eq(write_at), wp.data.eq(write.data), wp.en.eq(write.en)]
            transparent = (wp,) if self.ultra else ()
            if self.shared_read:
                rp = mem.read_port(transparent_for=transparent)
                m.d.comb += rp.addr.eq(Mux(flush_valid, flush_at, update_at))
                return rp.data, rp.data
            update_rp, flush_rp = mem.read_port(transparent_for=transparent), mem.read_port(transparent_for=transparent)
            m.d.comb += [update_rp.addr.eq(update_at), flush_rp.addr.eq(flush_at)]
            return update_rp.data, flush_rp.data
        # block RAM (ECP5): a memory per bank with one read port, which serves the flush
        # when it names that bank and the updates otherwise (the updates read the bank they
        # update, the flushes the other one: the caller's contract)
        flush_bank, update_bank = Signal(), Signal()
        m.d.sync += [flush_bank.eq(flush_at[slot_bits]), update_bank.eq(update_at[slot_bits])]
        reads = []
        for b in range(2):
            mem = Memory(shape=width, depth=self.slots, init=[])
            m.submodules[f"states{b}"] = mem
            rp, wp = mem.read_port(), mem.write_port()
            m.d.comb += [rp.addr.eq(Mux(flush_valid & (flush_at[slot_bits] == b), flush_at[:slot_bits],
                                        update_at[:slot_bits])),
                         wp.addr.eq(write_at[:slot_bits]), wp.data.eq(write.data),
                         wp.en.eq(write.en & (write_at[slot_bits] == b))]
            reads.append(rp.data)
        return Mux(update_bank, reads[1], reads[0]), Mux(flush_bank, reads[1], reads[0])

    def elaborate(self, platform):
        m = Module()
        C = self.lanes
        Slot = weighted_layout(C)
        beat, flush = self.i.payload, self.flush.payload
        slot_bits = (self.slots - 1).bit_length()
        update_at = Signal(slot_bits + 1)
        m.d.comb += update_at.eq(Cat(beat.slot[:slot_bits], beat.bank))
        flush_at = Signal(slot_bits + 1)
        m.d.comb += flush_at.eq(Cat(flush.slot[:slot_bits], flush.bank))
        write_at = Signal(slot_bits + 1)
        write = Signal(data.StructLayout({"data": Slot, "en": 1}))
        old_raw, flushed_raw = self._states(m, platform, update_at, write_at, write, flush_at, self.flush.valid)
        old = data.View(Slot, old_raw)

        # ---- stage 0: the weight's fields and the term's exponent (once for the lanes) ----
        pipe = Pipeline(m, self.i.valid, "weigh")
        p = decompose_tf32(m, beat.p, "weight")
        live = ~p.zero & ~p.inf & ~p.nan
        term_exp = Signal(EXP_SHAPE)                  # the weight's last place plus the row's
        term_up = Signal(EXP_SHAPE)                   # ... up to a multiple of GROW
        m.d.comb += [term_exp.eq(p.exp + beat.v_exp), term_up.eq((term_exp + (GROW - 1)) & ~(GROW - 1))]
        total_up = Signal(signed(10))                 # the weight's fixed-point shift
        m.d.comb += total_up.eq(p.exp + TOTAL_FRAC)
        p_flags = Cat(p.zero, p.inf, p.nan)
        staged = pipe.stage(update_at, beat.fresh, beat.total, live, p.sig, term_exp, term_up, total_up, p_flags)
        where, fresh, total, live, sig, term_exp, term_up, total_up, p_flags = staged
        p_zero, p_inf, p_nan = p_flags

        # ---- stage 1: the old state; whether the exponent grows, by how much, and the weight's
        # distance below it either way (the comparison and the subtractions side by side) ----
        base_exp = Signal(EXP_SHAPE)
        m.d.comb += base_exp.eq(Mux(fresh, NO_TERM, old.exp))
        grow = Signal()
        m.d.comb += grow.eq(live & (term_up > base_exp))
        new_exp = Signal(EXP_SHAPE)
        m.d.comb += new_exp.eq(Mux(grow, term_up, base_exp))
        rise, below = Signal(signed(EXP_SHAPE.width + 1)), Signal(signed(EXP_SHAPE.width + 1))
        m.d.comb += [rise.eq(term_up - base_exp), below.eq(base_exp - term_exp)]
        # the lanes' sums with their signs (0 for a fresh slot, which the 12-step select gives)
        signs = Cat(*[old.lanes[i].sum[-1] & ~fresh for i in range(C)])
        base_flags = Signal(2 * (C + 1))
        m.d.comb += base_flags.eq(Mux(fresh, 0, Cat(*[Cat(s.pos_inf, s.neg_inf)
                                                       for s in [*old.lanes, old.total]])))
        base_total = Signal(signed(SUM_BITS))
        m.d.comb += base_total.eq(Mux(fresh, 0, old.total.sum))
        sums = Cat(*[old.lanes[i].sum for i in range(C)])
        staged = pipe.stage(where, fresh, total, live, grow, rise, below, (term_up - term_exp)[:2], sig, new_exp,
                            total_up, p_flags, sums, signs, base_flags, base_total)
        (where, fresh, total, live, grow, rise, below, up_distance, sig, new_exp, total_up, p_flags, sums, signs,
         base_flags, base_total) = staged
        p_zero, p_inf, p_nan = p_flags
        # ---- stage 2: the shift amounts; the aligned weight, each lane's realigned sum, the
        # weights' sum's term; the products' specials (the elements arrive here) ----
        assert pipe.depth == X_LAG
        x = self.x
        steps = Signal(4)                             # the sums' shift in GROW steps (12: all gone)
        m.d.comb += steps.eq(Mux(fresh, ALL_STEPS,
                                 Mux(grow, Mux(rise.as_signed() >= SUM_BITS, ALL_STEPS, rise[2:6]), 0)))
        distance = Signal(signed(EXP_SHAPE.width + 1))
        m.d.comb += distance.eq(Mux(grow, up_distance, below))
        align = Signal(range(W_BITS + 1))            # the weight's shift (W_BITS: all gone)
        m.d.comb += align.eq(Mux(~live | (distance >= W_BITS), W_BITS, distance))
        weight = Signal(W_BITS)
        m.d.comb += weight.eq(Cat(Const(0, W_BITS - SIG_BITS), sig) >> align)
        down = [_step_down(m, sums.word_select(i, SUM_BITS), steps, signs[i], f"lane{i}") for i in range(C)]
        term = Signal(SUM_BITS)                       # floor(p * 2**TOTAL_FRAC) (p <= 1)
        m.d.comb += term.eq(Mux(live & total, Mux(total_up >= 0, sig << total_up.as_unsigned()[:6],
                                                  sig >> (-total_up).as_unsigned()), 0))
        # the products' specials: the weight's against each element (p is never negative)
        flags = []
        for i in range(C):
            v = x[i]
            nan = p_nan | v.nan | (p_inf & v.zero) | (p_zero & v.inf)
            inf = (p_inf | v.inf) & ~nan
            flags.append(Cat((inf & ~v.sign) | nan, (inf & v.sign) | nan))
        total_flags = Mux(total, Cat(p_inf | p_nan, p_nan), 0)
        new_flags = Signal(2 * (C + 1))
        m.d.comb += new_flags.eq(base_flags | Cat(*flags, total_flags))
        xs = Cat(*[x[i].x for i in range(C)])
        x_signs = Cat(*[x[i].sign for i in range(C)])
        staged = pipe.stage(where, weight, xs, x_signs, Cat(*down), new_exp, base_total, term, new_flags)
        where, weight, xs, x_signs, down, new_exp, base_total, term, new_flags = staged
        # ---- stages 3, 4: the DSP's product of the magnitudes (M register), then the sum
        # (P register) ----
        products = []
        for i in range(C):
            product = Signal(W_BITS + V_BITS, name=f"lane{i}_product")
            m.d.comb += product.eq(weight * xs.word_select(i, V_BITS))
            products.append(product)
        new_total = Signal(signed(SUM_BITS))
        m.d.comb += new_total.eq(base_total + term)
        staged = pipe.stage(where, *products, x_signs, down, new_exp, new_total, new_flags)
        where, products, (x_signs, down, new_exp, new_total, new_flags) = staged[0], staged[1:C + 1], staged[C + 1:]
        results = []
        for i in range(C):
            # sum - product for a negative element as sum + ~product + 1, the 1 a carry in: an
            # extra low bit, 1 beside the sign, carries exactly the sign (-0 adds 0)
            negative = x_signs[i]
            with_carry = Signal(SUM_BITS + 1, name=f"lane{i}_with_carry")
            m.d.comb += with_carry.eq(Cat(Const(1), down.word_select(i, SUM_BITS)) +
                                      Cat(negative, products[i].as_unsigned() ^ negative.replicate(W_BITS + V_BITS),
                                          negative.replicate(SUM_BITS - W_BITS - V_BITS)))
            result = Signal(signed(SUM_BITS), name=f"lane{i}_sum")
            m.d.comb += result.eq(with_carry[1:])
            results.append(result)
        staged = pipe.stage(where, *results, new_exp, new_total, new_flags)
        where, results, (new_exp, new_total, new_flags) = staged[0], staged[1:C + 1], staged[C + 1:]
        # ---- stage 5: the write ----
        assert pipe.depth == REVISIT - 1
        new = Signal(Slot)
        m.d.comb += [new.exp.eq(new_exp), new.total.sum.eq(new_total),
                     Cat(new.total.pos_inf, new.total.neg_inf).eq(new_flags[2 * C:])]
        for i in range(C):
            m.d.comb += [new.lanes[i].sum.eq(results[i]),
                         Cat(new.lanes[i].pos_inf, new.lanes[i].neg_inf).eq(new_flags[2 * i:2 * i + 2])]
        m.d.comb += [write_at.eq(where), write.data.eq(new), write.en.eq(pipe.valid)]

        # ---- the flush: the read port's data a cycle later, as SumStates, registered ----
        flush_pipe = Pipeline(m, self.flush.valid, "flush")
        flush_pipe.stage()
        flushed = data.View(Slot, flushed_raw)
        exp = Signal(EXP_SHAPE)
        # the product of an aligned weight and an integer weighs 2**(exp + 11 + SIG - W_BITS - V_BITS)
        offset = SIG_BITS + GUARD - W_BITS - V_BITS
        m.d.comb += exp.eq(Mux(flushed.exp == NO_TERM, NO_TERM,
                               flushed.exp + Mux(self.bf16, offset + 8, offset + SIG_BITS)))
        out = Signal(data.ArrayLayout(SumState, C + 1))
        for i, s in enumerate([*flushed.lanes, flushed.total]):
            m.d.comb += [out[i].sum.eq(s.sum), out[i].exp.eq(exp if i < C else GUARD - TOTAL_FRAC),
                         out[i].pos_inf.eq(s.pos_inf), out[i].neg_inf.eq(s.neg_inf),
                         out[i].nan.eq(s.pos_inf & s.neg_inf)]
        out = flush_pipe.stage(out)
        assert flush_pipe.depth == FLUSH_LATENCY
        m.d.comb += [self.state.valid.eq(flush_pipe.valid), self.state.payload.eq(out)]
        return m


#: a merged sum: four partials
MERGED_BITS = SUM_BITS + 2
MergedState = data.StructLayout({"sum": signed(MERGED_BITS), "exp": EXP_SHAPE, "pos_inf": 1, "neg_inf": 1, "nan": 1})
#: stages of :func:`merge_states`
MERGE_LATENCY = 3


def merge_states(m: Module, pipe: Pipeline, a, b, carry=()):
    """:func:`ndpkit.arith.blockfloat.merge` of two states (``MergedState``-shaped
    views, or ``SumState``): both aligned to the larger exponent (the other's floor)
    and added.  :data:`MERGE_LATENCY` stages of ``pipe``; returns (the merged state's
    fields as a ``MergedState`` value, carried values)."""
    return _align_add(m, pipe, MergedState, (a.sum, a.exp, Cat(a.pos_inf, a.neg_inf, a.nan)),
                      (b.sum, b.exp, Cat(b.pos_inf, b.neg_inf, b.nan)), carry)


def _align_add(m: Module, pipe: Pipeline, layout, a, b, carry=()):
    """``a + b`` of two (sum, exponent, (pos_inf, neg_inf, nan)) states: the one with the
    smaller exponent shifted down to the other's (floor), then added — the step of
    ``accumulate`` and ``merge``.  :data:`MERGE_LATENCY` stages; returns (a ``layout``
    signal, carried values)."""
    name = pipe.name
    (a_sum, a_exp, a_flags), (b_sum, b_exp, b_flags) = a, b
    width = layout.members["sum"].width
    grow = Signal(name=f"{name}_grow")
    distance = Signal(signed(EXP_SHAPE.width + 1), name=f"{name}_distance")
    m.d.comb += [grow.eq(b_exp > a_exp), distance.eq(Mux(grow, b_exp - a_exp, a_exp - b_exp))]
    amount = Signal(width.bit_length(), name=f"{name}_amount")
    m.d.comb += amount.eq(Mux(distance > width - 1, width - 1, distance))
    moved = Signal(signed(width), name=f"{name}_moved")
    kept = Signal(signed(width), name=f"{name}_kept")
    m.d.comb += [moved.eq(Mux(grow, a_sum, b_sum)), kept.eq(Mux(grow, b_sum, a_sum))]
    staged = pipe.stage(moved, kept, amount, Mux(grow, b_exp, a_exp), a_flags | b_flags, *carry)
    moved, kept, amount, exp, flags = staged[:5]
    carry = staged[5:]
    # the arithmetic right shift (floor) in two stages of three levels each
    half = Signal(signed(width), name=f"{name}_half")
    m.d.comb += half.eq(moved >> Cat(Const(0, 3), amount[3:]))
    staged = pipe.stage(half, kept, amount, exp, flags, *carry)
    half, kept, amount, exp, flags = staged[:5]
    carry = staged[5:]
    aligned = Signal(signed(width), name=f"{name}_aligned")
    m.d.comb += aligned.eq(half >> amount[:3])
    staged = pipe.stage(aligned, kept, exp, flags, *carry)
    aligned, kept, exp, flags = staged[:4]
    carry = staged[4:]
    out = Signal(layout, name=f"{name}_result")
    m.d.comb += [out.sum.eq(aligned + kept), out.exp.eq(exp), Cat(out.pos_inf, out.neg_inf, out.nan).eq(flags)]
    return out, list(carry)
