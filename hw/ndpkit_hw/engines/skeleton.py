"""What every engine that runs one command at a time shares, written once.

- :class:`CommandEngine`: the component's ports from its register block (``cmd``,
  ``cpl``, ``bus``, ``window_base``, ``window_size``: :func:`engine_members`), its bus
  geometry, and its burst readers and writers behind the one AXI4 master
  (:class:`~ndpkit_hw.bus.dma.BurstPorts`).
- :class:`CommandChecks`: the whole-command checks in the order the golden model's
  ``check`` states them — field rules, then each range by the transfer rule (a length
  past 32 bits is OUT_OF_WINDOW), then no two ranges overlapping; the first failing
  rule's code, 0 when the command is accepted.
- :class:`CommandControl`: the command state machine — IDLE (take a command) → SETTLE
  (the checks run from registers, :attr:`CommandChecks.CYCLES` cycles) → CHECK
  (latch the verdict; a rejected command completes at once, having moved nothing) →
  the engine's own states → COMPLETE (push the completion) → IDLE — and the completion
  payload (byte counts and ``aux`` read 0 for a rejected command).

An engine's ``elaborate``::

    ctl = CommandControl(m, self)
    checks = CommandChecks(m, self)
    checks.require(ctl.cmd.format > 2, ErrorCode.BAD_FIELD)
    checks.ranges({"dst": Transfer(ctl.cmd.dst, length), "src": Transfer(ctl.cmd.src, length)})
    checks.disjoint(["dst", "src"])
    with ctl.states(checks, first="RUN", clear=[...]):
        with m.State("RUN"):
            ...
            with m.If(done):
                ctl.finish(status)
    ctl.complete(bytes_read=..., bytes_written=..., aux=...)
"""
from __future__ import annotations

import contextlib

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory

from ndpkit_spec.codes import ErrorCode
from ndpkit_spec.regs import RegisterBlock
from ndpkit_hw.arith.fp_common import DSP48E2_SHAPE
from ndpkit_hw.bus.axi import log2_exact
from ndpkit_hw.bus.dma import BurstPorts, SettledTransferCheck, Transfer, TransferSweep
from ndpkit_hw.shell.engine_frontend import command_layout, engine_members

__all__ = ["CommandEngine", "CommandChecks", "CommandControl"]


class CommandEngine(wiring.Component):
    """Base of an engine: ports from ``block``; with ``reads``/``writes``, its burst
    readers and writers (``self.ports``, ``self.readers``, ``self.writers``) behind the
    AXI4 master; otherwise the master's ``id_width`` is the subclass's to give.
    ``members``: the engine's own further ports (the graph engine's link counters)."""
    max_in_flight = 1

    def __init__(self, block: RegisterBlock, *, addr_width: int, data_width: int, max_burst_bytes: int = 4096,
                 max_outstanding: int = 8, reads=(), writes=(), id_width: int | None = None,
                 members: dict | None = None, **ports):
        self.block = block
        self.addr_width, self.data_width = addr_width, data_width
        self.word_bytes = data_width // 8
        log2_exact(self.word_bytes, "data_width/8")
        self.ports = None
        if reads:
            self.ports = BurstPorts(reads, writes, addr_width=addr_width, data_width=data_width,
                                    max_burst_bytes=max_burst_bytes, max_outstanding=max_outstanding, **ports)
            self.readers, self.writers = self.ports.readers, self.ports.writers
            id_width = self.ports.id_width
        elif id_width is None:
            raise ValueError("an engine without burst ports gives its master's id_width")
        signature = engine_members(block, addr_width=addr_width, data_width=data_width, id_width=id_width)
        super().__init__({**signature, **(members or {})})

    def elaborate_ports(self, m: Module) -> None:
        """The burst ports on the master, each seeing the shell's window."""
        self.ports.elaborate(m, self.bus, self.window_base, self.window_size)


