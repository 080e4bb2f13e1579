"""The decode part of `make demo`: a small transformer layer generating tokens with
its attention on the simulated card.

A pre-norm decoder layer (d_model 256, 8 query heads over 2 KV heads of d = 64:
grouped-query attention, G = 4; a 4x MLP), random weights, a batch of three
requests with prompts of different lengths.  The prompt's keys and values are
prefilled into a :class:`ndpkit.KVCache` on the card; then each decode step
projects the newest token to q, k, v on the host, and the card appends k, v to each
request's cache and attends over it (one command for the batch); the host finishes
the layer and feeds the result back as the next token.  Every step's attention
output is compared bit for bit with :mod:`ndpkit.engines.attention.golden` on the cache read
back from the card, and against float64 attention.
"""
from __future__ import annotations

import numpy as np

from ndpkit.arith import fp
from ndpkit.engines.attention.golden import KvFormat, decode, reference, widen

DECODE_URI = "sim?data_width=128&engines=attention&mem_size=8M"
D_MODEL, HEADS, KV_HEADS, HEAD_DIM = 256, 8, 2, 64


def _norm(x):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)


def decode_session(dev, *, steps: int = 6, seed: int = 5) -> dict:
    from ndpkit.engines.attention.kvcache import KVCache
    rng = np.random.default_rng(seed)
    w = {name: (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32) for name, shape in
         (("q", (D_MODEL, HEADS * HEAD_DIM)), ("k", (D_MODEL, KV_HEADS * HEAD_DIM)),
          ("v", (D_MODEL, KV_HEADS * HEAD_DIM)), ("o", (HEADS * HEAD_DIM, D_MODEL)),
          ("up", (D_MODEL, 4 * D_MODEL)), ("down", (4 * D_MODEL, D_MODEL)))}
    prompts = [rng.standard_normal((n, D_MODEL)).astype(np.float32) for n in (5, 40, 131)]
    batch = len(prompts)
    cache = KVCache(dev, layers=1, slots=4, kv_heads=KV_HEADS, head_dim=HEAD_DIM, capacity=160, fmt="fp16")
    rows, worst_exact, worst_f64 = [], 0, 0.0
    try:
        slots = [cache.new_request() for _ in range(batch)]
        for s, prompt in zip(slots, prompts):
            h = _norm(prompt)
            k = (h @ w["k"]).reshape(-1, KV_HEADS, HEAD_DIM).transpose(1, 0, 2)
            v = (h @ w["v"]).reshape(-1, KV_HEADS, HEAD_DIM).transpose(1, 0, 2)
            cache.prefill(0, s, k, v)
        x = np.stack([p[-1] for p in prompts])
        scale = 1 / np.sqrt(HEAD_DIM)
        for step in range(steps):
            h = _norm(x)
            q = (h @ w["q"]).reshape(batch, HEADS, HEAD_DIM)
            k_new = (h @ w["k"]).reshape(batch, KV_HEADS, HEAD_DIM)
            v_new = (h @ w["v"]).reshape(batch, KV_HEADS, HEAD_DIM)
            c0 = dev.cycles()
            attn = dev.attention.decode(q, k_new, v_new, cache, 0, slots)
            cycles = dev.cycles() - c0
            mismatched = 0
            for i, s in enumerate(slots):
                k, v = cache.read(0, s)
                want = fp.floats(decode(q[i], k, v, scale=scale, q_format=KvFormat.FP32, kv_format=KvFormat.FP16))
                mismatched += int(np.count_nonzero(fp.bits(attn[i]) != fp.bits(want)))
                ref = reference(q[i], fp.floats(widen(k, KvFormat.FP16)), fp.floats(widen(v, KvFormat.FP16)),
                                scale=float(np.float32(scale)))
                worst_f64 = max(worst_f64, float(np.max(np.abs(attn[i] - ref))))
            worst_exact = max(worst_exact, mismatched)
            x = x + attn.reshape(batch, -1) @ w["o"]
            x = x + np.maximum(_norm(x) @ w["up"], 0) @ w["down"]
            rows.append({"step": step, "lengths": [int(cache.lengths[0, s]) for s in slots], "cycles": cycles,
                         "mismatched": mismatched})
    finally:
        cache.close()
    return {"rows": rows, "mismatched": worst_exact, "max_abs_vs_float64": worst_f64}


def print_decode(result: dict) -> bool:
    print(f"\ndecoder layer (d_model {D_MODEL}, {HEADS} heads over {KV_HEADS} KV heads, d = {HEAD_DIM}), "
          f"batch of 3, attention on the card:")
    print(f"{'step':>5} {'cache lengths':>16} {'device cycles':>14} {'bits differing from golden':>28}")
    for r in result["rows"]:
        print(f"{r['step']:>5} {str(r['lengths']):>16} {r['cycles']:>14} {r['mismatched']:>28}")
    ok = result["mismatched"] == 0
    print(f"attention outputs bit-exact to ndpkit.engines.attention.golden: {'yes' if ok else 'NO'}; "
          f"largest difference from float64 attention: {result['max_abs_vs_float64']:.2e}")
    return ok


def run(device: str) -> bool:
    from examples.demo import run_part
    return run_part(device, DECODE_URI, "decode", "a few minutes", decode_session, print_decode)
