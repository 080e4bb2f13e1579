"""The host side of the shared command protocol (see :func:`ndpkit_spec.shell.engine_block`).

:class:`EngineClient` submits commands (argument registers, tag, doorbell), never
keeps more in flight than the card can hold (the running one, the queue, and the
completion queue's room), collects completions in order, and turns an error code
into a :class:`~ndpkit.errors.DeviceError` naming the offending argument.  Each
engine's driver (``ndpkit.engines.<name>``) subclasses it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ndpkit_spec.codes import ErrorCode
from ndpkit.errors import DeviceError, DeviceTimeout, NdpkitError
from ndpkit.regs.access import RegisterFile, decode_fields
from ndpkit_spec.shell import ENGINE_STRIDE, command_fields, effective_window
from ndpkit_spec.registry import REGISTRY

__all__ = ["Completion", "Command", "EngineClient"]


@dataclass(frozen=True)
class Completion:
    """What the card reported for one command."""
    engine: str
    tag: int
    error: ErrorCode
    cycles: int
    bytes_read: int
    bytes_written: int
    start: int = 0          # engine cycle stamp of the start (0 on the model)
    aux: int = 0            # engine-defined (adam: non-finite gradients)

    @property
    def ok(self) -> bool:
        return self.error == ErrorCode.OK


class Command:
    """A submitted command; :meth:`wait` returns its :class:`Completion`."""

    def __init__(self, client: "EngineClient", tag: int, args: dict, work_bytes: int):
        self.client, self.tag, self.args, self.work_bytes = client, tag, args, work_bytes

    def wait(self, timeout: float | None = None, *, check: bool = True) -> Completion:
        """Wait for the completion (``timeout`` in seconds of device time; by default a
        bound derived from the command's size).  With ``check``, an error code raises
        :class:`DeviceError`."""
        done = self.client.wait_for(self, timeout)
        if check and not done.ok:
            raise DeviceError(self.client.name, done.error, field=self.client.blame(self.args, done.error),
                              tag=self.tag)
        return done

    def __repr__(self):
        return f"<{self.client.name} command tag={self.tag}>"


class _RememberingRegisterFile(RegisterFile):
    """A RegisterFile that remembers the last whole value written to each register,
    so a submission can skip argument registers that already hold the value.  Writes
    that bypass it (raw ``transport.write32``) must be followed by ``forget()``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.written: dict[str, int] = {}

    def write(self, reg, value=None, **fields):
        super().write(reg, value, **fields)
        if value is None:
            self.written.pop(reg, None)
        else:
            self.written[reg] = value


class EngineClient:
    name: str = ""

    def __init__(self, device, kind: int):
        self.device, self.kind = device, int(kind)
        self.spec = REGISTRY[self.name]
        self.block = self.spec.block
        self.golden = self.spec.golden_module()
        t = device.transport
        self.regs = _RememberingRegisterFile(self.block, t.read32, t.write32, base=self.kind * ENGINE_STRIDE)
        self._next_tag = 0
        self._in_flight: dict[int, Command] = {}
        #: completions found by polling after their interrupt did not arrive
        self.missed_interrupts = 0
        self._done: dict[int, Completion] = {}
        self.capacity = device.queue_depth + 1     # queued + running; completions hold one more
        self.regs.write("irq", 0b11)               # clear stale interrupts
        self.regs.write("irq_enable", 0b11)

    # -- memory isolation ----------------------------------------------------------
    def set_window(self, base: int = 0, size: int = 0) -> None:
        """Restrict this engine's commands to ``[base, base + size)`` of card memory:
        the shell checks every transfer of a command against the window taken at its
        doorbell and fails a command reaching outside with OUT_OF_WINDOW before it
        moves any data.  ``size`` 0 (the default, and the state after reset) lets the
        engine use all of card memory."""
        for name, value in (("base", base), ("size", size)):
            if not isinstance(value, int) or not 0 <= value < (1 << 32):
                raise ValueError(f"{self.name}: window {name} must be a 32-bit unsigned integer, not {value!r}")
        self.regs.write("window_base", base)
        self.regs.write("window_size", size)

    @property
    def window(self) -> tuple[int, int]:
        """(base, size) the engine's next command is checked against."""
        d = self.device
        return effective_window(self.regs.read("window_base"), self.regs.read("window_size"), d.mem_base,
                                d.mem_size)

    # -- error attribution ------------------------------------------------------------
    def blame(self, args: dict, code: ErrorCode) -> str | None:
        """The argument an error code points at: the one the golden model's ``check``
        names, or, for a command that passed those checks and failed while it ran,
        :meth:`blame_run`'s."""
        base, size = self.window
        field = self.golden.check(args, word_bytes=self.device.word_bytes, window_base=base, window_size=size)[1]
        return field if field is not None else self.blame_run(args, code)

    def blame_run(self, args: dict, code: ErrorCode) -> str | None:
        """The argument behind an error found while the command ran (engines refine this)."""
        return None

    # -- the Buffers a command names ---------------------------------------------------
    #: the user-facing argument behind a command field, where their names differ
    argument_names: dict[str, str] = {}
    #: the user-facing arguments that size a command's ranges (named in check_buffers' errors)
    size_arguments: str = "the command"

    def check_buffers(self, args: dict, buffers: dict) -> None:
        """Refuse a command that would reach past a Buffer it names: ``buffers`` maps a
        command field to what the caller gave for it (a Buffer is checked; a raw card
        address is the caller's to get right).  The ranges are the golden model's
        (``command_ranges``, whole bus words, as the allocator sizes Buffers), checked in
        its order, before anything reaches the card."""
        from ndpkit.device import Buffer
        ranges = self.golden.command_ranges(args, self.device.word_bytes)
        for field, (address, nbytes) in ranges.items():
            where = buffers.get(field)
            if isinstance(where, Buffer) and not where.address <= address <= address + nbytes <= where.address + where.size:
                name = self.argument_names.get(field, field)
                raise ValueError(f"{self.name}: argument '{name}': {self.size_arguments} needs {nbytes} bytes "
                                 f"there, more than the Buffer's {where.size}")

    # -- submission ------------------------------------------------------------------
    def submit(self, args: dict, *, work_bytes: int = 0, buffers: dict | None = None) -> Command:
        """Write the argument registers and ring the doorbell.  Unknown or missing
        arguments raise TypeError; values must fit their fields (ValueError); with
        ``buffers`` (field -> the Buffer it came from), :meth:`check_buffers`."""
        fields = {name: (reg, f) for name, reg, f in command_fields(self.block)}
        unknown = set(args) - set(fields)
        missing = set(fields) - set(args)
        if unknown or missing:
            raise TypeError(f"{self.name}: unknown arguments {sorted(unknown)}, missing {sorted(missing)}")
        for name, value in args.items():
            f = fields[name][1]
            if not isinstance(value, int) or not 0 <= value < (1 << f.width):
                raise ValueError(f"{self.name}: argument {name}={value!r} does not fit its {f.width}-bit field")
        if buffers:
            self.check_buffers(args, buffers)
        if self.device.held:
            if len(self._in_flight) >= self.device.queue_depth:
                raise NdpkitError(f"{self.name}: a batch holds at most {self.device.queue_depth} commands "
                                  f"(the queue depth); submit the rest after it")
        while len(self._in_flight) >= self.capacity:
            self._collect(block=True, timeout=self._timeout_for(min(self._in_flight.values(),
                                                                    key=lambda c: c.tag)))
        by_register: dict[str, int] = {}
        for name, value in args.items():
            reg, f = fields[name]
            by_register[reg.name] = by_register.get(reg.name, 0) | (value << f.lsb)
        for reg_name, value in by_register.items():
            if self.regs.written.get(reg_name) != value:     # registers keep their value between commands
                self.regs.write(reg_name, value)
        tag = self._next_tag
        self._next_tag = (self._next_tag + 1) & 0xFFFF
        self.regs.write("tag", tag)
        command = Command(self, tag, dict(args), work_bytes)
        self._in_flight[tag] = command
        self.regs.write("doorbell", submit=1)
        return command

    def _timeout_for(self, command: Command) -> float:
        """Device seconds a command may take: its bytes at a quarter of the bus rate plus 1 ms."""
        d = self.device
        cycles = 4 * (command.work_bytes // d.word_bytes + 1) * max(1, len(self._in_flight))
        return cycles / (d.clock_mhz * 1e6) + 1e-3

    # -- completion ------------------------------------------------------------------
    def _drain(self) -> int:
        """Pop every completion the card holds; returns how many."""
        popped = 0
        while True:
            status = decode_fields(self.block, "cpl_status", self.regs.read("cpl_status"))
            if not status["valid"]:
                return popped
            done = Completion(self.name, status["tag"], ErrorCode(status["error"]) if status["error"] in
                              ErrorCode._value2member_map_ else status["error"],
                              self.regs.read("cpl_cycles"), self.regs.read("cpl_bytes_read"),
                              self.regs.read("cpl_bytes_written"), self.regs.read("cpl_start"),
                              self.regs.read("cpl_aux"))
            self.regs.write("cpl_pop", pop=1)
            self._in_flight.pop(done.tag, None)
            self._done[done.tag] = done
            popped += 1

    #: device seconds of the first interrupt wait before the completion registers are
    #: polled; each further wait doubles, so a lost interrupt costs about as long as
    #: the command took, never the whole timeout
    first_poll = 20e-6

    def _collect(self, *, block: bool, timeout: float) -> None:
        t = self.device.transport
        self.regs.write("irq", done=1)         # clear first, then drain: a later completion re-raises it
        if self._drain() or not block:
            return
        waited, step = 0.0, self.first_poll
        while waited < timeout:
            step = min(step, timeout - waited)
            if t.wait_irq(1 << self.kind, step):
                self.regs.write("irq", done=1)
                self._drain()
                return
            waited += step
            step *= 2
            if self._drain():                 # done, but its interrupt never came
                self.missed_interrupts += 1
                return
        if self._in_flight:
            overflow = self.regs.field("irq", "overflow")
            if overflow:
                self.regs.write("irq", overflow=1)
                lost = sorted(self._in_flight)
                self._in_flight.clear()
                raise DeviceError(self.name, ErrorCode.QUEUE_FULL, tag=lost[-1],
                                  detail=f"commands {lost} were not accepted")
            raise DeviceTimeout(f"{self.name}: no completion within {timeout:.3g} s of device time "
                                f"(commands in flight: {sorted(self._in_flight)})")

    def wait_for(self, command: Command, timeout: float | None) -> Completion:
        if timeout is None:
            timeout = self._timeout_for(command)
        while command.tag not in self._done:
            if command.tag not in self._in_flight:
                raise DeviceError(self.name, ErrorCode.QUEUE_FULL, tag=command.tag,
                                  detail="the command was dropped at the doorbell")
            self._collect(block=True, timeout=timeout)
        return self._done.pop(command.tag)

    def wait_all(self, timeout: float | None = None) -> None:
        for tag in sorted(self._in_flight):
            cmd = self._in_flight.get(tag)
            if cmd is not None:
                self.wait_for(cmd, timeout)
        self._done.clear()

    def forget(self) -> None:
        """After a soft reset: nothing is in flight any more, registers are at reset."""
        self._in_flight.clear()
        self._done.clear()
        self.regs.written.clear()
        self.regs.write("irq_enable", 0b11)
