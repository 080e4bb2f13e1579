"""``attention``: decode attention for a batch of requests over a card-resident KV cache.

The command (:data:`ndpkit_spec.engines.attention.BLOCK`, docs/engines/attention.md) names a table of
64-byte request descriptors.  Whole-command checks first (formats, shape, requests,
the table's range: :func:`ndpkit.engines.attention.golden.check`); then, one request
after the other, its descriptor is read and checked
(:func:`ndpkit.engines.attention.golden.request_check`, same order).  A failing request gets
its code in its status word and nothing else; a good one is issued head by head:

- q rows of the head's query group -> the datapath's q bank,
- the head's K rows ``[first, length)`` from the cache, then (append) its new row
  straight from ``k_new``: those words are forked to a writer that appends them to
  the cache at row ``length`` (the new token is read once and never read back),
- the same for V,
- the output rows from the datapath to ``out``.

Paged commands (``shape.block_size`` 16..128): ``k`` and ``v`` are block pools; a request
that passes its checks first reads the ids of the blocks it uses (``block_table``, on
the reader of the descriptors and q rows) into the ids RAM, checking each against ``pool_blocks`` (BAD_INDEX:
retired, nothing issued); its K and V parts are then one transfer per block piece (a
window's first block from its offset, whole blocks, a partial last one), the new row
goes to row ``length mod block_size`` of block ``table[length / block_size]``.  The
datapath sees the same words as from a contiguous slot.

Issuing runs ahead of the data (each reader and writer queues transfers), so the
next head's and the next request's reads overlap this one's arithmetic; what issuing
uses of a request is held from its first cycle, so the next request's descriptor,
checks and block-id read overlap this one's issuing too; a request's
status word (bit 31 done, bits 0-7 its code) is written once its output writes are
acknowledged.  A bus error (SLVERR/DECERR) on any transfer is the command's error.
``cpl_aux`` counts the failed requests.
"""
from __future__ import annotations

from amaranth.hdl import Array, Module, Signal, Cat, Const, Mux
from amaranth.lib import data, fifo, stream
from amaranth.lib.memory import Memory

from ndpkit_spec.codes import ErrorCode
from ndpkit_spec.engines.attention import BLOCK_SIZES, DESCRIPTOR_BYTES, DESCRIPTOR_FIELDS, FLAG_APPEND, HEAD_DIMS, \
    MAX_KV_HEADS, MAX_TABLE_ENTRIES, STATUS_DONE, KvFormat
from ndpkit_spec.engines.attention import BLOCK as ATTENTION
from ndpkit_hw.bus.dma import DmaCommandLayout, Transfer
from ndpkit_hw.engines.skeleton import CommandChecks, CommandControl, CommandEngine
from ndpkit_hw.engines.attention.datapath import MAX_GROUP, AttentionDatapath

__all__ = ["AttentionEngine"]

# q: a head's q rows, and the descriptors and a paged request's block ids (the table's reads:
# a 64-byte descriptor a request, fetched while the request before it issues), on one reader
READS = ("q", "k", "v")
# writer i shares interconnect port i with reader i
WRITES = ("status", "out", "append")
# every writer (a request's status word, a head's output rows, the new token's K and V rows,
# one writer for both: under 1 % of the bytes): short bursts into a distributed-RAM buffer (a
# 513-bit, 32-beat one is 37 RAM32M16, 296 LUTs).  K, V and the q reader stream through
# full-burst block-RAM ones: the cards run out of LUTs first, and 7.5 BRAM36 for q keep an
# instance within 39 (a writer's full buffer, two 4 KiB bursts, would take 8).
LIGHT = WRITES
STATUS_OFFSET = 4 * DESCRIPTOR_FIELDS.index("status")


