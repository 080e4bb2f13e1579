"""`make demo`: a scripted session on the simulated card, through the public API.

Opens the card (``ndpkit.open("sim")``: the Device top level with its shell, the
dma_copy engine and the RTL memory model, in Verilator behind the modelled PCIe
link), allocates buffers, uploads data, runs copies and fills of several sizes, a
queued batch and three bad commands, downloads the results, checks every byte
against the golden model (and the guard regions around every buffer), and prints a
table of cycles, bytes and efficiency.  Then (with PyTorch installed) a second card
with the optimizer engines trains a small model with its step offloaded next to
storage (:mod:`examples.demo_training`), and a third card with the attention
engine runs the decode loop of a small transformer layer
(:mod:`examples.demo_decode`), and a fourth with the graph engine runs PageRank and
BFS on a Kronecker graph in Piccolo and baseline modes
(:mod:`examples.demo_graph`).  Each simulated card runs on the memory of the board it
stands for (``sim?board=``: the SmartSSD's DDR4 for training, a U55C HBM pseudo-channel
for the others).  ``--device model`` runs them all on the behavioural model.
"""
from __future__ import annotations

import argparse
import random
import time

import numpy as np

import ndpkit
from ndpkit.engines.dma_copy import golden

GUARD = 4096


def _row(what, done, nbytes, port):
    eff = nbytes / done.cycles / port if done.cycles and done.ok else float("nan")
    return (what, nbytes, done.error.name, done.cycles, done.bytes_read, done.bytes_written, eff)


def session(dev, seed: int) -> tuple[list, dict]:
    rng = np.random.default_rng(seed)
    port = dev.word_bytes
    total = 8 << 20
    # one arena with a guard page on each side; a NumPy shadow of it follows every command
    arena = dev.alloc(total + 2 * GUARD, align=GUARD)
    base = arena.address + GUARD
    shadow = rng.integers(0, 256, total + 2 * GUARD, dtype=np.uint8)
    t0 = time.perf_counter()
    arena.write(shadow)
    upload_s = time.perf_counter() - t0

    def run(what, op, src_off, dst_off, length, pattern=0, expect="OK"):
        src, dst = base + src_off, base + dst_off
        cmd = (dev.copy(dst, src, length, wait=False) if op == golden.OP_COPY
               else dev.fill(dst, pattern, length, wait=False))
        done = cmd.wait(check=False)
        assert done.error.name == expect, f"{what}: {done.error.name}, expected {expect}"
        code, _ = golden.check_args(op, src, dst, length, word_bytes=port, window_base=dev.mem_base,
                                    window_size=dev.mem_size)
        if code == 0:
            golden.apply(shadow, op, src, dst, length, pattern, base=arena.address)
        return _row(what, done, length, port)

    rows = []
    for size in (4 << 10, 64 << 10, 1 << 20):
        rows.append(run(f"copy {size >> 10} KiB", golden.OP_COPY, 0, 4 << 20, size))
    rows.append(run("fill 256 KiB", golden.OP_FILL, 0, 2 << 20, 256 << 10, pattern=0x5EED5EED))
    # a batch of eight 256 KiB copies queued back to back
    cmds = [dev.copy(base + (4 << 20) + i * (256 << 10), base + i * (256 << 10), 256 << 10, wait=False)
            for i in range(8)]
    done = [c.wait() for c in cmds]
    for i in range(8):
        golden.apply(shadow, golden.OP_COPY, base + i * (256 << 10), base + (4 << 20) + i * (256 << 10),
                     256 << 10, 0, base=arena.address)
    span = (done[-1].start + done[-1].cycles - done[0].start) & 0xFFFF_FFFF if done[0].cycles else 0
    rows.append(("8 x 256 KiB queued", 8 * (256 << 10), "OK", span, sum(d.bytes_read for d in done),
                 sum(d.bytes_written for d in done), (8 * (256 << 10)) / span / port if span else float("nan")))
    # bad commands: each rejected with its code, nothing written
    rows.append(run("bad: unaligned dst", golden.OP_COPY, 0, (7 << 20) + 4, 4096, expect="UNALIGNED"))
    rows.append(run("bad: past the end", golden.OP_FILL, 0, dev.mem_size - base - 64, 4096,
                    expect="OUT_OF_WINDOW"))
    rows.append(run("bad: overlap", golden.OP_COPY, 0, 64, 4096, expect="OVERLAP"))
    rows.append(run("copy after errors", golden.OP_COPY, 1 << 20, 6 << 20, 64 << 10))

    t0 = time.perf_counter()
    final = arena.download(np.uint8)
    download_s = time.perf_counter() - t0
    mismatches = int(np.count_nonzero(final != shadow))
    stats = {"mismatched_bytes": mismatches, "upload_mb_s": arena.size / upload_s / 1e6,
             "download_mb_s": arena.size / download_s / 1e6, "arena": arena.size}
    arena.free()
    return rows, stats


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="sim", help="device URI (default: sim, each card on the memory of the "
                                                     "board it stands for: sim?board=...)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--no-training", action="store_true", help="skip the training part")
    ap.add_argument("--no-decode", action="store_true", help="skip the decode (attention) part")
    ap.add_argument("--no-graph", action="store_true", help="skip the graph part")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    print(f"ndpkit demo on '{args.device}' (seed {seed}); the first run builds the simulated card, "
          f"about half a minute ...", flush=True)
    started = time.perf_counter()
    with ndpkit.open(on_board(args.device, "alveo_u55c")) as dev:
        info = dev.info()
        print(f"opened in {time.perf_counter() - started:.1f} s: {info['transport']} card, "
              f"{info['mem_size'] >> 20} MiB memory, {info['word_bytes'] * 8}-bit port, engines "
              f"{', '.join(info['engines'])}, memory {info.get('memory', 'model')}, {info.get('link', '')}")
        c0 = dev.cycles()
        rows, stats = session(dev, seed)
        cycles = dev.cycles() - c0
    print(f"\n{'command':<22}{'bytes':>10}{'status':>15}{'cycles':>9}{'read':>10}{'written':>10}"
          f"{'of port peak':>14}")
    for what, nbytes, status, cyc, read, written, eff in rows:
        print(f"{what:<22}{nbytes:>10}{status:>15}{cyc:>9}{read:>10}{written:>10}"
              f"{'' if eff != eff else f'{eff:.3f}':>14}")
    print(f"\nverified {stats['arena']} bytes of card memory (buffers and guard pages) against the golden "
          f"model: {stats['mismatched_bytes']} bytes differ")
    print(f"host DMA through the transport: {stats['upload_mb_s']:.1f} MB/s up, {stats['download_mb_s']:.1f} "
          f"MB/s down (wall clock); session: {cycles} device cycles, {time.perf_counter() - started:.1f} s")
    ok = stats["mismatched_bytes"] == 0
    if not args.no_training:
        ok &= _training(args.device)
    if not args.no_decode:
        from examples.demo_decode import run as decode_part
        ok &= decode_part(args.device)
    if not args.no_graph:
        from examples.demo_graph import run as graph_part
        ok &= graph_part(args.device)
    return 0 if ok else 1


