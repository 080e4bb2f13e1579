"""The attention numerics' accuracy table (docs/engines/attention.md): the golden model
(bit-exact to the engine) and PyTorch's own SDPA in the KV format, each against a float64
two-pass softmax on the same inputs, for fp16 and bf16 caches, contexts up to 8K and the
stress inputs of test_golden.py.  Errors are in units of PyTorch's SDPA tolerance for the
format (``atol * max(1, max|v|) + rtol * |ref|``: <= 1 passes).

    python -m tb.engines.attention.accuracy          # prints the markdown table
"""
from __future__ import annotations

import numpy as np

from ndpkit.arith import fp
from ndpkit.engines.attention.golden import KvFormat, decode, reference, widen
from tb.engines.attention.test_golden import _case, _within

LENGTHS = (1, 129, 1000, 8192)
KINDS = ("normal", "peaked", "flat", "large")



def rows():
    import torch
    out = []
    for fmt, dtype in ((KvFormat.FP16, torch.float16), (KvFormat.BF16, torch.bfloat16)):
        for kind in KINDS:
            for length in LENGTHS:
                rng = np.random.default_rng(length * 3 + int(fmt))
                heads, kv_heads, d = (4, 2, 128) if length < 8192 else (2, 1, 128)
                q, k, v = _case(rng, heads, kv_heads, length, d, kind)
                tq, tk, tv = (torch.tensor(x, dtype=dtype) for x in (q, k, v))
                q64, k64, v64 = (x.double().numpy() for x in (tq, tk, tv))
                scale = 1 / np.sqrt(d)
                want = reference(q64, k64, v64, scale=float(np.float32(scale)))
                ours = decode(q64, tk.view(torch.int16).numpy().view(np.uint16),
                              tv.view(torch.int16).numpy().view(np.uint16), scale=scale, q_format=KvFormat.FP32,
                              kv_format=fmt, out_format=fmt)
                ours = fp.floats(widen(ours, fmt)).astype(np.float64)
                theirs = torch.nn.functional.scaled_dot_product_attention(
                    tq[None, :, None, :], tk[None], tv[None], enable_gqa=True)[0, :, 0].double().numpy()
                out.append({"format": fmt.name.lower(), "inputs": kind, "context": length,
                            "max_abs_error": float(np.abs(ours - want).max()),
                            "ndpkit": float(_within(ours, want, v64, fmt)), "torch": float(_within(theirs, want, v64, fmt))})
    return out


def markdown(table) -> str:
    lines = ["| KV format | inputs | context | max abs error | ndpkit / tolerance | torch SDPA / tolerance |",
             "|---|---|---:|---:|---:|---:|"]
    for r in table:
        lines.append(f"| {r['format']} | {r['inputs']} | {r['context']} | {r['max_abs_error']:.3g} | "
                     f"{r['ndpkit']:.3f} | {r['torch']:.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(rows()))
