"""AXI4 burst read and write engines: the DMA every core uses.

Both engines take commands ``{addr, length}`` (bytes) on a stream, split them into
INCR bursts of at most ``max_burst_bytes`` that never cross a ``max_burst_bytes``
boundary (``max_burst_bytes`` divides 4 KiB, so no burst crosses a 4 KiB page,
and it is at most 256 beats), keep up to ``max_outstanding`` bursts in flight, and
report one status per command, in command order, on a status stream.

Transfer rule (checked in hardware, see :class:`ndpkit_spec.codes.ErrorCode`):
``addr`` and ``length`` are multiples of the bus word (``data_width // 8``),
``length`` is non-zero, and ``[addr, addr + length)`` lies inside the window
``[window_base, window_base + window_size)`` (unless built ``checked=False``, for an
engine that checks the whole ranges its transfers lie in).  A rejected command moves no data,
consumes no data beats (writer) and produces no data beats (reader); its status
carries the code, once the accepted commands before it have completed.  Commands are
checked from registers (:class:`SettledTransferCheck`), a command every
``2 + SettledTransferCheck.CYCLES`` cycles.  A SLVERR/DECERR on any beat or write response is reported as
that command's status (the first one seen); the remaining bursts still run so the
bus is left clean.

The read engine reserves buffer space before it issues a burst, so it never
back-pressures the R channel and a slow consumer cannot block a shared memory
port.  The write engine issues a burst's address only when the burst's data is
already buffered, so W beats follow AW back to back and never hold an
interconnect's W channel idle.
"""
from __future__ import annotations

from amaranth.hdl import Array, Module, Signal, Cat, Const, Mux
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ndpkit_spec.codes import ErrorCode
from ndpkit_hw.bus.axi import AXI4Signature, BURST_INCR, READ_MEMBERS, WRITE_MEMBERS, connect_members, log2_exact
from ndpkit_hw.bus.interconnect import AxiInterconnect

__all__ = ["DmaCommandLayout", "DmaStatusLayout", "BurstSplitter", "BurstReader", "BurstWriter", "transfer_error",
           "Transfer", "transfers_overlap", "TransferGroup", "BurstPorts", "SettledTransferCheck", "TransferSweep"]

LENGTH_WIDTH = 32
COUNTER_WIDTH = 48
STATUS_WIDTH = 4


def DmaCommandLayout(addr_width: int) -> data.StructLayout:
    return data.StructLayout({"addr": addr_width, "length": LENGTH_WIDTH})


DmaStatusLayout = data.StructLayout({"error": STATUS_WIDTH})


class _DmaParams:
    """Parameter checks and derived widths shared by both engines."""

    def __init__(self, *, addr_width, data_width, id_width, max_burst_bytes, max_outstanding,
                 buffer_beats, max_commands):
        self.addr_width, self.data_width, self.id_width = addr_width, data_width, id_width
        self.data_bytes = data_width // 8
        self.word_shift = log2_exact(self.data_bytes, "data_width/8")
        log2_exact(max_burst_bytes, "max_burst_bytes")
        if not (self.data_bytes <= max_burst_bytes <= 4096):
            raise ValueError(f"max_burst_bytes must be between one bus word and 4096, not {max_burst_bytes}")
        self.max_burst_beats = max_burst_bytes // self.data_bytes
        if self.max_burst_beats > 256:
            raise ValueError(f"{max_burst_bytes} B bursts would be {self.max_burst_beats} beats; AXI4 allows 256")
        if max_outstanding < 1 or max_commands < 1:
            raise ValueError("max_outstanding and max_commands must be at least 1")
        if buffer_beats < self.max_burst_beats:
            raise ValueError(f"buffer_beats ({buffer_beats}) must hold one whole burst ({self.max_burst_beats} beats)")
        self.max_burst_bytes, self.max_outstanding = max_burst_bytes, max_outstanding
        self.buffer_beats, self.max_commands = buffer_beats, max_commands


class Transfer:
    """An ``{addr, length}`` pair of plain values, for :func:`transfer_error` and
    :func:`transfers_overlap` where they are not a command payload."""

    def __init__(self, addr, length):
        self.addr, self.length = addr, length


def transfers_overlap(a, b):
    """True when the byte ranges ``[addr, addr + length)`` of ``a`` and ``b`` intersect."""
    return (a.addr < b.addr + b.length) & (b.addr < a.addr + a.length)


