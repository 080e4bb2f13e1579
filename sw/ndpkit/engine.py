"""The host side of the shared command protocol (see :func:`ndpkit_spec.shell.engine_block`).

:class:`EngineClient` submits commands (argument registers, tag, doorbell), never
keeps more in flight than the card can hold (the running one, the queue, and the
completion queue's room), collects completions in order, and turns an error code
into a :class:`~ndpkit.errors.DeviceError` naming the offending argument.  Each
engine's driver (``ndpkit.engines.<name>``) subclasses it.

One client drives one engine instance (its register slot).  Where a card has
several instances of an engine, ``dev.<engine>`` is a *routing* client of the same
class (:meth:`EngineClient.router`): its commands go to the instance whose memory
region holds the command's buffers, the least busy one where several do, and to the
one already running a command on the same bytes where there is one (so commands
that depend on each other keep their order); ``dev.instance(name, i)`` is instance
``i`` itself.
"""
from __future__ import annotations

from dataclasses import dataclass

from ndpkit_spec.codes import ErrorCode
from ndpkit.errors import DeviceError, DeviceTimeout, NdpkitError
from ndpkit.memory import Buffer
from ndpkit.regs.access import RegisterFile, decode_fields
from ndpkit_spec.shell import ENGINE_STRIDE, command_fields, effective_window
from ndpkit_spec.registry import REGISTRY

__all__ = ["Completion", "Command", "CommandGroup", "EngineClient", "span"]


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

    def __init__(self, client: "EngineClient", tag: int, args: dict, work_bytes: int, ranges=()):
        self.client, self.tag, self.args, self.work_bytes = client, tag, args, work_bytes
        self.ranges = ranges        # (address, bytes) of card memory it reads or writes

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


def span(done: list, aux=sum) -> Completion:
    """One :class:`Completion` for commands that ran at once: the first error, the
    longest command's cycles from the earliest start, the bytes summed, ``aux`` of
    their ``aux`` values (``aux``: a function of the list; summed by default)."""
    first = min(done, key=lambda c: c.start)
    bad = next((c for c in done if not c.ok), first)
    return Completion(first.engine, first.tag, bad.error, max(c.start + c.cycles for c in done) - first.start,
                      sum(c.bytes_read for c in done), sum(c.bytes_written for c in done), first.start,
                      aux([c.aux for c in done]))


