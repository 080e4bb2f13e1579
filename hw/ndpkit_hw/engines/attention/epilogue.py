"""The attention datapath's epilogue: per block, merge each lane's four partial running
sums, round, fold into the output and denominator; after a head's last block, the
outputs ``o * (1 / l)``.

Bit for bit the block step of :func:`ndpkit.engines.attention.golden.decode_group`:
``ob[i] = round(merge(merge(merge(s0, s1), s2), s3))``, ``o[i] = fma(o[i], corr, ob[i])``
(``o`` = +0 before a head's first block), ``l`` likewise from the denominator lane,
and ``out[i] = div(o[i], l)`` narrowed to the output format.

The work is per column group (a WeightedSums slot of ``C + 1`` sums: C value columns,
and with group 0 the denominator), in one of two forms:

- **registered** (``width`` E lanes a cycle): the group's four partials are flushed on
  four consecutive cycles into four registers, read E lanes a cycle into E merge
  chains (three merge units each, the later partials delayed to meet them), E
  roundings and E fmas.  The next group's flushes are issued so that its states land
  as the last lanes leave: a group costs ``ceil((C + 1) / E)`` cycles with no gap, so
  the epilogue keeps up with the value side whenever ``E >= lanes / 128`` (its cost
  per block and head ``(d + 1) / E`` cycles against the value side's ``128 * d / C``
  beats per pass of ``H`` heads).
- **serial** (``serial``, E = 1; :func:`epilogue_serial`: up to 32 lanes): a lane every
  four cycles.  Each lane's four partials are flushed on consecutive cycles and its
  lane taken from each state as it lands (one select, no registers of partials), and
  one merge unit does the lane's three merges, issued five cycles apart (slots the
  next lanes' merges never take).  ``4 (d + 1)`` cycles a head per block: at most half
  of the value side's time at 32 lanes.  At 32 lanes it is 2.6k LUT and 4.8k FF
  smaller than the registered form (distributed RAMs then counted a LUT a cell).

After a head's last block ``out = o * (1 / l)`` (:func:`ndpkit.engines.attention.golden.output`):
each query head's reciprocal from one serial unit
(:class:`~ndpkit_hw.arith.recip.SerialReciprocal`: a division a query head is rare; the
pipelined divider it replaced was 1.3k LUT), then its products through the fold's fmas
with a -0 addend (in state FINAL the fold is idle); narrowed and packed into words: in
the serial form 16 bits a step (a binary32 product's halves on two cycles, its products
issued every other cycle), so the word's register only shifts; in the registered form
E products a cycle, the register shifting by 16 or 32 E bits (the tail of a head's last
block is the fast builds' cost).

Interfaces: ``job`` (one entry per block: the WeightedSums bank, whether it is the head's
first and last block, its rows), accepted as the epilogue starts it (the block's score
bank can be reused then: its ``corr`` values, read at ``corr_addr`` from the sweep's
register files, stay until the bank's block after next, :func:`corr_address`); ``flush`` / ``state``
to the WeightedSums units (the state ``flush_latency`` cycles after its flush, from the
unit the flush names: two, or more where the value side delays a flush to share the
units' read port with its beats); ``released`` pulses with ``released_bank`` when the job's sums bank is
no longer read; ``out`` the packed output words, pushed into the consumer's buffer (the
output writer's) with no back-pressure: ``out_space`` says how many words it can take
(its room, a cycle late is allowed), and a product is only issued while every word
it and those in flight will fill fits (so the packer never waits: no queue
of words of its own).
"""
from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Module, Signal, Const, Mux, Array, Cat
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ndpkit_spec.blockfloat import PARTIALS
from ndpkit_spec.engines.attention import HEAD_DIMS, MAX_GROUP, KvFormat
from ndpkit_hw.arith.blockfloat import (FLUSH_LATENCY, MERGE_LATENCY, NO_TERM, MergedState, SumState, merge_states,
                                        sum_to_fp32)