class TransferGroup:
    """One command each for a set of burst engines, as an engine's command runs: while
    ``running``, each enabled engine gets its transfer once and its status is taken
    once; ``error`` keeps the first non-zero status, ``finished`` is high when every
    enabled engine has reported.  ``clear()`` are the statements that reset the group
    for the next command (in the engine's check cycle)."""

    def __init__(self, m: Module, engines: dict, transfers: dict, running, enabled: dict | None = None):
        self.error = Signal(STATUS_WIDTH, name="transfer_error")
        self.sent = {k: Signal(name=f"sent_{k}") for k in engines}
        self.done = {k: Signal(name=f"done_{k}") for k in engines}
        enabled = enabled or {}
        on = {k: enabled.get(k, Const(1)) for k in engines}
        self.finished = Signal(name="transfers_finished")
        m.d.comb += self.finished.eq(Cat(*[self.done[k] | ~on[k] for k in engines]).all())
        for key, e in engines.items():
            t = transfers[key]
            m.d.comb += [e.cmd.payload.addr.eq(t.addr), e.cmd.payload.length.eq(t.length),
                         e.cmd.valid.eq(running & on[key] & ~self.sent[key]),
                         e.status.ready.eq(running & on[key] & ~self.done[key])]
            with m.If(e.cmd.valid & e.cmd.ready):
                m.d.sync += self.sent[key].eq(1)
            with m.If(e.status.valid & e.status.ready):
                m.d.sync += self.done[key].eq(1)
                with m.If(self.error == 0):
                    m.d.sync += self.error.eq(e.status.payload.error)

    def clear(self) -> list:
        return ([s.eq(0) for s in self.sent.values()] + [d.eq(0) for d in self.done.values()]
                + [self.error.eq(0)])


def _rule_code(m: Module, zero, unaligned, outside) -> Signal:
    """The transfer rule's code from its three tests, in the rule's order."""
    error = Signal(STATUS_WIDTH)
    with m.If(zero):
        m.d.comb += error.eq(ErrorCode.ZERO_LENGTH)
    with m.Elif(unaligned):
        m.d.comb += error.eq(ErrorCode.UNALIGNED)
    with m.Elif(outside):
        m.d.comb += error.eq(ErrorCode.OUT_OF_WINDOW)
    return error


def _shape_tests(data_bytes: int, payload):
    """(zero length, unaligned) of ``{addr, length}``."""
    return payload.length == 0, ((payload.addr | payload.length) & (data_bytes - 1)) != 0


def _below(addr, window_base):
    return Const(0) if isinstance(window_base, int) and window_base == 0 else addr < window_base


def transfer_error(m: Module, data_bytes: int, addr_width: int, payload, window_base, window_size):
    """The transfer rule as logic: an ErrorCode-valued signal (0 = accepted) for ``{addr, length}``,
    in the same cycle (an adder and two compares deep: :class:`SettledTransferCheck` is the
    registered form)."""
    end = Signal(addr_width + LENGTH_WIDTH + 1)
    m.d.comb += end.eq(payload.addr + payload.length)
    return _rule_code(m, *_shape_tests(data_bytes, payload),
                      _below(payload.addr, window_base) | (end > window_base + window_size))


class SettledTransferCheck:
    """The transfer rule of a held ``{addr, length}`` over :attr:`CYCLES` registered
    stages (the end address and the window's end, then the window compares): ``error``
    is valid :attr:`CYCLES` cycles after ``payload`` last changed, while it stays; ``end``
    (``addr + length``) from one cycle after.  No adder feeds a compare in one cycle."""

    CYCLES = 2

    def __init__(self, m: Module, data_bytes: int, addr_width: int, payload, window_base, window_size):
        self.end = Signal(max(addr_width, LENGTH_WIDTH) + 1, name="transfer_end")
        window_end = Signal(addr_width + 2, name="window_end")     # base + a size of up to addr_width + 1 bits
        zero, unaligned, outside = Signal(), Signal(), Signal(name="transfer_outside")
        m.d.sync += [self.end.eq(payload.addr + payload.length), window_end.eq(window_base + window_size),
                     Cat(zero, unaligned).eq(Cat(*_shape_tests(data_bytes, payload))),
                     outside.eq(_below(payload.addr, window_base) | (self.end > window_end))]
        self.error = _rule_code(m, zero, unaligned, outside)


