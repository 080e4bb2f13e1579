"""What every engine that runs one command at a time shares, written once.

- :class:`CommandEngine`: the component's ports from its register block (``cmd``,
  ``cpl``, ``bus``, ``window_base``, ``window_size``: :func:`engine_members`), its bus
  geometry, and its burst readers and writers behind the one AXI4 master
  (:class:`~ndpkit_hw.bus.dma.BurstPorts`).
- :class:`CommandChecks`: the whole-command checks in the order the golden model's
  ``check`` states them — field rules, then each range by the transfer rule (a length
  past 32 bits is OUT_OF_WINDOW), then no two ranges overlapping; the first failing
  rule's code, 0 when the command is accepted.
- :class:`CommandControl`: the command state machine — IDLE (take a command) → CHECK
  (latch the verdict; a rejected command completes at once, having moved nothing) →
  the engine's own states → COMPLETE (push the completion) → IDLE — and the completion
  payload (byte counts and ``aux`` read 0 for a rejected command).

An engine's ``elaborate``::

    ctl = CommandControl(m, self)
    checks = CommandChecks(m, self)
    checks.require(ctl.cmd.format > 2, ErrorCode.BAD_FIELD)
    checks.ranges({"dst": Transfer(ctl.cmd.dst, length)})
    with ctl.states(checks.code(), first="RUN", clear=[...]):
        with m.State("RUN"):
            ...
            with m.If(done):
                ctl.finish(status)
    ctl.complete(bytes_read=..., bytes_written=..., aux=...)
"""
from __future__ import annotations

import contextlib

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import wiring

from ndpkit_spec.codes import ErrorCode
from ndpkit_spec.regs import RegisterBlock
from ndpkit_hw.bus.axi import log2_exact
from ndpkit_hw.bus.dma import BurstPorts, transfer_error, transfers_overlap
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
    """The ordered whole-command checks of ``engine``'s current command (see the module)."""

    def __init__(self, m: Module, engine: CommandEngine, *, word_bytes: int | None = None):
        self.m, self.engine = m, engine
        self.word_bytes = word_bytes or engine.word_bytes
        self._rules: list[tuple[Value, Value]] = []
        self._code: Signal | None = None

    def require(self, bad, code: ErrorCode = ErrorCode.BAD_FIELD) -> None:
        """``code`` when ``bad`` holds (and no earlier rule failed)."""
        self._rules.append((bad, Const(int(code), 4)))

    def ranges(self, transfers: dict, *, active: dict | None = None, wide: dict | None = None) -> None:
        """Each of ``transfers`` (name -> :class:`~ndpkit_hw.bus.dma.Transfer`) by the
        transfer rule, in order, where ``active`` (name -> condition) holds; ``wide``
        (name -> the length before truncation to 32 bits) makes a length past 32 bits
        OUT_OF_WINDOW first."""
        active, wide = active or {}, wide or {}
        e = self.engine
        for name, t in transfers.items():
            on = active.get(name, Const(1))
            if name in wide:
                self.require(on & (wide[name][32:] != 0), ErrorCode.OUT_OF_WINDOW)
            error = transfer_error(self.m, self.word_bytes, e.addr_width, t, e.window_base, e.window_size)
            self._rules.append((on & (error != 0), error))

    def disjoint(self, transfers: dict, *, active: dict | None = None) -> None:
        """OVERLAP when any two of ``transfers`` (both active) intersect."""
        active = active or {}
        names = list(transfers)
        pairs = [active.get(a, Const(1)) & active.get(b, Const(1)) & transfers_overlap(transfers[a], transfers[b])
                 for i, a in enumerate(names) for b in names[i + 1:]]
        if pairs:
            self.require(Cat(*pairs).any(), ErrorCode.OVERLAP)

    def code(self) -> Signal:
        """The first failing rule's ErrorCode; 0 when every rule passes."""
        if self._code is None:
            self._code = Signal(4, name="check")
            for i, (bad, code) in enumerate(self._rules):
                with (self.m.If if i == 0 else self.m.Elif)(bad):
                    self.m.d.comb += self._code.eq(code)
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
    def states(self, check, *, first: str, ready=Const(1), clear=(), start=()):
        """The state machine; the engine's own states go inside the ``with``, starting at
        state ``first``, and end with :meth:`finish`.  ``ready``: the engine may take a
        command now (IDLE); ``clear``: synchronous statements of the CHECK cycle (reset
        the per-command state); ``start``: combinational statements of that cycle.  The
        burst ports' byte counters are cleared in the CHECK cycle too."""
        m, e = self.m, self.engine
        with m.FSM(name=self.name):
            with m.State("IDLE"):
                m.d.comb += e.cmd.ready.eq(ready)
                with m.If(e.cmd.valid & e.cmd.ready):
                    m.d.sync += self.cmd.eq(e.cmd.payload)
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
