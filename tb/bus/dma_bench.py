"""Pieces shared by the burst reader and burst writer benches."""
from __future__ import annotations

import random
from dataclasses import dataclass

import cocotb
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiRamRead, AxiRamWrite

from ndpkit_spec.codes import ErrorCode


class ErrorInjectingRamRead(AxiRamRead):
    """AxiRamRead answering SLVERR for beats whose word lies in ``bad_words``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.bad_words: set[int] = set()

    async def _read(self, address, length):
        if address // self.byte_lanes in self.bad_words:
            raise IOError(f"injected read error at {address:#x}")
        return await super()._read(address, length)


class ErrorInjectingRamWrite(AxiRamWrite):
    """AxiRamWrite answering SLVERR (and dropping the bytes) for words in ``bad_words``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.bad_words: set[int] = set()

    async def _write(self, address, data):
        if address // self.byte_lanes in self.bad_words:
            raise IOError(f"injected write error at {address:#x}")
        return await super()._write(address, data)


@dataclass
class Command:
    addr: int
    length: int
    expect: ErrorCode = ErrorCode.OK

    def words(self, word: int):
        return range(self.addr // word, (self.addr + self.length) // word)


def random_commands(rng: random.Random, count: int, *, word: int, mem_size: int, window: tuple[int, int],
                    max_burst: int, invalid_ratio: float = 0.15) -> list[Command]:
    """Valid transfers of assorted shapes, with rejected ones mixed in."""
    lo, size = window
    hi = lo + size
    out = []
    for _ in range(count):
        roll = rng.random()
        if roll < invalid_ratio / 3:
            out.append(Command(rng.randrange(lo, hi, word), 0, ErrorCode.ZERO_LENGTH))
            continue
        if roll < 2 * invalid_ratio / 3:
            addr, length = rng.randrange(lo, hi - 8 * word, word), word * rng.randint(1, 4)
            if rng.random() < 0.5:
                addr += rng.randint(1, word - 1)
            else:
                length += rng.randint(1, word - 1)
            out.append(Command(addr, length, ErrorCode.UNALIGNED))
            continue
        if roll < invalid_ratio:
            length = word * rng.randint(1, 8)
            addr = rng.choice([hi - length + word, lo - word if lo >= word else hi]) // word * word
            out.append(Command(addr, length, ErrorCode.OUT_OF_WINDOW))
            continue
        shape = rng.random()
        if shape < 0.25:      # crosses a 4 KiB page
            page = rng.randrange(lo // 4096 + 1, hi // 4096) * 4096
            before = word * rng.randint(1, 40)
            length = before + word * rng.randint(1, 40)
            addr = page - before
        elif shape < 0.45:    # whole maximum-length bursts, aligned
            bursts = rng.randint(1, 3)
            length = bursts * max_burst
            addr = rng.randrange(lo // max_burst, (hi - length) // max_burst + 1) * max_burst
        else:                 # anything
            length = word * rng.randint(1, (3 * max_burst) // word)
            addr = rng.randrange(lo, hi - length + 1, word)
        if addr < lo or addr + length > hi:
            continue
        out.append(Command(addr, length))
    return out


class AddressChannelMonitor:
    """Records AR or AW handshakes and checks AXI rules on them as they happen.

    VALID must stay high with a stable payload until READY; a burst must not cross
    4 KiB and must not exceed ``max_beats``; every byte it touches must belong to
    one of the ``allowed`` ranges (the commands issued so far).
    """

    def __init__(self, dut, channel: str, word: int, max_beats: int):
        self.sig = {n: getattr(dut, f"bus_{channel}{n}") for n in ("valid", "ready", "addr", "len", "size", "burst")}
        self.clk, self.word, self.max_beats, self.channel = dut.clk, word, max_beats, channel
        self.allowed: list[tuple[int, int]] = []
        self.bursts: list[tuple[int, int]] = []
        self.errors: list[str] = []
        cocotb.start_soon(self._run())

    async def _run(self):
        pending = None
        while True:
            await RisingEdge(self.clk)
            valid = int(self.sig["valid"].value)
            if pending is not None:
                now = (int(self.sig["addr"].value), int(self.sig["len"].value))
                if not valid or now != pending:
                    self.errors.append(f"{self.channel}: VALID dropped or payload changed while stalled")
            if not valid:
                pending = None
                continue
            addr, length = int(self.sig["addr"].value), int(self.sig["len"].value) + 1
            if int(self.sig["ready"].value):
                pending = None
                self._check(addr, length)
                self.bursts.append((addr, length))
            else:
                pending = (addr, length - 1)

    def _check(self, addr, beats):
        end = addr + beats * self.word
        if beats > self.max_beats:
            self.errors.append(f"{self.channel}: burst of {beats} beats > {self.max_beats}")
        if addr // 4096 != (end - 1) // 4096:
            self.errors.append(f"{self.channel}: burst {addr:#x}+{beats} crosses 4 KiB")
        if int(self.sig["size"].value) != self.word.bit_length() - 1 or int(self.sig["burst"].value) != 1:
            self.errors.append(f"{self.channel}: unexpected AxSIZE/AxBURST")
        if not any(lo <= addr and end <= lo + n for lo, n in self.allowed):
            self.errors.append(f"{self.channel}: burst {addr:#x}..{end:#x} outside every command's range")


# ---- configurations and pytest entries shared by the reader and writer benches ----
CONFIGS = {
    # 256-beat maximum bursts, few outstanding, a small buffer
    "w64-b2048-o4": dict(data_width=64, max_burst_bytes=2048, max_outstanding=4, buffer_beats=256,
                         mem_size=65536, commands=40, stall=0.3),
    # the card's 512-bit bus with 4 KiB bursts
    "w512-b4096-o8": dict(data_width=512, max_burst_bytes=4096, max_outstanding=8, buffer_beats=128,
                          mem_size=65536, commands=40, stall=0.3),
    # short bursts, one outstanding, a buffer of exactly one burst
    "w128-b256-o1": dict(data_width=128, max_burst_bytes=256, max_outstanding=1, buffer_beats=16,
                         mem_size=32768, commands=40, stall=0.2),
    # a writer of 32-bit words repeated across the bus (the attention engine's status words)
    "w128-b256-o2-word32": dict(data_width=128, max_burst_bytes=256, max_outstanding=2, buffer_beats=32,
                                mem_size=32768, commands=40, stall=0.3, word_bits=32),
    # a writer of whole words (no strobes)
    "w128-b512-o2-whole": dict(data_width=128, max_burst_bytes=512, max_outstanding=2, buffer_beats=32,
                               mem_size=32768, commands=40, stall=0.3, strobes=False),
    # no window check (an engine that checked the transfers' ranges itself: the attention
    # engine's), so valid commands only: a command every two cycles, the same transfers
    "w128-b512-o2-unchecked": dict(data_width=128, max_burst_bytes=512, max_outstanding=2, buffer_beats=32,
                                   mem_size=32768, commands=40, stall=0.1, checked=False),
}
#: the configurations a reader takes (word_bits and strobes are a writer's)
READER_CONFIGS = [name for name, c in CONFIGS.items() if not {"word_bits", "strobes"} & set(c)]
LONG_COMMANDS = 400


def run_engine_bench(kind: str, module: str, config: str, long: bool = False) -> None:
    """Build the ``kind`` ("read"/"write") engine with ``CONFIGS[config]`` and run ``module``."""
    from ndpkit_tools.sim.runner import Design, run_bench
    from ndpkit_hw.bus.dma import BurstReader, BurstWriter
    p = dict(CONFIGS[config], **({"commands": LONG_COMMANDS} if long else {}))
    cls = {"read": BurstReader, "write": BurstWriter}[kind]
    narrow = {k: p[k] for k in ("word_bits", "strobes") if k in p}
    engine = cls(addr_width=32, data_width=p["data_width"], max_burst_bytes=p["max_burst_bytes"],
                 max_outstanding=p["max_outstanding"], buffer_beats=p["buffer_beats"],
                 checked=p.get("checked", True), **narrow)
    run_bench(Design(engine, f"burst_{kind}er", quick_build=True), module, params=p)


def start_engine_bench(dut, ram, channel: str):
    """Common set-up: RAM pauses, window, command/status streams, monitor, command list.

    Two valid commands get one injected bad word each (``ram.bad_words``); their
    expected status becomes SLVERR.  Returns (params, rng, cmd source, status sink,
    monitor, commands).
    """
    from ndpkit_hw.bus.dma import DmaCommandLayout, DmaStatusLayout
    from ndpkit_tools.sim.bench import StreamSink, StreamSource, bench_params, pause_generator
    p = bench_params()
    word = p["data_width"] // 8
    rng = random.Random(random.getrandbits(32))
    channels = ("ar_channel", "r_channel") if channel == "ar" else ("aw_channel", "w_channel", "b_channel")
    for name in channels:
        getattr(ram, name).set_pause_generator(pause_generator(p["stall"]))
    window = (0x1000, p["mem_size"] - 0x2000)
    dut.window_base.value, dut.window_size.value = window
    dut.clear_counters.value = 0
    cmd = StreamSource(dut, "cmd", DmaCommandLayout(32), stall=p["stall"])
    status = StreamSink(dut, "status", DmaStatusLayout, stall=p["stall"])
    monitor = AddressChannelMonitor(dut, channel, word, p["max_burst_bytes"] // word)
    commands = random_commands(rng, p["commands"], word=word, mem_size=p["mem_size"], window=window,
                               max_burst=p["max_burst_bytes"], invalid_ratio=0.15 if p.get("checked", True) else 0)
    for c in rng.sample([c for c in commands if c.expect == ErrorCode.OK], k=2):
        ram.bad_words.add(rng.choice(c.words(word)))
    for c in commands:
        if c.expect == ErrorCode.OK and any(w in ram.bad_words for w in c.words(word)):
            c.expect = ErrorCode.SLVERR
        if c.expect in (ErrorCode.OK, ErrorCode.SLVERR):
            monitor.allowed.append((c.addr, c.length))
    return p, rng, cmd, status, monitor, commands


async def finish_engine_bench(dut, status, monitor, commands):
    """Wait for every status, then check order/codes and the AXI monitor."""
    from ndpkit_tools.sim.bench import wait_until
    from cocotb.triggers import ClockCycles
    await wait_until(dut.clk, lambda: status.count == len(commands), 2_000_000, "all statuses")
    await ClockCycles(dut.clk, 20)
    assert not monitor.errors, monitor.errors[:5]
    got = [ErrorCode(s["error"]) for s in status.items]
    assert got == [c.expect for c in commands], \
        [(hex(c.addr), c.length, c.expect.name, g.name) for c, g in zip(commands, got) if c.expect != g]
    assert not int(dut.busy.value)
