"""ndpkit in vLLM: a plugin whose attention backend runs every decode step on the card.

Installed with ``pip install 'ndpkit[vllm]'`` (in its own environment: vLLM's CPU build
pins an older transformers than ``ndpkit[llm]``; ``make vllm-demo`` makes it), the
package registers a ``vllm.general_plugins`` entry point, :func:`register`.  It does
nothing unless ``NDPKIT_VLLM_DEVICE`` names a card (an :func:`ndpkit.open` string, e.g.
``model?engines=attention`` or ``sim?engines=attention``); then it replaces vLLM's CPU
attention (``CPU_ATTN``) with :class:`ndpkit.vllm.backend.NdpkitAttentionBackend`:

- prompts run through vLLM's own CPU attention, their keys and values are written to the
  card at vLLM's block ids;
- every decode step runs on the card's attention engine over a paged KV cache holding
  vLLM's blocks (the engine appends each new token's key and value itself);
- ``NDPKIT_VLLM_VERIFY=1`` checks every card output bit for bit against the golden model
  on the cache read back; ``NDPKIT_VLLM_REPORT=path`` keeps a JSON of the counters
  (decode commands, request-layers on the card, prompt tokens written, engine cycles,
  mismatches) up to date after every step.

vLLM's block budget must fit the card: :func:`card_blocks` gives the number for
``LLM(..., num_gpu_blocks_override=...)``; a budget the card cannot hold is refused when
the first step opens the card, with the numbers.

::

    import os
    os.environ["NDPKIT_VLLM_DEVICE"] = "model?engines=attention"
    from vllm import LLM, SamplingParams
    from ndpkit.vllm.model import smollm2_folder

    if __name__ == "__main__":                 # vLLM runs its engine in a spawned process
        llm = LLM(model=smollm2_folder(), dtype="float32", enforce_eager=True, max_model_len=512,
                  num_gpu_blocks_override=64)
        print(llm.generate(["The capital of France is"], SamplingParams(temperature=0, max_tokens=4)))
"""
from __future__ import annotations

import json
import os

__all__ = ["register", "card_blocks", "report", "DEVICE_ENV", "VERIFY_ENV", "REPORT_ENV", "BACKEND"]

DEVICE_ENV = "NDPKIT_VLLM_DEVICE"
VERIFY_ENV = "NDPKIT_VLLM_VERIFY"
REPORT_ENV = "NDPKIT_VLLM_REPORT"
#: the class path vLLM loads
BACKEND = "ndpkit.vllm.backend.NdpkitAttentionBackend"


def register() -> None:
    """vLLM's ``general_plugins`` hook (every vLLM process calls it): with
    ``NDPKIT_VLLM_DEVICE`` set, ``CPU_ATTN`` becomes ndpkit's backend."""
    if not os.environ.get(DEVICE_ENV):
        return
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend
    register_backend(AttentionBackendEnum.CPU_ATTN, BACKEND)


def card_blocks(spec: str, *, layers: int, kv_heads: int, head_dim: int, block_size: int = 128) -> int:
    """How many KV blocks of ``block_size`` tokens the card ``spec`` holds for a model's
    ``layers``, ``kv_heads`` and ``head_dim`` (vLLM's ``num_gpu_blocks_override``)."""
    import ndpkit
    from ndpkit.vllm.card import blocks_that_fit
    with ndpkit.open(spec) as dev:
        return blocks_that_fit(dev, layers=layers, kv_heads=kv_heads, head_dim=head_dim, block_size=block_size)


def report(state) -> dict:
    """The counters of a :class:`~ndpkit.vllm.card.CardAttention`, written to
    ``NDPKIT_VLLM_REPORT`` when it is set."""
    data = {"decode_steps": state.decode_steps, "decode_tokens": state.decode_tokens,
            "prefill_tokens": state.prefill_tokens, "mismatches": state.mismatches,
            "verify": state.verify, "layers": state.layers, "engine_cycles": sum(state.cycles),
            "device": os.environ.get(DEVICE_ENV, "")}
    path = os.environ.get(REPORT_ENV)
    if path:
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    return data
