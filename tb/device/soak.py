"""`make soak DURATION=<seconds>`: mixed concurrent workloads on several simulated
cards, each paired with the behavioural model as its golden reference.

Workers (one thread each, every simulated card its own Verilator process):

- ``optim``: the 128-bit card with dma_copy, adam and decomp: random batches of
  commands with valid and invalid fields (the model-vs-sim fuzz generator of
  tb/device/test_agreement_optim.py) on the card and on the model; every outcome
  (error code, byte counts, aux) and, after every batch, the whole working region must
  agree.  One batch in ten injects a bus fault: the memory model answers SLVERR or
  DECERR for one array of a valid copy or dense Adam update (read or written), the
  card must report that code (and a copy elsewhere still work), then the fault is
  cleared and the model's region re-synchronised from the card.  One batch in seven
  runs with long memory stalls (500-4000 cycles of latency): outcomes must not change.
- ``attention``: the attention card: decode steps of a batch of requests with random
  lengths, group sizes and appends, outputs and caches compared bit for bit with the
  model; one step in ten has a request that overflows its slot (it must fail alone).

Reports commands run, errors injected and detected, data mismatches and hangs (a
command without a completion within its timeout) and writes build/soak/soak.json.
Exit status 1 on any mismatch, hang or undetected error.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import threading
import time

import numpy as np

import ndpkit
from ndpkit import DeviceTimeout, ErrorCode
from ndpkit_tools.sim.device_server import DEFAULTS

DEFAULT_LATENCY = (DEFAULTS["read_latency"], DEFAULTS["write_latency"])     # the sim card's
OPTIM_URI = "{}?data_width=128&engines=dma_copy,adam,decomp&mem_size=4M"
ATTENTION_URI = "{}?data_width=128&engines=attention&mem_size=8M"


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {"commands": 0, "errors_injected": 0, "errors_detected": 0, "mismatches": 0, "hangs": 0,
                       "faults_injected": 0, "faults_detected": 0, "stalls_injected": 0}
        self.notes: list[str] = []

    def add(self, **kw):
        with self.lock:
            for k, v in kw.items():
                self.counts[k] += v

    def note(self, text: str):
        with self.lock:
            self.notes.append(text)


def _random_command(rng) -> dict:
    """One command of the fuzz generator's shape (tb/device/test_agreement_optim.py)."""
    faults = [None] * 6 + ["unaligned", "past_end", "overlap", "field", "zero", "huge"]
    return {"engine": str(rng.choice(["adam", "adam", "adam", "decomp", "dma_copy"])),
            "slots": [int(x) for x in rng.permutation(8)], "fault": faults[int(rng.integers(len(faults)))],
            "which": int(rng.integers(6)), "n": int(rng.integers(1, 301)), "pairs": int(rng.integers(1, 41)),
            "sorted": bool(rng.random() < 0.67), "mode": int(rng.integers(2)), "grad": int(rng.integers(3)),
            "copy": int(rng.integers(3)), "sparse": bool(rng.integers(2)), "op": int(rng.integers(2)),
            "words": int(rng.integers(1, 65))}


def _bus_fault(rng, sim, base, stats: Stats, batch: int) -> None:
    """A SLVERR or DECERR window over one array of a valid command (a copy's source or
    destination, a dense Adam update's p, m, v or g): the card must report exactly that
    code; after clearing it, a copy elsewhere must work."""
    from tb.device.test_agreement_optim import SLOT, _run
    resp = str(rng.choice(["SLVERR", "DECERR"]))
    cmd = dict(_random_command(rng), fault=None, sparse=False, op=0, engine=str(rng.choice(["dma_copy", "adam"])))
    victim = int(rng.integers(2 if cmd["engine"] == "dma_copy" else 4))   # src/dst or p/m/v/g
    sim.transport.set_memory(error_base=base + cmd["slots"][victim] * SLOT, error_size=SLOT, error_resp=resp)
    try:
        outcome = _run(sim, base, cmd, int(rng.integers(2 ** 31)))
        detected = outcome[1] == ErrorCode[resp]
        stats.add(commands=1, faults_injected=1, faults_detected=int(detected))
        if not detected:
            stats.note(f"optim batch {batch}: {resp} on {cmd['engine']} array {victim} reported {outcome}")
    finally:
        sim.transport.set_memory(error_base=0, error_size=0, error_resp="SLVERR")
    done = sim.engine("dma_copy").copy(base + cmd["slots"][6] * SLOT, base + cmd["slots"][7] * SLOT,
                                       256).wait(check=False)
    stats.add(commands=1)
    if done.error:
        stats.add(mismatches=1)
        stats.note(f"optim batch {batch}: the copy after a cleared fault failed: {done.error!r}")


