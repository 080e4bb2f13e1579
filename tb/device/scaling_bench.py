"""Card scale: N engine instances, each in its own memory region with its own memory
model (an HBM pseudo-channel's controller), running at once on one simulated card.

    python -m tb.device.scaling_bench          # prints the tables, writes build/perf/scaling.json
    MEMORY=hbm2_pc python -m tb.device.scaling_bench   # each region on that DRAM preset: scaling-hbm2_pc.json

On a preset every case runs twice: alone, and with the host writing and reading back
64 KiB in each running instance's region meanwhile (host DMA reaching the same channels).

For attention (decode, context 2048, G = 1, 4, 8) and Adam (dense fp32, 1 % sparse)
on a card with eight instances over eight regions, the same per-instance work runs on
N = 1, 2, 4 and 8 instances together (queued under ``control.hold``, released at
once).  The aggregate rate is the bytes every instance moved (its completions' byte
counts) over the span from the first start to the last completion (the instances'
cycle stamps); scaling = aggregate / (N x the N = 1 rate).  Every instance's outputs
are checked equal to instance 0's at N = 1 (the same inputs), so a run that scaled by
doing less work would fail.  The 128-bit engines (16 attention MAC lanes, one Adam
lane) keep the Verilator builds and the run to minutes; the per-instance rate of the
port-sized engines is the attention and adam benches'.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

import ndpkit
from ndpkit.engines.adam.golden import scalars_for_step
from ndpkit.engines.attention.client import start_decode
from ndpkit.engines.attention.kvcache import KVCache
from ndpkit_tools.paths import build_root

OUT = build_root() / "perf" / "scaling.json"
INSTANCES = 8
CARD = ("sim?data_width=128&engines={engine}*{n}&memory_ports={n}&mem_size={mem}&read_latency=64&write_latency=32"
        "&queue_depth=4")
COUNTS = (1, 2, 4, 8)


class HostTraffic:
    """Host DMA into the instances' own regions while they run (``nbytes`` written and read
    back per instance, checked): the card's host path reaching the same channels."""

    def __init__(self, dev, engine: str, nbytes: int):
        self.nbytes = nbytes
        self.buffers = [dev.alloc(nbytes, region=dev.instance(engine, i).region) for i in range(INSTANCES)] \
            if nbytes else []

    def run(self, n: int) -> int:
        """Write and read back ``nbytes`` in each of the first ``n`` regions; the bytes moved."""
        for buf in self.buffers[:n]:
            payload = os.urandom(self.nbytes)
            buf.write(payload)
            assert buf.read(self.nbytes) == payload, "host DMA read back differs"
        return 2 * self.nbytes * n if self.buffers else 0

    def close(self):
        for buf in self.buffers:
            buf.free()


def _span(done: list) -> tuple[int, int]:
    """(bytes moved, cycles from the first start to the last completion)."""
    moved = sum(d.bytes_read + d.bytes_written for d in done)
    return moved, max(d.start + d.cycles for d in done) - min(d.start for d in done)


def attention_runs(dev, context: int, groups, requests: int = 2, host_bytes: int = 0) -> list[dict]:
    hkv, d = 2, 64
    caches = []
    for i in range(INSTANCES):                       # the same K/V in every instance's region
        rng = np.random.default_rng(1)
        cache = KVCache(dev, layers=1, slots=requests, kv_heads=hkv, head_dim=d, capacity=context, instance=i)
        slots = [cache.new_request() for _ in range(requests)]
        for s in slots:
            cache.prefill(0, s, rng.normal(0, 1, (hkv, context, d)), rng.normal(0, 1, (hkv, context, d)))
        caches.append((cache, slots))
    rows = []
    host = HostTraffic(dev, "attention", host_bytes)
    for group in groups:
        q = np.random.default_rng(group).normal(0, 1, (requests, hkv * group, d)).astype(np.float32)
        reference = None
        for n in COUNTS:
            with dev.batch():
                pending = [start_decode(q, None, None, cache, 0, slots) for cache, slots in caches[:n]]
            t0 = time.perf_counter()
            host_moved = host.run(n)                 # while the instances run
            outs = [p.finish() for p in pending]
            wall = time.perf_counter() - t0
            done = [p.client.last for p in pending]
            reference = outs[0] if reference is None else reference
            assert all(np.array_equal(o.view(np.uint32), reference.view(np.uint32)) for o in outs), \
                f"G={group} N={n}: an instance's output differs"
            moved, span = _span(done)
            rows.append({"engine": "attention", "case": f"G={group}, context {context}" + _host_case(host_bytes),
                         "group": group, "context": context, "instances": n, "bytes": moved, "cycles": span,
                         "host_dma_bytes": host_moved,
                         "per_instance_cycles": [c.cycles for c in done], "wall_seconds": wall})
    for cache, _ in caches:
        cache.close()
    host.close()
    return rows


def _host_case(host_bytes: int) -> str:
    return f", host DMA {host_bytes >> 10} KiB each way an instance" if host_bytes else ""