class CommandChecks:
    """The ordered whole-command checks of ``engine``'s current command (see the module).

    The checks run from registers over :attr:`CYCLES` cycles, so none of them is more
    than an adder or a compare deep: each rule's condition and each range's address and
    length are registered first, then the ranges' ends, then the window and overlap
    compares, then the first failing rule's code.  :class:`CommandControl` waits for
    them between taking a command and acting on its code.

    ``serial``: the ranges go through one checker a range a cycle, and the overlaps
    through one pair of compares a pair a cycle (:class:`~ndpkit_hw.bus.dma.TransferSweep`),
    once every derived value has settled: a few dozen cycles more for the verdict
    instead of a window check a range and two compares a pair (the attention engine's
    request checks: 8 ranges and 23 pairs, checked while the request before issues)."""

    CYCLES = 1 + SettledTransferCheck.CYCLES + 1     # without :meth:`derive` stages
    MAX_DERIVE = 16                                   # derive stages
    MAX_SWEEP = 256                                   # serial: the sweep's cycles

    def __init__(self, m: Module, engine, *, word_bytes: int | None = None, name: str = "", serial: bool = False):
        self.m, self.engine = m, engine
        self.word_bytes = word_bytes or engine.word_bytes
        self.prefix = f"{name}_" if name else ""        # signal names (an engine may check per request too)
        self.serial = serial
        self.cycles = self.CYCLES
        self._rules: list[tuple[Value, Value]] = []
        self._ends: dict = {}
        self._swept: list = []                         # serial: (transfer, code register, end register)
        self._pairs: list = []                         # serial: (range a, range b, its rule's flag index)
        self._flags: list = []                         # serial: each disjoint() rule's flag
        self._code: Signal | None = None
        self._depth: dict[int, int] = {}               # id of a derived signal -> its register stages
        self._age_limit = self.CYCLES + self.MAX_DERIVE + (self.MAX_SWEEP if serial else 0)
        self._age = Signal(range(self._age_limit), name=f"{self.prefix}check_age")
        self.settled = Signal(name=f"{self.prefix}checks_settled")

    def after(self, *derived: Signal) -> int:
        """The register stages of the deepest of ``derived`` (signals :meth:`derive` or
        :meth:`derive_product` returned): the ``after`` of a value computed from them."""
        return max(self._depth[id(d)] for d in derived)

    def _stages(self, depth: int, reg: Signal) -> Signal:
        # a value ``depth`` register stages after the command: the checks wait for it
        if self._code is not None:
            raise RuntimeError("checks: a value derived after code() (the verdict would not wait for it)")
        self._depth[id(reg)] = depth
        self.cycles = max(self.cycles, self.CYCLES + depth)
        if self.cycles >= self.CYCLES + self.MAX_DERIVE:
            raise ValueError(f"checks: {depth} derive stages is too deep")
        return reg

    def derive(self, value, name: str, *, after: int = 0) -> Signal:
        """``value`` (a size computed from the command) registered, for the checks and the
        engine: the checks take one cycle more, so an adder that sizes a range and the
        adder that ends it are never in one cycle.  ``after``: how many derive stages
        ``value``'s own inputs are from the command (a value derived from derived values:
        :meth:`after`)."""
        return self._stages(after + 1, self._registered(value, name))

    def derive_product(self, a, b, name: str, *, after: int = 0) -> Signal:
        """``a * b`` for a narrow unsigned ``b`` (a head count, a group size) on the hard
        multipliers, in two register stages: ``a`` in slices of a DSP48E2's 26 unsigned
        bits (``b``: at most its 17), each slice's product registered (a DSP whose inputs
        and output are registers: a stage of its own, on no fabric path; the adder tree of
        ``len(b)`` shifted partial sums it replaces was about 250 LUTs a 32-bit product),
        then the slices' products summed.  ``after`` as for :meth:`derive`."""
        a, b = Value.cast(a), Value.cast(b)
        a_bits, b_bits = DSP48E2_SHAPE
        if len(b) > b_bits:
            raise ValueError(f"derive_product: b is {len(b)} bits, at most {b_bits}")
        width = len(a) + len(b)
        partial = [(lo, self._registered(a[lo:lo + a_bits] * b, f"{name}_p{lo}")) for lo in range(0, len(a), a_bits)]
        total = sum((Value.cast(p) << lo for lo, p in partial[1:]), Value.cast(partial[0][1]))
        return self._stages(after + 2, self._registered(total.as_unsigned()[:width], name))

    def restart(self):
        """The statement for the cycle a new command is latched: :attr:`settled` rises
        when :meth:`code` is the new command's (:attr:`cycles` cycles later)."""
        return self._age.eq(0)

    def _registered(self, value, name: str) -> Signal:
        reg = Signal.like(Value.cast(value), name=f"{self.prefix}{name}")
        self.m.d.sync += reg.eq(value)
        return reg

    def require(self, bad, code: ErrorCode = ErrorCode.BAD_FIELD) -> None:
        """``code`` when ``bad`` holds (and no earlier rule failed)."""
        self._rules.append((self._registered(bad, f"rule_{len(self._rules)}"), Const(int(code), 4)))

    def ranges(self, transfers: dict, *, active: dict | None = None, wide: dict | None = None) -> None:
        """Each of ``transfers`` (name -> :class:`~ndpkit_hw.bus.dma.Transfer`) by the
        transfer rule, in order, where ``active`` (name -> condition) holds; ``wide``
        (name -> the length before truncation to 32 bits) makes a length past 32 bits
        OUT_OF_WINDOW first."""
        active, wide = active or {}, wide or {}
        e = self.engine
        for name, t in transfers.items():
            on = self._registered(active.get(name, Const(1)), f"{name}_active")
            if name in wide:
                self._rules.append((on & self._registered(wide[name][32:] != 0, f"{name}_wide"),
                                    Const(int(ErrorCode.OUT_OF_WINDOW), 4)))
            held = Transfer(self._registered(t.addr, f"{name}_addr"), self._registered(t.length, f"{name}_length"))
            if self.serial:
                # (its end goes into the sweep's register file, read by the pair compares)
                code, end = Signal(4, name=f"{self.prefix}{name}_code"), None
                self._swept.append((held, code))
            else:
                check = SettledTransferCheck(self.m, self.word_bytes, e.addr_width, held, e.window_base,
                                             e.window_size)
                code, end = check.error, check.end
            self._ends[name] = (held, end, on)
            self._rules.append((on & (code != 0), code))

    def end(self, name: str) -> Signal:
        """Range ``name``'s end (``addr + length``), valid from the third cycle of the checks
        (not kept by the serial form)."""
        if self.serial:
            raise ValueError("checks: a serial sweep keeps no register of a range's end")
        return self._ends[name][1]

    def disjoint(self, names) -> None:
        """OVERLAP when any two of the ranges ``names`` (given to :meth:`ranges`, both
        active) intersect."""
        pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
        if self.serial and pairs:
            flag = Signal(name=f"{self.prefix}overlap_{len(self._rules)}")
            self._pairs += [(a, b, len(self._flags)) for a, b in pairs]
            self._flags.append(flag)
            self._rules.append((flag, Const(int(ErrorCode.OVERLAP), 4)))
            return
        hits = []
        for a, b in pairs:
            (ta, end_a, on_a), (tb, end_b, on_b) = self._ends[a], self._ends[b]
            hits.append(self._registered(on_a & on_b & (ta.addr < end_b) & (tb.addr < end_a), f"overlap_{a}_{b}"))
        if hits:
            self._rules.append((Cat(*hits).any(), Const(int(ErrorCode.OVERLAP), 4)))

    def _sweep(self) -> None:
        """The serial form's checker and pair compares (see the class), from the cycle every
        held range has settled; :attr:`cycles` grows by the sweep."""
        m, e, age = self.m, self.engine, self._age
        start = self.cycles - self.CYCLES + 1          # the held ranges settle (age counts from 0)
        transfers, codes = zip(*self._swept)
        sweep = TransferSweep(m, self.word_bytes, e.addr_width, list(transfers), list(codes),
                              e.window_base, e.window_size, age, start)
        # the swept ranges' addresses and ends in a register file (a distributed RAM with a
        # read port a side of the pair), not a select of every range's registers a side
        names = list(self._ends)
        ranges = Memory(shape=data.StructLayout({"addr": e.addr_width, "end": len(sweep.end)}), depth=len(names),
                        init=[])
        m.submodules[f"{self.prefix}swept_ranges"] = ranges
        wp = ranges.write_port()
        a_rp, b_rp = ranges.read_port(domain="comb"), ranges.read_port(domain="comb")
        m.d.comb += [wp.addr.eq(sweep.k), wp.data.addr.eq(sweep.addr), wp.data.end.eq(sweep.end),
                     wp.en.eq(sweep.valid)]
        pair_start = start + len(transfers) + TransferSweep.LATENCY
        # a pair a cycle: the pair's ranges' indices from the age, registered; both ranges
        # read by them and registered; compared and registered; or-ed into its rule's flag
        # (cleared as the command is taken)
        index = range(max(2, len(names)))
        a_k, b_k = Signal(index, name=f"{self.prefix}pair_a_k"), Signal(index, name=f"{self.prefix}pair_b_k")
        go = [Signal(name=f"{self.prefix}pair_go{i}") for i in range(3)]
        which = [Signal(range(max(2, len(self._flags))), name=f"{self.prefix}pair_rule{i}") for i in range(3)]
        # (from a table by the age: each bit a LUT of the age's bits, not a select of every
        # pair's case, which was a 10-level path)
        Pair = data.StructLayout({"go": 1, "a": index, "b": index, "which": which[0].shape()})
        table = [{"go": 0, "a": 0, "b": 0, "which": 0}] * (1 << len(age))
        for j, (a, b, f) in enumerate(self._pairs):
            table[pair_start - 1 + j] = {"go": 1, "a": names.index(a), "b": names.index(b), "which": f}
        pairs = Memory(shape=Pair, depth=len(table), init=table)
        m.submodules[f"{self.prefix}pair_table"] = pairs
        pair_rp = pairs.read_port(domain="comb")
        m.d.comb += pair_rp.addr.eq(age)
        m.d.sync += [go[0].eq(pair_rp.data.go), a_k.eq(pair_rp.data.a), b_k.eq(pair_rp.data.b),
                     which[0].eq(pair_rp.data.which)]
        on = Array(self._ends[n][2] for n in names)
        m.d.comb += [a_rp.addr.eq(a_k), b_rp.addr.eq(b_k)]
        a_range, b_range = Signal.like(a_rp.data, name=f"{self.prefix}pair_a"), \
            Signal.like(b_rp.data, name=f"{self.prefix}pair_b")
        both, hit = Signal(name=f"{self.prefix}pair_on"), Signal(name=f"{self.prefix}pair_hit")
        m.d.sync += [a_range.eq(a_rp.data), b_range.eq(b_rp.data),
                     both.eq(on[a_k] & on[b_k]), go[1].eq(go[0]), which[1].eq(which[0]),
                     hit.eq(both & (a_range.addr < b_range.end) & (b_range.addr < a_range.end)),
                     go[2].eq(go[1]), which[2].eq(which[1])]
        with m.If(age == 0):
            m.d.sync += [flag.eq(0) for flag in self._flags]
        with m.Elif(go[2] & hit):
            with m.Switch(which[2]):
                for i, flag in enumerate(self._flags):
                    with m.Case(i):
                        m.d.sync += flag.eq(1)
        # pair j's indices are taken at age pair_start - 1 + j, its ranges at pair_start + j,
        # its flag visible from pair_start + j + 3; the verdict's register samples the rules at
        # age cycles - 1
        self.cycles = max(self.cycles, pair_start + len(self._pairs) + 3)
        if self.cycles >= self._age_limit:
            raise ValueError(f"checks: a sweep of {self.cycles} cycles is too long")

    def code(self) -> Signal:
        """The first failing rule's ErrorCode (0 when every rule passes), registered:
        valid :attr:`cycles` cycles after the command was taken (call it after the last
        rule is added)."""
        if self._code is None:
            if self._swept:
                self._sweep()
            self.m.d.comb += self.settled.eq(self._age == self.cycles - 1)
            with self.m.If(~self.settled):
                self.m.d.sync += self._age.eq(self._age + 1)
            first = Signal(4, name=f"{self.prefix}first_failing")
            for i, (bad, code) in enumerate(self._rules):
                with (self.m.If if i == 0 else self.m.Elif)(bad):
                    self.m.d.comb += first.eq(code)
            self._code = self._registered(first, "check")
        return self._code


