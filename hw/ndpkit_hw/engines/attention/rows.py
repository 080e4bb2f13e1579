"""What the attention datapath's sides share: the shape of a beat and of a row, the
passes a group takes over each row, the row buffer K and V words go through (rows of words, or of beats),
and the memories they keep per unit."""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.lib.memory import Memory

from ndpkit_spec.engines.attention import MAX_GROUP
from ndpkit_hw.arith.blockfloat import largest_field, row_maximum
from ndpkit_hw.arith.fp_common import Pipeline
from ndpkit_hw.bus.axi import log2_exact
from ndpkit_hw.engines.attention.epilogue import MAX_DIM

__all__ = ["RowSide", "RowBuffer", "memory_ports", "register_file", "pass_count", "serves", "pairs_mode",
           "pairs_supported"]


def pass_count(m: Module, group, units: int, pairs=Const(0)) -> Signal:
    """The passes each row takes, as a signal: ``ceil(group / units)``, or with ``pairs``
    (see :func:`pairs_mode`) one a query head."""
    passes = Signal(range(MAX_GROUP // units + 1))
    m.d.comb += passes.eq(Mux(pairs, group, (group + units - 1) >> log2_exact(units, "units")))
    return passes


def serves(j, h: int, group, units: int, pairs=Const(0)):
    """Unit ``h``'s pass ``j`` has a query head of the group (with ``pairs``, unit 0's
    does: the head's scores and weights are unit 0's)."""
    return Mux(pairs, (h == 0) & (j < group), ((j << log2_exact(units, "units")) + h) < group)


def pairs_supported(units: int) -> bool:
    """Whether a build of ``units`` units can take a row's words in pairs (two units, a
    bus word a beat: :func:`pairs_mode`)."""
    return units == 2


def pairs_mode(m: Module, group, units: int) -> Signal:
    """Whether a command's rows go through the two units as pairs of words: each pass
    one query head, unit 0 taking the row's even words and unit 1 its odd ones (unit 0's
    dot product adds unit 1's row integer before its rounding, unit 1 weighs its
    columns with unit 0's weights).  For an odd group of three or more heads and fewer
    than the passes the memories hold: a pass a head takes G half-rows where heads two
    at a time take G + 1 (G = 7: 3.5 words' time a word, not 4).  Not for G = 1, which
    the port bounds either way: a d = 64 row at 512 bits is one pair, and a pass a row
    would bring a value sums slot back every four beats, inside its read-modify-write
    (:data:`~ndpkit_hw.arith.blockfloat.REVISIT`; three or more passes bring it back
    every twelve or more).  Registered: ``group`` is held for a command."""
    pairs = Signal(name="pairs")
    m.d.sync += pairs.eq(group[0] & (group > 1) & (group < MAX_GROUP // units))
    return pairs


def memory_ports(m: Module, name: str, shape, depth: int):
    """A memory's write port and (synchronous) read port."""
    mem = Memory(shape=shape, depth=depth, init=[])
    m.submodules[name] = mem
    return mem.write_port(), mem.read_port()


def register_file(m: Module, name: str, shape, depth: int):
    """A memory's write port and an asynchronous read port (a register file's timing: a
    read sees the value written at an earlier edge)."""
    mem = Memory(shape=shape, depth=depth, init=[])
    m.submodules[name] = mem
    return mem.write_port(), mem.read_port(domain="comb")


class RowBuffer:
    """Row slots filled from a word stream, read by one consumer that releases a slot
    when it has issued its last word.  With ``bf16`` (the format of the words' 16-bit
    elements) it also takes each row's largest exponent field as the row fills
    (:func:`~ndpkit_hw.arith.blockfloat.largest_field`): ``field``, the slot being read's
    (a slot counts as full once its field is there).  A slot is taken from its row's last
    word on (``held``), not from when its field lands: a row of fewer words than the
    field's pipeline is deep would otherwise let a later row overwrite it.

    ``beats`` (S): the consumer takes a word as S beats of ``width / S`` bits.  With S = 1
    the memory holds words: ``2 * max_words`` of them, two slots of ``max_words`` words
    or, with ``short`` (runtime), four of half as many (d = 64: a row's two slots would
    not cover its exponent field's latency).  With S > 1 it holds beats, four slots of
    ``max_words`` words, and a word goes in a beat a cycle (the rest of it held in a
    register): the consumer takes no more than that, and a distributed RAM as wide as a
    beat, not a word, is S times smaller (32 deep either way at 512 bits, S = 2), with no
    select of a beat behind it; the field's tree takes a beat's elements, not a word's.
    :meth:`read` gives a beat a cycle after its word and beat are named."""

    def __init__(self, m: Module, name: str, words_in: stream.Interface, short, max_words: int, width: int,
                 bf16=None, beats: int = 1):
        S = beats
        log2_exact(S, "beats")
        beat_bits = width // S
        n = 4                                          # slots, counted modulo 4 (two in use at S = 1, d = 128)
        depth = 4 * max_words * S if S > 1 else 2 * max_words
        mem = Memory(shape=beat_bits, depth=depth, init=[])
        m.submodules[f"{name}_rows"] = mem
        self._mem = mem
        wp, self._rp = mem.write_port(), mem.read_port()
        self.full = Signal(n, name=f"{name}_full")
        held = Signal(n, name=f"{name}_held")          # the slot has a row the reader has not released
        fill_count = Signal(range(n), name=f"{name}_fill_count")     # rows taken in, and read, modulo 4
        read_count = Signal(range(n), name=f"{name}_read_count")
        fill_word = Signal(range(max_words), name=f"{name}_fill_word")
        self.release = Signal(name=f"{name}_release")
        self._word_bits, self._short, self._beats = log2_exact(max_words, "row words"), short, S
        rows_words = Mux(short, max_words // 2, max_words)
        # the slots in use: the counts taken modulo their number (a command of the other head
        # dim may have left them past it; both are equal whenever the buffer is empty)
        slot_mask = n - 1 if S > 1 else Mux(short, n - 1, 1)
        fill_slot = Signal(range(n), name=f"{name}_fill_slot")
        self.read_slot = Signal(range(n), name=f"{name}_read_slot")
        m.d.comb += [fill_slot.eq(fill_count & slot_mask), self.read_slot.eq(read_count & slot_mask)]
        set_full = Signal(n, name=f"{name}_set_full")
        set_held = Signal(n, name=f"{name}_set_held")
        take = words_in.valid & words_in.ready
        if S == 1:
            m.d.comb += words_in.ready.eq(~held.bit_select(fill_slot, 1))
            written, beat, data = take, Const(0, 1), words_in.payload
            word_done = take
        else:
            # a beat a cycle: the word's first from the stream, the rest from a register
            beat = Signal(range(S), name=f"{name}_fill_beat")
            rest = Signal(width - beat_bits, name=f"{name}_rest")
            m.d.comb += words_in.ready.eq(~held.bit_select(fill_slot, 1) & (beat == 0))
            written = take | (beat != 0)
            data = Signal(beat_bits, name=f"{name}_fill_data")
            m.d.comb += data.eq(Mux(beat == 0, words_in.payload[:beat_bits],
                                    rest.word_select((beat - 1)[:len(beat)], beat_bits) if S > 2 else rest))
            with m.If(take):
                m.d.sync += rest.eq(words_in.payload[beat_bits:])
            with m.If(written):
                m.d.sync += beat.eq(Mux(beat == S - 1, 0, beat + 1))
            word_done = written & (beat == S - 1)
        m.d.comb += [wp.addr.eq(self._address(fill_slot, fill_word, beat)), wp.data.eq(data), wp.en.eq(written)]
        with m.If(word_done):
            m.d.sync += fill_word.eq(fill_word + 1)
            with m.If(fill_word == rows_words - 1):
                m.d.sync += [fill_word.eq(0), fill_count.eq(fill_slot + 1)]
                m.d.comb += set_held.eq(1 << fill_slot)
                if bf16 is None:
                    m.d.comb += set_full.eq(1 << fill_slot)
        if bf16 is not None:
            pipe = Pipeline(m, written, f"{name}_field")
            elements = [data[16 * i:16 * (i + 1)] for i in range(beat_bits // 16)]
            largest, (first, last, slot) = largest_field(m, pipe, elements, bf16, carry=(
                (fill_word == 0) & (beat == 0), (fill_word == rows_words - 1) & (beat == S - 1), fill_slot))
            row_max = row_maximum(m, largest, first, pipe.valid, f"{name}_row")
            fields = Array(Signal(8, name=f"{name}_field{b}") for b in range(n))
            with m.If(pipe.valid & last):
                m.d.sync += fields[slot].eq(row_max)
                m.d.comb += set_full.eq(1 << slot)
        clear = Signal(n, name=f"{name}_clear")
        with m.If(self.release):
            m.d.comb += clear.eq(1 << self.read_slot)
            m.d.sync += read_count.eq(self.read_slot + 1)
        m.d.sync += [self.full.eq((self.full & ~clear) | set_full), held.eq((held & ~clear) | set_held)]
        self.ready = self.full.bit_select(self.read_slot, 1)
        self.rows_words = rows_words
        if bf16 is not None:
            self.field = fields[self.read_slot]

    def _address(self, slot, word, beat):
        """Beat ``beat`` of word ``word`` of slot ``slot``."""
        if self._beats > 1:                              # four slots of a d = 128 row's beats
            return Cat(beat, word[:self._word_bits], slot[:2])
        low = word[:self._word_bits - 1]
        return Cat(low, Mux(self._short, slot[:2], Cat(word[self._word_bits - 1], slot[0])))

    def read(self, m: Module, word, beat):
        """Beat ``beat`` of word ``word`` of the slot being read, a cycle later (a memory read)."""
        m.d.comb += self._rp.addr.eq(self._address(self.read_slot, word, beat))
        return self._rp.data

    def read_pair(self, m: Module, word, pairs):
        """Two words of the slot being read, a cycle later (words of one beat): with
        ``pairs``, words ``2 word`` and ``2 word + 1``, else word ``word`` twice (a second
        read port)."""
        assert self._beats == 1, "pairs of words are read where a word is a beat"
        second = self._mem.read_port()
        m.d.comb += [self._rp.addr.eq(self._address(self.read_slot, Mux(pairs, word << 1, word), 0)),
                     second.addr.eq(self._address(self.read_slot, Mux(pairs, (word << 1) | 1, word), 0))]
        return self._rp.data, second.data


class RowSide(wiring.Component):
    """A side that streams K or V rows through ``units`` units of ``columns`` lanes: a
    row is R bus words (d = 128 or 64 elements of 16 bits), a word
    ``beats`` beats of ``columns`` elements, a d = 128 row ``groups`` column groups; a
    group of query heads takes ``max_passes`` passes at most.  Subclasses add their
    ports to :meth:`members`."""

    def __init__(self, *, data_width: int, columns: int, units: int, token_bits: int = 32, pair_words: bool = False):
        if pair_words and not pairs_supported(units):
            raise ValueError(f"pairs of words need two units, not {units}")
        self.data_width, self.columns, self.units, self.pair_words = data_width, columns, units, pair_words
        self.token_bits = token_bits                       # a head's token count (jobs)
        self.elements = data_width // 16                   # P
        self.beats = self.elements // columns              # S: beats a word
        self.row_words = MAX_DIM // self.elements          # R at d = 128 (half as many at d = 64)
        self.groups = MAX_DIM // columns                   # column groups of a d = 128 row
        self.max_passes = MAX_GROUP // units
        super().__init__(self.members())

    def members(self) -> dict:
        """The ports both sides have: ``jobs`` (a KV head's token count, ``token_bits`` wide), the fields held
        for a command, ``busy``."""
        return {"jobs": In(stream.Signature(self.token_bits)), "head_dim128": In(1), "group": In(range(MAX_GROUP + 1)),
                "pairs": In(1), "kv_format": In(2), "busy": Out(1)}

    def row_stream(self, m: Module, name: str, words: stream.Interface, bf16=None):
        """The side's row buffer on ``words`` (``bf16``: see :class:`RowBuffer`), the beats'
        cursor's words a row (R, the bus words of a row at the command's head dimension;
        R / 2 pairs with ``pairs``) and the passes each row takes."""
        buffer = RowBuffer(m, name, words, ~self.head_dim128, self.row_words, self.data_width, bf16, self.beats)
        rows_words = Mux(self.pairs, buffer.rows_words >> 1, buffer.rows_words) if self.pair_words \
            else buffer.rows_words
        return buffer, rows_words, pass_count(m, self.group, self.units, self.pairs)

    def read_beat(self, m: Module, buffer: RowBuffer, word, beat):
        """The beat the cursor names, a cycle later, for each unit: with ``pair_words`` unit
        1 reads the pair's second word (:meth:`RowBuffer.read_pair`)."""
        if self.pair_words:
            return buffer.read_pair(m, word, self.pairs)
        return (buffer.read(m, word, beat),) * self.units

    def row_end(self, beat, word, rows_words):
        """The beat is a row's last (of its pass)."""
        return (word == rows_words - 1) & (beat == self.beats - 1)

    def step(self, m: Module, beat, word, pass_, rows_words, passes):
        """Move the cursor (``beat`` of ``word`` of pass ``pass_``) one beat on; returns
        "this was the row's last beat of its last pass" (the caller moves to the next row)."""
        row_end = self.row_end(beat, word, rows_words)
        m.d.sync += beat.eq(beat + 1)
        with m.If(beat == self.beats - 1):
            m.d.sync += [beat.eq(0), word.eq(word + 1)]
        with m.If(row_end):
            m.d.sync += [word.eq(0), pass_.eq(pass_ + 1)]
        with m.If(row_end & (pass_ == passes - 1)):
            m.d.sync += pass_.eq(0)
        return row_end & (pass_ == passes - 1)