def on_board(uri: str, board: str) -> str:
    """``uri`` on ``board``'s memory (``sim?board=``: its DRAM preset and engine clock) when
    it is a simulated card that names neither a board nor a memory."""
    name, _, query = uri.partition("?")
    if name != "sim" or "board=" in query or "memory=" in query:
        return uri
    return f"sim?{query + '&' if query else ''}board={board}"


def run_part(device: str, uri: str, what: str, build_note: str, session, report, board: str = "alveo_u55c") -> bool:
    """One part of the demo on its own card: ``uri`` (a "sim?..." URI; ``device``'s
    transport replaces "sim"; a simulated card on ``board``'s memory),
    ``session(dev) -> result``, ``report(result) -> ok``."""
    uri = on_board(uri.replace("sim", device.split("?")[0], 1), board)
    print(f"\nopening {uri} for the {what} part (the first run builds it, {build_note}) ...", flush=True)
    started = time.perf_counter()
    with ndpkit.open(uri) as dev:
        result = session(dev)
    ok = report(result)
    print(f"{what} part: {time.perf_counter() - started:.1f} s")
    return ok


def _training(device: str) -> bool:
    from examples.demo_training import TRAINING_URI, print_training, training_session
    try:
        import torch  # noqa: F401
    except ImportError:
        print("\n(training part skipped: PyTorch is not installed; pip install 'ndpkit[torch]')")
        return True
    return run_part(device, TRAINING_URI, "training", "about three minutes", training_session, print_training,
                    board="smartssd")


if __name__ == "__main__":
    raise SystemExit(main())
