"""attention engine benchmark (part of `make perf`): KV bytes per cycle against the
port's peak for contexts 128..2048 (8192 for G = 1) and group sizes 1, 4, 8 (d = 128, fp16 cache) at
a 200-cycle memory latency on a 512-bit port with 32 MAC lanes (ATTN_LANES=64 etc.: other
lane counts; ATTN_PAIRS=1: built with pair_words; QUICK=1: 128-bit, 16 lanes), G = 1 at context 512 also at latencies 2 and 64, and decode tokens per second for a
Llama-2-7B-like model next to PyTorch attention on this machine's CPU.

Each case is one command: R requests x H KV heads (2 x 2 for the sweep, 4 x 4 for a
batch-sized check), each attending over ``L`` cached tokens (no append); cycles from
the command's acceptance to its completion, so descriptor reads, q loads, pipeline
fill and drain, output and status writes are all in.  Efficiency = K and V bytes read
/ cycles / the port's bytes per cycle.  From a straight-line fit over the contexts the report also derives the steady-state
efficiency (its slope: extra KV bytes per extra cycle) and the fixed cycles a command costs
(its intercept) (the memory latency chain: table, q, first K; last V, combine,
division, output and status writes).  The engine alone with the memory model (no
shell).  Writes build/perf/attention.json.  Contexts 128, 512, 2048 for every G, and 8192 for G = 1
(the full run only; ATTN_LONG=0 leaves it out).  QUICK=1: G = 1 and 4; ATTN_GROUPS=1,8 runs only
those group sizes.

**Paged KV cache** (the full run; ATTN_PAGED=0 leaves it out, ATTN_PAGED=only runs only it):
G = 1, 2 x 2 heads, block size 16, one K and one V pool (4 KiB aligned) holding the two
requests' blocks in a random permutation, each request's table 64-byte aligned: contexts
128, 512 and 2048 at d = 128 and context 512 at d = 64, each beside the same case on
contiguous slots; the paged / contiguous ratio of the efficiencies (of the cycles, the
KV bytes being the same) and of the steady states of the two fits.  Written to the JSON's
``paged`` entry (the ``engine`` rows stay the contiguous sweep); ATTN_PAGED=only writes
attention-paged.json (the full run's attention.json stays).

MEMORY=hbm2_pc: the 2 x 2 cases at contexts 128, 512 and 2048 on that DRAM preset (the
engine at the U55C default build's clock, ATTN_MHZ to choose, behind the card's clock crossing), written to
attention-<preset>.json with the fixed cost and steady state of a straight-line fit
over the contexts (:func:`fit_contexts`).
"""
from __future__ import annotations

import json
import os
import time

import cocotb
import numpy as np

from ndpkit.engines.attention import golden
from ndpkit_spec.engines.attention import BLOCK as ATTENTION
from ndpkit_tools.impl.clock import supported_clock
from ndpkit_tools.sim.bench import BulkBackdoor, StreamSink, StreamSource, bench_params, start_clock_and_reset

OUT_NAME = "attention.json"
D = 128
LLAMA = {"layers": 32, "heads": 32, "head_dim": 128}      # Llama-2-7B: multi-head attention (G = 1)


def cases(quick: bool, groups=(1, 4, 8)):
    """(G, L, requests, KV heads) of every command.  The full run adds context 8192 for G = 1
    only (the Llama-like decode model's case; at 1-2 k simulated cycles per second each
    8192-token command of the 8-unit engine takes several minutes)."""
    contexts = (128, 512, 2048)
    long = [] if quick or os.environ.get("ATTN_LONG", "1") == "0" else [(1, 8192, 2, 2)] if 1 in groups else []
    return [(g, n, 2, 2) for g in groups for n in contexts] + long + [(g, 512, 4, 4) for g in groups]


#: the paged comparison's block size
PAGED_BLOCK = 16


