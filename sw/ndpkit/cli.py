"""``ndpkit`` command line: ``ndpkit info``, ``ndpkit selftest``, ``ndpkit --version``.

    ndpkit info                                  # the model card (instant)
    ndpkit info --device sim                     # the simulated RTL card (builds once)
    ndpkit selftest --device "model?mem_size=4M" --rounds 50

Errors are reported in one line (``ndpkit info: OptionError: mem_size: ...``) with exit
status 1; ``--traceback`` shows the Python traceback as well.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time


from ndpkit.device import open_device
from ndpkit.errors import DeviceError

__all__ = ["main", "Progress"]


class Progress:
    """A one-line progress bar on stderr (plain lines when stderr is not a terminal)."""

    def __init__(self, total: int, label: str, stream=None):
        self.total, self.label, self.done = total, label, 0
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.started = time.monotonic()
        self._last = -1

    def update(self, n: int = 1) -> None:
        self.done += n
        fraction = self.done / self.total if self.total else 1.0
        if self.tty:
            filled = int(30 * fraction)
            self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} "
                              f"{time.monotonic() - self.started:5.1f}s")
            if self.done >= self.total:
                self.stream.write("\n")
        elif int(fraction * 10) != self._last:     # every 10 %
            self._last = int(fraction * 10)
            self.stream.write(f"{self.label}: {self.done}/{self.total}\n")
        self.stream.flush()


def selftest(dev, rounds: int, seed: int, progress: bool = True) -> dict:
    """Random copies and fills checked against host-side expectations, plus rejected
    commands that must write nothing.  Returns counts; raises AssertionError on a mismatch."""
    rng = random.Random(seed)
    word = dev.word_bytes
    size = 64 * word * 16
    a, b = dev.alloc(size), dev.alloc(size)
    guard = dev.alloc(4096)
    guard_bytes = rng.randbytes(4096)
    guard.write(guard_bytes)
    shadow = {a.address: bytearray(rng.randbytes(size)), b.address: bytearray(size)}
    a.write(bytes(shadow[a.address]))
    b.write(bytes(shadow[b.address]))
    bar = Progress(rounds, "selftest") if progress else None
    counts = {"copies": 0, "fills": 0, "rejected": 0, "bytes": 0}
    for _ in range(rounds):
        src, dst = (a, b) if rng.random() < 0.5 else (b, a)
        length = rng.randrange(1, size // word + 1) * word
        so, do = (rng.randrange(0, (size - length) // word + 1) * word for _ in range(2))
        kind = rng.random()
        if kind < 0.5:
            dev.copy(dst.address + do, src.address + so, length)
            shadow[dst.address][do:do + length] = shadow[src.address][so:so + length]
            counts["copies"] += 1
        elif kind < 0.85:
            pattern = rng.getrandbits(32)
            dev.fill(dst.address + do, pattern, length)
            shadow[dst.address][do:do + length] = pattern.to_bytes(4, "little") * (length // 4)
            counts["fills"] += 1
        else:
            bad = rng.choice([(dst.address + 4, src.address, word), (dst.address, src.address, 0),
                              (dev.mem_base + dev.mem_size - word, src.address, 2 * word)])
            try:
                dev.copy(*bad)
            except DeviceError:
                counts["rejected"] += 1
            else:
                raise AssertionError(f"a bad copy {bad} was accepted")
        counts["bytes"] += length
        if bar:
            bar.update()
    for buf in (a, b):
        assert buf.read() == bytes(shadow[buf.address]), f"card memory of {buf!r} differs from the expectation"
    assert guard.read() == guard_bytes, "a guard region was written"
    for buf in (a, b, guard):
        buf.free()
    return counts


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("ndpkit")
    except PackageNotFoundError:       # run from a source tree without installing
        return "unknown (not installed)"


DEVICE_HELP = ("device URI: model (default; a behavioural card, instant), sim (the RTL in Verilator; the first "
               "use of a configuration builds it, minutes), xdma:/dev/xdma0, uart:/dev/ttyUSB1; options as "
               "?mem_size=64M&engines=dma_copy,adam")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="ndpkit", description="ndpkit host tools")
    ap.add_argument("--version", action="version", version=f"ndpkit {_version()}")
    ap.add_argument("--traceback", action="store_true", help="show the Python traceback of an error")
    sub = ap.add_subparsers(dest="command", required=True)
    p_info = sub.add_parser("info", help="describe a device")
    p_info.add_argument("--device", default="model", help=DEVICE_HELP)
    p_self = sub.add_parser("selftest", help="random copies/fills and bad commands, checked")
    p_self.add_argument("--device", default="model", help=DEVICE_HELP)
    p_self.add_argument("--rounds", type=int, default=40)
    p_self.add_argument("--seed", type=int, default=None)
    args = ap.parse_args(argv)
    try:
        with open_device(args.device) as dev:
            if args.command == "info":
                print(json.dumps(dev.info(), indent=2))
                return 0
            seed = args.seed if args.seed is not None else random.randrange(1 << 30)
            print(f"selftest on {args.device}, seed {seed} (--seed {seed} reproduces)")
            started = dev.cycles()
            counts = selftest(dev, args.rounds, seed)
            print(f"selftest passed: {counts}, {dev.cycles() - started} device cycles")
            return 0
    except KeyboardInterrupt:
        print(f"ndpkit {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:           # one line for the user; --traceback for the rest
        if args.traceback:
            raise
        message = " ".join(str(e).split()) or type(e).__name__
        print(f"ndpkit {args.command}: {type(e).__name__}: {message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
