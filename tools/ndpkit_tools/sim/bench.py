"""Helpers used inside cocotb benches (they run in the simulator's Python).

- :func:`bench_params`: the parameters the pytest entry elaborated the design with;
- :func:`start_clock_and_reset`: 100 MHz clock on ``clk``, synchronous ``rst``;
- :class:`StreamSource` / :class:`StreamSink`: drivers for ``amaranth.lib.stream``
  ports (``<name>_valid``/``_ready``/``_payload``) with random stalls, payloads
  packed from dicts by the component's ``lib.data`` layout;
- :class:`Backdoor`: fast preload/inspection of an ``AxiMemoryModel``'s storage;
- :func:`pause_generator` / :func:`stall_axi`: random stalls on cocotbext-axi
  models, so every AXI channel is exercised with gaps on both sides;
- :func:`memory_stats`: an ``AxiMemoryModel``'s counters (AXI beats, DRAM activates and
  data-bus time), for the real-bytes columns of the sg and graph benches.
"""
from __future__ import annotations

import itertools
import json
import os
import random
from collections import deque

import numpy as np

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Event, ReadOnly, RisingEdge, SimTimeoutError, with_timeout
from cocotb.utils import get_sim_time

__all__ = ["RegionBackdoor", "bench_params", "start_clock_and_reset", "engine_bench", "pack", "unpack", "StreamSource", "StreamSink",
           "Backdoor", "BulkBackdoor", "pause_generator", "stall_axi", "wait_until", "memory_stats", "stats_delta"]


def bench_params() -> dict:
    return json.loads(os.environ.get("NDP_PARAMS", "{}"))


CLOCK_PERIOD_NS = 10


async def start_clock_and_reset(dut, cycles: int = 4):
    cocotb.start_soon(Clock(dut.clk, CLOCK_PERIOD_NS, unit="ns").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, cycles)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


def _fields(layout):
    return {name: (field.offset, field.width) for name, field in layout}


def pack(layout, values: dict) -> int:
    fields = _fields(layout)
    word = 0
    for name, value in values.items():
        offset, width = fields[name]
        if not 0 <= value < (1 << width):
            raise ValueError(f"{name}={value} does not fit in {width} bits")
        word |= value << offset
    return word


def unpack(layout, word: int) -> dict:
    return {name: (word >> offset) & ((1 << width) - 1) for name, (offset, width) in _fields(layout).items()}


def pause_generator(probability: float, rng: random.Random | None = None):
    """Endless booleans: True (stall this cycle) with ``probability``."""
    rng = rng or random.Random(random.getrandbits(32))
    while True:
        yield rng.random() < probability


def stall_axi(model, probability: float) -> None:
    """Random stalls on every channel of a cocotbext-axi master/slave/RAM model."""
    if probability <= 0:
        return
    for side in ("write_if", "read_if"):
        interface = getattr(model, side, None)
        if interface is None:
            continue
        for name in ("aw_channel", "w_channel", "b_channel", "ar_channel", "r_channel"):
            channel = getattr(interface, name, None)
            if channel is not None:
                channel.set_pause_generator(pause_generator(probability))


async def wait_until(clk, predicate, timeout_cycles: int, what: str):
    for _ in range(timeout_cycles):
        await RisingEdge(clk)
        if predicate():
            return
    raise TimeoutError(f"timed out after {timeout_cycles} cycles waiting for {what}")


class _StreamPort:
    """The three signals of an ``amaranth.lib.stream`` port, a stall rate, and a driver task."""

    def __init__(self, dut, prefix: str, layout, stall: float, idle_output):
        self.clk = dut.clk
        self.valid = getattr(dut, f"{prefix}_valid")
        self.ready = getattr(dut, f"{prefix}_ready")
        self.payload = getattr(dut, f"{prefix}_payload")
        self.layout, self.stall = layout, stall
        self._rng = random.Random(random.getrandbits(32))
        getattr(self, idle_output).value = 0
        cocotb.start_soon(self._run())

    def _stalled(self) -> bool:
        return bool(self.stall) and self._rng.random() < self.stall


