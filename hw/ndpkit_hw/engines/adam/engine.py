"""``adam``: the Adam/AdamW updater engine (Smart-Infinity's near-storage step).

Command (:data:`ndpkit_spec.engines.adam.BLOCK`): element count ``n``, addresses of ``p``,
``m``, ``v`` (fp32, updated in place), ``g`` (fp32/fp16/bf16) and the optional 16-bit
parameter copy, the mode, formats and the ten float32 scalars.  Checked before any
traffic, in order: formats and mode (BAD_FIELD), ``n != 0`` (ZERO_LENGTH), every
array's word-rounded range by the transfer rule (UNALIGNED, OUT_OF_WINDOW), no two
arrays overlapping (OVERLAP).

Data: four burst readers (p, m, v, g) stream into :class:`AdamUpdater`, and its
results fork to four burst writers (p, m, v and the copy).  ``lanes`` (elements per
cycle) defaults to the port's element rate: an element reads 16 bytes (p, m, v, g), so a
512-bit port feeds 4 lanes and a 128-bit port 1 (more lanes would wait on the port).  A
bus word of fp32 holds ``k = bus width / 32 / lanes`` vectors, taken in turn (a 16-bit
gradient word ``2k``); the writers' words are packed from ``k`` vectors (the copy's from
``2k``), the unfilled vectors of a last word with their strobes off.  Reads and writes
overlap: there are no per-chunk phases.  The last vector's lanes beyond ``n`` are
written with their byte strobes off, so nothing outside the arrays changes.  The nine engines share the engine's AXI4 master through a 5:1
interconnect (:class:`BurstPorts`: reader and writer paired on a port).
The completion's ``aux`` is the number of non-finite gradients.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal, Cat, Const, Mux

from ndpkit_spec.codes import ErrorCode
from ndpkit_spec.engines.adam import BLOCK as ADAM, port_lanes
from ndpkit_hw.bus.dma import Transfer, TransferGroup
from ndpkit_hw.engines.skeleton import CommandChecks, CommandControl, CommandEngine
from ndpkit_hw.engines.adam.stream_decompressor import StreamDecompressor
from ndpkit_hw.engines.adam.updater import SCALARS, AdamUpdater

__all__ = ["AdamEngine"]

READS = ("p", "m", "v", "g", "idx")
WRITES = ("p", "m", "v", "copy")


class AdamEngine(CommandEngine):
    def __init__(self, *, addr_width: int = 32, data_width: int = 512, max_burst_bytes: int = 4096,
                 max_outstanding: int = 8, lanes: int | None = None):
        super().__init__(ADAM, addr_width=addr_width, data_width=data_width, max_burst_bytes=max_burst_bytes,
                         max_outstanding=max_outstanding, reads=READS, writes=WRITES)
        self.word_elements = data_width // 32
        self.lanes = port_lanes(data_width) if lanes is None else lanes
        if not (1 <= self.lanes <= self.word_elements and self.word_elements % self.lanes == 0
                and self.lanes & (self.lanes - 1) == 0):
            raise ValueError(f"adam: lanes must be a power of two dividing the bus word's {self.word_elements} "
                             f"elements, not {lanes}")
        self.updater = AdamUpdater(lanes=self.lanes)
        self.decompressor = StreamDecompressor(data_width=data_width)

    def elaborate(self, platform):
        m = Module()
        lanes, word, elements = self.lanes, self.word_bytes, self.word_elements
        word_shift, lane_shift, element_shift = word.bit_length() - 1, lanes.bit_length() - 1, elements.bit_length() - 1
        per_word = elements // lanes                   # vectors in a word of fp32 (2 x in a 16-bit word)
        slot_bits = per_word.bit_length() - 1
        m.submodules.updater = updater = self.updater
        m.submodules.decompressor = dec = self.decompressor
        self.elaborate_ports(m)
        port = self.ports.port(len(READS) - 1)         # its reader has no writer beside it
        m.d.comb += [port.awvalid.eq(0), port.wvalid.eq(0), port.bready.eq(1)]
        # ---- the command and its derived sizes ----------------------------------
        ctl = CommandControl(m, self)
        cmd = ctl.cmd
        grad16 = cmd.format_grad != 0
        has_copy = cmd.format_copy != 0
        sparse = cmd.format_sparse
        # sizes from the command, each one adder, registered (CommandChecks.derive): the
        # checks, the burst engines and the counters' compares start from registers
        checks = CommandChecks(m, self)
        rounded = lambda n, unit, shift: (n + (unit - 1)) >> shift    # ceil(n / unit), unit = 1 << shift
        last_vector = checks.derive((cmd.count - 1)[:32] >> lane_shift, "last_vector")    # (count 0 is rejected)
        # the count before the last vector (wraps past every count when there is one vector):
        # "the next vector is the last" is then a compare of the count, with no increment before it
        before_last = checks.derive(last_vector - 1, "before_last", after=checks.after(last_vector))
        len32 = checks.derive(rounded(cmd.count, elements, element_shift) << word_shift, "len32")
        len16 = checks.derive(rounded(cmd.count, 2 * elements, element_shift + 1) << word_shift, "len16")
        # sparse mode: g holds k values (fp32, or 16-bit packed 2 * lanes a word), idx k indices
        idx_len = checks.derive(rounded(cmd.pairs, elements, element_shift) << word_shift, "idx_len")
        g_len = checks.derive(Mux(sparse, Mux(grad16, rounded(cmd.pairs, 2 * elements, element_shift + 1)
                                              << word_shift, rounded(cmd.pairs, elements, element_shift) << word_shift),
                                  Mux(grad16, rounded(cmd.count, 2 * elements, element_shift + 1),
                                      rounded(cmd.count, elements, element_shift)) << word_shift), "g_len")
        ranges = {
            "p": Transfer(cmd.p, len32[:32]), "m": Transfer(cmd.m, len32[:32]), "v": Transfer(cmd.v, len32[:32]),
            "g": Transfer(cmd.g, g_len[:32]), "copy": Transfer(cmd.copy, len16[:32]),
            "idx": Transfer(cmd.idx, idx_len[:32]),
        }
        active = {"p": Const(1), "m": Const(1), "v": Const(1), "g": Const(1), "copy": has_copy, "idx": sparse}
        checks.require((cmd.format_mode > 1) | (cmd.format_grad > 2) | (cmd.format_copy > 2), ErrorCode.BAD_FIELD)
        checks.require(cmd.count == 0, ErrorCode.ZERO_LENGTH)
        checks.require(sparse & (cmd.pairs == 0), ErrorCode.ZERO_LENGTH)
        checks.require(sparse & (cmd.pairs > cmd.count), ErrorCode.BAD_FIELD)
        checks.ranges(ranges, active=active, wide={"p": len32})     # p, m and v share len32
        checks.disjoint(list(ranges))

        # scalars and modes reach the updater registered from the latched command (static
        # while it runs; settled during the checks), so no path runs from the command into
        # the arithmetic's first stage
        for name in SCALARS:
            m.d.sync += getattr(updater, name).eq(getattr(cmd, name))
        m.d.sync += [updater.mode.eq(cmd.format_mode[0]), updater.copy_bf16.eq(cmd.format_copy == 2),
                     updater.grad_format.eq(cmd.format_grad)]

        # ---- control ------------------------------------------------------------------
        stream_error, stopped = Signal(name="stream_error"), Signal(name="stopped")
        # the update stops once the vectors the decompressor sent before the error are taken
        m.d.comb += [stream_error.eq(sparse & (dec.error != 0)), stopped.eq(stream_error & ~dec.o.valid)]
        in_count, out_count = Signal(33, name="in_count"), Signal(33, name="out_count")
        in_done, out_done = Signal(name="in_done"), Signal(name="out_done")   # every vector taken / written
        # in_count == last_vector and out_count == last_vector, kept as flags with the counts
        last_in, last = Signal(name="last_in"), Signal(name="last_out")
        nonfinite = Signal(32)
        running = Signal()
        ports = {f"r{k}": self.readers[k] for k in READS}
        ports.update({f"w{k}": self.writers[k] for k in WRITES})
        transfers = TransferGroup(m, ports, {key: ranges[key[1:]] for key in ports}, running,
                                  {key: active[key[1:]] for key in ports})
        status = transfers.error

        with ctl.states(checks, first="RUN", ready=updater.idle, start=[dec.start.eq(1)],
                        clear=[in_count.eq(0), out_count.eq(0), in_done.eq(0), out_done.eq(0), nonfinite.eq(0),
                               last_in.eq(last_vector == 0), last.eq(last_vector == 0)]
                        + transfers.clear()):
            with m.State("RUN"):
                m.d.comb += running.eq(1)
                with m.If(transfers.finished):
                    ctl.finish(Mux(status != 0, status, Mux(stream_error, dec.error, 0)))
        # the completion's byte counts, registered from the registered sizes (read at COMPLETE)
        # (one adder a stage: the sums of three operands take two)
        pmv_bytes, g_bytes, copy_bytes = Signal(42, name="pmv_bytes"), Signal(43, name="g_bytes"), \
            Signal(41, name="copy_bytes")
        bytes_read, bytes_written = Signal(44, name="bytes_read"), Signal(43, name="bytes_written")
        m.d.sync += [pmv_bytes.eq((len32 << 1) + len32), g_bytes.eq(g_len + Mux(sparse, idx_len, 0)),
                     copy_bytes.eq(Mux(has_copy, len16, 0)),
                     bytes_read.eq(pmv_bytes + g_bytes), bytes_written.eq(pmv_bytes + copy_bytes)]
        ctl.complete(bytes_read=bytes_read, bytes_written=bytes_written,
                     # after a sparse-mode pair error: the elements updated before it
                     aux=Mux(stream_error, in_count << lane_shift, nonfinite))

        # ---- readers -> updater (a 16-bit gradient word feeds two vectors) -------------
        # sparse mode: the g (values) and idx readers feed the decompressor, which feeds
        # the updater's gradient lanes; after a pair error p, m, v drain unused
        rp, rm, rv, rg, ridx = (self.readers[k].data for k in READS)
        m.d.comb += [dec.n.eq(cmd.count), dec.k.eq(cmd.pairs), dec.value16.eq(grad16),
                     dec.idx.payload.eq(ridx.payload.data), dec.idx.valid.eq(ridx.valid & sparse),
                     ridx.ready.eq(dec.idx.ready),
                     dec.val.payload.eq(rg.payload.data), dec.val.valid.eq(rg.valid & sparse)]
        # a word's vectors in turn: vector `slot` of an fp32 word, `g_slot` of a 16-bit one
        slot = in_count[:slot_bits] if slot_bits else Const(0, 1)
        g_slot = in_count[:slot_bits + 1]
        word_done = last_in | (slot == per_word - 1)
        g16_done = last_in | (g_slot == 2 * per_word - 1)
        g_word = rg.payload.data
        g16 = g_word.word_select(g_slot, 16 * lanes)
        g_lanes = [Mux(grad16, g16[16 * i:16 * (i + 1)], g_word.word_select(slot, 32 * lanes)[32 * i:32 * (i + 1)])
                   for i in range(lanes)]
        g_valid = Mux(sparse, dec.o.valid, rg.valid)
        # a pair error stops the update before a dense word of the decompressor, never
        # inside one (the decompressor holds its word until the last vector of it is read)
        all_valid = rp.valid & rm.valid & rv.valid & g_valid & running & ~in_done & ~stopped
        fire_in = Signal()
        release = fire_in & word_done
        m.d.comb += [fire_in.eq(all_valid & updater.i.ready),
                     updater.i.valid.eq(all_valid),
                     updater.i.payload.p.eq(rp.payload.data.word_select(slot, 32 * lanes)),
                     updater.i.payload.m.eq(rm.payload.data.word_select(slot, 32 * lanes)),
                     updater.i.payload.v.eq(rv.payload.data.word_select(slot, 32 * lanes)),
                     updater.i.payload.g.eq(Mux(sparse, dec.o.payload.as_value().word_select(slot, 32 * lanes),
                                                Cat(*g_lanes))),
                     rp.ready.eq(release | stopped), rm.ready.eq(release | stopped),
                     rv.ready.eq(release | stopped),
                     dec.o.ready.eq(sparse & release),
                     rg.ready.eq(Mux(sparse, dec.val.ready, fire_in & Mux(grad16, g16_done, word_done)))]
        with m.If(fire_in):
            m.d.sync += [in_count.eq(in_count + 1), last_in.eq(in_count == before_last)]
            with m.If(last_in):
                m.d.sync += in_done.eq(1)

        # ---- updater -> writers ------------------------------------------------------
        # after a pair error, once the updater has delivered every vector it took, the
        # writers get their remaining beats with every strobe off (only while the command
        # runs: between commands the stale error must not push beats into idle writers)
        o = updater.o
        flush = Signal()
        caught_up = Signal()
        # registered: stopped the cycle before, so in_count was already still (no vector is
        # taken while stopped); out_count only grows, so a stale "caught up" stays true
        m.d.sync += caught_up.eq(stopped & (out_count >= in_count))
        m.d.comb += flush.eq(running & stopped & caught_up & ~out_done)
        out_valid = o.valid | flush
        tail_on = Signal(lanes)         # the last vector's lanes, from the held command
        m.d.sync += tail_on.eq((Const(1, lanes + 1) << (cmd.count[:lane_shift] - 1)[:lane_shift] + 1) - 1
                               if lanes > 1 else 1)
        lane_on = Signal(lanes)
        m.d.comb += lane_on.eq(Mux(flush, 0, Mux(last, tail_on, (1 << lanes) - 1)))
        # a word's vectors are held until it is complete (or the last vector came)
        o_slot = out_count[:slot_bits] if slot_bits else Const(0, 1)
        c_slot = out_count[:slot_bits + 1]
        word_out = last | (o_slot == per_word - 1)
        emit = has_copy & (last | (c_slot == 2 * per_word - 1))
        results = {"p": o.payload.p.as_value(), "m": o.payload.m.as_value(), "v": o.payload.v.as_value()}
        held = {k: [Signal(32 * lanes, name=f"held_{k}{j}") for j in range(per_word - 1)] for k in results}
        held_on = [Signal(lanes, name=f"held_on{j}") for j in range(per_word - 1)]
        copy = o.payload.copy.as_value()
        copy_held = [Signal(16 * lanes, name=f"held_copy{j}") for j in range(2 * per_word - 1)]
        copy_on = [Signal(lanes, name=f"held_copy_on{j}") for j in range(2 * per_word - 1)]

        def assemble(current, stored, stored_on, at, size, n):
            """The word of ``n`` vectors with the current one at ``at``: (data, byte strobes)."""
            data, strb = [], []
            for j in range(n):
                here = at == j
                if j < n - 1:
                    data.append(Mux(here, current, stored[j]))
                    on = Mux(here, lane_on, Mux(at > j, stored_on[j], 0))
                else:
                    data.append(current)
                    on = Mux(here, lane_on, 0)
                strb.append(Cat(*[on[i].replicate(size) for i in range(lanes)]))
            return Cat(*data), Cat(*strb)

        wp, wm, wv, wc = (self.writers[k].data for k in WRITES)
        all_ready = Signal()
        m.d.comb += all_ready.eq((~word_out | (wp.ready & wm.ready & wv.ready)) & (~emit | wc.ready))
        fire_out = Signal()
        m.d.comb += [fire_out.eq(out_valid & all_ready), o.ready.eq(all_ready & ~flush)]
        for name, writer in zip(("p", "m", "v"), (wp, wm, wv)):
            data, strb = assemble(results[name], held[name], held_on, o_slot, 4, per_word)
            m.d.comb += [writer.valid.eq(fire_out & word_out), writer.payload.data.eq(data),
                         writer.payload.strb.eq(strb)]
        data, strb = assemble(copy, copy_held, copy_on, c_slot, 2, 2 * per_word)
        m.d.comb += [wc.valid.eq(fire_out & emit), wc.payload.data.eq(data), wc.payload.strb.eq(strb)]
        popcount = sum((o.payload.nonfinite & lane_on)[i] for i in range(lanes))
        with m.If(fire_out):
            m.d.sync += [out_count.eq(out_count + 1), nonfinite.eq(nonfinite + popcount),
                         last.eq(out_count == before_last)]
            with m.If(last):
                m.d.sync += out_done.eq(1)
            for j in range(per_word - 1):
                with m.If(o_slot == j):
                    m.d.sync += [held[k][j].eq(results[k]) for k in results]
                    m.d.sync += held_on[j].eq(lane_on)
            for j in range(2 * per_word - 1):
                with m.If(c_slot == j):
                    m.d.sync += [copy_held[j].eq(copy), copy_on[j].eq(lane_on)]
        return m