class CommandGroup:
    """One request split into commands on several instances of an engine (they run at
    once); :meth:`wait` waits for all and returns one :class:`Completion` (:func:`span`:
    the first error, the longest command's cycles from the earliest start, the bytes
    and ``aux`` summed); :meth:`wait_parts` each command's."""

    def __init__(self, commands: list):
        self.commands = list(commands)
        self.client, self.tag = self.commands[0].client, self.commands[0].tag

    def wait_parts(self, timeout: float | None = None, *, check: bool = True) -> list[Completion]:
        """Every command's completion, in order.  All are waited for even after one
        failed (its buffers stay in use until the others end); then the first failure
        is raised."""
        done, failure = [], None
        for command in self.commands:
            try:
                done.append(command.wait(timeout, check=check))
            except DeviceError as e:
                failure = failure or e
        if failure is not None:
            raise failure
        return done

    def wait(self, timeout: float | None = None, *, check: bool = True) -> Completion:
        return span(self.wait_parts(timeout, check=check))

    def __repr__(self):
        return f"<{self.client.name} command group of {len(self.commands)}>"


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

    def __init__(self, device, kind: int, *, slot: int | None = None, instance: int = 0, region: int = 0,
                 members: list | None = None):
        self.device, self.kind = device, int(kind)
        self.slot = self.kind if slot is None else slot
        self.instance, self.region = instance, region
        self.spec = REGISTRY[self.name]
        self.block = self.spec.block
        self.golden = self.spec.golden_module()
        #: the instances a routing client sends commands to (None: this client is one instance)
        self.members = members
        self._next_tag = 0
        self._in_flight: dict[int, Command] = {}
        self._done: dict[int, Completion] = {}
        self.missed_interrupts = 0
        self.capacity = device.queue_depth + 1     # queued + running; completions hold one more
        if members is not None:                    # a router: instance 0's registers, no queue of its own
            self.regs = members[0].regs
            return
        t = device.transport
        self.regs = _RememberingRegisterFile(self.block, t.read32, t.write32, base=self.slot * ENGINE_STRIDE)
        self.regs.write("irq", 0b11)               # clear stale interrupts
        self.regs.write("irq_enable", 0b11)

    @classmethod
    def router(cls, device, members: list) -> "EngineClient":
        """A client that sends each command to one of ``members`` (instances of this
        engine): see the module's documentation."""
        first = members[0]
        return cls(device, first.kind, slot=first.slot, instance=0, region=first.region, members=list(members))

    @property
    def instances(self) -> list:
        """The instances this client's commands may run on."""
        return self.members if self.members is not None else [self]

    @property
    def siblings(self) -> list:
        """Every instance of this engine on the card (they share an interrupt line)."""
        return self.device.instances.get(self.name, [self])

    def __repr__(self):
        if self.members is not None:
            return f"<{self.name} over {len(self.members)} instances>"
        return f"<{self.name} instance {self.instance} (slot {self.slot}, region {self.region})>"

    def parts(self, address: int, total: int, unit: int) -> list:
        """How a request of ``total`` units whose data starts at ``address`` splits over
        this client's instances: [(instance, first unit, units)], one piece per
        instance working in the address's region, in multiples of ``unit`` units (one
        piece, on this client's choice, where only one instance works there)."""
        region = self.device.region_of(address)
        here = [c for c in self.instances if region is None or c.region == region]
        if len(here) < 2 or total < 2 * unit:
            return [(None, 0, total)]
        share = -(-total // len(here) // unit) * unit
        pieces, first = [], 0
        for client in here:
            if first >= total:
                break
            pieces.append((client, first, min(share, total - first)))
            first += share
        return pieces

    def submit_split(self, args: dict, *, total: int, unit: int, piece, work_bytes: int = 0,
                     buffers: dict | None = None):
        """Submit ``args`` (a request of ``total`` units) as one command or, from a
        routing client with several instances in the command's region, as a
        :class:`CommandGroup` of one piece per instance (``piece(first, count)`` -> the
        piece's args; pieces in multiples of ``unit``).  A command the golden model
        refuses, or one touching bytes a running command touches, is not split: it
        runs whole, on one instance, and fails or waits as it would."""
        ranges = self._ranges(args)
        if self.members is None or not ranges:
            return self.submit(args, work_bytes=work_bytes, buffers=buffers)
        pieces = self.parts(ranges[0][1], total, unit)
        spans = [(a, a + n) for _, a, n in ranges]
        busy = any(a < e and b < f for c in self.instances for command in c._in_flight.values()
                   for a, f in spans for b, e in command.ranges)
        window = effective_window(0, 0, *self.device.region(pieces[0][0].region)) if pieces[0][0] else None
        if len(pieces) < 2 or busy or self.golden.check(args, word_bytes=self.device.word_bytes,
                                                        window_base=window[0], window_size=window[1])[0]:
            return self.submit(args, work_bytes=work_bytes, buffers=buffers)
        if buffers:
            self.check_buffers(args, buffers)
        return CommandGroup([client.submit(piece(first, count), work_bytes=work_bytes * count // total)
                             for client, first, count in pieces])

    def engine_args(self, args: dict) -> dict:
        """``args`` with the card addresses it names (:meth:`_ranges`) as this instance
        addresses them (:meth:`ndpkit.device.Device.engine_address`)."""
        out = dict(args)
        for field, _, _ in self._ranges(args):
            if field in out:
                out[field] = self.device.engine_address(out[field], self.region)
        return out

    # -- where a command runs -----------------------------------------------------------
    def _ranges(self, args: dict) -> list:
        try:
            ranges = self.golden.command_ranges(args, self.device.word_bytes)
        except (KeyError, ValueError, TypeError):
            return []
        return [(field, address, nbytes) for field, (address, nbytes) in ranges.items() if nbytes > 0]

    def route(self, args: dict):
        """The instance a command goes to: one whose region holds every range it names
        (ranges outside card memory are left for the card to refuse), the one running
        a command on overlapping bytes if any, else the least busy."""
        ranges = self._ranges(args)
        d = self.device
        regions = {}
        for field, address, nbytes in ranges:
            region = d.region_of(address)
            if region is not None:
                regions.setdefault(region, field)
        if len(regions) > 1:
            names = ", ".join(f"'{self.argument_names.get(f, f)}' in region {r}" for r, f in sorted(regions.items()))
            raise ValueError(f"{self.name}: a command works in one memory region, but its buffers are in several "
                             f"({names}); allocate them in one region (dev.alloc(..., region=r))")
        candidates = [c for c in self.instances if not regions or c.region in regions]
        if not candidates:
            (region, field), = regions.items()
            where = sorted({c.region for c in self.instances})
            raise ValueError(f"{self.name}: argument '{self.argument_names.get(field, field)}' is in memory region "
                             f"{region}, where no {self.name} instance works (its instances work in region(s) "
                             f"{', '.join(map(str, where))}); allocate its buffers there: "
                             f"dev.alloc(..., engine={self.name!r}) or dev.alloc(..., region={where[0]})")
        spans = [(a, a + n) for _, a, n in ranges]
        for client in candidates:
            for command in client._in_flight.values():
                if any(a < e and b < f for a, f in spans for b, e in command.ranges):
                    return client
        return min(candidates, key=lambda c: (len(c._in_flight), c.instance))

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
        if self.members is not None:
            for client in self.members:
                client.set_window(base, size)
            return
        self.regs.write("window_base", base)
        self.regs.write("window_size", size)

    @property
    def window(self) -> tuple[int, int]:
        """(base, size) the engine's next command is checked against (a routing
        client: its first instance's)."""
        base, size = self.device.region(self.region)
        return effective_window(self.regs.read("window_base"), self.regs.read("window_size"),
                                self.device.engine_address(base, self.region), size)

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
        ``buffers`` (field -> the Buffer it came from), :meth:`check_buffers`.  A
        routing client submits on the instance :meth:`route` picks."""
        fields = {name: (reg, f) for name, reg, f in command_fields(self.block)}
        unknown = set(args) - set(fields)
        missing = set(fields) - set(args)
        if unknown or missing:
            raise TypeError(f"{self.name}: unknown arguments {sorted(unknown)}, missing {sorted(missing)}")
        for name, value in args.items():
            f = fields[name][1]
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{self.name}: argument {name}={value!r} does not fit its {f.width}-bit field")
        if buffers:
            self.check_buffers(args, buffers)
        if self.members is not None:
            return self.route(args).submit(args, work_bytes=work_bytes, buffers=buffers)
        ranges = [(a, a + n) for _, a, n in self._ranges(args)]       # card addresses
        args = self.engine_args(args)
        for name, value in args.items():
            f = fields[name][1]
            if not 0 <= value < (1 << f.width):
                raise ValueError(f"{self.name}: argument {name}={value!r} does not fit its {f.width}-bit field")
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
        command = Command(self, tag, dict(args), work_bytes, ranges)
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
                # the line is every instance's of this kind: clear and drain each, so it falls
                for client in self.siblings:
                    client.regs.write("irq", done=1)
                    client._drain()
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
        if command.client is not self:
            return command.client.wait_for(command, timeout)
        if timeout is None:
            timeout = self._timeout_for(command)
        while command.tag not in self._done:
            if command.tag not in self._in_flight:
                raise DeviceError(self.name, ErrorCode.QUEUE_FULL, tag=command.tag,
                                  detail="the command was dropped at the doorbell")
            self._collect(block=True, timeout=timeout)
        return self._done.pop(command.tag)

    def wait_all(self, timeout: float | None = None) -> None:
        if self.members is not None:
            for client in self.members:
                client.wait_all(timeout)
            return
        for tag in sorted(self._in_flight):
            cmd = self._in_flight.get(tag)
            if cmd is not None:
                self.wait_for(cmd, timeout)
        self._done.clear()

    def forget(self) -> None:
        """After a soft reset: nothing is in flight any more, registers are at reset."""
        if self.members is not None:
            for client in self.members:
                client.forget()
            return
        self._in_flight.clear()
        self._done.clear()
        self.regs.written.clear()
        self.regs.write("irq_enable", 0b11)