class StreamSource(_StreamPort):
    """Drives ``<prefix>_valid``/``_payload``; VALID stays up until READY, as required."""

    def __init__(self, dut, prefix: str, layout=None, stall: float = 0.0):
        self.queue: deque = deque()
        self.sent = 0
        super().__init__(dut, prefix, layout, stall, "valid")

    def send(self, item) -> None:
        """Queue a payload: an int, or a dict packed by the layout."""
        self.queue.append(pack(self.layout, item) if isinstance(item, dict) else item)

    def idle(self) -> bool:
        return not self.queue and not int(self.valid.value)

    async def _run(self):
        driving = False
        while True:
            await RisingEdge(self.clk)
            if driving and int(self.ready.value):
                self.sent += 1
                driving = False
            if not driving:
                if self.queue and not self._stalled():
                    self.payload.value = self.queue.popleft()
                    driving = True
                self.valid.value = int(driving)


class StreamSink(_StreamPort):
    """Drives ``<prefix>_ready`` randomly and collects handshaken payloads."""

    def __init__(self, dut, prefix: str, layout=None, stall: float = 0.0):
        self.items: deque = deque()
        self.count = 0
        self._arrived = Event()
        super().__init__(dut, prefix, layout, stall, "ready")

    async def _run(self):
        ready = False
        while True:
            await RisingEdge(self.clk)
            if ready and int(self.valid.value):
                word = int(self.payload.value)
                self.items.append(unpack(self.layout, word) if self.layout is not None else word)
                self.count += 1
                self._arrived.set()
            ready = not self._stalled()
            self.ready.value = int(ready)

    async def receive(self, timeout_cycles: int = 100_000):
        await wait_until(self.clk, lambda: bool(self.items), timeout_cycles, "a stream item")
        return self.items.popleft()

    async def timed_receive(self, timeout_cycles: int = 50_000_000):
        """The next payload and the clock cycles from the call to its handshake.  Sleeps
        until it arrives (no coroutine woken every cycle: the benchmarks' long commands
        simulate faster); a TimeoutError after ``timeout_cycles``."""
        start = get_sim_time("ns")
        while not self.items:
            self._arrived.clear()
            try:
                await with_timeout(self._arrived.wait(), timeout_cycles * CLOCK_PERIOD_NS, "ns")
            except SimTimeoutError:
                raise TimeoutError(f"no item after {timeout_cycles} cycles") from None
        return self.items.popleft(), round((get_sim_time("ns") - start) / CLOCK_PERIOD_NS)


class BulkBackdoor:
    """Bulk preload/readout of an ``AxiMemoryModel`` through the RAM's file backdoor
    (``$fread`` of ``ndpkit_backdoor.bin``, ``$writememh`` of ``ndpkit_backdoor.hex``,
    in the simulator's folder,
    see hw/ndpkit_hw/verilog/ndpkit_sim_ram.v): one clock edge and no per-word Python,
    so megabytes move in milliseconds.  Transfers of a few words use VPI word by word.
    ``ram`` is the RAM instance (``dut.memory.storage``); addresses are whole words."""

    FILE = "ndpkit_backdoor.hex"
    LOAD_FILE = "ndpkit_backdoor.bin"
    SMALL_WORDS = 16

    def __init__(self, ram, clk, data_bytes: int, base: int = 0):
        self.ram, self.clk = ram, clk
        self.words = Backdoor(ram.mem, data_bytes, base)
        self.data_bytes, self.base = data_bytes, base

    def _span(self, address: int, length: int) -> tuple[int, int]:
        r = self.words._words(address, length)
        return r.start, r.stop - 1

    async def _request(self, name: str, first: int, last: int) -> None:
        self.ram.bd_first.value = first
        self.ram.bd_last.value = last
        req = getattr(self.ram, name)
        req.value = (int(req.value) + 1) & 0xFFFF_FFFF
        await RisingEdge(self.clk)
        await ReadOnly()
        await RisingEdge(self.clk)

    async def write(self, address: int, payload: bytes) -> None:
        first, last = self._span(address, len(payload))
        if last - first < self.SMALL_WORDS:
            self.words.write(address, payload)
            return
        with open(self.LOAD_FILE, "wb") as f:        # $fread wants each word's top byte first
            f.write(np.frombuffer(payload, dtype=np.uint8).reshape(-1, self.data_bytes)[:, ::-1].tobytes())
        await self._request("bd_load_req", first, last)

    async def read(self, address: int, length: int) -> bytes:
        first, last = self._span(address, length)
        if last - first < self.SMALL_WORDS:
            return self.words.read(address, length)
        await self._request("bd_dump_req", first, last)
        with open(self.FILE) as f:
            lines = [line for line in f.read().split() if not line.startswith(("//", "@"))]
        raw = np.frombuffer(bytes.fromhex("".join(lines)), dtype=np.uint8).reshape(-1, self.data_bytes)
        return raw[:, ::-1].tobytes()


