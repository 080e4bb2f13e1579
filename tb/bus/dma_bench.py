"""Pieces shared by the burst reader and burst writer benches."""
from __future__ import annotations

import random
from dataclasses import dataclass

import cocotb
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiRamRead, AxiRamWrite

from ndpkit.codes import ErrorCode


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
