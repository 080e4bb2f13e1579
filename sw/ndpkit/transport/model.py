"""``model``: an in-process behavioural card built on the golden models.

It honours the same BAR0 map (the register blocks' declarations drive a
:class:`~ndpkit.regs.model.RegisterModel` per block), the same command queues,
completion queues and interrupt lines as the gateware, and runs each engine's
golden model on card memory held in a NumPy array.

Time: the model has no clock of its own.  A command runs when the host next looks
at the device (any register read or interrupt wait), so commands rung back to back
queue up exactly as on a card whose commands outlast a register write (the queue
then overflows at the same doorbell).  The cycle counter advances by the PCIe
link model's cost of each access; per-command ``cpl_cycles`` read 0 (a cycle count
is what the model cannot know); bytes read and written are exact.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from ndpkit_spec.codes import AxiResp
from ndpkit.errors import DmaError, RegisterAccessError, TransportClosed
from ndpkit.pcie import PcieLink, StorageLink
from ndpkit_spec.registry import REGISTRY, instance_counts
from ndpkit_spec.shell import (ENGINE_STRIDE, FIRST_EXTRA_SLOT, GLOBAL, IRQ_LINES, NDPKIT_MAGIC, VERSION,
                               command_fields, effective_window, home_region, region_bounds, slot_layout)
from ndpkit.regs.model import RegisterModel, UnmappedRegister
from ndpkit.transport.base import Transport

__all__ = ["ModelTransport", "ModelDevice", "run_command"]


def run_command(golden, device: "ModelDevice", cmd: dict, window: tuple[int, int],
                high: int = 0, state: dict | None = None) -> tuple[int, int, int, int]:
    """(error, bytes read, bytes written, aux) of one command: the engine's golden
    ``check``, then its ``execute`` on card memory.  ``high``: the address bits above
    32 of the instance's region (engines address their region modulo 4 GiB, as the
    gateware's do), so the command sees the 4 GiB of card memory from there.
    ``state``: the instance's state beyond memory, as keywords of both (the golden
    module's ``model_state``: the graph engine's window sets)."""
    where = dict(word_bytes=device.word_bytes, window_base=window[0], window_size=window[1], **(state or {}))
    code, _ = golden.check(cmd, **where)
    if code:
        return int(code), 0, 0, 0
    if not high:
        return golden.execute(device.memory, cmd, base=device.mem_base, **where)
    start = high - device.mem_base
    return golden.execute(device.memory[start:start + (1 << 32)], cmd, base=0, **where)


class _EngineModel:
    """The shared front end (queue, completions, interrupt) around one behaviour: one
    engine instance, working in its memory region."""

    def __init__(self, device, spec, queue_depth, instance=0, region=0):
        self.device, self.name, self.kind = device, spec.name, spec.kind
        self.instance, self.region = instance, region
        base, size = region_bounds(device.mem_base, device.mem_size, device.memory_ports, region)
        self.high = base & ~0xFFFF_FFFF             # the region in the engine's 32-bit view
        self.region_bounds = (base - self.high, size)
        self.golden = spec.golden_module()
        self.max_in_flight = spec.max_in_flight
        self.block = spec.block
        self.constants = spec.constants          # the default build's read-only registers
        # state beyond memory, some of it the card's (``device.engine_state[name]``)
        make_state = getattr(self.golden, "model_state", None)
        self.state = make_state(device.engine_state.setdefault(spec.name, {}), self.constants,
                                device.word_bytes) if make_state else {}
        self.regs = RegisterModel(self.block)
        self.depth = queue_depth
        self.reset()

    def reset(self):
        self.regs.reset()
        for part in self.state.values():
            getattr(part, "reset", lambda: None)()
        self.queue, self.completions, self.running = deque(), deque(), deque()
        self._publish()

    def _snapshot(self) -> tuple[dict, tuple[int, int]]:
        """The command as the doorbell took it, and the address window beside it (not in
        the command: an engine's fields may use any name)."""
        cmd = {name: self.regs.output(reg.name, f.name) for name, reg, f in command_fields(self.block)}
        cmd["tag"] = self.regs.output("tag", "value")
        cmd.update(self.constants)               # the build constants the engine checks against
        window = effective_window(self.regs.output("window_base", "value"),
                                  self.regs.output("window_size", "value"), *self.region_bounds)
        return cmd, window

    def _run(self, snapshot):
        """The command starts (the golden module's ``started`` hook, where it has one)."""
        hook = getattr(self.golden, "started", None)
        if hook:
            cmd, window = snapshot
            hook(cmd, word_bytes=self.device.word_bytes, window_base=window[0], window_size=window[1], **self.state)
        self.running.append(snapshot)

    def write(self, offset, value):
        pulses = self.regs.write(offset, value)
        if pulses.get("doorbell_submit"):
            if len(self.running) < self.max_in_flight and not self.queue and not self.device.held:
                self._run(self._snapshot())
            elif len(self.queue) < self.depth:
                self.queue.append(self._snapshot())
            else:
                self.regs.set_bits("irq", "overflow", 1)
        if pulses.get("cpl_pop_pop") and self.completions:
            self.completions.popleft()
        self._publish()

    def _start(self):
        while self.queue and len(self.running) < self.max_in_flight and not self.device.held:
            self._run(self.queue.popleft())

    def advance(self):
        self._start()
        while self.running and len(self.completions) < self.depth + self.max_in_flight:
            cmd, window = self.running.popleft()
            error, read, written, aux = run_command(self.golden, self.device, cmd, window, self.high, self.state)
            self.completions.append({"tag": cmd["tag"], "error": error, "cycles": 0,
                                     "bytes_read": read, "bytes_written": written, "aux": aux})
            self.regs.set_bits("irq", "done", 1)
            self._start()
        self._publish()

    @property
    def busy(self) -> bool:
        return bool(self.running) or bool(self.queue)

    @property
    def irq(self) -> bool:
        return bool((self.regs.output("irq", "done") & self.regs.output("irq_enable", "done")) |
                    (self.regs.output("irq", "overflow") & self.regs.output("irq_enable", "overflow")))

    def _publish(self):
        r = self.regs
        r.set_input("kind", "value", self.kind)
        r.set_input("place", "instance", self.instance)
        r.set_input("place", "region", self.region)
        for name, value in self.constants.items():
            r.set_input(name, "value", value)
        r.set_input("status", "busy", int(self.busy))
        r.set_input("status", "queued", len(self.queue))
        r.set_input("status", "completions", len(self.completions))
        head = self.completions[0] if self.completions else None
        r.set_input("cpl_status", "valid", int(head is not None))
        r.set_input("cpl_status", "error", head["error"] if head else 0)
        r.set_input("cpl_status", "tag", head["tag"] if head else 0)
        for reg, key in (("cpl_cycles", "cycles"), ("cpl_start", "cycles"), ("cpl_bytes_read", "bytes_read"),
                         ("cpl_bytes_written", "bytes_written"), ("cpl_aux", "aux")):
            r.set_input(reg, "value", head[key] if head else 0)


class ModelDevice:
    """The card: shell registers, engines, memory."""

    def __init__(self, *, mem_size: int = 16 << 20, mem_base: int = 0, data_width: int = 512,
                 engines=("dma_copy",), queue_depth: int = 4, clock_mhz: int = 250, mem_queue: int = 16,
                 memory_ports: int = 1, memory: str = "ideal"):
        # mem_queue, memory: the simulated card's memory queue and timing; the model has no timing
        self.mem_base, self.mem_size = mem_base, mem_size
        self.memory_ports = memory_ports
        self.word_bytes = data_width // 8
        self.queue_depth, self.clock_mhz = queue_depth, clock_mhz
        self.memory = np.zeros(mem_size, dtype=np.uint8)
        self.shell = RegisterModel(GLOBAL)
        self.reset_pending = False
        self.cycle_count = 0
        try:
            layout = slot_layout(instance_counts(engines))
        except ValueError as e:
            raise ValueError(f"the model cannot carry engines {engines!r}: {e}") from None
        if not 1 <= memory_ports <= max(1, len(layout)):
            raise ValueError(f"memory_ports must be 1..{len(layout)} (a region per engine instance at most)")
        regions = home_region(layout, memory_ports)
        #: engine name -> the card-wide state its instances share (the graph engine's window exchange)
        self.engine_state = {}
        #: slot -> engine instance
        self.engines = {slot: _EngineModel(self, REGISTRY[name], queue_depth, instance, regions[name, instance])
                        for name, instance, slot in layout}
        s = self.shell
        s.set_input("id", "value", NDPKIT_MAGIC)
        s.set_input("version", "major", VERSION[0])
        s.set_input("version", "minor", VERSION[1])
        s.set_input("build", "word_bytes", self.word_bytes)
        s.set_input("build", "queue_depth", queue_depth)
        s.set_input("build", "irq_lines", IRQ_LINES)
        s.set_input("clock", "mhz", clock_mhz)
        s.set_input("engines", "value", sum(1 << kind for kind in {e.kind for e in self.engines.values()}))
        s.set_input("layout", "regions", memory_ports)
        s.set_input("layout", "extra_slots", sum(e.instance > 0 for e in self.engines.values()))
        s.set_input("layout", "first_extra_slot", FIRST_EXTRA_SLOT)
        s.set_input("mem_base", "value", mem_base)
        s.set_input("mem_size_lo", "value", mem_size & 0xFFFF_FFFF)
        s.set_input("mem_size_hi", "value", mem_size >> 32)

    def advance(self):
        for engine in self.engines.values():       # (commands released together start together)
            engine._start()
        for engine in self.engines.values():
            engine.advance()
        if self.reset_pending and not any(e.running for e in self.engines.values()):
            self.reset_pending = False
            for engine in self.engines.values():
                engine.reset()
        self.shell.set_input("irq_status", "lines", self.irq_status())
        self.shell.set_input("reset_status", "pending", int(self.reset_pending))
        self.shell.set_input("cycles_lo", "value", self.cycle_count & 0xFFFF_FFFF)
        self.shell.set_input("cycles_hi", "value", self.cycle_count >> 32)

    @property
    def held(self) -> bool:
        """Engines start nothing new: a soft reset is draining, or control.hold is set."""
        return self.reset_pending or bool(self.shell.output("control", "hold"))

    def irq_status(self) -> int:
        lines = 0
        for e in self.engines.values():
            lines |= int(e.irq) << e.kind
        return lines

    def irq_lines(self) -> int:
        return self.irq_status() & self.shell.output("irq_mask", "lines")

    def _target(self, address):
        block, offset = divmod(address, ENGINE_STRIDE)
        if block == 0:
            return None, offset
        if block in self.engines:
            return self.engines[block], offset
        raise RegisterAccessError(address, AxiResp.DECERR, write=False)

    def read32(self, address: int) -> int:
        self.advance()
        target, offset = self._target(address)
        try:
            return (self.shell if target is None else target.regs).read(offset)
        except UnmappedRegister:
            raise RegisterAccessError(address, AxiResp.SLVERR, write=False) from None

    def write32(self, address: int, value: int) -> None:
        try:
            target, offset = self._target(address)
        except RegisterAccessError as e:
            raise RegisterAccessError(address, e.resp, write=True) from None
        try:
            if target is None:
                pulses = self.shell.write(offset, value)
                if pulses.get("soft_reset_engines"):
                    self.reset_pending = True
                for engine in self.engines.values():
                    if pulses.get("irq_clear_lines", 0) >> engine.kind & 1:
                        engine.regs.clear_bits("irq", "done", 1)
                        engine.regs.clear_bits("irq", "overflow", 1)
            else:
                target.write(offset, value)
        except UnmappedRegister:
            raise RegisterAccessError(address, AxiResp.SLVERR, write=True) from None


class ModelTransport(Transport):
    kind = "model"

    def __init__(self, *, link: PcieLink | None = None, storage: StorageLink | None = None, **device_params):
        self.device = ModelDevice(**device_params)
        self.link = link or PcieLink()
        self.storage = StorageLink(**storage) if isinstance(storage, dict) else (storage or StorageLink())
        self.closed = False

    def _live(self) -> ModelDevice:
        if self.closed:
            raise TransportClosed("the model transport is closed")
        return self.device

    def _charge(self, ns: float) -> None:
        self.device.cycle_count += self.link.to_cycles(ns, self.device.clock_mhz)

    def read32(self, address):
        self._charge(self.link.read_latency_ns)
        return self._live().read32(address)

    def write32(self, address, value):
        self._charge(self.link.write_latency_ns)
        self._live().write32(address, value)

    def _range(self, address, length):
        d = self._live()
        if address < d.mem_base or address + length > d.mem_base + d.mem_size or length < 0:
            # the memory controller answers DECERR: XDMA reports it as a failed transfer
            raise DmaError(f"card range [{address:#x}, {address + length:#x}) is outside card memory "
                             f"[{d.mem_base:#x}, {d.mem_base + d.mem_size:#x})")
        return address - d.mem_base

    def dma_write(self, address, data):
        start = self._range(address, len(data))
        self._charge(self.link.h2c_ns(len(data)))
        self.device.memory[start:start + len(data)] = np.frombuffer(bytes(data), dtype=np.uint8)

    def dma_read(self, address, length):
        start = self._range(address, length)
        self._charge(self.link.c2h_ns(length))
        return self.device.memory[start:start + length].tobytes()

    p2p_native = True

    def p2p_write(self, address, data):
        start = self._range(address, len(data))
        self._charge_storage(len(data))
        self.device.memory[start:start + len(data)] = np.frombuffer(bytes(data), dtype=np.uint8)

    def p2p_read(self, address, length):
        start = self._range(address, length)
        self._charge_storage(length)
        return self.device.memory[start:start + length].tobytes()

    def _charge_storage(self, nbytes):
        self._charge(self.storage.transfer_ns(nbytes))

    def wait_irq(self, mask, timeout):
        d = self._live()
        d.advance()
        # nothing else happens in the model: either an interrupt is up now or none will come
        return d.irq_lines() & mask

    def cycles(self):
        return self._live().cycle_count

    def close(self):
        self.closed = True

    def describe(self):
        d = self.device
        return {"transport": "model", "mem_size": d.mem_size, "clock_mhz": d.clock_mhz, "link": self.link.describe()}