def adam_runs(dev, elements: int, host_bytes: int = 0) -> list[dict]:
    rows = []
    host = HostTraffic(dev, "adam", host_bytes)
    for density in (None, 0.01):
        state = []
        rng = np.random.default_rng(2)
        p = rng.normal(0, 0.5, elements).astype(np.float32)
        for i in range(INSTANCES):
            region = dev.instance("adam", i).region
            rng = np.random.default_rng(3)
            bufs = [dev.upload(x, region=region) for x in (p, np.zeros_like(p), np.zeros_like(p))]
            if density is None:
                grad = dev.upload(rng.normal(0, 1e-2, elements).astype(np.float32), region=region)
                sparse = {}
            else:
                k = int(elements * density)
                idx = np.sort(rng.choice(elements, k, replace=False)).astype(np.uint32)
                grad = dev.upload(rng.normal(0, 1e-2, k).astype(np.float32), region=region)
                sparse = {"indices": dev.upload(idx, region=region), "pairs": k}
            state.append((bufs, grad, sparse))
        reference = None
        sc = scalars_for_step(1, lr=1e-3, weight_decay=0.01)
        for n in COUNTS:
            for bufs, _, _ in state[:n]:                # every run from the same state
                for b, x in zip(bufs, (p, np.zeros_like(p), np.zeros_like(p))):
                    b.write(x)
            with dev.batch():
                cmds = [dev.instance("adam", i).step(*bufs, grad, n=elements, scalars=sc, wait=False, **sparse)
                        for i, (bufs, grad, sparse) in enumerate(state[:n])]
            host_moved = host.run(n)                     # while the instances run
            done = [c.wait() for c in cmds]
            outs = [bufs[0].download(np.uint32) for bufs, _, _ in state[:n]]
            reference = outs[0] if reference is None else reference
            assert all(np.array_equal(o, reference) for o in outs), f"adam N={n}: an instance's parameters differ"
            moved, span = _span(done)
            rows.append({"engine": "adam", "case": ("dense fp32" if density is None else "1 % sparse")
                         + _host_case(host_bytes), "instances": n, "bytes": moved, "cycles": span,
                         "host_dma_bytes": host_moved,
                         "per_instance_cycles": [c.cycles for c in done], "elements": elements})
        for bufs, grad, sparse in state:
            for b in bufs + [grad] + list(b for b in sparse.values() if hasattr(b, "free")):
                b.free()
    host.close()
    return rows


def with_scaling(rows: list[dict], word_bytes: int) -> list[dict]:
    single = {r["case"]: r["bytes"] / r["cycles"] for r in rows if r["instances"] == 1}
    for r in rows:
        rate = r["bytes"] / r["cycles"]
        r.update(bytes_per_cycle=rate, per_instance_port=rate / r["instances"] / word_bytes,
                 scaling=rate / (r["instances"] * single[r["case"]]))
    return rows


def table(rows: list[dict]) -> str:
    lines = [f"{'engine':>9} {'case':>22} {'N':>3} {'cycles':>9} {'B/cycle':>9} {'x N=1':>7} {'scaling':>8}"]
    single = {r["case"]: r for r in rows if r["instances"] == 1}
    for r in rows:
        lines.append(f"{r['engine']:>9} {r['case']:>22} {r['instances']:>3} {r['cycles']:>9} "
                     f"{r['bytes_per_cycle']:>9.2f} {r['bytes_per_cycle'] / single[r['case']]['bytes_per_cycle']:>7.2f} "
                     f"{r['scaling']:>8.3f}")
    return "\n".join(lines)


def card(engine: str, memory: str | None) -> str:
    """The card's open() string: the ideal memory at fixed latencies, or a DRAM preset."""
    text = CARD.format(engine=engine, n=INSTANCES, mem=f"{8 * INSTANCES}M")
    return text if memory is None else text.replace("read_latency=64&write_latency=32", f"memory={memory}")


def main() -> int:
    quick = os.environ.get("QUICK", "0") not in ("", "0")
    memory = os.environ.get("MEMORY") or None
    out = OUT if memory is None else OUT.with_name(f"scaling-{memory}.json")
    context = 512 if quick else 2048
    # on a preset (each case twice, alone and with host DMA) G = 1 and 4: G = 8 only lengthens
    # the same commands, and the attention bench has it on the preset
    groups = (1, 4) if quick or memory else (1, 4, 8)
    elements = 8192 if quick else 32768
    # on a preset, each case again with host DMA into the same channels while the engines run
    host_sizes = (0,) if memory is None else (0, (16 << 10) if quick else (64 << 10))
    started = time.monotonic()
    rows = []
    with ndpkit.open(card("attention", memory)) as dev:
        for host_bytes in host_sizes:
            rows += with_scaling(attention_runs(dev, context, groups, host_bytes=host_bytes), dev.word_bytes)
        word_bytes = dev.word_bytes
    with ndpkit.open(card("adam", memory)) as dev:
        for host_bytes in host_sizes:
            rows += with_scaling(adam_runs(dev, elements, host_bytes=host_bytes), dev.word_bytes)
    print(f"\ncard scale: N instances at once, each on its own region and "
          f"{'memory model' if memory is None else memory + ' channel'} "
          f"({word_bytes * 8}-bit engines; scaling = aggregate / (N x N=1), goal >= 0.9)")
    print(table(rows))
    worst = min(r["scaling"] for r in rows)
    print(f"\nworst scaling {worst:.3f}; {time.monotonic() - started:.0f} s")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "word_bytes": word_bytes, "instances": INSTANCES,
                               "counts": list(COUNTS), "memory": memory}, indent=1))
    print(f"wrote {out}")
    return 0 if worst >= 0.9 else 1


if __name__ == "__main__":
    raise SystemExit(main())