def writer_options(data_width: int) -> dict:
    """The status writer's buffer holds a 32-bit word a beat, not a bus word, written with the
    strobe of the descriptor's status field (descriptors are aligned to their 64 bytes: the
    field is always at the same place in its bus word); the others write whole words (no
    strobes in their buffers either)."""
    return {"status": {"word_bits": 32, "strobes": 0xF << STATUS_OFFSET % (data_width // 8)},
            **{name: {"strobes": False} for name in WRITES[1:]}}


assert BLOCK_SIZES == (16, 32, 64, 128)                # a block's shift is 4 + a 2-bit amount
OFFERED = 4                                            # a paged piece's phase once its transfer is offered

Descriptor = data.StructLayout({**{name: 32 for name in DESCRIPTOR_FIELDS},
                                "reserved": 8 * DESCRIPTOR_BYTES - 32 * len(DESCRIPTOR_FIELDS)})


class _Issuer:
    """Walks the heads of the current request, handing one transfer per head (or two:
    ``parts``) to a burst engine's command stream; ``done`` when all are taken."""

    def __init__(self, m: Module, name: str, engine_cmd, start, enabled=Const(1)):
        self.head = Signal(range(MAX_KV_HEADS + 1), name=f"{name}_head")
        self.done = Signal(name=f"{name}_done", init=1)
        self.fire = Signal(name=f"{name}_fire")
        self.cmd = engine_cmd
        m.d.comb += self.fire.eq(engine_cmd.valid & engine_cmd.ready)
        with m.If(start):
            m.d.sync += [self.head.eq(0), self.done.eq(~enabled)]
        # (``done`` is high when a request starts: the one before it is issued, or none was)
        self.active = ~self.done


class AttentionEngine(CommandEngine):
    def __init__(self, *, addr_width: int = 32, data_width: int = 512, max_burst_bytes: int = 4096,
                 max_outstanding: int = 8, lanes: int = 32, pair_words: bool = False):
        super().__init__(ATTENTION, addr_width=addr_width, data_width=data_width, max_burst_bytes=max_burst_bytes,
                         max_outstanding=max_outstanding, reads=READS, writes=WRITES, writer_commands=8,
                         light=LIGHT, writer_options=writer_options(data_width), checked=False)
        # (checked=False: every transfer lies in a range the command's or its request's
        # checks passed -- the table, a request's q, K, V, new rows, block table and out --
        # so the burst engines do not compare each one with the window again)
        # (a head's tokens: its rows, at least 128 bytes each, lie in the address space)
        self.datapath = AttentionDatapath(data_width=data_width, lanes=lanes, token_bits=addr_width - 6,
                                          pair_words=pair_words)

    def elaborate(self, platform):
        m = Module()
        wb, W = self.word_bytes, self.data_width
        word_shift = wb.bit_length() - 1
        desc_words = DESCRIPTOR_BYTES // wb
        m.submodules.datapath = dp = self.datapath
        self.elaborate_ports(m)
        # ---- the command ----------------------------------------------------------------
        ctl = CommandControl(m, self)
        cmd = ctl.cmd
        d128 = cmd.shape_head_dim == 128
        G, hkv = cmd.shape_group, cmd.shape_kv_heads
        q_size_shift = Mux(cmd.format_q == KvFormat.FP32, 2, 1)
        out_size_shift = Mux(cmd.format_out == KvFormat.FP32, 2, 1)
        d_shift = Mux(d128, 7, 6)
        row_shift = d_shift + 1                                     # bytes per cache row: d * 2
        table_bytes = Signal(40)
        m.d.comb += table_bytes.eq(cmd.requests * DESCRIPTOR_BYTES)
        table = Transfer(cmd.table, table_bytes[:32])
        checks = CommandChecks(m, self)
        checks.require(cmd.format_q > 2)
        checks.require((cmd.format_kv != KvFormat.FP16) & (cmd.format_kv != KvFormat.BF16))
        checks.require(cmd.format_out > 2)
        checks.require((cmd.shape_head_dim != HEAD_DIMS[0]) & (cmd.shape_head_dim != HEAD_DIMS[1]))
        checks.require((G == 0) | (G > MAX_GROUP))
        checks.require((hkv == 0) | (hkv > MAX_KV_HEADS))
        bs = cmd.shape_block_size
        checks.require(~Cat(*[bs == size for size in (0, *BLOCK_SIZES)]).any())
        checks.require(cmd.requests == 0, ErrorCode.ZERO_LENGTH)
        checks.ranges({"table": table}, wide={"table": table_bytes})
        # the command's sizes, registered while its checks settle (no multiplier on a request's path)
        q_head = checks.derive((G << d_shift) << q_size_shift, "q_head")          # bytes of one head's q rows
        out_head = checks.derive((G << d_shift) << out_size_shift, "out_head")
        heads_g = checks.derive_product(G, hkv[:7], "heads_x_group")   # all heads' q rows (hkv > 64: rejected)
        q_bytes = checks.derive(heads_g << (d_shift + q_size_shift), "q_bytes", after=checks.after(heads_g))
        out_bytes = checks.derive(heads_g << (d_shift + out_size_shift), "out_bytes", after=checks.after(heads_g))
        new_bytes = checks.derive(hkv << row_shift, "new_row_bytes")               # one row a head
        row_bytes = checks.derive(1 << row_shift, "row_bytes")
        # (a table within the window has fewer than 2 ** req_bits descriptors: its range check
        # refuses more, so the request counters are that wide)
        req_bits = self.addr_width - (DESCRIPTOR_BYTES.bit_length() - 1)
        last_request = checks.derive((cmd.requests - 1)[:req_bits], "last_request")  # (0 requests: rejected)
        # paged (block_size 16..128): a block is 1 << (4 + shift) rows; shifts by it are a 4-way mux
        # (multiplies by it, its rows or bytes, are on the DSPs)
        paged = checks.derive(bs != 0, "paged")
        block_shift = checks.derive(Mux(bs[7], 3, Mux(bs[6], 2, Mux(bs[5], 1, 0))), "block_shift")
        block_shift = block_shift[:2]
        block_mask = checks.derive((bs - 1)[:7], "block_mask")                      # (block_size 0: unused)
        block_rows = checks.derive(bs, "block_rows")
        # (at most 128 rows of 256 bytes: 16 bits, within a DSP48E2's 17-bit unsigned port)
        block_bytes = checks.derive((bs << row_shift)[:16], "block_bytes")

        def rows_to_blocks(x):
            return (x >> 4) >> block_shift

        def rows_to_bytes(x):
            return Mux(d128, x << 8, x << 7)
        # the shape and formats reach the datapath registered from the latched command (static
        # while it runs, settled during the checks): no path from the command's decode into it
        m.d.sync += [dp.head_dim128.eq(d128), dp.group.eq(G), dp.q_format.eq(cmd.format_q),
                     dp.kv_format.eq(cmd.format_kv), dp.out_format.eq(cmd.format_out), dp.scale.eq(cmd.scale)]

        # ---- the current request and its checks: registered stages from the descriptor, as
        # the command's (golden ``request_check``'s order); the verdict waits for them
        desc = Signal(Descriptor)
        append = desc.flags[0]
        # (serial: one range checker and one pair of compares walk the request's 8 ranges and 23
        # pairs, a few dozen cycles while the request before it issues, for 2k LUT of compares)
        request = CommandChecks(m, self, name="request", serial=True)
        needed = request.derive(desc.length + append, "needed")                   # rows after the append
        tokens = request.derive(Mux((desc.window != 0) & (desc.window < needed), desc.window, needed),   # rows attended
                                "tokens", after=request.after(needed))                             # (window 0: all)
        cache_rows = request.derive(tokens - append, "cache_rows", after=request.after(tokens))
        first_row = request.derive(needed - tokens, "first_row", after=request.after(tokens))
        # a head's rows in the cache region: the slot's capacity, or (paged) the pool's blocks x block_size
        # (paged: blocks x block_size on the multipliers, not a shift by the block size)
        pool_rows = request.derive_product(desc.pool_blocks, block_rows, "pool_rows")
        head_rows = request.derive(Mux(paged, pool_rows, desc.capacity), "head_rows", after=request.after(pool_rows))
        head_bytes = request.derive(head_rows << row_shift, "head_bytes", after=request.after(head_rows))
        region_step = head_bytes[:self.addr_width]     # one head's region of the slot (or pool)
        slot_bytes = request.derive_product(head_bytes, hkv[:7], "slot_bytes",   # kv_heads x that
                                            after=request.after(head_bytes))
        # the rows the request may hold: its capacity, or (paged) its table's blocks x block_size
        table_rows = request.derive_product(desc.blocks, block_rows, "table_rows")
        room_rows = request.derive(Mux(paged, table_rows, desc.capacity), "room_rows", after=request.after(table_rows))
        # a paged request's block_table range: its entries in whole 64-byte units (> 1024 entries: rejected first)
        table_range = request.derive(((desc.blocks[:11] + 15) >> 4) << 6, "block_table_bytes")
        request.require((desc.flags & ~FLAG_APPEND & 0xFFFF_FFFF) != 0)
        request.require(needed == 0, ErrorCode.ZERO_LENGTH)
        request.require(paged & (desc.blocks > MAX_TABLE_ENTRIES))
        request.require(needed > room_rows, ErrorCode.OUT_OF_WINDOW)          # (capacity or blocks 0: needed > 0)
        request.ranges({"out": Transfer(desc.out, out_bytes), "q": Transfer(desc.q, q_bytes),
                        "k": Transfer(desc.k, slot_bytes[:32]), "v": Transfer(desc.v, slot_bytes[:32]),
                        "k_new": Transfer(desc.k_new, new_bytes), "v_new": Transfer(desc.v_new, new_bytes),
                        "block_table": Transfer(desc.block_table, table_range), "table": table},
                       active={"k_new": append, "v_new": append, "block_table": paged},
                       wide={"k": slot_bytes, "v": slot_bytes})
        request.disjoint(["out", "q", "k", "v", "k_new", "v_new", "block_table"])
        request.disjoint(["out", "table"])
        request.disjoint(["block_table", "table"])
        # what the request moves (the command's counters), and where its K/V parts start
        kv_rows = request.derive_product(tokens, hkv[:7], "kv_rows", after=request.after(tokens))
        request_read = request.derive(q_bytes + (kv_rows << (row_shift + 1)), "request_read",
                                      after=request.after(kv_rows))
        request_written = request.derive(4 + out_bytes + Mux(append, new_bytes << 1, 0), "request_written")
        cache_offset = request.derive(first_row << row_shift, "cache_offset", after=request.after(first_row))
        # paged: the block ids read (entries [0, last_entry]: ceil(needed / block_size) of them, whole
        # bus words), the entry the new row goes to, and a head's cache rows [first_row, length) as
        # pieces of blocks: the first from first_offset (to_end rows, or all cache_rows when it is the
        # only one), then whole blocks, then last_rows of block last_block
        entry_bits = (MAX_TABLE_ENTRIES - 1).bit_length()
        entries_per_word = wb // 4
        needed_less = request.derive(needed - 1, "needed_less_one", after=request.after(needed))
        last_entry = request.derive(rows_to_blocks(needed_less)[:entry_bits], "last_entry",
                                    after=request.after(needed_less))
        table_read = request.derive(((last_entry >> (entries_per_word.bit_length() - 1)) + 1) << word_shift,
                                    "table_read_bytes", after=request.after(last_entry))
        append_entry = request.derive(rows_to_blocks(desc.length)[:entry_bits], "append_entry")
        append_row = request.derive(desc.length[:7] & block_mask, "append_row")       # in its block
        first_block = request.derive(rows_to_blocks(first_row)[:entry_bits], "first_block",
                                     after=request.after(first_row))
        first_offset = request.derive(first_row[:7] & block_mask, "first_offset", after=request.after(first_row))
        to_end = request.derive(block_rows - first_offset, "to_end", after=request.after(first_offset))
        length_less = request.derive(desc.length - 1, "length_less_one")             # the last cache row
        last_block = request.derive(rows_to_blocks(length_less)[:entry_bits], "last_block",
                                    after=request.after(length_less))
        last_rows = request.derive((length_less[:7] & block_mask) + 1, "last_rows", after=request.after(length_less))
        later_blocks = request.derive(last_block - first_block, "later_blocks",   # a head's pieces after the first
                                      after=request.after(last_block, first_block))
        # the new row's offset in its head's region (paged: from the block id read, append_id, on a
        # DSP48E2 as the pieces' blocks; registered twice, so BLOCKS_CHECK waits three cycles)
        append_id = Signal(32)
        append_block = request.derive(append_id[:26] * block_bytes, "append_block")
        append_offset = request.derive(Mux(paged, append_block | rows_to_bytes(append_row),
                                           desc.length << row_shift)[:self.addr_width], "append_offset",
                                       after=request.after(append_block))
        request_check = request.code()                 # (after the last derived value: it waits for them all)

        # ---- issuing a good request, head by head ------------------------------------------
        start = Signal()                           # the cycle a checked request starts issuing
        rd = {k: self.readers[k] for k in READS}
        wr = {k: self.writers[k] for k in WRITES}
        # the q issuer's transfers share the q reader with the table's (below)
        q_cmd = stream.Signature(DmaCommandLayout(self.addr_width)).create(path=("q_cmd",))
        q_iss = _Issuer(m, "q_issue", q_cmd, start)
        q_is_table = fifo.SyncFIFO(width=1, depth=16)     # a flag a q reader transfer: the table's
        m.submodules.q_is_table = q_is_table
        out_iss = _Issuer(m, "out_issue", wr["out"].cmd, start)
        head_iss = _Issuer(m, "head_issue", dp.head, start)
        k_iss = _Issuer(m, "k_issue", rd["k"].cmd, start)
        v_iss = _Issuer(m, "v_issue", rd["v"].cmd, start)
        append_iss = _Issuer(m, "append_issue", wr["append"].cmd, start, append)
        issuers = [q_iss, out_iss, head_iss, k_iss, v_iss, append_iss]
        # what issuing reads of the request after its first cycle, held from ``start``: the next
        # request's descriptor is read, checked and (paged) its block ids fetched meanwhile

        def held(value, name):
            reg = Signal.like(value, name=f"issue_{name}")
            with m.If(start):
                m.d.sync += reg.eq(value)
            return reg

        i_region_step, i_tokens, i_cache_rows = held(region_step, "region_step"), \
            held(tokens[:dp.token_bits], "tokens"), held(cache_rows, "cache_rows")
        i_append, i_has_cache = held(append, "append"), held(cache_rows != 0, "has_cache")
        i_first_block, i_later_blocks = held(first_block, "first_block"), held(later_blocks, "later_blocks")
        i_first_offset, i_to_end, i_last_rows = held(first_offset, "first_offset"), held(to_end, "to_end"), \
            held(last_rows, "last_rows")

        def per_head(iss, bases, step, length):
            """A transfer of ``length`` bytes from each of ``bases`` in turn, a head; each base
            ``step`` further on for the next head."""
            addrs = [Signal(self.addr_width, name=f"{iss.head.name}_addr{i}") for i in range(len(bases))]
            turn = Signal(range(max(2, len(bases))), name=f"{iss.head.name}_turn")     # (one base: always 0)
            last = turn == len(bases) - 1
            with m.If(start):
                m.d.sync += [turn.eq(0), *[a.eq(b) for a, b in zip(addrs, bases)]]
            m.d.comb += [iss.cmd.payload.addr.eq(Array(addrs)[turn] if len(bases) > 1 else addrs[0]),
                         iss.cmd.payload.length.eq(length), iss.cmd.valid.eq(iss.active)]
            with m.If(iss.fire):
                m.d.sync += turn.eq(Mux(last, 0, turn + 1))
                with m.If(last):
                    m.d.sync += [iss.head.eq(iss.head + 1), *[a.eq(a + step) for a in addrs]]
                    with m.If(iss.head == hkv - 1):
                        m.d.sync += iss.done.eq(1)

        per_head(q_iss, [desc.q], q_head, q_head)
        per_head(out_iss, [desc.out], out_head, out_head)
        # the new token's rows: per head its K row, then its V row, on one writer
        per_head(append_iss, [desc.k + append_offset, desc.v + append_offset], i_region_step, row_bytes)
        m.d.comb += [dp.head.payload.eq(i_tokens), dp.head.valid.eq(head_iss.active)]
        with m.If(head_iss.fire):
            m.d.sync += head_iss.head.eq(head_iss.head + 1)
            with m.If(head_iss.head == hkv - 1):
                m.d.sync += head_iss.done.eq(1)

        # K and V: per head the cache part (when not empty), then the new row (append);
        # each transfer's "is the new row" flag goes to the fork in transfer order.  Contiguous:
        # the cache part is one transfer.  Paged: one transfer a block piece, its address from the
        # block id (the ids RAM, filled in state BLOCKS), one register stage an adder: the id
        # read, the piece's row in the pool, its address; then it is offered.
        ids = Memory(shape=32, depth=MAX_TABLE_ENTRIES, init=[])
        m.submodules.block_ids = ids
        ids_write = ids.write_port()
        forks = {}
        has_cache = cache_rows != 0
        for name, iss, cache_base, new_base in (("k", k_iss, desc.k, desc.k_new), ("v", v_iss, desc.v, desc.v_new)):
            cache_addr = Signal(self.addr_width, name=f"{name}_cache_addr")
            new_addr = Signal(self.addr_width, name=f"{name}_new_addr")
            part = Signal(name=f"{name}_part")             # 0: the cache rows, 1: the new row
            flags = fifo.SyncFIFO(width=1, depth=16)
            m.submodules[f"{name}_fork_flags"] = flags
            # the paged generator
            ids_read = ids.read_port()
            # 0: the id read, 1: the id registered, 2: its block's offset, 3: the piece's address, 4: offered
            phase = Signal(range(OFFERED + 1), name=f"{name}_piece_phase")
            block = Signal(entry_bits, name=f"{name}_piece_block")
            later = Signal(entry_bits, name=f"{name}_pieces_later")   # the head's pieces after this one
            first = Signal(name=f"{name}_piece_first")
            head_base = Signal(self.addr_width, name=f"{name}_head_base")
            piece_id = Signal(26, name=f"{name}_piece_id")    # (a good id: id x block bytes < 2**32)
            piece_skip = Signal(16, name=f"{name}_piece_skip")              # bytes before the piece in its block
            piece_block = Signal(self.addr_width, name=f"{name}_piece_block_offset")   # its block in the pool region
            piece_rows = Signal(8, name=f"{name}_piece_rows")
            piece_addr = Signal(self.addr_width, name=f"{name}_piece_addr")
            piece_bytes = Signal(16, name=f"{name}_piece_bytes")
            only = later == 0
            m.d.comb += ids_read.addr.eq(block)

            with m.If(start):
                m.d.sync += [cache_addr.eq(cache_base + cache_offset), new_addr.eq(new_base),
                             part.eq(~has_cache), head_base.eq(cache_base), block.eq(first_block),
                             later.eq(later_blocks), first.eq(1), phase.eq(Mux(has_cache, 0, OFFERED))]
            on_new = part                                  # (paged: part is set on the head's last piece)
            offered = ~paged | (phase == OFFERED)
            m.d.comb += [iss.cmd.valid.eq(iss.active & flags.w_rdy & offered),
                         iss.cmd.payload.addr.eq(Mux(on_new, new_addr, Mux(paged, piece_addr, cache_addr))),
                         iss.cmd.payload.length.eq(Mux(on_new, row_bytes,
                                                       Mux(paged, piece_bytes, i_cache_rows << row_shift))),
                         flags.w_en.eq(iss.fire), flags.w_data.eq(on_new)]
            with m.If(paged & iss.active & ~on_new):
                with m.Switch(phase):
                    with m.Case(0):
                        m.d.sync += phase.eq(1)
                    with m.Case(1):
                        m.d.sync += [piece_id.eq(ids_read.data),
                                     piece_skip.eq(rows_to_bytes(Mux(first, i_first_offset, 0))),
                                     piece_rows.eq(Mux(first, Mux(only, i_cache_rows[:8], i_to_end),
                                                       Mux(only, i_last_rows, block_rows))),
                                     phase.eq(2)]
                    with m.Case(2):
                        # (id x block bytes on a DSP48E2, from registers into a register; the skip
                        # is below a block's bytes: an OR adds it)
                        m.d.sync += [piece_block.eq(piece_id * block_bytes), piece_bytes.eq(rows_to_bytes(piece_rows)),
                                     phase.eq(3)]
                    with m.Case(3):
                        m.d.sync += [piece_addr.eq(head_base + (piece_block | piece_skip)), phase.eq(OFFERED)]
            next_head = [part.eq(~i_has_cache), cache_addr.eq(cache_addr + i_region_step),
                         head_base.eq(head_base + i_region_step), block.eq(i_first_block),
                         later.eq(i_later_blocks), first.eq(1), phase.eq(Mux(i_has_cache, 0, OFFERED)),
                         new_addr.eq(new_addr + row_bytes), iss.head.eq(iss.head + 1)]
            with m.If(iss.fire):
                with m.If(~on_new & paged & ~only):        # a paged head's next piece
                    m.d.sync += [block.eq(block + 1), later.eq(later - 1), first.eq(0), phase.eq(0)]
                with m.Elif(~on_new & i_append):
                    m.d.sync += part.eq(1)
                with m.Else():
                    m.d.sync += next_head
                    with m.If(iss.head == hkv - 1):
                        m.d.sync += iss.done.eq(1)
            forks[name] = flags

        # the forks: reader words to the datapath, new-row words to the append writer too, whose
        # commands take a head's K row, then its V row: ``v_turn`` says which fork's new row it
        # takes next (the other's waits: the V side never needs a later head's K rows to take
        # this head's V rows, so the wait ends)
        writer = wr["append"].data
        v_turn = Signal()
        for name in ("k", "v"):
            src, flags = rd[name].data, forks[name]
            dst = getattr(dp, name)
            turn = v_turn if name == "v" else ~v_turn
            to_writer = flags.r_rdy & flags.r_data
            writer_ready = writer.ready & turn
            m.d.comb += [dst.payload.eq(src.payload.data),
                         dst.valid.eq(src.valid & flags.r_rdy & (~to_writer | writer_ready)),
                         src.ready.eq(flags.r_rdy & dst.ready & (~to_writer | writer_ready)),
                         flags.r_en.eq(src.valid & src.ready & src.payload.last)]
            with m.If(turn):
                m.d.comb += [writer.valid.eq(src.valid & to_writer & dst.ready),
                             writer.payload.data.eq(src.payload.data)]
            with m.If(src.valid & src.ready & to_writer & src.payload.last):
                m.d.sync += v_turn.eq(~v_turn)
        clear = Signal()                           # (a command's start: the first new row is a K row)
        with m.If(clear):
            m.d.sync += v_turn.eq(0)
        m.d.comb += [dp.q.payload.eq(rd["q"].data.payload.data),
                     wr["out"].data.payload.data.eq(dp.out.payload),      # (the epilogue writes on the
                     wr["out"].data.valid.eq(dp.out.valid), dp.out_space.eq(wr["out"].space)]   # writer's credit)
        issued = Signal()
        m.d.comb += issued.eq(Cat(*[i.done for i in issuers]).all() & ~start)
        # K and V issued: the ids RAM is free for the next request's block ids
        ids_free = Signal()
        m.d.comb += ids_free.eq(k_iss.done & v_iss.done)          # (no request starts while they fill)

        # ---- statuses of every transfer; the first error is the command's -----------------
        bus_error = Signal(4)
        pending = {}
        for name, e in list(rd.items()) + [(f"w_{k}", v) for k, v in wr.items()]:
            # (at most the engine's queued commands and the one it holds: a narrow counter)
            count = Signal(range(e.params.max_commands + 2), name=f"pending_{name}")
            pending[name] = count
            m.d.comb += e.status.ready.eq(1)
            took = e.status.valid
            sent = e.cmd.valid & e.cmd.ready
            m.d.sync += count.eq(count + sent - took)
            with m.If(took & (e.status.payload.error != 0) & (bus_error == 0)):
                m.d.sync += bus_error.eq(e.status.payload.error)
        with m.If(clear):
            m.d.sync += bus_error.eq(0)

        # ---- retiring requests: status words, in order, after their outputs ----------------
        retire_depth = 8
        retire = fifo.SyncFIFOBuffered(width=self.addr_width + 4 + 1, depth=retire_depth)
        m.submodules.retire = retire
        retire_in = Signal(data.StructLayout({"addr": self.addr_width, "code": 4, "outputs": 1}))
        retire_head = data.View(retire_in.shape(), retire.r_data)
        # out transfers acknowledged, not yet retired: of the requests in the retire queue and the one
        # issuing (it waits for room there), a head's each
        outs_done = Signal(range((retire_depth + 1) * MAX_KV_HEADS + 1))
        out_ack = wr["out"].status.valid
        status_w = wr["status"]
        # (the word and its command together: the writer's buffer holds the word, with the
        # strobe of its place, writer_options)
        ready_to_retire = retire.r_rdy & (~retire_head.outputs | (outs_done >= hkv)) & status_w.cmd.ready & \
            status_w.data.ready
        offset = STATUS_OFFSET % wb
        m.d.comb += [retire.w_data.eq(retire_in),
                     status_w.cmd.valid.eq(ready_to_retire), retire.r_en.eq(ready_to_retire),
                     status_w.cmd.payload.addr.eq(retire_head.addr), status_w.cmd.payload.length.eq(wb),
                     status_w.data.valid.eq(ready_to_retire),
                     status_w.data.payload.data.eq(STATUS_DONE | retire_head.code)]      # (the writer repeats it)
        m.d.sync += outs_done.eq(outs_done + out_ack - Mux(ready_to_retire & retire_head.outputs, hkv, 0))

        # ---- control ------------------------------------------------------------------------
        index = Signal(req_bits)                   # the request being read
        desc_word = Signal(range(max(2, desc_words)))
        desc_addr = Signal(self.addr_width)        # the descriptor's first byte
        failed = Signal(req_bits + 1)
        bytes_read, bytes_written = Signal(32), Signal(32)
        # the counters' one adder each: what a state adds (the clear and the table's bytes,
        # assigned in the states below, take precedence), the low half's carry into the high
        # half a cycle later (the state's select, merged into the adds' LUTs, and a 32-bit carry
        # chain are not one cycle; the counters settle a cycle after a request's add, long
        # before the command completes, and no carry is pending at a clear)
        read_add, written_add, fail_add = Signal(32), Signal(32), Signal()
        for counter, add in ((bytes_read, read_add), (bytes_written, written_add), (failed, fail_add)):
            half = len(counter) // 2
            low = Signal(half + 1, name=f"{counter.name}_low")
            carry = Signal(name=f"{counter.name}_carry")
            m.d.comb += low.eq(counter[:half] + add[:half])
            high = Signal(len(counter) - half + 1, name=f"{counter.name}_high")      # (the carry as the
            m.d.comb += high.eq(Cat(Const(1, 1), counter[half:]) + Cat(carry, add[half:]))   # adder's carry in)
            m.d.sync += [counter.eq(Cat(low[:half], high[1:])), carry.eq(low[half])]
        # the descriptor after this one, and this one's status word
        next_desc = Signal(self.addr_width)
        status_at = Signal(self.addr_width)
        m.d.comb += [next_desc.eq(desc_addr + DESCRIPTOR_BYTES), status_at.eq(desc_addr + (STATUS_OFFSET - offset))]
        all_done = Cat(*[c == 0 for c in pending.values()]).all() & ~retire.r_rdy & dp.idle
        # the q reader takes the descriptors, one read each, and a paged request's block ids,
        # in the order they are used: the next descriptor is asked for once this request's ids
        # are (or it has none), so its fetch overlaps this request's wait to issue, and the
        # table's words come in the order the states take them.  Beside them, the q rows of the
        # request being issued: the table is asked only once they all are (``q_iss.done``),
        # since a table read's words, taken by a later state, would hold back the q rows queued
        # behind them, and the request they belong to would never finish issuing.  A flag a
        # transfer (in issue order) sends its words to the q loader or to the table's states.
        q_reader = rd["q"]
        # (the table's words through a register of their own, taken at most every other cycle: a
        # descriptor is one word, a paged request's ids a few; the states' readiness then does
        # not reach the q reader's buffer in the cycle it is decided)
        table_data = ids_data = stream.Signature(data.StructLayout({"data": W, "last": 1})).create(path=("table",))
        table_full = Signal(name="table_full")
        m.d.comb += table_data.valid.eq(table_full)
        desc_asked = Signal()                      # the next descriptor to take is on its way
        more = index != last_request
        ask_desc = Signal()                        # ask for the descriptor at ask_at
        ask_at = Signal(self.addr_width)
        ask_blocks = Signal()                      # ask for the request's block ids
        table_cmd_ready = Signal()
        ask = (ask_desc | ask_blocks) & q_iss.done
        m.d.comb += table_cmd_ready.eq(q_reader.cmd.ready & q_iss.done & q_is_table.w_rdy)
        m.d.comb += [q_reader.cmd.valid.eq((q_cmd.valid | ask) & q_is_table.w_rdy),
                     q_reader.cmd.payload.addr.eq(Mux(q_cmd.valid, q_cmd.payload.addr,
                                                      Mux(ask_blocks, desc.block_table, ask_at))),
                     q_reader.cmd.payload.length.eq(Mux(q_cmd.valid, q_cmd.payload.length,
                                                        Mux(ask_blocks, table_read, DESCRIPTOR_BYTES))),
                     q_cmd.ready.eq(q_reader.cmd.ready & q_is_table.w_rdy),
                     q_is_table.w_en.eq(q_reader.cmd.valid & q_reader.cmd.ready), q_is_table.w_data.eq(~q_cmd.valid)]
        to_table = q_is_table.r_rdy & q_is_table.r_data
        to_q = q_is_table.r_rdy & ~q_is_table.r_data
        m.d.comb += [dp.q.valid.eq(q_reader.data.valid & to_q),
                     q_reader.data.ready.eq(Mux(to_table, ~table_full, to_q & dp.q.ready)),
                     q_is_table.r_en.eq(q_reader.data.valid & q_reader.data.ready & q_reader.data.payload.last)]
        with m.If(table_data.ready):
            m.d.sync += table_full.eq(0)
        with m.If(q_reader.data.valid & to_table & ~table_full):
            m.d.sync += [table_full.eq(1), table_data.payload.eq(q_reader.data.payload)]
        with m.If(ask_desc & table_cmd_ready):
            m.d.sync += desc_asked.eq(1)

        def ask_next():                            # (in a request's states: the one after it)
            m.d.comb += [ask_desc.eq(more & ~desc_asked), ask_at.eq(next_desc)]
        # a paged request's block ids (state BLOCKS): one entry a cycle from the reader's words
        # into the ids RAM, a registered stage later checked against pool_blocks and the new
        # row's block taken; the entries after the last one used are dropped unread
        entry_index_bits = max(1, entries_per_word.bit_length() - 1)
        fill_entry = Signal(entry_bits)            # the next entry's index
        fill_sub = Signal(entry_index_bits)        # its place in the word
        fill_sub_last = Signal()                   # the word's last entry
        fill_left = Signal(entry_bits)             # entries used after it
        fill_at_last = Signal()                    # it is the last entry used
        fill_past = Signal()                       # the last entry used is taken: drop the rest
        fill_take = Signal()
        entry = Signal(32)
        entry_valid, entry_append = Signal(), Signal()
        entry_at = Signal(entry_bits)
        bad_index = Signal()
        blocks_settle = Signal(2)
        issuing = Signal()                         # a request is being issued (its status not yet queued)
        issue_status = Signal(self.addr_width)     # its status word's address
        m.d.sync += entry_valid.eq(fill_take)
        with m.If(fill_take):
            m.d.sync += [entry.eq(ids_data.payload.data.word_select(fill_sub, 32)), entry_at.eq(fill_entry),
                         entry_append.eq(append & (fill_entry == append_entry)),
                         fill_entry.eq(fill_entry + 1), fill_left.eq(fill_left - 1), fill_at_last.eq(fill_left == 1),
                         fill_sub.eq(fill_sub + 1), fill_sub_last.eq(fill_sub == entries_per_word - 2)]
            with m.If(fill_at_last):
                m.d.sync += fill_past.eq(1)
        m.d.comb += [ids_write.addr.eq(entry_at), ids_write.data.eq(entry), ids_write.en.eq(entry_valid)]
        with m.If(entry_valid):
            with m.If(entry >= desc.pool_blocks):
                m.d.sync += bad_index.eq(1)
            with m.If(entry_append):
                m.d.sync += append_id.eq(entry)
        with ctl.states(checks, first="TABLE", ready=dp.idle, start=[clear.eq(1)],
                        clear=[index.eq(0), desc_word.eq(0), desc_addr.eq(cmd.table), failed.eq(0),
                               bytes_read.eq(0), bytes_written.eq(0), desc_asked.eq(0)]):
            with m.State("TABLE"):                     # (every descriptor is read once: the table's bytes)
                m.d.sync += bytes_read.eq(table_bytes)
                m.next = "DESCRIPTOR"
            with m.State("DESCRIPTOR"):
                # (the first one, or one a request failing before its block ids, is asked for here)
                m.d.comb += [table_data.ready.eq(1), ask_desc.eq(~desc_asked), ask_at.eq(desc_addr)]
                with m.If(table_data.valid):
                    m.d.sync += [desc.as_value().eq(Cat(desc.as_value()[W:], table_data.payload.data)
                                                    if desc_words > 1 else table_data.payload.data),
                                 desc_word.eq(desc_word + 1)]
                    with m.If(desc_word == desc_words - 1):
                        m.d.sync += [desc_word.eq(0), request.restart(), desc_asked.eq(0)]
                        m.next = "REQUEST_SETTLE"
            with m.State("REQUEST_SETTLE"):            # the request's checks run from registers
                with m.If(request.settled):
                    m.next = "REQUEST"
            # a request waits for the one before it to be issued (``issuing``) only to start or to
            # retire: its descriptor, checks and (paged) block-id read overlap that one's issuing
            with m.State("REQUEST"):
                m.d.comb += [retire_in.addr.eq(status_at),
                             retire_in.code.eq(request_check), retire_in.outputs.eq(0)]
                with m.If((request_check != 0) | ~paged):  # (a paged one's block ids are asked for first)
                    ask_next()
                with m.If(request_check != 0):
                    with m.If(~issuing):
                        m.d.comb += retire.w_en.eq(retire.w_rdy)
                        with m.If(retire.w_rdy):
                            m.d.comb += [fail_add.eq(1), written_add.eq(4)]
                            m.next = "NEXT"
                with m.Elif(paged):
                    m.next = "BLOCKS"
                with m.Elif(~issuing):
                    m.d.comb += start.eq(1)
                    m.d.comb += [read_add.eq(request_read), written_add.eq(request_written)]
                    m.next = "NEXT"
            with m.State("BLOCKS"):                    # paged: read the ids of the blocks used
                m.d.comb += ask_blocks.eq(1)
                with m.If(table_cmd_ready):
                    m.d.comb += read_add.eq(table_read)
                    m.d.sync += [fill_entry.eq(0), fill_sub.eq(0),
                                 fill_sub_last.eq(entries_per_word == 1), fill_left.eq(last_entry),
                                 fill_at_last.eq(last_entry == 0), fill_past.eq(0), bad_index.eq(0)]
                    m.next = "BLOCK_IDS"
            with m.State("BLOCK_IDS"):                 # (once the request before has its K and V issued)
                ask_next()
                m.d.comb += [fill_take.eq(ids_data.valid & ~fill_past & ids_free),
                             ids_data.ready.eq(ids_free & (fill_sub_last | fill_at_last | fill_past))]
                with m.If(ids_data.valid & ids_data.ready & ids_data.payload.last):
                    m.d.sync += blocks_settle.eq(0)
                    m.next = "BLOCKS_CHECK"
            with m.State("BLOCKS_CHECK"):              # the last id checked and taken, then the append offset
                m.d.comb += [retire_in.addr.eq(status_at),
                             retire_in.code.eq(ErrorCode.BAD_INDEX), retire_in.outputs.eq(0)]
                m.d.sync += blocks_settle.eq(blocks_settle + 1)
                with m.If(blocks_settle == 3):
                    m.d.sync += blocks_settle.eq(3)
                with m.If((blocks_settle == 3) & ~issuing):
                    with m.If(bad_index):
                        m.d.comb += retire.w_en.eq(retire.w_rdy)
                        with m.If(retire.w_rdy):
                            m.d.comb += [fail_add.eq(1), written_add.eq(4)]
                            m.next = "NEXT"
                    with m.Else():
                        m.d.comb += start.eq(1)
                        m.d.comb += [read_add.eq(request_read), written_add.eq(request_written)]
                        m.next = "NEXT"
            with m.State("NEXT"):
                m.d.sync += [index.eq(index + 1), desc_addr.eq(next_desc)]
                with m.If(index == last_request):
                    m.next = "FINISH"
                with m.Else():
                    m.next = "DESCRIPTOR"
            with m.State("FINISH"):
                with m.If(all_done & ~issuing):
                    ctl.finish(bus_error)
        # the request being issued: its status word is queued once all of it is issued (the
        # front queues a failed request's only while none is being issued: one writer at a time)
        with m.If(issuing & issued):
            m.d.comb += [retire_in.addr.eq(issue_status), retire_in.code.eq(0), retire_in.outputs.eq(1),
                         retire.w_en.eq(retire.w_rdy)]
            with m.If(retire.w_rdy):
                m.d.sync += issuing.eq(0)
        with m.If(start):
            m.d.sync += [issuing.eq(1), issue_status.eq(status_at)]
        ctl.complete(bytes_read=bytes_read, bytes_written=bytes_written, aux=failed)
        return m
