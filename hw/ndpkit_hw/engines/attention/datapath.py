"""The attention engine's arithmetic: one pass over K and V, block online softmax.

Bit for bit :func:`ndpkit.engines.attention.golden.decode_group` (read its docstring first).
The datapath takes, per KV head, the group's q rows, then the K rows and the V rows of
the head's context (``tokens`` rows, each ``R = d / P`` bus words of ``P = W / 16``
16-bit elements), and gives back the G output rows.  ``lanes`` (L) MAC lanes: L/2 on
the score side, L/2 on the value side, as ``H`` units of ``C`` columns (C = min(P, L/2),
H = L / 2C).  A beat is C columns of a bus word for H query heads; G > H heads take
ceil(G / H) passes over each row.  L = 32 at a 512-bit port (C = 16, H = 1) keeps pace
with the port for G = 1: K and V share it, each side takes a word every two cycles.

- **q loader** (:class:`~ndpkit_hw.engines.attention.qload.QueryBanks`): the group's q
  elements, one a cycle, rounded to the KV format and turned into the row's block-fixed
  integers, into the q bank of the head (two banks: the next head loads while this one
  runs).
- **score side** (:class:`~ndpkit_hw.engines.attention.score.ScoreSide`): the K rows as
  block-fixed integers (one :class:`~ndpkit_hw.arith.blockfloat.KeyAlign`), per unit a
  :class:`~ndpkit_hw.arith.blockfloat.FixedDot` (their products with the q row's
  integers, summed, one rounding), ``s = dot * scale``; the scores of a block of 128 tokens go to a score
  bank with the running maximum; at the block's end the bank keeps ``m_new`` and the
  maximum before it.
- **softmax sweep** (:class:`~ndpkit_hw.engines.attention.sweep.SoftmaxSweep`, an exp
  unit per unit): per bank, ``corr = exp(m_old - m_new)`` and ``pk = exp(s - m_new)``
  rounded to TF32, into the bank's weight memory, row by row (a row's passes
  together): the value side follows a row behind.
- **value side** (:class:`~ndpkit_hw.engines.attention.value.ValueSide`): V rows as
  block-fixed integers (each row's largest exponent taken as it fills the row buffer),
  per unit a :class:`~ndpkit_hw.arith.blockfloat.WeightedSums` of C lanes (and the
  weights' own sum: the denominator), four partial sums a block (token j -> partial j
  mod 4), in the sums bank of the block's parity.
- **epilogue** (:class:`~ndpkit_hw.engines.attention.epilogue.Epilogue`): per block
  and column group the four partials flushed, merged in order, rounded and folded in
  with ``o = fma(o, corr, ob)``, ``l = fma(l, corr, lb)``: a lane every four cycles up
  to L = 32 (one merge unit), else ``E`` lanes a cycle (``E = max(1, L / 128)``), its
  cost per block below the value side's either way;
  after a head's last block ``out = o * (1 / l)`` (a reciprocal a query head, the
  products on the fold's fmas), narrowed, packed into output words.

``pair_words`` (a build of two units): an odd group of three to seven heads takes a pass a
head, each row's words in pairs, unit 0 the even words and unit 1 the odd ones
(:func:`~ndpkit_hw.engines.attention.rows.pairs_mode`): G half-rows a row, not G + 1
(the rows' second read ports, a KeyAlign of twice the lanes, a second set of V
converters).  The arithmetic is the same: unit 0's dot product adds unit 1's row
integer before its one rounding, and each column group is summed in one unit.

K of block n + 1 streams while V of block n is consumed and block n - 1's partials are
merged, so the memory port, not the arithmetic, bounds the engine when G <= H.

This component joins the parts: it queues each head for both sides, holds the q
banks' full flags (set by the loader, cleared by the score side) and the two score
banks' states (free, filling, scored, sweeping, ready, merging), which the parts'
events move and their ``free`` / ``scored`` / ``weighing`` inputs read.
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.engines.attention import MAX_GROUP
from ndpkit_hw.engines.attention.epilogue import MAX_DIM, OUT_SPACE, Epilogue, epilogue_serial, epilogue_width
from ndpkit_hw.engines.attention.qload import QueryBanks
from ndpkit_hw.engines.attention.rows import pairs_mode, pairs_supported
from ndpkit_hw.engines.attention.score import ScoreSide
from ndpkit_hw.engines.attention.sweep import SoftmaxSweep
from ndpkit_hw.engines.attention.value import ValueSide

__all__ = ["AttentionDatapath", "lane_shape", "sums_shared"]


def sums_shared(serial: bool, units: int) -> bool:
    """Whether the value side's sums are one copy, their read port shared by the beats and
    the epilogue's flushes (:class:`~ndpkit_hw.engines.attention.value.ValueSide`'s
    ``shared_sums``): for the registered epilogue (the serial one flushes every cycle it
    merges) and at most two units, where the flushes take at most 1/16 of the value
    side's cycles (a flush reads one unit, a beat all: H / 32 of them).  Two copies would
    hold a U55C of 128-lane instances to 8 by its UltraRAM."""
    return not serial and units <= 2


def lane_shape(data_width: int, lanes: int) -> tuple[int, int]:
    """(C columns, H units) of ``lanes`` MAC lanes at a ``data_width``-bit port."""
    if data_width not in (64, 128, 256, 512):
        raise ValueError(f"data_width must be 64, 128, 256 or 512, not {data_width}")
    elements = data_width // 16
    if lanes < 4 or lanes & (lanes - 1):
        raise ValueError(f"lanes must be a power of two of at least 4, not {lanes}")
    columns = min(elements, lanes // 2)
    units = lanes // 2 // columns
    if units > MAX_GROUP:
        raise ValueError(f"{lanes} lanes at {data_width} bits serve {units} query heads at once; "
                         f"a group has at most {MAX_GROUP}: at most {4 * MAX_GROUP * elements // 2} lanes")
    if MAX_DIM // 2 // columns < 2:
        raise ValueError(f"{columns} columns a beat leave a d = 64 row one beat")     # (never at <= 512 bits)
    return columns, units


class AttentionDatapath(wiring.Component):
    """``q``, ``k``, ``v``: bus words; ``head``: one entry per KV head (its token
    count, ``token_bits`` wide: 26 holds any head of a 32-bit address space, at least 128
    bytes a row); ``out``: the output words, on the credit ``out_space`` (the epilogue's).
    ``head_dim128``, ``group``, the formats and ``scale`` are held for a whole command."""

    def __init__(self, *, data_width: int = 512, lanes: int = 32, token_bits: int = 26, pair_words: bool = False):
        self.columns, self.units = lane_shape(data_width, lanes)
        if pair_words and not pairs_supported(self.units):
            raise ValueError(f"pair_words needs two units: {lanes} lanes at {data_width} bits make {self.units}")
        self.pair_words = pair_words
        self.token_bits = token_bits
        self.epilogue_width, self.epilogue_serial = epilogue_width(lanes), epilogue_serial(lanes)
        self.data_width, self.lanes = data_width, lanes
        super().__init__({
            "q": In(stream.Signature(data_width)),
            "k": In(stream.Signature(data_width)),
            "v": In(stream.Signature(data_width)),
            "head": In(stream.Signature(token_bits)),
            "out": Out(stream.Signature(data_width, always_ready=True)),
            "out_space": In(range(OUT_SPACE + 1)),
            "head_dim128": In(1),
            "group": In(range(MAX_GROUP + 1)),
            "q_format": In(2),
            "kv_format": In(2),
            "out_format": In(2),
            "scale": In(32),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W, C, H = self.data_width, self.columns, self.units
        shape = dict(data_width=W, columns=C, units=H)
        m.submodules.q_banks = q_banks = QueryBanks(**shape)
        m.submodules.score = score = ScoreSide(**shape, token_bits=self.token_bits, pair_words=self.pair_words)
        m.submodules.sweep = sweep = SoftmaxSweep(units=H)
        m.submodules.value = value = ValueSide(**shape, token_bits=self.token_bits, pair_words=self.pair_words,
                                               shared_sums=sums_shared(self.epilogue_serial, H))
        m.submodules.epilogue = ep = Epilogue(**shape, width=self.epilogue_width, serial=self.epilogue_serial,
                                              flush_latency=value.flush_latency())
        for part in (q_banks, score, value, ep):
            m.d.comb += [part.head_dim128.eq(self.head_dim128), part.group.eq(self.group)]
        pairs = pairs_mode(m, self.group, H) if self.pair_words else Const(0)
        for part in (q_banks, score, sweep, value, ep):
            m.d.comb += part.pairs.eq(pairs)
        m.d.comb += [sweep.group.eq(self.group), q_banks.q_format.eq(self.q_format),
                     ep.out_format.eq(self.out_format), score.scale.eq(self.scale)]
        for part in (q_banks, score, value):
            m.d.comb += part.kv_format.eq(self.kv_format)

        # each head to both sides' job queues
        k_jobs = fifo.SyncFIFOBuffered(width=self.token_bits, depth=4)
        v_jobs = fifo.SyncFIFOBuffered(width=self.token_bits, depth=4)
        m.submodules.k_jobs, m.submodules.v_jobs = k_jobs, v_jobs
        m.d.comb += [self.head.ready.eq(k_jobs.w_rdy & v_jobs.w_rdy),
                     k_jobs.w_en.eq(self.head.valid & self.head.ready), k_jobs.w_data.eq(self.head.payload),
                     v_jobs.w_en.eq(self.head.valid & self.head.ready), v_jobs.w_data.eq(self.head.payload)]
        for jobs, side in ((k_jobs, score), (v_jobs, value)):
            wiring.connect(m, jobs.r_stream, side.jobs)

        # q: the loader fills a bank the score side has released
        q_full = Signal(2)                 # bank holds a loaded head the score side has not finished
        wiring.connect(m, wiring.flipped(self.q), q_banks.q)
        m.d.comb += [q_banks.full.eq(q_full), score.q_full.eq(q_full), q_banks.read_addr.eq(score.q_addr),
                     score.q_data.eq(q_banks.read_data)]
        m.d.sync += q_full.eq((q_full & ~score.q_release) | q_banks.loaded)

        # the score banks: free, the score side fills one, scored, the sweep computes its
        # weights (the value side follows it row by row), weights ready, merging (freed as
        # the epilogue takes the block, its corr values copied)
        FREE, FILLING, SCORED, SWEEPING, READY, MERGING = range(6)
        bank_state = Array(Signal(3, name=f"bank{b}_state") for b in range(2))
        m.d.comb += [score.free.eq(Cat(*[state == FREE for state in bank_state])),
                     sweep.scored.eq(Cat(*[state == SCORED for state in bank_state])),
                     value.weighing.eq(Cat(*[(state == SWEEPING) | (state == READY) for state in bank_state]))]
        for event, next_state in ((score.fill, FILLING), (score.scored, SCORED), (sweep.start, SWEEPING),
                                  (sweep.done, READY), (value.merging, MERGING)):
            with m.If(event.valid):
                m.d.sync += bank_state[event.payload].eq(next_state)
        with m.If(ep.job.valid & ep.job.ready):          # the block's scores and weights are no longer read
            m.d.sync += bank_state[ep.job.payload.b].eq(FREE)
        wiring.connect(m, wiring.flipped(self.k), score.k)
        wiring.connect(m, wiring.flipped(self.v), value.v)
        m.d.comb += [sweep.bank_rows.eq(score.bank_rows), value.bank_rows.eq(score.bank_rows),
                     value.bank_first.eq(score.bank_first), value.bank_last.eq(score.bank_last),
                     score.score_addr.eq(sweep.score_addr), sweep.score_data.eq(score.score_data),
                     score.max_addr.eq(sweep.max_addr), sweep.m_new.eq(score.m_new), sweep.m_old.eq(score.m_old),
                     value.swept.eq(sweep.swept), sweep.pk_addr.eq(value.pk_addr), value.pk_data.eq(sweep.pk_data),
                     sweep.corr_addr.eq(ep.corr_addr), ep.corr_data.eq(sweep.corr_data),
                     value.released.eq(ep.released), value.released_bank.eq(ep.released_bank)]
        wiring.connect(m, value.blocks, ep.job)
        wiring.connect(m, ep.flush, value.flush)
        wiring.connect(m, value.state, ep.state)
        wiring.connect(m, ep.out, wiring.flipped(self.out))
        m.d.comb += ep.out_space.eq(self.out_space)

        m.d.comb += self.idle.eq(~score.busy & ~k_jobs.r_rdy & ~v_jobs.r_rdy & ~value.busy & ep.idle &
                                 (q_full == 0) & ~sweep.busy & ~q_banks.busy)
        return m