class TransferSweep:
    """The transfer rule of several held ``{addr, length}`` by one checker, one a cycle:
    transfer ``k`` is taken when ``age == start + k`` and its code lands in the register
    ``codes[k]`` (the caller's), valid from ``age == start + k + LATENCY``; in the cycle it
    lands, ``valid`` is high with ``k``, the transfer's ``addr`` and its ``end``
    (``addr + length``), for the caller to keep.  The transfers must hold from
    ``start`` until their turn.  For checks that can afford a cycle a range (an attention
    request's, while the request before it issues): one adder and two compares behind a
    select, instead of a set of them a range."""

    LATENCY = 4

    def __init__(self, m: Module, data_bytes: int, addr_width: int, transfers: list, codes: list,
                 window_base, window_size, age, start: int):
        width = max(addr_width, LENGTH_WIDTH) + 1
        window_end = Signal(addr_width + 2, name="sweep_window_end")
        m.d.sync += window_end.eq(window_base + window_size)
        # stage 1: the transfer whose turn it is; 2: its end and shape tests; 3: the window compare
        valid, k = Signal(3, name="sweep_valid"), [Signal(range(max(2, len(transfers))), name=f"sweep_k{i}")
                                                  for i in range(3)]
        addr, length = Signal(addr_width, name="sweep_addr"), Signal(LENGTH_WIDTH, name="sweep_length")
        end, addr2 = Signal(width, name="sweep_end"), Signal(addr_width, name="sweep_addr2")
        end3, addr3 = Signal(width, name="sweep_end3"), Signal(addr_width, name="sweep_addr3")
        zero, unaligned, outside = Signal(2, name="sweep_zero"), Signal(2, name="sweep_unaligned"), \
            Signal(name="sweep_outside")
        # (the turn's index from the age, then a select by it: a binary select, not a case a turn)
        turn, turn_k = Signal(name="sweep_turn"), Signal.like(k[0], name="sweep_turn_k")
        m.d.sync += [turn.eq((age >= start - 1) & (age < start - 1 + len(transfers))), turn_k.eq(age - (start - 1)),
                     valid[0].eq(turn), k[0].eq(turn_k),
                     addr.eq(Array(t.addr for t in transfers)[turn_k]),
                     length.eq(Array(t.length for t in transfers)[turn_k])]
        payload = Transfer(addr, length)
        m.d.sync += [valid[1:].eq(valid[:2]), k[1].eq(k[0]), k[2].eq(k[1]),
                     end.eq(addr + length), addr2.eq(addr), end3.eq(end), addr3.eq(addr2),
                     Cat(zero[0], unaligned[0]).eq(Cat(*_shape_tests(data_bytes, payload))),
                     zero[1].eq(zero[0]), unaligned[1].eq(unaligned[0]),
                     outside.eq(_below(addr2, window_base) | (end > window_end))]
        code = _rule_code(m, zero[1], unaligned[1], outside)
        with m.If(valid[2]):
            with m.Switch(k[2]):
                for i in range(len(transfers)):
                    with m.Case(i):
                        m.d.sync += codes[i].eq(code)
        self.valid, self.k, self.addr, self.end = valid[2], k[2], addr3, end3


class BurstSplitter(wiring.Component):
    """Turns ``{addr, last, empty}`` (``last``: the command's beats less one; ``empty``: it
    has none) into AXI bursts that stay inside ``max_burst_bytes`` blocks.

    One burst per cycle into an output register; ``burst.payload.len`` is AXI's
    ``AxLEN`` (beats - 1).  Every burst but a command's last runs to the end of its
    block, so the next one starts at the next block (an increment of the block
    number); the command's last word, held from its start, says which burst is its
    last (the one in that word's block) and that one's length: nothing waits for a
    burst's own length.
    """

    def __init__(self, *, addr_width: int, data_bytes: int, max_burst_beats: int):
        self._addr_width, self._data_bytes, self._max_beats = addr_width, data_bytes, max_burst_beats
        self._word_shift = log2_exact(data_bytes, "data_bytes")
        super().__init__({
            "cmd": In(stream.Signature(data.StructLayout({"addr": addr_width, "last": LENGTH_WIDTH, "empty": 1}))),
            "burst": Out(stream.Signature(data.StructLayout({"addr": addr_width, "len": 8, "last": 1}))),
        })

    def elaborate(self, platform):
        m = Module()
        ws = self._word_shift
        bb = log2_exact(self._max_beats, "max_burst_beats")         # a word's index bits in a block
        block_shift = ws + bb
        addr = Signal(self._addr_width)
        # the command's last word (modulo the address space): a burst is the command's last
        # when that word is in its block.  (Held from the command, not counted down a burst at
        # a time: an add when it is taken, a compare after.)
        last = Signal(self._addr_width - ws)
        active = Signal()
        word_index, last_index = addr[ws:block_shift], last[:bb]
        fits = Signal()
        m.d.comb += [fits.eq(last[bb:] == addr[block_shift:]), self.cmd.ready.eq(~active)]
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [addr.eq(self.cmd.payload.addr), last.eq(self.cmd.payload.addr[ws:] + self.cmd.payload.last),
                         active.eq(~self.cmd.payload.empty)]
        with m.If(active & (~self.burst.valid | self.burst.ready)):
            # AxLEN: to the last word, or to the block's end
            to_last = Signal(bb)
            m.d.comb += to_last.eq(last_index - word_index)
            m.d.sync += [self.burst.valid.eq(1), self.burst.payload.addr.eq(addr),
                         self.burst.payload.len.eq(Mux(fits, to_last, ~word_index)),
                         self.burst.payload.last.eq(fits),
                         addr.eq(Cat(Const(0, block_shift), addr[block_shift:] + 1))]
            with m.If(fits):
                m.d.sync += active.eq(0)
        with m.Elif(self.burst.ready):
            m.d.sync += self.burst.valid.eq(0)
        return m