def paged_cases():
    """(G, L, requests, KV heads, block size, d) of the paged comparison: each paged case
    (block size 16) beside the same case on contiguous slots (block size 0)."""
    shapes = [(n, D) for n in (128, 512, 2048)] + [(512, 64)]
    return [(1, n, 2, 2, bs, d) for n, d in shapes for bs in (0, PAGED_BLOCK)]


def _case(c):
    """A case as (G, L, requests, KV heads, block size, d)."""
    return tuple(c) + (0, D)[len(c) - 4:] if len(c) < 6 else tuple(c)


def memory_bytes(todo) -> int:
    need = max(2 * c[2] * c[3] * c[1] * 2 * _case(c)[5] for c in todo) + (1 << 20)
    return max(1 << 24, 1 << (need - 1).bit_length())


@cocotb.test(timeout_time=7200, timeout_unit="sec")
async def attention_throughput(dut):
    from ndpkit_hw.shell.engine_frontend import CompletionLayout, command_layout
    p = bench_params()
    source = StreamSource(dut, "cmd", command_layout(ATTENTION))
    sink = StreamSink(dut, "cpl", CompletionLayout)
    await start_clock_and_reset(dut)
    word = p["data_width"] // 8
    memory = BulkBackdoor(dut.memory.storage, dut.clk, word)
    rng = np.random.default_rng(1)
    rows = []
    # G = 1 at context 512 over the latency sweep, then every case at the main latency
    jobs = [(lat, (1, 512, 2, 2)) for lat in p.get("sweep_latencies", ()) if lat != p["latency"]]
    for latency, case in jobs + [(p["latency"], c) for c in p["cases"]]:
        group, length, REQUESTS, KV_HEADS, block, d = _case(case)
        dut.read_latency.value = latency
        dut.write_latency.value = latency
        heads = group * KV_HEADS
        row = 2 * d
        table, q_base, out_base = 0, 4096, 4096 + REQUESTS * heads * d * 2
        cache = out_base + REQUESTS * heads * d * 4
        region = KV_HEADS * length * row
        if block:
            # one K and one V pool (4 KiB aligned) of the requests' blocks, in a random order;
            # each request's table 64-byte aligned, after the descriptors
            per = -(-length // block)
            pool_blocks = REQUESTS * per
            cache = -(-cache // 4096) * 4096
            pool_bytes = -(-KV_HEADS * pool_blocks * block * row // 4096) * 4096
            ids = rng.permutation(pool_blocks).astype(np.uint32)
            stride = -(-per * 4 // 64) * 64
            assert 1024 + REQUESTS * stride <= q_base
            descs = [{"q": q_base + i * heads * d * 2, "out": out_base + i * heads * d * 4, "k": cache,
                      "v": cache + pool_bytes, "length": length, "capacity": 0,
                      "block_table": 1024 + i * stride, "blocks": per, "pool_blocks": pool_blocks}
                     for i in range(REQUESTS)]
            for i, r in enumerate(descs):                  # (zero-padded to whole 64-byte units)
                entries = np.zeros(stride // 4, np.uint32)
                entries[:per] = ids[i * per:(i + 1) * per]
                await memory.write(r["block_table"], entries.tobytes())
        else:
            descs = [{"q": q_base + i * heads * d * 2, "out": out_base + i * heads * d * 4,
                      "k": cache + 2 * i * region, "v": cache + (2 * i + 1) * region, "length": length,
                      "capacity": length} for i in range(REQUESTS)]
        q = golden.narrow(rng.standard_normal(REQUESTS * heads * d).astype(np.float32).view(np.uint32),
                          golden.KvFormat.FP16)
        await memory.write(q_base, q.tobytes())
        await memory.write(table, golden.pack_descriptors(descs))
        fields = {"format_q": 1, "format_kv": 1, "format_out": 0, "table": table, "requests": REQUESTS,
                  "shape_head_dim": d, "shape_group": group, "shape_kv_heads": KV_HEADS,
                  "shape_block_size": block, "tag": 1,
                  "scale": int(np.float32(1 / np.sqrt(d)).view(np.uint32))}
        t0 = time.perf_counter()
        source.send(fields)
        cpl, cycles = await sink.timed_receive(p.get("timeout_cycles", 50_000_000))
        seconds = time.perf_counter() - t0
        assert cpl["error"] == 0 and cpl["aux"] == 0, cpl
        kv_bytes = REQUESTS * 2 * region
        rows.append({"group": group, "context": length, "head_dim": d, "requests": REQUESTS, "kv_heads": KV_HEADS,
                     "block_size": block, "paged_comparison": len(case) == 6,
                     "cycles": cycles, "kv_bytes": kv_bytes, "kv_bytes_per_cycle": kv_bytes / cycles,
                     "port_bytes_per_cycle": word, "efficiency": kv_bytes / cycles / word,
                     "bytes_read": cpl["bytes_read"], "latency": latency, "data_width": p["data_width"],
                     "lanes": p["lanes"], "sim_cycles_per_second": cycles / seconds})
        dut._log.info(f"G={group} L={length} d={d} {REQUESTS}x{KV_HEADS}"
                      f"{f' paged bs {block}' if block else ''}: {cycles} cycles, "
                      f"efficiency {rows[-1]['efficiency']:.3f}")
    with open(p["out"], "w") as f:
        json.dump(rows, f, indent=2)


def cpu_attention(batch: int, context: int, repeats: int = 3) -> dict:
    """One Llama-2-7B-like layer's decode attention (batch x 32 heads, one query token,
    ``context`` cached tokens, d = 128, fp32) with PyTorch SDPA on this CPU."""
    try:
        import torch
    except ImportError:
        return {}
    h, d = LLAMA["heads"], LLAMA["head_dim"]
    q = torch.randn(batch, h, 1, d)
    k = torch.randn(batch, h, context, d)
    v = torch.randn(batch, h, context, d)
    torch.nn.functional.scaled_dot_product_attention(q, k, v)
    t0 = time.perf_counter()
    for _ in range(repeats):
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
    seconds = (time.perf_counter() - t0) / repeats
    return {"batch": batch, "context": context, "layer_seconds": seconds, "threads": torch.get_num_threads(),
            "torch": torch.__version__, "load_average": os.getloadavg()[0]}   # other jobs slow the CPU side


def engine_mhz() -> int:
    """The engine's clock on a DRAM preset: ATTN_MHZ, else the U55C default build's (the
    decode card's; its board file), so the preset runs are at the clock the card runs."""
    from ndpkit_tools.boards import engine_clock_mhz
    return int(os.environ.get("ATTN_MHZ") or engine_clock_mhz("alveo_u55c"))


def fit_contexts(rows, port_bytes_per_cycle: float) -> dict:
    """Least-squares line cycles = fixed + KV bytes / (port x steady) over every context
    of one group: the fixed cost a command pays (its intercept) and the steady-state
    efficiency (its slope), each counted once."""
    x = np.array([r["kv_bytes"] for r in rows], float)
    y = np.array([r["cycles"] for r in rows], float)
    slope, intercept = np.polyfit(x, y, 1)
    return {"fixed_cycles_per_command": float(intercept),
            "steady_state_efficiency": float(1 / slope / port_bytes_per_cycle),
            "from_contexts": [r["context"] for r in rows]}


def paged_report(rows, width: int, lanes: int) -> dict | None:
    """The paged comparison: each paged case's efficiency against the same contiguous case
    (their ratio), and the two straight-line fits over the d = 128 contexts (the ratio of
    the steady states; the paged fixed cost's excess)."""
    if not rows:
        return None
    key = lambda r: (r["head_dim"], r["context"])
    flat = {key(r): r for r in rows if not r["block_size"]}
    pairs = []
    print(f"\npaged KV cache (block size {PAGED_BLOCK}, a random permutation of the pools' blocks) against "
          f"contiguous slots: {width}-bit port, {lanes} MAC lanes, G = 1, 2 x 2 heads, latency 200")
    print(f"{'d':>4} {'context':>8} {'contiguous cycles':>18} {'paged cycles':>13} {'contiguous eff.':>16} "
          f"{'paged eff.':>11} {'paged / contiguous':>19}")
    for r in sorted((r for r in rows if r["block_size"]), key=key):
        c = flat[key(r)]
        pairs.append({"head_dim": r["head_dim"], "context": r["context"], "block_size": r["block_size"],
                      "contiguous_cycles": c["cycles"], "paged_cycles": r["cycles"],
                      "contiguous_efficiency": c["efficiency"], "paged_efficiency": r["efficiency"],
                      "ratio": r["efficiency"] / c["efficiency"], "paged_bytes_read": r["bytes_read"],
                      "contiguous_bytes_read": c["bytes_read"]})
        p = pairs[-1]
        print(f"{p['head_dim']:>4} {p['context']:>8} {p['contiguous_cycles']:>18} {p['paged_cycles']:>13} "
              f"{p['contiguous_efficiency']:>16.3f} {p['paged_efficiency']:>11.3f} {p['ratio']:>19.3f}")
    fits = {}
    for name, paged in (("contiguous", False), ("paged", True)):
        sweep = sorted((r for r in rows if bool(r["block_size"]) == paged and r["head_dim"] == D), key=key)
        if len(sweep) >= 3:
            fits[name] = fit_contexts(sweep, sweep[0]["port_bytes_per_cycle"])
    if len(fits) == 2:
        fits["steady_state_ratio"] = fits["paged"]["steady_state_efficiency"] / \
            fits["contiguous"]["steady_state_efficiency"]
        fits["extra_fixed_cycles"] = fits["paged"]["fixed_cycles_per_command"] - \
            fits["contiguous"]["fixed_cycles_per_command"]
        print(f"steady state (fit over d = {D}, contexts 128-2048): contiguous "
              f"{fits['contiguous']['steady_state_efficiency']:.3f}, paged {fits['paged']['steady_state_efficiency']:.3f}"
              f" (ratio {fits['steady_state_ratio']:.3f}); fixed cycles a command: contiguous "
              f"{fits['contiguous']['fixed_cycles_per_command']:.0f}, paged {fits['paged']['fixed_cycles_per_command']:.0f}")
    return {"pairs": pairs, "fits": fits, "rows": rows}


def memory_main(memory: str, width: int, lanes: int, mem: int, params: dict, out) -> int:
    from ndpkit_tools.sim.runner import Design, run_bench
    from ndpkit_hw.engines.harness import EngineHarness
    from ndpkit_spec.dram import preset
    timing = preset(memory)
    mhz = engine_mhz()
    engine, pairs = bench_engine(width, lanes)
    run_bench(Design(EngineHarness(engine, mem_size=mem, memory=memory, engine_mhz=mhz),
                     f"attention_engine_{width}_{memory}",
                     key=f"w{width} l{lanes} {mem} {memory} {mhz} MHz" + (" pairs" if pairs else "")),
              "tb.engines.attention.attention_bench", params=params)
    rows = json.loads(out.read_text())
    bus = timing.peak_bytes_per_cycle(mhz)
    print(f"\nattention engine, {width}-bit port ({width // 8} B/cycle), {lanes} MAC lanes"
          f"{' (pair_words)' if pairs else ''}, on {memory} ({bus:.1f} B per {mhz} MHz cycle)")
    print(f"{'G':>3} {'context':>8} {'cycles':>9} {'KV B/cycle':>11} {'of port':>8} {'of memory':>10}")
    for r in rows:
        r["memory"] = memory
        r["of_memory"] = r["kv_bytes_per_cycle"] / bus
        print(f"{r['group']:>3} {r['context']:>8} {r['cycles']:>9} {r['kv_bytes_per_cycle']:>11.2f} "
              f"{r['efficiency']:>8.3f} {r['of_memory']:>10.3f}")
    fits = []
    for g in sorted({r["group"] for r in rows}):
        sweep = sorted((r for r in rows if r["group"] == g), key=lambda r: r["context"])
        if len(sweep) >= 3:
            fits.append({"group": g, **fit_contexts(sweep, sweep[0]["port_bytes_per_cycle"])})
    for f in fits:
        print(f"G = {f['group']}: steady state {f['steady_state_efficiency']:.3f} of the port, fixed "
              f"{f['fixed_cycles_per_command']:.0f} cycles a command (fit over contexts {f['from_contexts']})")
    out.write_text(json.dumps({"engine": rows, "fits": fits, "memory": memory, "engine_mhz": mhz,
                               "memory_bytes_per_cycle": bus, "pair_words": pairs}, indent=2))
    print(f"wrote {out}")
    return 0


def bench_engine(width: int, lanes: int):
    """The benchmarked engine and whether it has ``pair_words`` (ATTN_PAIRS=1: two units,
    odd groups' rows in pairs of words)."""
    from ndpkit_hw.engines.attention.engine import AttentionEngine
    pairs = os.environ.get("ATTN_PAIRS", "0") not in ("", "0")
    return AttentionEngine(data_width=width, lanes=lanes, pair_words=pairs), pairs


def main() -> int:
    from ndpkit_tools.sim.runner import Design, run_bench
    from ndpkit_tools.paths import build_root
    from ndpkit_hw.engines.harness import EngineHarness
    quick = os.environ.get("QUICK", "0") not in ("", "0")
    memory = os.environ.get("MEMORY") or None
    # ATTN_OUT: another file name (the lane table's runs must not replace the standard run's)
    paged = os.environ.get("ATTN_PAGED", "1")
    # (the paged comparison alone writes its own file: the full run's stays)
    stem = OUT_NAME.replace(".json", f"-{memory}.json") if memory else \
        OUT_NAME.replace(".json", "-paged.json") if paged == "only" else OUT_NAME
    out = build_root() / "perf" / (os.environ.get("ATTN_OUT") or stem)
    out.parent.mkdir(parents=True, exist_ok=True)
    groups = tuple(int(g) for g in os.environ.get("ATTN_GROUPS", "1,4" if quick else "1,4,8").split(","))
    todo = [] if paged == "only" and not memory else cases(quick, groups)
    if memory:
        todo = [c for c in todo if c[2:] == (2, 2) and c[1] <= 2048]
    elif paged != "0":
        todo += paged_cases()
    mem = memory_bytes(todo)
    width, lanes = (128, 16) if quick else (512, int(os.environ.get("ATTN_LANES", "32")))
    params = {"data_width": width, "lanes": lanes, "latency": 200,
              "sweep_latencies": [] if memory or paged == "only" else [2, 64], "cases": todo, "out": str(out)}
    if memory:
        return memory_main(memory, width, lanes, mem, params, out)
    print(f"attention benchmark: building the {width}-bit engine ({lanes} MAC lanes) once")
    engine, pairs = bench_engine(width, lanes)
    run_bench(Design(EngineHarness(engine, mem_size=mem), f"attention_engine_{width}",
                     key=f"w{width} l{lanes} {mem}" + (" pairs" if pairs else "")),
              "tb.engines.attention.attention_bench", params=params)
    every = json.loads(out.read_text())
    comparison = paged_report([r for r in every if r.get("paged_comparison")], width, lanes)
    every = [r for r in every if not r.get("paged_comparison")]
    if not every:
        out.write_text(json.dumps({"engine": [], "params": {k: v for k, v in params.items() if k != "out"},
                                   "paged": comparison}, indent=2))
        return 0
    rows = [r for r in every if r["latency"] == params["latency"]]
    print(f"\nattention engine, {width}-bit port ({width // 8} B/cycle), {lanes} MAC lanes, d = {D}, fp16 cache, "
          f"memory latency {params['latency']} cycles")
    print(f"{'G':>3} {'context':>8} {'requests x heads':>17} {'cycles':>9} {'KV B/cycle':>11} {'efficiency':>11} "
          f"{'sim cyc/s':>10}")
    for r in rows:
        print(f"{r['group']:>3} {r['context']:>8} {str(r['requests']) + ' x ' + str(r['kv_heads']):>17} "
              f"{r['cycles']:>9} {r['kv_bytes_per_cycle']:>11.2f} {r['efficiency']:>11.3f} "
              f"{r['sim_cycles_per_second']:>10.0f}")
    steady = []
    for g in sorted({r["group"] for r in rows}):
        sweep = sorted((r for r in rows if r["group"] == g and (r["requests"], r["kv_heads"]) == (2, 2)),
                       key=lambda r: r["context"])
        if len(sweep) >= 3:
            # one line through every context: its slope the steady state, its intercept the
            # fixed cost (each loss counted once; total minus bytes-at-peak is not a constant)
            steady.append({"group": g, **fit_contexts(sweep, sweep[0]["port_bytes_per_cycle"])})
    print(f"\n{'G':>3} {'steady-state efficiency':>24} {'fixed cycles / command (2 x 2)':>31}")
    for s in steady:
        print(f"{s['group']:>3} {s['steady_state_efficiency']:>24.3f} {s['fixed_cycles_per_command']:>31.0f}")
    # decode throughput of a Llama-2-7B-like model (G = 1): one command per layer for the whole
    # batch (B x 32 heads), its cycles from the measured steady-state rate and fixed cost
    system = []
    mha = next((x for x in steady if x["group"] == 1), None)
    # the clock the timing evidence supports: the measured depth of this configuration's netlist
    from ndpkit_tools.impl.clock import registry_config
    try:
        clock = supported_clock("attention", registry_config("attention", data_width=width, lanes=lanes))
    except LookupError as e:           # a lane count the impl report has not measured: no per-second figures
        print(f"\nno per-second figures: {e}")
        out.write_text(json.dumps({"engine": every, "params": {k: v for k, v in params.items() if k != "out"},
                                   "steady_state": steady, "paged": comparison}, indent=2))
        return 0
    print(f"\nclock for per-second figures: {clock.text}")
    contexts = sorted({r["context"] for r in rows})
    for length in contexts if mha else []:
        row_cycles = 2 * 2 * LLAMA["head_dim"] / (width // 8)     # K and V rows of one token, a word a cycle
        for batch in (16, 64):
            heads = batch * LLAMA["heads"]
            step_cycles = LLAMA["layers"] * (heads * length * row_cycles / mha["steady_state_efficiency"]
                                             + mha["fixed_cycles_per_command"])
            card = batch / (step_cycles / (clock.mhz * 1e6))
            cpu = cpu_attention(batch, length) if length <= 2048 else {}
            cpu_tps = batch / (cpu["layer_seconds"] * LLAMA["layers"]) if cpu else None
            system.append({"context": length, "batch": batch, "card_tokens_per_second": card,
                           "cpu_tokens_per_second": cpu_tps, "cpu": cpu, "clock_mhz": clock.mhz})
    print(f"\nLlama-2-7B-like decode (32 layers x 32 heads, d = 128), attention only: tokens per second, "
          f"one engine instance at {clock.mhz} MHz on the ideal memory vs PyTorch SDPA (fp32) on this CPU")
    print(f"{'context':>8} {'batch':>6} {'engine tok/s':>13} {'CPU tok/s':>10} {'ratio':>7}")
    for s in system:
        cpu = s["cpu_tokens_per_second"]
        ratio = f"{s['card_tokens_per_second'] / cpu:.1f}x" if cpu else "-"
        print(f"{s['context']:>8} {s['batch']:>6} {s['card_tokens_per_second']:>13.1f} "
              f"{(f'{cpu:.1f}' if cpu else '-'):>10} {ratio:>7}")
    out.write_text(json.dumps({"engine": every, "params": {k: v for k, v in params.items() if k != "out"},
                               "paged": comparison, "clock_mhz": clock.mhz, "clock_evidence": clock.text, "steady_state": steady, "llama_decode": system}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