from ndpkit_hw.arith.dataflow import Dataflow, Timed, delay_line, delayed
from ndpkit_hw.arith.fp_common import Pipeline
from ndpkit_hw.arith.recip import SerialReciprocal
from ndpkit_hw.bus.axi import log2_exact

__all__ = ["Epilogue", "corr_address", "epilogue_width", "epilogue_serial", "EpilogueJob", "MAX_DIM", "flush_layout",
           "slot_count", "sums_slot"]

MAX_DIM = max(HEAD_DIMS)
#: a block for the epilogue: its WeightedSums bank, the head's first / last block, its rows
EpilogueJob = data.StructLayout({"b": 1, "first": 1, "last": 1, "rows": 8})
#: the largest ``out_space`` (words) the epilogue's consumer may report
OUT_SPACE = 255
NEGATIVE_ZERO = 0x8000_0000          # fma(a, b, -0) is a * b rounded once, signed zeros too


def epilogue_width(lanes: int) -> int:
    """Lanes a cycle the epilogue needs to keep pace with ``lanes`` MAC lanes."""
    return max(1, lanes // 128)


def epilogue_serial(lanes: int) -> bool:
    """Whether a lane every PARTIALS cycles keeps pace with ``lanes`` MAC lanes: a block
    costs the epilogue ``PARTIALS * G * (d + 1)`` cycles and the value side ``128 * d / C``
    beats for each pass of H heads, at most ``lanes / 64`` of it for the ``L / 2 = C * H``
    value lanes: half at 32 lanes."""
    return lanes <= 32


#: a partial no token of a short block reached
EMPTY_STATE = Const({"sum": 0, "exp": NO_TERM, "pos_inf": 0, "neg_inf": 0, "nan": 0}, SumState)


def corr_address(pass_, bank, generation, units: int):
    """Where a unit of the softmax sweep keeps a query head's ``corr`` for the epilogue:
    its pass (of ``MAX_GROUP / units``), the block's bank, the bank's generation (flipped
    as each of the bank's blocks ends, by the sweep and by the epilogue alike)."""
    return Cat(pass_[:(MAX_GROUP // units - 1).bit_length()], bank, generation)


def sums_slot(j, group, r, groups: int):
    """The WeightedSums slot of pass ``j``, column group ``group`` (of ``groups`` in a
    d = 128 row) and partial ``r``: where the value side adds and the epilogue flushes."""
    return ((j * groups + group) << log2_exact(PARTIALS, "partials")) + r


def slot_count(columns: int, units: int) -> int:
    """The WeightedSums slots a unit uses: one per pass, column group and partial."""
    return MAX_GROUP // units * (MAX_DIM // columns) * PARTIALS


def flush_layout(columns: int, units: int) -> data.StructLayout:
    """A flush of one WeightedSums slot: the slot (pass, column group, partial), the
    sums bank, the unit."""
    return data.StructLayout({"slot": range(slot_count(columns, units)), "bank": 1, "unit": range(max(2, units))})


class Epilogue(wiring.Component):
    def __init__(self, *, data_width: int, columns: int, units: int, width: int = 1, serial: bool = False,
                 flush_latency: int = FLUSH_LATENCY):
        if width < 1 or width & (width - 1) or columns % width:
            raise ValueError(f"width must be a power of two dividing the {columns} columns, not {width}")
        if serial and width != 1:
            raise ValueError(f"a serial epilogue takes a lane every {PARTIALS} cycles: width 1, not {width}")
        self.data_width, self.columns, self.units, self.width = data_width, columns, units, width
        self.serial, self.flush_latency = serial, flush_latency
        self.elements = data_width // 16
        self.flush_layout = flush_layout(columns, units)
        super().__init__({
            "job": In(stream.Signature(EpilogueJob)),
            # every unit's correction at corr_addr (corr_address), the same cycle
            "corr_addr": Out(range(4 * (MAX_GROUP // units))), "corr_data": In(data.ArrayLayout(32, units)),
            "flush": Out(stream.Signature(self.flush_layout, always_ready=True)),
            "state": In(stream.Signature(data.ArrayLayout(SumState, columns + 1), always_ready=True)),
            "released": Out(1),
            "released_bank": Out(1),
            "out": Out(stream.Signature(data_width, always_ready=True)),
            "out_space": In(range(OUT_SPACE + 1)),
            "head_dim128": In(1),
            "group": In(range(MAX_GROUP + 1)), "pairs": In(1),
            "out_format": In(2),
            "idle": Out(1),
        })

    def _groups(self) -> int:
        """Column groups in a d = 128 row."""
        return MAX_DIM // self.columns

    def _tag(self):
        """What travels with a lane down the merge chain: query head, column group, chunk."""
        GROUPS = self._groups()
        return data.StructLayout({"g": range(MAX_GROUP), "grp": range(GROUPS),
                                  "k": range(-(-(self.columns + 1) // self.width))})

    def _flush(self, m: Module, job, g, grp, r, valid):
        """The flush of partial ``r`` of column group ``grp`` of query head ``g``."""
        GROUPS = self._groups()
        h_bits = log2_exact(self.units, "units")
        # (pairs: the head's pass is its index, its even column groups in unit 0's sums and
        # its odd ones in unit 1's, at the pair's index)
        m.d.comb += [self.flush.valid.eq(valid),
                     self.flush.payload.slot.eq(Mux(self.pairs, sums_slot(g, grp >> 1, r, GROUPS),
                                                    sums_slot(g >> h_bits, grp, r, GROUPS))),
                     self.flush.payload.bank.eq(job.b),
                     self.flush.payload.unit.eq(Mux(self.pairs, grp[0], g[:h_bits]) if self.units > 1 else 0)]

    def _registered_lanes(self, m: Module, job, partials, start, row_groups):
        """E lanes a cycle: a group's four partials flushed on four consecutive cycles into
        four registers of C + 1 lanes, read E lanes a cycle.  Returns the emission (a
        chunk of partial 0's lanes leaves), its tag, ``read[r][e]`` (partial r's lane e of
        the chunk, ready r + 1 cycles after the emission), ``issuing`` and ``busy``."""
        C, E = self.columns, self.width
        GROUPS = self._groups()
        chunks_all = -(-(C + 1) // E)                 # chunks of group 0 (with the denominator)
        chunks_rest = C // E
        NL = chunks_all * E                           # lanes a partial register holds
        i_g, i_grp = Signal(range(MAX_GROUP)), Signal(range(GROUPS))     # the next group to issue
        issuing = Signal()                   # groups of the job are left to issue
        issue = Signal()
        Flush = data.StructLayout({"valid": 1, "g": range(MAX_GROUP), "grp": range(GROUPS), "r": range(PARTIALS)})
        flush_line = [Signal(Flush, name=f"flush_r{r}") for r in range(PARTIALS)]
        m.d.comb += [flush_line[0].valid.eq(issue), flush_line[0].g.eq(i_g), flush_line[0].grp.eq(i_grp)]
        for r in range(1, PARTIALS):
            m.d.sync += [flush_line[r].eq(flush_line[r - 1]), flush_line[r].r.eq(r)]
        f = flush_line
        # one flush a cycle: partial r of the group issued r cycles after partial 0
        now = Signal(Flush)
        m.d.comb += now.eq(Mux(issue, f[0].as_value(), 0))
        for r in range(1, PARTIALS):
            with m.If(f[r].valid):
                m.d.comb += now.eq(f[r])
        self._flush(m, job, now.g, now.grp, now.r, now.valid)
        with m.If(start):
            m.d.sync += [i_g.eq(0), i_grp.eq(0), issuing.eq(1)]
        with m.If(issue):
            m.d.sync += i_grp.eq(i_grp + 1)
            with m.If(i_grp == row_groups - 1):
                m.d.sync += [i_grp.eq(0), i_g.eq(i_g + 1)]
                with m.If(i_g == self.group - 1):
                    m.d.sync += issuing.eq(0)
        resp, responses, zero_landing = now, [], []      # the response's partial and group, flush_latency cycles later
        for _ in range(self.flush_latency):
            resp = delayed(m, resp, 1, "flush_resp", reset=True)
            responses.append(resp.valid)
            zero_landing.append(resp.valid & (resp.r == 0))

        # (loaded whole, with an enable: no multiplexer in front of them; the lanes read
        # through a select behind them, the partials a short block never touched replaced
        # by empty sums there)
        regs = [[Signal(SumState, name=f"part{r}_{i}", reset_less=True) for i in range(NL)]
                for r in range(PARTIALS)]
        for r in range(PARTIALS):
            with m.If(resp.valid & (resp.r == r)):
                m.d.sync += [regs[r][i].eq(self.state.payload[i]) for i in range(C + 1)]
        for r in range(PARTIALS):
            for i in range(C + 1, NL):                  # the last chunk's padding: never used
                m.d.comb += regs[r][i].eq(EMPTY_STATE)

        # partial 0's lanes: chunks left, and the group they belong to
        left = Signal(range(chunks_all + 1))
        cur = Signal(self._tag())
        emit = Signal()
        m.d.comb += emit.eq(left != 0)
        with m.If(emit):
            m.d.sync += [left.eq(left - 1), cur.k.eq(cur.k + 1)]
        with m.If(resp.valid & (resp.r == 0)):
            m.d.sync += [left.eq(Mux(resp.grp == 0, chunks_all, chunks_rest)), cur.g.eq(resp.g),
                         cur.grp.eq(resp.grp), cur.k.eq(0)]
        # the next flush when partial 0's register empties as its states land (flush_latency
        # + 1 cycles from now), and not while one is in flight: its partials still to issue,
        # or its partial 0 not landed (so ``left`` counts its lanes)
        in_flight = Cat(*[x.valid for x in f[1:]], *zero_landing).any()
        m.d.comb += issue.eq(issuing & (left <= self.flush_latency + 1) & ~in_flight)

        # partial r's chunk is read r cycles after partial 0's, a register behind each select
        chunk = [cur.k]
        for r in range(1, PARTIALS):
            chunk.append(delayed(m, chunk[-1], 1, f"chunk{r}"))
        read = []
        for r in range(PARTIALS):
            lanes = []
            for e in range(E):
                sel = Array(regs[r][c * E + e].as_value() for c in range(chunks_all))[chunk[r]]
                reg = Signal(SumState, name=f"read{r}_{e}", reset_less=True)
                m.d.sync += reg.eq(Mux(r < partials, sel, EMPTY_STATE.as_value()) if r else sel)
                lanes.append(reg)
            read.append(lanes)
        busy = issue | in_flight | Cat(*responses).any() | emit
        return SimpleNamespace(cur=cur, emit=emit, read=read, issuing=issuing, busy=busy)

    def _serial_lanes(self, m: Module, job, partials, start, row_groups):
        """A lane every PARTIALS cycles (E = 1), no registers of partials: the lane's four
        partials flushed on four consecutive cycles, each state's lane taken as it lands
        (one select, one register: partial r's lane is in it r + 1 cycles after partial
        0's landed).  Enough wherever a unit's C lanes and the H units are at most 16
        lanes of each side (see :func:`epilogue_serial`).  Returns as
        :meth:`_registered_lanes`."""
        C = self.columns
        GROUPS = self._groups()
        Tag = self._tag()
        Flush = data.StructLayout({"valid": 1, "tag": Tag, "r": range(PARTIALS)})
        now = Signal(Flush)                  # the next flush: lane k of group grp of head g, partial r
        issuing = Signal()
        m.d.comb += now.valid.eq(issuing)
        self._flush(m, job, now.tag.g, now.tag.grp, now.r, now.valid)
        with m.If(start):
            m.d.sync += [now.tag.eq(0), now.r.eq(0), issuing.eq(1)]
        with m.If(issuing):
            m.d.sync += now.r.eq(now.r + 1)
            with m.If(now.r == PARTIALS - 1):
                m.d.sync += [now.r.eq(0), now.tag.k.eq(now.tag.k + 1)]
                with m.If(now.tag.k == Mux(now.tag.grp == 0, C, C - 1)):
                    m.d.sync += [now.tag.k.eq(0), now.tag.grp.eq(now.tag.grp + 1)]
                    with m.If(now.tag.grp == row_groups - 1):
                        m.d.sync += [now.tag.grp.eq(0), now.tag.g.eq(now.tag.g + 1)]
                        with m.If(now.tag.g == self.group - 1):
                            m.d.sync += issuing.eq(0)
        resp, responses = now, []
        for _ in range(self.flush_latency):
            resp = delayed(m, resp, 1, "flush_resp", reset=True)
            responses.append(resp.valid)
        lane = Signal(SumState, name="read_lane", reset_less=True)
        sel = Array(self.state.payload[i].as_value() for i in range(C + 1))[resp.tag.k]
        m.d.sync += lane.eq(Mux((resp.r == 0) | (resp.r < partials), sel, EMPTY_STATE.as_value()))
        emit = Signal()
        m.d.comb += emit.eq(resp.valid & (resp.r == 0))
        busy = issuing | Cat(*responses).any()
        return SimpleNamespace(cur=resp.tag, emit=emit, read=[[lane]] * PARTIALS, issuing=issuing, busy=busy)

    @staticmethod
    def _round(m: Module, pipe, merged, carry):
        """The merged sum registered (the last merge's add and the rounding's negation are
        not one cycle), then rounded to binary32 (:func:`sum_to_fp32`)."""
        staged = pipe.stage(merged, *carry)
        merged, carry = data.View(MergedState, staged[0] if carry else staged), staged[1:] if carry else []
        return sum_to_fp32(m, pipe, merged.sum, merged.exp, merged.nan, merged.pos_inf, merged.neg_inf, carry=carry)

    def _merge_chains(self, m: Module, emit, cur, read):
        """E chains of three merge units.  Returns (E binary32 results, the tag beside
        them, their valid, the depth from the emission)."""
        first_stage = Pipeline(m, emit, "chain")
        tag = first_stage.stage(cur.as_value())
        tag = first_stage.stage(tag)                    # partial 0 meets partial 1, two cycles on
        results = []
        for e in range(self.width):
            chain = Pipeline(m, first_stage.valid, f"chain{e}")
            chain.depth = first_stage.depth
            p0 = data.View(SumState, delayed(m, read[0][e].as_value(), 1, f"p0_{e}"))
            merged, carry = merge_states(m, chain, p0, read[1][e], carry=(tag,) if e == 0 else ())
            # partial r's lanes are ready r + 1 cycles after the emission
            p2 = data.View(SumState, delayed(m, read[2][e].as_value(), chain.depth - 3, f"p2_{e}"))
            merged, carry = merge_states(m, chain, data.View(MergedState, merged), p2, carry=carry)
            p3 = data.View(SumState, delayed(m, read[3][e].as_value(), chain.depth - 4, f"p3_{e}"))
            merged, carry = merge_states(m, chain, data.View(MergedState, merged), p3, carry=carry)
            value, carry = self._round(m, chain, merged, carry)
            results.append(value)
            if e == 0:
                (tag_out,) = carry
                out_valid, depth = chain.valid, chain.depth
        return results, tag_out, out_valid, depth

    def _shared_merge(self, m: Module, emit, cur, read):
        """One merge unit for a lane every PARTIALS cycles: its three merges issued
        ``FEEDBACK`` cycles apart (the unit's latency and its result's two registers, so
        no add feeds the next issue's alignment in one cycle), in issue slots that
        the next lanes' merges never take.  Returns as :meth:`_merge_chains`."""
        FEEDBACK = MERGE_LATENCY + 2
        assert len({0, FEEDBACK % PARTIALS, 2 * FEEDBACK % PARTIALS}) == 3, "a lane's merges would collide"
        (lane,) = read[0]                                # partial r's lane in it r + 1 cycles after the emission
        first = delayed(m, emit, 2, "merge1", reset=True)
        second = delayed(m, first, FEEDBACK, "merge2", reset=True)
        third = delayed(m, second, FEEDBACK, "merge3", reset=True)
        # partials 0, 2 and 3 taken 1, FEEDBACK - 1 and 2 FEEDBACK - 2 cycles late, from one line
        taps = delay_line(m, lane.as_value(), 2 * FEEDBACK - 2, "lane")
        p0 = data.View(SumState, taps[1])
        p0_merged = Signal(MergedState)
        m.d.comb += [p0_merged.sum.eq(p0.sum), p0_merged.exp.eq(p0.exp),
                     Cat(p0_merged.pos_inf, p0_merged.neg_inf, p0_merged.nan).eq(Cat(p0.pos_inf, p0.neg_inf, p0.nan))]
        result = Signal(MergedState)
        fed_back = delayed(m, result, FEEDBACK - MERGE_LATENCY, "merged")
        a = Signal(MergedState)
        b = Signal(SumState)
        m.d.comb += [a.eq(Mux(first, p0_merged, fed_back)),
                     b.eq(Mux(first, lane, Mux(second, taps[FEEDBACK - 1], taps[2 * FEEDBACK - 2])))]
        unit = Pipeline(m, first | second | third, "merge")
        merged, _ = merge_states(m, unit, a, b)
        m.d.comb += result.eq(merged)
        done = delayed(m, third, MERGE_LATENCY, "merged_valid", reset=True)
        to_done = 2 + 2 * FEEDBACK + MERGE_LATENCY      # from the emission to the last merge's result
        rounding = Pipeline(m, done, "round")
        value, (tag_out,) = self._round(m, rounding, result, (delayed(m, cur.as_value(), to_done, "tag"),))
        return [value], tag_out, rounding.valid, to_done + rounding.depth

    def elaborate(self, platform):
        m = Module()
        W, P, C, H, E = self.data_width, self.elements, self.columns, self.units, self.width
        c_bits, e_bits = log2_exact(C, "columns"), log2_exact(E, "width")
        G = self.group
        GROUPS = self._groups()
        row_groups = Mux(self.head_dim128, GROUPS, GROUPS // 2)
        dim = Mux(self.head_dim128, MAX_DIM, MAX_DIM // 2)
        Tag = self._tag()

        # ---- the job and its lanes' partials -----------------------------------------------
        job = Signal(EpilogueJob)
        # each bank's generation, as the sweep keeps it: the corrections of the job's block
        generation = Signal(2)
        partials = Signal(range(PARTIALS + 1))
        m.d.comb += partials.eq(Mux(job.rows < PARTIALS, job.rows, PARTIALS))
        start = Signal()                     # a job accepted: its flushes start the next cycle
        lanes_in = self._serial_lanes if self.serial else self._registered_lanes
        source = lanes_in(m, job, partials, start, row_groups)
        cur, emit, read = source.cur, source.emit, source.read

        # ---- the merges ((p0 + p1) + p2) + p3, then rounding ---------------------------------
        merges = self._shared_merge if self.serial else self._merge_chains
        results, tag_out, out_valid, chain_depth = merges(m, emit, cur, read)
        rtag = data.View(Tag, tag_out)

        # ---- the fold: o = fma(o, corr, value), l likewise -------------------------------------
        o_mem = Memory(shape=32 * E, depth=MAX_GROUP * MAX_DIM // E, init=[])
        m.submodules.o_mem = o_mem
        o_wp, o_rp = o_mem.write_port(), o_mem.read_port()
        l_mem = Memory(shape=32, depth=MAX_GROUP, init=[])
        m.submodules.l_mem = l_mem
        l_wp, l_fold_rp, l_final_rp = l_mem.write_port(), l_mem.read_port(domain="comb"), \
            l_mem.read_port(domain="comb")
        finishing = Signal()
        final_g, final_w = Signal(range(MAX_GROUP)), Signal(range(MAX_DIM // E))
        lane0 = Cat(Const(0, e_bits), rtag.k) if E > 1 else rtag.k          # k * E
        is_l = (rtag.grp == 0) & (lane0 == C)
        word = Cat(lane0[:c_bits], rtag.grp)[e_bits:]                      # (grp * C + k * E) / E
        o_at = rtag.g * (MAX_DIM // E) + word
        m.d.comb += o_rp.addr.eq(Mux(finishing, final_g * (MAX_DIM // E) + final_w, o_at))
        m.d.comb += l_fold_rp.addr.eq(rtag.g)
        h_bits = log2_exact(H, "units")
        # (pairs: every head's corrections are unit 0's, at the head's pass)
        m.d.comb += self.corr_addr.eq(corr_address(Mux(self.pairs, rtag.g, rtag.g[h_bits:]), job.b,
                                                   generation.bit_select(job.b, 1), H))
        corr = Mux(self.pairs, self.corr_data[0], self.corr_data[rtag.g[:h_bits]]) if H > 1 else self.corr_data[0]
        # (after a head's last block the same fmas give the outputs, fma(o, 1 / l, -0): in
        # state FINAL, ``finishing``, its operands are o, the query head's reciprocal and -0)
        fdf = Dataflow(m, "fold", platform)
        recip_value = Signal(32)
        first = fdf.at(fdf.input(job.first & ~finishing), 1)
        c_val = fdf.at(fdf.input(Mux(finishing, recip_value, corr)), 1)
        l_old = fdf.at(fdf.input(l_fold_rp.data), 1)
        l_now = fdf.at(fdf.input(is_l & ~finishing), 1)
        folded = []
        for e in range(E):
            old = Mux(l_now, l_old, o_rp.data.word_select(e, 32)) if e == 0 else o_rp.data.word_select(e, 32)
            # the accumulator operand selected and registered before the fma (the selects and
            # the fma's operand decode were one 10-level path)
            chosen = fdf.select(Timed(first, 1), fdf.static(Const(0, 32)), Timed(old, 1))
            addend = Mux(finishing, Const(NEGATIVE_ZERO, 32), results[e])
            folded.append(fdf.op("fma", Timed(fdf.at(chosen, 2), 2), Timed(c_val, 1),
                                 Timed(fdf.at(fdf.input(addend), 1), 1)))
        fold_time = max(x.time for x in folded)
        fo = {name: fdf.at(fdf.input(v), fold_time) for name, v in
              (("valid", out_valid), ("l", is_l), ("g", rtag.g), ("at", o_at))}
        m.d.comb += [o_wp.addr.eq(fo["at"]), o_wp.data.eq(Cat(*[fdf.at(x, fold_time) for x in folded])),
                     o_wp.en.eq(fo["valid"] & ~fo["l"]),
                     l_wp.addr.eq(fo["g"]), l_wp.data.eq(fdf.at(folded[0], fold_time)),
                     l_wp.en.eq(fo["valid"] & fo["l"])]
        drain = chain_depth + fold_time + 2

        # ---- the outputs: out = o x (1 / l), narrowed, packed into words -------------------------
        # the query head's reciprocal first (one unit, a bit a cycle: once a query head), then
        # its products issued into the fold's fmas; they come out fold_time later
        final_issue = Signal()
        m.submodules.recip = recip = SerialReciprocal()
        m.d.comb += [l_final_rp.addr.eq(final_g), recip.x.eq(l_final_rp.data)]
        product_valid = fdf.at(fdf.input(final_issue), fold_time)
        ddf = Dataflow(m, "final", platform)
        out32 = self.out_format == KvFormat.FP32
        narrowed = []
        for e in range(E):
            product = ddf.input(fdf.at(folded[e], fold_time))
            narrow = ddf.select(ddf.static(self.out_format == KvFormat.BF16), ddf.op("fp32_to_bf16", product),
                                ddf.op("fp32_to_fp16", product))
            narrowed.append((product, narrow))
        d_time = ddf.latency
        d_valid = ddf.at(ddf.input(product_valid), d_time)
        wide = Cat(*[ddf.at(q, d_time) for q, _ in narrowed])
        half = Cat(*[ddf.at(n, d_time)[:16] for _, n in narrowed])
        pack = Signal(W)
        pack_n = Signal(range(P // E))
        if self.serial:
            # 16 E bits a pack step: a binary32 product's halves on two cycles (its products
            # are issued every other cycle), so the word's register only ever shifts by 16 E
            high_next = Signal()
            high = Signal(16 * E)
            m.d.sync += [high_next.eq(d_valid & out32), high.eq(wide[16 * E:])]
            step = Signal(16 * E)
            m.d.comb += step.eq(Mux(high_next, high, Mux(out32, wide[:16 * E], half)))
            packed_word, steps, pushed = Cat(pack[16 * E:], step), P // E, d_valid | high_next
            left = Mux(out32, high_next, d_valid)                   # a product's last pack step
            every_other = out32
        else:
            # (a product a cycle: the epilogue's fast form keeps its last block's tail short)
            packed_word = Mux(out32, Cat(pack[32 * E:], wide), Cat(pack[16 * E:], half))
            steps, pushed, left, every_other = Mux(out32, P // 2 // E, P // E), d_valid, d_valid, 0
        m.d.comb += self.out.payload.eq(packed_word)
        with m.If(pushed):
            m.d.sync += [pack.eq(packed_word), pack_n.eq(pack_n + 1)]
            with m.If(pack_n == steps - 1):
                m.d.sync += pack_n.eq(0)
                m.d.comb += self.out.valid.eq(1)
        # products in flight (until their last pack step): never more than the consumer's room holds
        in_flight = Signal(range(64 + P))
        m.d.sync += in_flight.eq(in_flight + final_issue - left)
        words_ahead = Mux(out32, (in_flight + P // 2 // E) >> log2_exact(P // 2 // E, "fp32 words a chunk"),
                          (in_flight + P // E) >> log2_exact(P // E, "16-bit words a chunk"))
        # the consumer's room, registered: it may be a cycle late (a word pushed then not in it)
        # and may take one word less than it says (a queue with an output register)
        space = Signal.like(self.out_space)
        m.d.sync += space.eq(self.out_space)
        room = words_ahead + 2 < space
        issued_last = Signal()               # serial, binary32: a product every other cycle
        m.d.sync += issued_last.eq(final_issue & every_other)

        # ---- the sequence ------------------------------------------------------------------------
        wait = Signal(range(64))
        recip_have = Signal()                # the query head's reciprocal is in recip_value
        m.d.comb += [self.job.ready.eq(0), self.released_bank.eq(job.b)]
        with m.FSM(name="epilogue") as fsm:
            with m.State("IDLE"):
                m.d.comb += self.job.ready.eq(1)
                with m.If(self.job.valid):
                    m.d.comb += start.eq(1)
                    m.d.sync += job.eq(self.job.payload)
                    m.next = "MERGE"
            with m.State("MERGE"):
                with m.If(~source.issuing & ~source.busy):
                    m.d.sync += wait.eq(drain)
                    m.next = "DRAIN"
            with m.State("DRAIN"):
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 0):
                    m.d.comb += self.released.eq(1)
                    m.d.sync += generation.eq(generation ^ (1 << job.b))
                    m.d.sync += [final_g.eq(0), final_w.eq(0)]
                    with m.If(job.last):
                        m.next = "FINAL"
                    with m.Else():
                        m.next = "IDLE"
            with m.State("FINAL"):
                m.d.comb += finishing.eq(1)
                with m.If(~recip_have):                  # the query head's 1 / l
                    m.d.comb += recip.start.eq(~recip.busy)
                    with m.If(recip.done):
                        m.d.sync += [recip_value.eq(recip.result), recip_have.eq(1)]
                with m.Else():
                    m.d.comb += final_issue.eq(room & ~issued_last)
                with m.If(final_issue):
                    m.d.sync += final_w.eq(final_w + 1)
                    with m.If(final_w == (dim >> e_bits) - 1):
                        m.d.sync += [final_w.eq(0), final_g.eq(final_g + 1), recip_have.eq(0)]
                        with m.If(final_g == G - 1):
                            m.next = "IDLE"
        m.d.comb += self.idle.eq(fsm.ongoing("IDLE") & (in_flight == 0) & ~self.job.valid)
        return m
