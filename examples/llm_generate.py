"""Generate text with SmolLM2-135M-Instruct whose decode attention runs on a card.

    python -m examples.llm_generate                          # the model card, fp16 KV cache
    python -m examples.llm_generate --device sim --tokens 8  # the RTL in Verilator
    python -m examples.llm_generate --fmt bf16 --tokens 32 --json build/llm.json

Each prompt is generated greedily twice with the same weights: with
``attn_implementation="ndpkit"`` (prompt on the host, every decode step's attention
on the card over its KV cache) and with transformers' eager attention.  Prints the
texts, whether the tokens agree (and where not, the step and the reference's margin
between its two best logits: a near-tie), the largest |logit difference| per step,
tokens per second (wall clock) and the engine cycles per decode step with the
per-layer breakdown.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

PROMPTS = ["The capital of France is", "Once upon a time, in a small village,",
           "The three primary colors are", "def fibonacci(n):"]


def print_report(r: dict, device: str) -> bool:
    """The report of :func:`ndpkit.hf.compare`, printed; True when nothing is unexplained."""
    print(f"\nSmolLM2-135M-Instruct, {len(r['prompts'])} prompts, {r['max_new_tokens']} new tokens, "
          f"{r['fmt']} KV cache on '{device}' vs transformers' eager attention")
    for i, prompt in enumerate(r["prompts"]):
        same = r["diverged"][i] is None and r["tokens"][i] == r["reference"][i]
        print(f"  {prompt!r}\n    card:  {r['texts'][i]!r}\n    eager: {r['reference_texts'][i]!r}  "
              f"[{'same tokens' if same else 'differ'}]")
        d = r["diverged"][i]
        if d:
            print(f"    diverges at step {d['step']}: card {d['ours']}, eager {d['reference']}; eager's top-two "
                  f"margin {d['reference_margin']:.4f} vs |logit diff| {d['logit_diff_there']:.4f} there")
    print("  largest |logit difference| per step: " + " ".join(f"{x:.2e}" for x in r["logit_diff"]))
    tokens = r["new_tokens"]
    print(f"  {tokens} tokens in {r['seconds']:.1f} s on the card path ({tokens / r['seconds']:.2f} tokens/s, "
          f"wall clock), {r['reference_seconds']:.1f} s with eager attention on the CPU")
    if r["cycles"] and not any(map(any, r["cycles"])):
        print("  engine cycles: none on the model card (it has no timing); run on 'sim' for RTL cycles")
    elif r["cycles"]:
        steps = r["cycles"]
        per_step = [sum(s) for s in steps]
        layers = len(steps[0])
        mean_layer = [sum(s[k] for s in steps) / len(steps) for k in range(layers)]
        print(f"  engine cycles per decode step (all {layers} layers, batch of {len(r['prompts'])}): "
              + " ".join(str(c) for c in per_step))
        print("  per layer (mean over steps): " + " ".join(f"{c:.0f}" for c in mean_layer))
        mean = sum(per_step) / len(per_step)
        # cycles, not seconds: no routed timing supports a clock for the attention engine yet
        print(f"  {mean / len(r['prompts']):,.0f} engine cycles of attention per generated token (mean; tokens/s = "
              f"f_clk / that, for a clock timing evidence supports)")
    if "mismatches" in r and r.get("verified"):
        print(f"  card outputs checked bit for bit against the golden model: {r['mismatches']} differ")
    explained = all(d is None or d["reference_margin"] <= 2 * d["logit_diff_there"] for d in r["diverged"])
    return explained and not r.get("mismatches")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="model", help="card URI (default: model; 'sim' for the RTL)")
    ap.add_argument("--tokens", type=int, default=8, help="new tokens per prompt (default 8)")
    ap.add_argument("--fmt", default="fp16", choices=("fp16", "bf16"), help="KV cache format")
    ap.add_argument("--prompt", action="append", help="a prompt (repeatable; default: four built-in ones)")
    ap.add_argument("--verify", action="store_true", help="check every card output against the golden model")
    ap.add_argument("--json", type=Path, help="write the report here")
    args = ap.parse_args(argv)
    import ndpkit
    from ndpkit.hf import compare, load_smollm2
    prompts = args.prompt or PROMPTS
    print("loading SmolLM2-135M-Instruct (GGUF, dequantised to fp32; about half a minute) ...", flush=True)
    tokenizer, model = load_smollm2()
    uri = args.device if "?" in args.device else f"{args.device}?engines=attention&data_width=128&mem_size=8M"
    with ndpkit.open(uri) as dev:
        report = compare(model, tokenizer, prompts, dev, max_new_tokens=args.tokens, fmt=args.fmt,
                         verify=args.verify)
    report["verified"] = args.verify
    ok = print_report(report, args.device)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({k: v for k, v in report.items() if k != "logits"}, indent=1))
        print(f"wrote {args.json}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
