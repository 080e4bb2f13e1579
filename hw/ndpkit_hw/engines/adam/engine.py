"""``adam``: the Adam/AdamW updater engine (Smart-Infinity's near-storage step).

Command (:data:`ndpkit_spec.engines.adam.BLOCK`): element count ``n``, addresses of ``p``,
``m``, ``v`` (fp32, updated in place), ``g`` (fp32/fp16/bf16) and the optional 16-bit
parameter copy, the mode, formats and the ten float32 scalars.  Checked before any
traffic, in order: formats and mode (BAD_FIELD), ``n != 0`` (ZERO_LENGTH), every
array's word-rounded range by the transfer rule (UNALIGNED, OUT_OF_WINDOW), no two
arrays overlapping (OVERLAP).

Data: four burst readers (p, m, v, g) stream into :class:`AdamUpdater` (``lanes`` =
bus width / 32 elements per vector; a 16-bit gradient word feeds two vectors), and
its results fork to four burst writers (p, m, v and the copy, two vectors packed per
word).  Reads and writes overlap: there are no per-chunk phases.  The last vector's
lanes beyond ``n`` are written with their byte strobes off, so nothing outside the
arrays changes.  The nine engines share the engine's AXI4 master through a 5:1
interconnect (:class:`BurstPorts`: reader and writer paired on a port).
The completion's ``aux`` is the number of non-finite gradients.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal, Cat, Const, Mux

from ndpkit_spec.codes import ErrorCode
from ndpkit_spec.engines.adam import BLOCK as ADAM
from ndpkit_hw.bus.dma import Transfer, TransferGroup
from ndpkit_hw.engines.skeleton import CommandChecks, CommandControl, CommandEngine
from ndpkit_hw.engines.adam.stream_decompressor import StreamDecompressor
from ndpkit_hw.engines.adam.updater import SCALARS, AdamUpdater

__all__ = ["AdamEngine"]

READS = ("p", "m", "v", "g", "idx")
WRITES = ("p", "m", "v", "copy")


class AdamEngine(CommandEngine):
    def __init__(self, *, addr_width: int = 32, data_width: int = 512, max_burst_bytes: int = 4096,
                 max_outstanding: int = 8):
        super().__init__(ADAM, addr_width=addr_width, data_width=data_width, max_burst_bytes=max_burst_bytes,
                         max_outstanding=max_outstanding, reads=READS, writes=WRITES)
        self.lanes = data_width // 32
        self.updater = AdamUpdater(lanes=self.lanes)
        self.decompressor = StreamDecompressor(data_width=data_width)

    def elaborate(self, platform):
        m = Module()
        lanes, word = self.lanes, self.word_bytes
        word_shift, lane_shift = word.bit_length() - 1, lanes.bit_length() - 1
        m.submodules.updater = updater = self.updater
        m.submodules.decompressor = dec = self.decompressor
        self.elaborate_ports(m)
        port = self.ports.port(len(READS) - 1)         # its reader has no writer beside it
        m.d.comb += [port.awvalid.eq(0), port.wvalid.eq(0), port.bready.eq(1)]
        # ---- the command and its derived sizes ----------------------------------
        ctl = CommandControl(m, self)
        cmd = ctl.cmd
        vectors = Signal(33)
        m.d.comb += vectors.eq((cmd.count + (lanes - 1)) >> lane_shift)
        len32, len16 = Signal(40), Signal(40)
        m.d.comb += [len32.eq(vectors << word_shift), len16.eq(((vectors + 1) >> 1) << word_shift)]
        grad16 = cmd.format_grad != 0
        has_copy = cmd.format_copy != 0
        sparse = cmd.format_sparse
        # sparse mode: g holds k values (fp32, or 16-bit packed 2 * lanes a word), idx k indices
        pair_words32, pair_words16 = Signal(33), Signal(33)
        m.d.comb += [pair_words32.eq((cmd.pairs + (lanes - 1)) >> lane_shift),
                     pair_words16.eq((cmd.pairs + (2 * lanes - 1)) >> (lane_shift + 1))]
        g_dense = Mux(grad16, len16, len32)
        g_sparse = Mux(grad16, pair_words16, pair_words32) << word_shift
        ranges = {
            "p": Transfer(cmd.p, len32[:32]), "m": Transfer(cmd.m, len32[:32]), "v": Transfer(cmd.v, len32[:32]),
            "g": Transfer(cmd.g, Mux(sparse, g_sparse, g_dense)[:32]), "copy": Transfer(cmd.copy, len16[:32]),
            "idx": Transfer(cmd.idx, (pair_words32 << word_shift)[:32]),
        }
        active = {"p": Const(1), "m": Const(1), "v": Const(1), "g": Const(1), "copy": has_copy, "idx": sparse}
        checks = CommandChecks(m, self)
        checks.require((cmd.format_mode > 1) | (cmd.format_grad > 2) | (cmd.format_copy > 2), ErrorCode.BAD_FIELD)
        checks.require(cmd.count == 0, ErrorCode.ZERO_LENGTH)
        checks.require(sparse & (cmd.pairs == 0), ErrorCode.ZERO_LENGTH)
        checks.require(sparse & (cmd.pairs > cmd.count), ErrorCode.BAD_FIELD)
        checks.ranges(ranges, active=active, wide={"p": len32})     # p, m and v share len32
        checks.disjoint(ranges, active=active)

        # scalars and modes reach the updater from the latched command (static while it runs)
        for name in SCALARS:
            m.d.comb += getattr(updater, name).eq(getattr(cmd, name))
        m.d.comb += [updater.mode.eq(cmd.format_mode[0]), updater.copy_bf16.eq(cmd.format_copy == 2),
                     updater.grad_format.eq(cmd.format_grad)]

        # ---- control ------------------------------------------------------------------
        stream_error = Signal()
        m.d.comb += stream_error.eq(sparse & (dec.error != 0))
        in_count, out_count = Signal(33), Signal(33)
        nonfinite = Signal(32)
        running = Signal()
        ports = {f"r{k}": self.readers[k] for k in READS}
        ports.update({f"w{k}": self.writers[k] for k in WRITES})
        transfers = TransferGroup(m, ports, {key: ranges[key[1:]] for key in ports}, running,
                                  {key: active[key[1:]] for key in ports})
        status = transfers.error

        with ctl.states(checks.code(), first="RUN", ready=updater.idle, start=[dec.start.eq(1)],
                        clear=[in_count.eq(0), out_count.eq(0), nonfinite.eq(0)] + transfers.clear()):
            with m.State("RUN"):
                m.d.comb += running.eq(1)
                with m.If(transfers.finished):
                    ctl.finish(Mux(status != 0, status, Mux(stream_error, dec.error, 0)))
        ctl.complete(bytes_read=3 * len32 + ranges["g"].length + Mux(sparse, ranges["idx"].length, 0),
                     bytes_written=3 * len32 + Mux(has_copy, len16, 0),
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
        g_half = Signal()
        half_bits = lanes * 16
        g_word = rg.payload.data
        g_lanes = [Mux(grad16, Mux(g_half, g_word[half_bits + 16 * i:half_bits + 16 * (i + 1)],
                                   g_word[16 * i:16 * (i + 1)]),
                       g_word[32 * i:32 * (i + 1)]) for i in range(lanes)]
        g_valid = Mux(sparse, dec.o.valid, rg.valid)
        all_valid = rp.valid & rm.valid & rv.valid & g_valid & running & (in_count < vectors) & ~stream_error
        fire_in = Signal()
        m.d.comb += [fire_in.eq(all_valid & updater.i.ready),
                     updater.i.valid.eq(all_valid),
                     updater.i.payload.p.eq(rp.payload.data), updater.i.payload.m.eq(rm.payload.data),
                     updater.i.payload.v.eq(rv.payload.data),
                     updater.i.payload.g.eq(Mux(sparse, dec.o.payload, Cat(*g_lanes))),
                     rp.ready.eq(fire_in | stream_error), rm.ready.eq(fire_in | stream_error),
                     rv.ready.eq(fire_in | stream_error),
                     dec.o.ready.eq(sparse & fire_in),
                     rg.ready.eq(Mux(sparse, dec.val.ready,
                                     fire_in & (~grad16 | g_half | (in_count + 1 == vectors))))]
        with m.If(fire_in):
            m.d.sync += [in_count.eq(in_count + 1), g_half.eq(grad16 & ~g_half)]
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += g_half.eq(0)

        # ---- updater -> writers ------------------------------------------------------
        # after a pair error, once the updater has delivered every vector it took, the
        # writers get their remaining beats with every strobe off (only while the command
        # runs: between commands the stale error must not push beats into idle writers)
        o = updater.o
        flush = Signal()
        m.d.comb += flush.eq(running & stream_error & (out_count >= in_count) & (out_count != vectors))
        out_valid = o.valid | flush
        last = out_count + 1 == vectors
        tail = Signal(range(lanes + 1))
        m.d.comb += tail.eq(cmd.count - ((vectors - 1) << lane_shift))
        lane_on = Signal(lanes)
        m.d.comb += lane_on.eq(Mux(flush, 0, Mux(last, (Const(1, lanes + 1) << tail) - 1, (1 << lanes) - 1)))
        strb32 = Cat(*[lane_on[i].replicate(4) for i in range(lanes)])
        c_half = Signal()
        copy_low = Signal(half_bits)
        copy_low_on = Signal(lanes)
        emit = has_copy & (c_half | last)
        wp, wm, wv, wc = (self.writers[k].data for k in WRITES)
        all_ready = Signal()
        m.d.comb += all_ready.eq(wp.ready & wm.ready & wv.ready & (~emit | wc.ready))
        fire_out = Signal()
        m.d.comb += fire_out.eq(out_valid & all_ready)
        strb16 = lambda on: Cat(*[on[i].replicate(2) for i in range(lanes)])
        m.d.comb += [
            o.ready.eq(all_ready & ~flush),
            wp.valid.eq(fire_out), wp.payload.data.eq(o.payload.p), wp.payload.strb.eq(strb32),
            wm.valid.eq(fire_out), wm.payload.data.eq(o.payload.m), wm.payload.strb.eq(strb32),
            wv.valid.eq(fire_out), wv.payload.data.eq(o.payload.v), wv.payload.strb.eq(strb32),
            wc.valid.eq(fire_out & emit),
            wc.payload.data.eq(Mux(c_half, Cat(copy_low, o.payload.copy), Cat(o.payload.copy, Const(0, half_bits)))),
            wc.payload.strb.eq(Mux(c_half, Cat(strb16(copy_low_on), strb16(lane_on)),
                                   Cat(strb16(lane_on), Const(0, 2 * lanes)))),
        ]
        popcount = sum((o.payload.nonfinite & lane_on)[i] for i in range(lanes))
        with m.If(fire_out):
            m.d.sync += [out_count.eq(out_count + 1), nonfinite.eq(nonfinite + popcount)]
            with m.If(has_copy):
                m.d.sync += [c_half.eq(~c_half & ~last), copy_low.eq(o.payload.copy), copy_low_on.eq(lane_on)]
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += c_half.eq(0)
        return m