class _CommandTracker:
    """In-order completion of commands: one status per command, in command order.

    ``accept(error)`` registers a command; ``burst_done(resp, last)`` reports one
    finished burst of the oldest accepted command.  A rejected command (``error`` != 0)
    completes at once, which keeps the order only while no accepted command is still
    running: the intake offers one only when ``may_reject`` holds (rare, so waiting for
    the engine to drain costs nothing that matters, and no response ever waits on it).
    """

    def __init__(self, m: Module, p: _DmaParams, status: stream.Interface):
        self.m, self.p = m, p
        self.pending = Signal(range(p.max_commands + 1))         # accepted, status not yet taken
        running = Signal(range(p.max_commands + 1))              # accepted, last burst not yet done
        self.results = fifo.SyncFIFO(width=STATUS_WIDTH, depth=p.max_commands)
        m.submodules.status_queue = self.results
        self.room = Signal()
        self.may_reject = Signal()
        self.accept_en = Signal()
        self.accept_error = Signal(STATUS_WIDTH)
        self.burst_en = Signal()
        self.burst_resp = Signal(2)
        self.burst_last = Signal()
        self.first_error = Signal(STATUS_WIDTH)

        rejected = self.accept_en & (self.accept_error != 0)
        # a finished burst is taken from registers: the bus's response (rid, rlast,
        # rresp) reaches the status queue a cycle later instead of through its write
        # enable into its level in the same cycle
        burst_en, burst_last, burst_resp = Signal(), Signal(), Signal(2)
        m.d.sync += [burst_en.eq(self.burst_en), burst_last.eq(self.burst_last), burst_resp.eq(self.burst_resp)]
        command_done = burst_en & burst_last
        error_so_far = Signal(STATUS_WIDTH)
        m.d.comb += [
            self.room.eq(self.pending < p.max_commands),
            self.may_reject.eq(running == 0),
            error_so_far.eq(Mux((self.first_error == 0) & (burst_resp != 0),
                                burst_resp, self.first_error)),
            self.results.w_en.eq(rejected | command_done),
            self.results.w_data.eq(Mux(rejected, self.accept_error, error_so_far)),
            status.valid.eq(self.results.r_rdy),
            status.payload.error.eq(self.results.r_data),
            self.results.r_en.eq(status.ready),
        ]
        with m.If(burst_en):
            m.d.sync += self.first_error.eq(Mux(burst_last, 0, error_so_far))
        popped = status.valid & status.ready
        m.d.sync += [self.pending.eq(self.pending + self.accept_en - popped),
                     running.eq(running + (self.accept_en & ~rejected) - command_done)]


class _DmaCounters:
    """Byte and busy/idle cycle counters, cleared by ``clear``.  Each cycle's increment
    is registered first, so the counters trail the bus by a cycle and a 48-bit adder
    is all one cycle holds."""

    def __init__(self, m: Module, component, busy, bytes_now):
        bytes_step, busy_step, idle_step = Signal.like(bytes_now), Signal(), Signal()
        m.d.sync += [bytes_step.eq(bytes_now), busy_step.eq(busy), idle_step.eq(~busy)]
        with m.If(component.clear_counters):
            m.d.sync += [component.bytes_count.eq(0), component.busy_cycles.eq(0),
                         component.idle_cycles.eq(0), bytes_step.eq(0), busy_step.eq(0), idle_step.eq(0)]
        with m.Else():
            m.d.sync += [component.bytes_count.eq(component.bytes_count + bytes_step),
                         component.busy_cycles.eq(component.busy_cycles + busy_step),
                         component.idle_cycles.eq(component.idle_cycles + idle_step)]