class RegionBackdoor:
    """One backdoor over a card whose memory is several models, one per region
    (:class:`ndpkit_hw.sim_card.SimCard` with ``memory_ports`` > 1): a transfer is split
    at region boundaries and each piece goes to its model's :class:`BulkBackdoor`.
    ``regions``: (base, size, backdoor) of each model, in address order."""

    def __init__(self, regions):
        self.regions = list(regions)

    def _pieces(self, address: int, length: int):
        for base, size, backdoor in self.regions:
            lo, hi = max(address, base), min(address + length, base + size)
            if lo < hi:
                yield backdoor, lo, hi

    async def write(self, address: int, payload: bytes) -> None:
        for backdoor, lo, hi in self._pieces(address, len(payload)):
            await backdoor.write(lo, payload[lo - address:hi - address])

    async def read(self, address: int, length: int) -> bytes:
        out = bytearray()
        for backdoor, lo, hi in self._pieces(address, length):
            out += await backdoor.read(lo, hi - lo)
        return bytes(out)


class Backdoor:
    """Reads and writes an ``AxiMemoryModel``'s storage array directly (no bus cycles)."""

    def __init__(self, storage_handle, data_bytes: int, base: int = 0):
        self.handle, self.data_bytes, self.base = storage_handle, data_bytes, base

    def _words(self, address: int, length: int):
        if (address - self.base) % self.data_bytes or length % self.data_bytes:
            raise ValueError("backdoor accesses must be whole bus words")
        first = (address - self.base) // self.data_bytes
        return range(first, first + length // self.data_bytes)

    def write(self, address: int, payload: bytes) -> None:
        for i, word in zip(self._words(address, len(payload)),
                           itertools.count(0, self.data_bytes)):
            self.handle[i].value = int.from_bytes(payload[word:word + self.data_bytes], "little")

    def read(self, address: int, length: int) -> bytes:
        out = bytearray()
        for i in self._words(address, length):
            out += int(self.handle[i].value).to_bytes(self.data_bytes, "little")
        return bytes(out)


async def engine_bench(dut, cmd_layout, *, stall: float, read_latency: int = 40, write_latency: int = 20):
    """An engine on :class:`ndpkit_hw.engines.harness.EngineHarness`: stalling command
    source and completion sink, memory latencies set, clock and reset started.
    Returns (source, sink, memory backdoor)."""
    from ndpkit_hw.shell.engine_frontend import CompletionLayout
    source = StreamSource(dut, "cmd", cmd_layout, stall=stall)
    sink = StreamSink(dut, "cpl", CompletionLayout, stall=stall)
    dut.read_latency.value = read_latency
    dut.write_latency.value = write_latency
    memory = Backdoor(dut.memory.storage.mem, bench_params()["data_width"] // 8)
    await start_clock_and_reset(dut)
    return source, sink, memory


def memory_stats(memory, *, beat_bytes: int = 64, preset: str | None = None, engine_mhz: float = 200.0) -> dict:
    """Counters of the ``AxiMemoryModel`` at ``memory`` (a cocotb handle): bytes through its
    AXI port each way and, on a DRAM preset (its name in ``preset``), activates and the
    data bus's busy time in ns (column bursts, either direction).  Take two readings and
    subtract (:func:`stats_delta`)."""
    stats = {"axi_read_bytes": beat_bytes * int(memory.stat_read_beats.value),
             "axi_write_bytes": beat_bytes * int(memory.stat_write_beats.value)}
    if preset is not None:
        from ndpkit_hw.mem.dram import calendar_units
        from ndpkit_spec.dram import preset as timing_of
        clock = timing_of(preset).clock_mhz
        u_per_tck, _ = calendar_units(clock, engine_mhz)
        stats["dram_activations"] = int(memory.dram.stat_activations.value)
        stats["dram_bus_ns"] = int(memory.dram.stat_bus_units.value) / u_per_tck * 1000.0 / clock
    return stats


def stats_delta(after: dict, before: dict) -> dict:
    """``after - before``, key by key."""
    return {k: after[k] - before[k] for k in after}