class CommandControl:
    """The command state machine and the completion of ``engine`` (see the module).

    ``cmd`` is the latched command (its register fields by name), ``error`` the code
    the completion carries, ``accepted`` whether the command passed its checks."""

    def __init__(self, m: Module, engine: CommandEngine, *, name: str = "control"):
        self.m, self.engine, self.name = m, engine, name
        self.cmd = Signal(command_layout(engine.block), name="cmd")
        self.error = Signal(4, name="cpl_error")
        self.accepted = Signal(name="accepted")

    @contextlib.contextmanager
    def states(self, checks: CommandChecks, *, first: str, ready=Const(1), clear=(), start=()):
        """The state machine; the engine's own states go inside the ``with``, starting at
        state ``first``, and end with :meth:`finish`; ``checks``: the command's
        :class:`CommandChecks`.  ``ready``: the engine may take a
        command now (IDLE); ``clear``: synchronous statements of the CHECK cycle (reset
        the per-command state); ``start``: combinational statements of that cycle.  The
        burst ports' byte counters are cleared in the CHECK cycle too."""
        m, e = self.m, self.engine
        check = checks.code()
        with m.FSM(name=self.name):
            with m.State("IDLE"):
                m.d.comb += e.cmd.ready.eq(ready)
                with m.If(e.cmd.valid & e.cmd.ready):
                    m.d.sync += [self.cmd.eq(e.cmd.payload), checks.restart()]
                    m.next = "SETTLE"
            with m.State("SETTLE"):             # the checks run from registers
                with m.If(checks.settled):
                    m.next = "CHECK"
            with m.State("CHECK"):
                if e.ports is not None:
                    m.d.comb += [port.clear_counters.eq(1) for port in e.ports.engines]
                m.d.comb += list(start)
                m.d.sync += [self.error.eq(check), self.accepted.eq(check == 0), *clear]
                with m.If(check != 0):
                    m.next = "COMPLETE"
                with m.Else():
                    m.next = first
            yield self
            with m.State("COMPLETE"):
                m.d.comb += e.cpl.valid.eq(1)
                with m.If(e.cpl.ready):
                    m.next = "IDLE"

    def finish(self, error) -> None:
        """From the engine's last state: complete with ``error`` (0: OK)."""
        self.m.d.sync += self.error.eq(error)
        self.m.next = "COMPLETE"

    def complete(self, *, bytes_read, bytes_written, aux=0) -> None:
        """The completion payload: the tag, the error, and (accepted commands only) the
        byte counts and the engine's ``aux``."""
        cpl, accepted = self.engine.cpl.payload, self.accepted
        self.m.d.comb += [cpl.tag.eq(self.cmd.tag), cpl.error.eq(self.error),
                          cpl.bytes_read.eq(Mux(accepted, bytes_read, 0)),
                          cpl.bytes_written.eq(Mux(accepted, bytes_written, 0)),
                          cpl.aux.eq(Mux(accepted, aux, 0))]