def _common_members(p: _DmaParams, channels: str) -> dict:
    return {
        "bus": Out(AXI4Signature(addr_width=p.addr_width, data_width=p.data_width,
                                 id_width=p.id_width, channels=channels)),
        "cmd": In(stream.Signature(DmaCommandLayout(p.addr_width))),
        "status": Out(stream.Signature(DmaStatusLayout)),
        "window_base": In(p.addr_width),
        "window_size": In(p.addr_width + 1),
        "busy": Out(1),
        "clear_counters": In(1),
        "bytes_count": Out(COUNTER_WIDTH),
        "busy_cycles": Out(COUNTER_WIDTH),
        "idle_cycles": Out(COUNTER_WIDTH),
    }


class _DmaEngine(wiring.Component):
    """Command intake shared by both engines: validation, tracking, burst splitting."""

    # Default buffer depth, in whole bursts (see each engine).
    default_buffer_bursts = 2

    def __init__(self, channels, extra_members, *, addr_width=32, data_width=512, id_width=4,
                 axi_id=0, max_burst_bytes=4096, max_outstanding=8, buffer_beats=None,
                 max_commands=4, checked=True):
        data_bytes = data_width // 8
        if buffer_beats is None:
            bursts = max_outstanding if self.default_buffer_bursts is None else self.default_buffer_bursts
            buffer_beats = bursts * min(256, max(1, max_burst_bytes // max(1, data_bytes)))
        self.params = _DmaParams(addr_width=addr_width, data_width=data_width, id_width=id_width,
                                 max_burst_bytes=max_burst_bytes, max_outstanding=max_outstanding,
                                 buffer_beats=buffer_beats, max_commands=max_commands)
        if not 0 <= axi_id < 2 ** id_width:
            raise ValueError(f"axi_id {axi_id} does not fit in {id_width} bits")
        self.axi_id = axi_id
        self.checked = checked
        members = _common_members(self.params, channels)
        members.update(extra_members(self.params))
        super().__init__(members)

    def _intake(self, m: Module):
        """The command is held in a register and checked from there
        (:class:`SettledTransferCheck`), then handed to the tracker and the splitter: a
        command per ``2 + CYCLES`` cycles, and no path from the command's source
        through the checks.  Unchecked (``checked=False``: the engine checked the
        command's whole range before issuing any of its transfers), a command every two
        cycles and no window logic."""
        p = self.params
        tracker = _CommandTracker(m, p, self.status)
        m.submodules.splitter = splitter = BurstSplitter(
            addr_width=p.addr_width, data_bytes=p.data_bytes, max_burst_beats=p.max_burst_beats)
        held = Signal(name="command_held")
        cycles = SettledTransferCheck.CYCLES if self.checked else 0
        age = Signal(range(cycles + 1), name="command_age")
        cmd = Signal(DmaCommandLayout(p.addr_width), name="command")
        # the command's beats less one, and whether it has none, registered with it (the
        # splitter's last word is then one add from registers)
        last_beat, empty = Signal(LENGTH_WIDTH, name="command_last_beat"), Signal(name="command_empty")
        if self.checked:
            error = SettledTransferCheck(m, p.data_bytes, p.addr_width, cmd, self.window_base, self.window_size).error
        else:
            error = Const(0, STATUS_WIDTH)
        rejected = error != 0
        checked = held & (age == cycles) & tracker.room & (~rejected | tracker.may_reject)
        m.d.comb += [
            self.cmd.ready.eq(~held),
            splitter.cmd.valid.eq(checked & ~rejected),
            splitter.cmd.payload.addr.eq(cmd.addr),
            splitter.cmd.payload.last.eq(last_beat), splitter.cmd.payload.empty.eq(empty),
            tracker.accept_en.eq(checked & (rejected | splitter.cmd.ready)),
            tracker.accept_error.eq(error),
            self.busy.eq(held | (tracker.pending != 0)),
        ]
        with m.If(self.cmd.valid & self.cmd.ready):
            beats = self.cmd.payload.length >> p.word_shift
            m.d.sync += [cmd.eq(self.cmd.payload), held.eq(1), age.eq(0), last_beat.eq(beats - 1), empty.eq(beats == 0)]
        with m.Elif(tracker.accept_en):
            m.d.sync += held.eq(0)
        with m.Elif(held & (age != cycles)):
            m.d.sync += age.eq(age + 1)
        return tracker, splitter

    def _address_stage(self, m: Module, splitter, prefix: str, room):
        """The AR or AW register stage, fed by the splitter.

        A burst loads when the stage is empty, fewer than ``max_outstanding`` bursts
        are in flight and ``room(beats)`` held the cycle before for the same burst (the
        engine's buffer rule, registered: a load leaves the stage full for at least the
        next cycle, so the registered test always sees the counters after the previous
        load; data moving since can only add room; a burst the splitter offers after its
        output was empty waits a cycle, its test having been of the last burst's beats).
        At most a burst per two cycles.  Returns (outstanding counter, load strobe,
        handshake strobe, the burst's last-of-command flag as it stands on the bus); the
        caller decrements ``outstanding`` itself.
        """
        p, bus = self.params, self.bus
        valid, ready = getattr(bus, f"{prefix}valid"), getattr(bus, f"{prefix}ready")
        outstanding = Signal(range(p.max_outstanding + 1), name=f"{prefix}_outstanding")
        burst = splitter.burst.payload
        last = Signal(name=f"{prefix}_last_of_command")
        load = Signal(name=f"{prefix}_load")
        has_room = Signal(name=f"{prefix}_room")
        # (only for a burst the splitter already offered: when its output was empty the payload
        # was the last burst's, and a larger new one could load with another's room)
        m.d.sync += has_room.eq(room(burst.len + 1) & (outstanding < p.max_outstanding) & splitter.burst.valid)
        m.d.comb += [
            load.eq(splitter.burst.valid & ~valid & has_room),
            splitter.burst.ready.eq(load),
            getattr(bus, f"{prefix}id").eq(self.axi_id),
            getattr(bus, f"{prefix}size").eq(p.word_shift),
            getattr(bus, f"{prefix}burst").eq(BURST_INCR),
        ]
        with m.If(load):
            m.d.sync += [valid.eq(1), getattr(bus, f"{prefix}addr").eq(burst.addr),
                         getattr(bus, f"{prefix}len").eq(burst.len), last.eq(burst.last)]
        with m.Elif(ready):
            m.d.sync += valid.eq(0)
        return outstanding, load, valid & ready, last


class BurstReader(_DmaEngine):
    """AXI4 burst read engine: commands in, a stream of bus words out.

    ``data`` carries ``{data, last}``; ``last`` marks the final word of a command.

    Bursts are only issued into reserved buffer space, so the data in flight is at
    most ``buffer_beats``: to reach the port's peak at a memory latency of L cycles
    the buffer needs about ``L + max_burst_beats`` beats.  The default buffer holds
    ``max_outstanding`` whole bursts.
    """

    default_buffer_bursts = None   # one burst per outstanding slot

    def __init__(self, **kwargs):
        super().__init__("r", lambda p: {
            "data": Out(stream.Signature(data.StructLayout({"data": p.data_width, "last": 1}))),
        }, **kwargs)

    def elaborate(self, platform):
        m = Module()
        p = self.params
        bus = self.bus
        tracker, splitter = self._intake(m)

        m.submodules.buffer = buffer = fifo.SyncFIFOBuffered(width=p.data_width + 1, depth=p.buffer_beats)
        m.submodules.burst_info = burst_info = fifo.SyncFIFO(width=1, depth=p.max_outstanding)

        reserved = Signal(range(p.buffer_beats + 1))     # beats promised to issued bursts, not yet consumed
        outstanding, load, _, _ = self._address_stage(
            m, splitter, "ar", lambda beats: reserved + beats <= p.buffer_beats)
        burst = splitter.burst.payload
        # a burst's last-of-command flag is queued when it loads into the AR stage (its R
        # beats come after the AR handshake; ``outstanding`` counts it from then, so there
        # is room), not at the handshake: the interconnect's ready stays off this path
        m.d.comb += [burst_info.w_en.eq(load), burst_info.w_data.eq(burst.last)]

        # R channel: always ready unless a burst's bookkeeping is not visible yet (never for
        # lack of buffer space).
        r_fire = Signal()
        r_burst_end = Signal()
        m.d.comb += [
            bus.rready.eq(buffer.w_rdy & burst_info.r_rdy),
            r_fire.eq(bus.rvalid & bus.rready),
            r_burst_end.eq(r_fire & bus.rlast),
            buffer.w_en.eq(r_fire),
            buffer.w_data.eq(Cat(bus.rdata, bus.rlast & burst_info.r_data)),
            burst_info.r_en.eq(r_burst_end),
            tracker.burst_en.eq(r_fire),
            tracker.burst_resp.eq(bus.rresp),
            tracker.burst_last.eq(r_burst_end & burst_info.r_data),
        ]
        # Bus errors are sticky for the command across all its beats; only the last beat
        # of the last burst completes it (tracker.burst_last).

        data_fire = self.data.valid & self.data.ready
        m.d.comb += [
            self.data.valid.eq(buffer.r_rdy),
            self.data.payload.data.eq(buffer.r_data[:p.data_width]),
            self.data.payload.last.eq(buffer.r_data[p.data_width]),
            buffer.r_en.eq(self.data.ready),
        ]
        m.d.sync += [
            reserved.eq(reserved + Mux(load, burst.len + 1, 0) - data_fire),
            outstanding.eq(outstanding + load - r_burst_end),
        ]
        _DmaCounters(m, self, self.busy, Mux(r_fire, p.data_bytes, 0))
        return m


class BurstWriter(_DmaEngine):
    """AXI4 burst write engine: commands and a stream of bus words in.

    ``data`` carries ``{data, strb}``; a command of ``length`` bytes consumes exactly
    ``length / (data_width/8)`` words, in command order.


    ``word_bits`` (a power of two below the bus width): the writer of narrow words (a
    status word): ``data`` carries one such word a beat, repeated across the bus (the
    strobe picks the bytes written), and the buffer holds it and the strobe, not a bus word.
    ``strobes=False``: every beat writes all its bytes; ``data`` has no ``strb`` and the
    buffer holds none.  ``strobes=<int>``: every beat writes the bytes of that strobe
    (a narrow word always at the same place in its bus word: a status word), none held either.

    ``space``: how many more words ``data`` will take whatever the bus does (the buffer's
    room less the one its output register may be about to free): a producer that cannot
    wait (the attention epilogue) writes on that credit instead of queueing its own words.
    """

    def __init__(self, *, word_bits: int | None = None, strobes: bool | int = True, **kwargs):
        self.word_bits, self.strobes = word_bits, strobes
        self._beat_strobes = strobes is True            # the producer's, a beat each
        super().__init__("w", lambda p: {
            "data": In(stream.Signature(data.StructLayout({"data": self._word_bits(p),
                                                           **({"strb": p.data_bytes} if strobes is True else {})}))),
            "space": Out(range(p.buffer_beats + 1)),
        }, **kwargs)

    def _word_bits(self, p) -> int:
        if self.word_bits is None:
            return p.data_width
        if not (8 <= self.word_bits < p.data_width) or self.word_bits & (self.word_bits - 1):
            raise ValueError(f"word_bits must be a power of two from 8 to below the {p.data_width}-bit bus, "
                             f"not {self.word_bits}")
        return self.word_bits

    def elaborate(self, platform):
        m = Module()
        p = self.params
        bus = self.bus
        tracker, splitter = self._intake(m)
        word = self._word_bits(p)

        strb_bits = p.data_bytes if self._beat_strobes else 0
        m.submodules.buffer = buffer = fifo.SyncFIFOBuffered(width=word + strb_bits, depth=p.buffer_beats)
        # Bursts whose AW was accepted and whose W beats are still to send: {len, last}.  Its
        # head from a register (a buffered queue, three deep at least to pass a burst a
        # cycle): WLAST is the beat count's compare with it, and behind WLAST an
        # interconnect's W route pops, so no distributed-RAM read starts that path.
        m.submodules.w_queue = w_queue = fifo.SyncFIFOBuffered(width=9, depth=max(3, p.max_outstanding))
        # Bursts whose W beats were sent and whose B response is awaited: {last}.
        m.submodules.b_queue = b_queue = fifo.SyncFIFO(width=1, depth=p.max_outstanding)

        m.d.comb += [
            self.space.eq(Mux(buffer.level == p.buffer_beats, 0, p.buffer_beats - 1 - buffer.level)),
            buffer.w_en.eq(self.data.valid),
            buffer.w_data.eq(Cat(self.data.payload.data, self.data.payload.strb) if self._beat_strobes
                             else self.data.payload.data),
            self.data.ready.eq(buffer.w_rdy),
        ]

        claimed = Signal(range(p.buffer_beats + 1))     # buffered beats that issued bursts will send
        outstanding, load, aw_fire, aw_last = self._address_stage(
            m, splitter, "aw", lambda beats: buffer.level >= claimed + beats)
        burst = splitter.burst.payload
        m.d.comb += [w_queue.w_en.eq(aw_fire), w_queue.w_data.eq(Cat(bus.awlen, aw_last))]

        beat = Signal(8)
        w_fire = Signal()
        w_burst_end = Signal()
        m.d.comb += [
            bus.wvalid.eq(w_queue.r_rdy & buffer.r_rdy & b_queue.w_rdy),
            bus.wdata.eq(buffer.r_data[:word].replicate(p.data_width // word)),
            bus.wstrb.eq(buffer.r_data[word:] if self._beat_strobes else
                         (1 << p.data_bytes) - 1 if self.strobes is False else self.strobes),
            bus.wlast.eq(beat == w_queue.r_data[:8]),
            w_fire.eq(bus.wvalid & bus.wready),
            w_burst_end.eq(w_fire & bus.wlast),
            buffer.r_en.eq(w_fire),
            w_queue.r_en.eq(w_burst_end),
            b_queue.w_en.eq(w_burst_end),
            b_queue.w_data.eq(w_queue.r_data[8]),
        ]
        with m.If(w_fire):
            m.d.sync += beat.eq(Mux(bus.wlast, 0, beat + 1))

        b_fire = Signal()
        m.d.comb += [
            bus.bready.eq(b_queue.r_rdy),
            b_fire.eq(bus.bvalid & bus.bready),
            b_queue.r_en.eq(b_fire),
            tracker.burst_en.eq(b_fire),
            tracker.burst_resp.eq(bus.bresp),
            tracker.burst_last.eq(b_fire & b_queue.r_data),
        ]
        m.d.sync += [
            claimed.eq(claimed + Mux(load, burst.len + 1, 0) - w_fire),
            outstanding.eq(outstanding + load - b_fire),
        ]
        _DmaCounters(m, self, self.busy, Mux(w_fire, p.data_bytes, 0))
        return m


#: a light port's largest burst, in beats (:class:`BurstPorts`)
LIGHT_BURST_BEATS = 16


class BurstPorts:
    """An engine's burst readers and writers behind one AXI4 master port.

    Reader ``reads[i]`` and writer ``writes[i]`` share interconnect port ``i`` (reads
    and writes route apart, so a pair costs one arbiter input); ports past the end of
    ``writes`` have their write side left to the caller (``port(i)``: tie it off or
    drive it), and ``extra_ports`` ports after the readers' are the caller's whole.  All engines see the shell's window.  Submodules are named
    ``read_<name>`` and ``write_<name>``.  ``checked=False``: the engines do not check
    their transfers against the window (the engine checks each command's and request's
    whole ranges before it issues any transfer in them, so the same compares in every
    engine would be the same answer again).
    """

    def __init__(self, reads, writes, *, addr_width: int, data_width: int, max_burst_bytes: int,
                 max_outstanding: int, writer_commands: int | None = None, extra_ports: int = 0, light=(),
                 writer_options: dict | None = None, checked: bool = True):
        if len(writes) > len(reads):
            raise ValueError("each writer shares a port with a reader: no more writers than readers")
        unknown = set(light) - set(reads) - set(writes)
        if unknown:
            raise ValueError(f"light ports {sorted(unknown)} are neither readers nor writers")
        dma = dict(addr_width=addr_width, data_width=data_width, id_width=1, max_burst_bytes=max_burst_bytes,
                   max_outstanding=max_outstanding, checked=checked)
        # a light port (descriptors, a head's q rows: little data, latency hidden by issuing
        # ahead) takes bursts of LIGHT_BURST_BEATS and buffers two: a distributed RAM, not
        # block RAMs the bus's width wide and a full burst deep
        light_burst = min(max_burst_bytes, LIGHT_BURST_BEATS * (data_width // 8))
        sizes = {name: dict(dma, max_burst_bytes=light_burst, buffer_beats=2 * light_burst // (data_width // 8))
                 if name in light else dma for name in (*reads, *writes)}
        extra = {} if writer_commands is None else {"max_commands": writer_commands}
        self.readers = {name: BurstReader(axi_id=0, **sizes[name]) for name in reads}
        writer_options = writer_options or {}
        unknown = set(writer_options) - set(writes)
        if unknown:
            raise ValueError(f"writer options for {sorted(unknown)}, which are not writers")
        self.writers = {name: BurstWriter(axi_id=0, **writer_options.get(name, {}), **extra, **sizes[name])
                        for name in writes}
        # ``extra_ports`` more interconnect ports (after the readers') for other masters of the engine
        self.interconnect = AxiInterconnect(num_masters=len(reads) + extra_ports, addr_width=addr_width,
                                            data_width=data_width, id_width=1)
        self.id_width = 1 + self.interconnect.index_bits     # of the shared master port
        self.engines = list(self.readers.values()) + list(self.writers.values())

    def port(self, i: int):
        return getattr(self.interconnect, f"s{i}")

    def elaborate(self, m: Module, bus, window_base, window_size) -> None:
        """Add the engines and the interconnect to ``m``; ``bus`` is the component's
        AXI4 master member."""
        m.submodules.interconnect = ic = self.interconnect
        for i, (name, reader) in enumerate(self.readers.items()):
            m.submodules[f"read_{name}"] = reader
            connect_members(m, reader.bus, self.port(i), READ_MEMBERS)
        for i, (name, writer) in enumerate(self.writers.items()):
            m.submodules[f"write_{name}"] = writer
            connect_members(m, writer.bus, self.port(i), WRITE_MEMBERS)
        wiring.connect(m, ic.m, wiring.flipped(bus))
        for engine in self.engines:
            m.d.comb += [engine.window_base.eq(window_base), engine.window_size.eq(window_size)]
