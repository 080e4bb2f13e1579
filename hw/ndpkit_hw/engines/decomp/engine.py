"""``decomp``: scatter-mode gradient decompression (Smart-Infinity compatible).

Spec: :func:`ndpkit.engines.decomp.golden.check` / :func:`~ndpkit.engines.decomp.golden.execute`.

Command (:data:`ndpkit_spec.engines.decomp.BLOCK`): value format, dense element count ``n``,
pair count ``k``, addresses of the indices, the values and the dense destination.
Checked before any traffic: format (BAD_FIELD), n and k non-zero (ZERO_LENGTH), each
array's word-rounded range (UNALIGNED, OUT_OF_WINDOW), no two arrays overlapping
(OVERLAP).

Run: a burst writer zero-fills the destination's ``n`` elements (byte strobes off past
them) while two burst readers already fetch the pairs; once every zero-fill write is
acknowledged, the pairs (one a cycle, :class:`~.pairs.PairUnpacker`) become
single-beat AXI writes with the value's bytes strobed, all with one ID on one port so
they land in array order: a repeated index keeps the last value.  Index 0xFFFFFFFF is
padding and is skipped; any other index >= n stops the command (OUT_OF_WINDOW, after
the pairs before it) and the readers drain.  ``cpl.aux`` = pairs written.

Unlike Smart-Infinity's decompressor (zero-fill, then one element per cycle with the
phases in sequence per chunk), the pair reads overlap the zero fill, and the fused
stream mode (:mod:`.stream_decompressor`) avoids the dense buffer altogether.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal, Cat, Const, Mux
from amaranth.lib import data, fifo

from ndpkit_spec.codes import ErrorCode
from ndpkit_spec.engines.decomp import SENTINEL
from ndpkit_spec.engines.decomp import BLOCK as DECOMP
from ndpkit_hw.bus.axi import AxiResp
from ndpkit_hw.bus.dma import Transfer, TransferGroup
from ndpkit_hw.engines.skeleton import CommandChecks, CommandControl, CommandEngine
from ndpkit_hw.engines.decomp.pairs import PairLayout, PairUnpacker

__all__ = ["DecompEngine"]


class DecompEngine(CommandEngine):
    def __init__(self, *, addr_width: int = 32, data_width: int = 512, max_burst_bytes: int = 4096,
                 max_outstanding: int = 8, max_scatter_outstanding: int = 64):
        self.max_scatter_outstanding = max_scatter_outstanding
        # port 0: index reads + zero fill, port 1: value reads + scatter writes (driven below)
        super().__init__(DECOMP, addr_width=addr_width, data_width=data_width, max_burst_bytes=max_burst_bytes,
                         max_outstanding=max_outstanding, reads=("idx", "val"), writes=("zero_fill",))
        self.read_idx, self.read_val = self.readers["idx"], self.readers["val"]
        self.zero_fill = self.writers["zero_fill"]
        self.unpacker = PairUnpacker(data_width=data_width)

    def elaborate(self, platform):
        m = Module()
        word = self.word_bytes
        word_shift = word.bit_length() - 1
        read_idx, read_val, zero_fill = self.read_idx, self.read_val, self.zero_fill
        m.submodules.unpacker = unpacker = self.unpacker
        self.elaborate_ports(m)
        scatter = self.ports.port(1)

        # ---- the command and its checks ------------------------------------------------
        ctl = CommandControl(m, self)
        cmd = ctl.cmd
        value16 = cmd.format != 0
        size_shift = Mux(value16, 1, 2)
        dst_bytes, pair_bytes = Signal(35), Signal(35)
        m.d.comb += [dst_bytes.eq(cmd.count << size_shift), pair_bytes.eq(cmd.pairs << size_shift)]

        def words(nbytes):
            return ((nbytes + (word - 1)) >> word_shift) << word_shift

        checks = CommandChecks(m, self)
        lengths = {name: checks.derive(words(nbytes), f"{name}_length")
                   for name, nbytes in {"dst": dst_bytes, "idx": cmd.pairs << 2, "val": pair_bytes}.items()}
        ranges = {"dst": Transfer(cmd.dst, lengths["dst"][:32]), "idx": Transfer(cmd.idx, lengths["idx"][:32]),
                  "val": Transfer(cmd.val, lengths["val"][:32])}
        checks.require(cmd.format > 2, ErrorCode.BAD_FIELD)
        checks.require((cmd.count == 0) | (cmd.pairs == 0), ErrorCode.ZERO_LENGTH)
        checks.ranges(ranges, wide=lengths)
        checks.disjoint(list(ranges))

        # ---- the engines' commands and statuses ----------------------------------------
        running = Signal()
        scattering = Signal()
        transfers = TransferGroup(m, {"idx": read_idx, "val": read_val, "dst": zero_fill}, ranges, running)
        status = transfers.error

        # zero fill: n elements' bytes strobed, the rest of the last word untouched.  The last
        # beat's index and strobes are registered from the held command (settled long before
        # the fill runs), so the beat counter meets only an equality compare.
        beats = lengths["dst"][word_shift:]
        beat, last_index = Signal(33), Signal(33)
        filling = Signal()
        # the last word's bytes 0..r, r = (dst_bytes - 1) mod word: a compare with a constant
        # per byte (no shifter)
        last_byte = Signal(word_shift, name="last_byte")
        tail_strobes = Signal(word)
        m.d.comb += last_byte.eq(dst_bytes[:word_shift] - 1)
        m.d.sync += [last_index.eq(beats - 1), tail_strobes.eq(Cat(*[i <= last_byte for i in range(word)]))]
        last_beat = beat == last_index
        zd = zero_fill.data
        m.d.comb += [zd.valid.eq(running & filling), zd.payload.data.eq(0),
                     zd.payload.strb.eq(Mux(last_beat, tail_strobes, (1 << word) - 1))]
        with m.If(zd.valid & zd.ready):
            m.d.sync += beat.eq(beat + 1)
            with m.If(last_beat):
                m.d.sync += filling.eq(0)

        # ---- pairs -> single-beat writes -------------------------------------------------
        stream_error = Signal(4)
        m.d.comb += [unpacker.k.eq(cmd.pairs), unpacker.value16.eq(value16), unpacker.drain.eq(stream_error != 0),
                     unpacker.idx.payload.eq(read_idx.data.payload.data), unpacker.idx.valid.eq(read_idx.data.valid),
                     read_idx.data.ready.eq(unpacker.idx.ready),
                     unpacker.val.payload.eq(read_val.data.payload.data), unpacker.val.valid.eq(read_val.data.valid),
                     read_val.data.ready.eq(unpacker.val.ready)]
        # a two-entry queue after the unpacker: each pair with its address and its verdicts,
        # so the lane select, the address adder and the index compare each get a cycle
        # before the write logic, and the unpacker's ready is the queue's registered room
        # (not the scatter handshake).  After a bad index the queue drains.
        entry_layout = data.StructLayout({"pair": PairLayout, "address": self.addr_width, "sentinel": 1, "bad": 1})
        m.submodules.pairs = pairs = fifo.SyncFIFO(width=entry_layout.size, depth=2)
        fresh, entry = unpacker.o.payload, Signal(entry_layout)
        m.d.comb += [entry.pair.eq(fresh), entry.address.eq(cmd.dst + (fresh.index << size_shift)),
                     entry.sentinel.eq(fresh.index == SENTINEL),
                     entry.bad.eq((fresh.index != SENTINEL) & (fresh.index >= cmd.count)),
                     pairs.w_data.eq(entry), pairs.w_en.eq(unpacker.o.valid), unpacker.o.ready.eq(pairs.w_rdy)]
        staged = data.View(entry_layout, pairs.r_data)
        pair, address, sentinel, bad_index = staged.pair, staged.address, staged.sentinel, staged.bad
        pair_valid = pairs.r_rdy
        pair_taken = Signal()
        m.d.comb += pairs.r_en.eq(pair_taken | (stream_error != 0))
        pairs_done = Signal(32)
        written = Signal(32)
        outstanding = Signal(range(self.max_scatter_outstanding + 1))
        aw_sent, w_sent = Signal(), Signal()
        head = scattering & (stream_error == 0) & pair_valid
        write = head & ~sentinel & ~bad_index
        room = outstanding < self.max_scatter_outstanding
        lane = address[:word_shift]
        lanes32, lanes16 = word // 4, word // 2
        m.d.comb += [
            scatter.awvalid.eq(write & ~aw_sent & room),
            scatter.awaddr.eq(address & ~(word - 1)), scatter.awlen.eq(0), scatter.awsize.eq(word_shift),
            scatter.awburst.eq(1), scatter.awid.eq(0),
            scatter.wvalid.eq(write & ~w_sent & (aw_sent | room)),
            scatter.wdata.eq(Mux(value16, Cat(*[pair.value[:16]] * lanes16), Cat(*[pair.value] * lanes32))),
            scatter.wstrb.eq(Mux(value16, Const(0b11, word), Const(0b1111, word)) << lane),
            scatter.wlast.eq(1), scatter.bready.eq(1),
        ]
        aw_fire = scatter.awvalid & scatter.awready
        w_fire = scatter.wvalid & scatter.wready
        b_fire = scatter.bvalid
        pair_written = write & (aw_sent | aw_fire) & (w_sent | w_fire)
        take = (head & (sentinel | bad_index)) | pair_written
        m.d.comb += pair_taken.eq(take & ~bad_index)
        m.d.sync += outstanding.eq(outstanding + aw_fire - b_fire)
        with m.If(take & bad_index):
            m.d.sync += stream_error.eq(ErrorCode.OUT_OF_WINDOW)
        with m.If(pair_taken):
            m.d.sync += [pairs_done.eq(pairs_done + 1), aw_sent.eq(0), w_sent.eq(0)]
        with m.Else():
            with m.If(aw_fire):
                m.d.sync += aw_sent.eq(1)
            with m.If(w_fire):
                m.d.sync += w_sent.eq(1)
        with m.If(pair_written):
            m.d.sync += written.eq(written + 1)
        with m.If(b_fire & (scatter.bresp != AxiResp.OKAY) & (status == 0)):
            m.d.sync += status.eq(Mux(scatter.bresp == AxiResp.DECERR, ErrorCode.DECERR, ErrorCode.SLVERR))

        # ---- control ------------------------------------------------------------------------
        finished = (transfers.finished & ((pairs_done == cmd.pairs) | ((stream_error != 0) & ~pairs.r_rdy))
                    & (outstanding == 0) & ~aw_sent)
        with ctl.states(checks, first="ZERO", start=[unpacker.start.eq(1)],
                        clear=[beat.eq(0), filling.eq(1), pairs_done.eq(0), written.eq(0), stream_error.eq(0), aw_sent.eq(0),
                               w_sent.eq(0)] + transfers.clear()):
            with m.State("ZERO"):
                m.d.comb += running.eq(1)
                with m.If(transfers.done["dst"]):          # every zero-fill write acknowledged
                    m.next = "SCATTER"
            with m.State("SCATTER"):
                m.d.comb += [running.eq(1), scattering.eq(1)]
                with m.If(finished):
                    ctl.finish(Mux(status != 0, status, stream_error))
        ctl.complete(bytes_read=ranges["idx"].length + ranges["val"].length,
                     bytes_written=dst_bytes + (written << size_shift), aux=written)
        return m