def optim_worker(duration: float, seed: int, stats: Stats):
    from tb.device.test_agreement_optim import REGION, SLOT, _run
    rng = np.random.default_rng(seed)
    model, sim = (ndpkit.open(OPTIM_URI.format(kind)) for kind in ("model", "sim"))
    deadline = time.monotonic() + duration          # (from when the cards are up)
    try:
        regions = [d.alloc(REGION) for d in (model, sim)]
        initial = rng.integers(0, 2 ** 32, REGION // 4, dtype=np.uint64).astype(np.uint32).tobytes()
        for d, r in zip((model, sim), regions):
            d.transport.dma_write(r.address, initial)
        batch = 0
        while time.monotonic() < deadline:
            batch += 1
            commands = [_random_command(rng) for _ in range(int(rng.integers(1, 7)))]
            cmd_seed = int(rng.integers(2 ** 31))
            outcomes = []
            try:
                for d, r in zip((model, sim), regions):
                    outcomes.append([_run(d, r.address, c, cmd_seed + i) for i, c in enumerate(commands)])
            except DeviceTimeout as e:
                stats.add(hangs=1)
                stats.note(f"optim batch {batch}: {e}")
                continue
            # an injected error: a spoiled command the golden model rejects; detected: the card says the same
            rejected = [i for i, c in enumerate(commands) if c["fault"] and outcomes[0][i][1] != 0]
            stats.add(commands=len(commands), errors_injected=len(rejected),
                      errors_detected=sum(outcomes[1][i][1] == outcomes[0][i][1] for i in rejected))
            memory = [hashlib.sha256(d.transport.dma_read(r.address, REGION)).hexdigest()
                      for d, r in zip((model, sim), regions)]
            if outcomes[0] != outcomes[1] or memory[0] != memory[1]:
                stats.add(mismatches=1)
                stats.note(f"optim batch {batch} (seed {cmd_seed}): model {outcomes[0]} sim {outcomes[1]} "
                           f"memory {'equal' if memory[0] == memory[1] else 'differs'}")
            if batch % 10 == 0:                   # a bus fault on the card
                _bus_fault(rng, sim, regions[1].address, stats, batch)
                # the faulted command's destination is undefined: take the card's region as the new reference
                model.transport.dma_write(regions[0].address, sim.transport.dma_read(regions[1].address, REGION))
            elif batch % 7 == 0:                  # long memory stalls for the next batch: timing changes nothing
                latency = int(rng.integers(500, 4000))
                sim.transport.set_memory(read_latency=latency, write_latency=latency // 2)
                stats.add(stalls_injected=1)
            else:
                sim.transport.set_memory(read_latency=DEFAULT_LATENCY[0], write_latency=DEFAULT_LATENCY[1])
    finally:
        model.close()
        sim.close()


def attention_worker(duration: float, seed: int, stats: Stats):
    from ndpkit.engines.attention.client import RequestError
    from ndpkit.arith import fp
    from ndpkit.engines.attention.kvcache import KVCache
    rng = np.random.default_rng(seed)
    devs = [ndpkit.open(ATTENTION_URI.format(kind)) for kind in ("model", "sim")]
    deadline = time.monotonic() + duration
    try:
        step = 0
        while time.monotonic() < deadline:
            d, hkv, group = int(rng.choice([64, 128])), int(rng.integers(1, 3)), int(rng.choice([1, 2, 3, 4, 8]))
            capacity, batch = int(rng.integers(8, 300)), int(rng.integers(1, 4))
            fmt = str(rng.choice(["fp16", "bf16"]))
            caches = [KVCache(dev, layers=1, slots=batch, kv_heads=hkv, head_dim=d, capacity=capacity, fmt=fmt)
                      for dev in devs]
            try:
                slots = [[c.new_request() for _ in range(batch)] for c in caches]
                for i in range(batch):
                    length = int(rng.integers(0, capacity))
                    k, v = rng.standard_normal((2, hkv, length, d))
                    for c, s in zip(caches, slots):
                        c.prefill(0, s[i], k, v)
                for _ in range(int(rng.integers(1, 4))):
                    step += 1
                    q = rng.standard_normal((batch, group * hkv, d)).astype(np.float32)
                    kn, vn = rng.standard_normal((2, batch, hkv, d)).astype(np.float32)
                    overflow = step % 10 == 0
                    if overflow:                      # fill request 0's slot: its append must fail
                        for c, s in zip(caches, slots):
                            c.lengths[0, s[0]] = capacity
                    results = []
                    for dev, c, s in zip(devs, caches, slots):
                        try:
                            out = dev.attention.decode(q, kn, vn, c, 0, s)
                            results.append((fp.bits(out), {}))
                        except RequestError as e:
                            results.append((fp.bits(np.nan_to_num(e.outputs)), e.failures))
                    stats.add(commands=1, errors_injected=int(overflow),
                              errors_detected=int(overflow and 0 in results[1][1]))
                    same = np.array_equal(results[0][0], results[1][0]) and results[0][1] == results[1][1]
                    caches_same = all(np.array_equal(x, y) for i in range(batch)
                                      for x, y in zip(caches[0].read(0, slots[0][i]), caches[1].read(0, slots[1][i])))
                    if not (same and caches_same):
                        stats.add(mismatches=1)
                        stats.note(f"attention step {step}: outputs {'equal' if same else 'differ'}, caches "
                                   f"{'equal' if caches_same else 'differ'} (d={d} hkv={hkv} G={group})")
                    if overflow:
                        for c, s in zip(caches, slots):
                            c.lengths[0, s[0]] = 0
            except DeviceTimeout as e:
                stats.add(hangs=1)
                stats.note(f"attention step {step}: {e}")
            finally:
                for c in caches:
                    c.close()
    finally:
        for dev in devs:
            dev.close()


def main(argv=None) -> int:
    from ndpkit_tools.paths import build_root
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=600, help="seconds (default 600)")
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time())
    print(f"soak: {args.duration:.0f} s, seed {seed} (--seed reproduces); opening the cards (the first run builds "
          f"them) ...", flush=True)
    stats = Stats()
    started = time.monotonic()
    errors = []

    def guarded(fn, s):
        try:
            fn(args.duration, s, stats)
        except Exception as e:        # a crashed worker is a failed soak, reported below
            errors.append(f"{fn.__name__}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=guarded, args=(fn, seed + i)) for i, fn in
               enumerate((optim_worker, attention_worker))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    c = stats.counts
    result = {"seed": seed, "seconds": round(time.monotonic() - started, 1), **c, "worker_errors": errors,
              "notes": stats.notes[:50]}
    out = build_root() / "soak" / "soak.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"\n{'seconds':>8} {'commands':>9} {'errors injected':>16} {'detected':>9} {'bus faults':>11} "
          f"{'detected':>9} {'stalled batches':>16} {'mismatches':>11} {'hangs':>6}")
    print(f"{result['seconds']:>8} {c['commands']:>9} {c['errors_injected']:>16} {c['errors_detected']:>9} "
          f"{c['faults_injected']:>11} {c['faults_detected']:>9} {c['stalls_injected']:>16} {c['mismatches']:>11} "
          f"{c['hangs']:>6}")
    for line in stats.notes[:20] + errors:
        print("  " + line)
    print(f"wrote {out}")
    ok = (not errors and c["mismatches"] == 0 and c["hangs"] == 0 and c["faults_detected"] == c["faults_injected"]
          and c["errors_detected"] == c["errors_injected"])
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
