"""vLLM serves SmolLM2 with every decode step's attention on an ndpkit card.

Run in the vLLM environment (``make vllm-demo`` makes ``.venv-vllm`` and runs this)::

    .venv-vllm/bin/python examples/vllm_generate.py --device model     # the model card
    .venv-vllm/bin/python examples/vllm_generate.py --compare model,sim

Five requests arrive at different engine steps and ask for different numbers of
tokens, so they join and leave the running batch at different times and vLLM mixes
prompts with decodes in one step.  ``--device``: ``model`` / ``sim`` (decode attention
on that card, each output checked bit for bit against the golden model on the cache
read back), ``none`` (vLLM's own CPU attention), ``eager`` (transformers' eager
attention, request by request).  ``--compare`` runs each of those in its own process and
prints the token-agreement table; ``--json`` writes it.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

#: (prompt, new tokens), and the engine step each request arrives at
PROMPTS = [("The capital of France is", 8), ("One, two, three,", 12), ("def fibonacci(n):", 10),
           ("The largest planet in the solar system is", 6), ("Water boils at", 9)]
ARRIVALS = [0, 0, 2, 5, 5]
#: the card each ``--device`` opens and vLLM's KV cache on it: blocks (num_gpu_blocks_override,
#: within what the card holds: ndpkit.vllm.card_blocks), tokens a block, tokens a request.  The
#: simulated card is the tests' 128-bit build with 8 MiB of memory (one Verilator build).
DEVICES = {
    "model": dict(spec="model?engines=attention&mem_size=64M", blocks=16, block_size=128, max_model_len=512),
    "sim": dict(spec="sim?engines=attention&data_width=128&mem_size=8M", blocks=8, block_size=32,
                max_model_len=192),        # (vLLM keeps one of the blocks back)
}


def run_vllm(device: str) -> dict:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    report = None
    if device != "none":
        report = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
        os.environ.update(NDPKIT_VLLM_DEVICE=DEVICES[device]["spec"], NDPKIT_VLLM_VERIFY="1",
                          NDPKIT_VLLM_REPORT=report)
    else:
        os.environ.pop("NDPKIT_VLLM_DEVICE", None)
    from vllm import LLM, SamplingParams

    from ndpkit.vllm.model import smollm2_folder
    card = DEVICES.get(device, DEVICES["model"])
    llm = LLM(model=smollm2_folder(), dtype="float32", enforce_eager=True, max_model_len=card["max_model_len"],
              num_gpu_blocks_override=card["blocks"], block_size=card["block_size"], max_num_seqs=8, seed=0)
    engine = llm.llm_engine
    tokens: dict[int, list[int]] = {}
    waiting = list(range(len(PROMPTS)))
    step, start = 0, time.perf_counter()
    while waiting or engine.has_unfinished_requests():
        for i in [i for i in waiting if ARRIVALS[i] <= step]:
            prompt, n = PROMPTS[i]
            engine.add_request(str(i), prompt, SamplingParams(temperature=0, max_tokens=n))
            waiting.remove(i)
        for out in engine.step():
            if out.finished:
                tokens[int(out.request_id)] = list(out.outputs[0].token_ids)
        step += 1
    seconds = time.perf_counter() - start
    result = {"device": device, "tokens": [tokens[i] for i in range(len(PROMPTS))], "engine_steps": step,
              "seconds": seconds, "tokens_per_second": sum(map(len, tokens.values())) / seconds}
    if report is not None:
        with open(report) as f:
            result["card"] = json.load(f)
        os.unlink(report)
    return result


def run_eager() -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ndpkit.vllm.model import smollm2_folder
    folder = smollm2_folder()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    out, start = [], time.perf_counter()
    for prompt, n in PROMPTS:
        ids = tokenizer(prompt, return_tensors="pt")
        with torch.no_grad():
            gen = model.generate(**ids, max_new_tokens=n, do_sample=False)
        out.append(gen[0, ids.input_ids.shape[1]:].tolist())
    seconds = time.perf_counter() - start
    return {"device": "eager", "tokens": out, "seconds": seconds,
            "tokens_per_second": sum(map(len, out)) / seconds}


def compare(devices: list[str]) -> dict:
    runs = {}
    for device in ["none", "eager", *devices]:
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            subprocess.run([sys.executable, __file__, "--device", device, "--json", f.name], check=True)
            runs[device] = json.load(open(f.name))
    base, eager = runs["none"]["tokens"], runs["eager"]["tokens"]
    rows = []
    for i, (prompt, n) in enumerate(PROMPTS):
        row = {"prompt": prompt, "new_tokens": n, "arrives_at_step": ARRIVALS[i],
               "vllm_cpu_equals_eager": base[i] == eager[i]}
        for d in devices:
            row[f"{d}_equals_vllm_cpu"] = runs[d]["tokens"][i] == base[i]
            row[f"{d}_equals_eager"] = runs[d]["tokens"][i] == eager[i]
        rows.append(row)
    return {"rows": rows, "runs": runs}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["model", "sim", "none", "eager"], default="model")
    ap.add_argument("--compare", help="comma list of cards (model, sim) to compare with vLLM's CPU attention "
                                      "and transformers' eager attention")
    ap.add_argument("--json", help="write the result here")
    args = ap.parse_args(argv)
    if args.compare:
        devices = [d for d in args.compare.split(",") if d]
        result = compare(devices)
        print(f"\n{'prompt':44} {'new':>3} {'at':>3}  vLLM CPU = eager  " + "  ".join(
            f"{d}: = vLLM CPU, = eager" for d in devices))
        for r in result["rows"]:
            print(f"{r['prompt'][:44]:44} {r['new_tokens']:>3} {r['arrives_at_step']:>3}  "
                  f"{str(r['vllm_cpu_equals_eager']):>16}  " + "  ".join(
                      f"{d}: {str(r[f'{d}_equals_vllm_cpu']):>5}, {str(r[f'{d}_equals_eager']):>5}" for d in devices))
        for d in ["none", "eager", *devices]:
            run = result["runs"][d]
            card = run.get("card")
            extra = ""
            if card:
                extra = (f"; on the card: {card['decode_steps']} decode commands, {card['decode_tokens']} request-layers, "
                         f"{card['prefill_tokens']} prompt token-layers written, {card['mismatches']} outputs differing "
                         f"from the golden model")
                if card["engine_cycles"]:
                    # cycles only: this is the tests' 128-bit build on the ideal memory, not a board's
                    # configuration, so no per-second figure is derived from it
                    run["cycles_per_decode_command"] = card["engine_cycles"] / card["decode_steps"]
                    extra += (f"; {run['cycles_per_decode_command']:,.0f} engine cycles a decode command "
                              f"(the 128-bit test build, ideal memory)")
            print(f"{d:>6}: {run['tokens_per_second']:.2f} tokens/s ({run['seconds']:.1f} s){extra}")
        ok = all(all(v for k, v in r.items() if k.endswith(("_equals_vllm_cpu",))) for r in result["rows"]) and \
            all(result["runs"][d]["card"]["mismatches"] == 0 for d in devices)
    else:
        result = run_eager() if args.device == "eager" else run_vllm(args.device)
        for (prompt, _), toks in zip(PROMPTS, result["tokens"]):
            print(f"{prompt!r} -> {toks}")
        ok = True
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":                 # vLLM runs its engine in a spawned process
    raise SystemExit(main())
