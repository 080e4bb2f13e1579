"""Hugging Face transformers integration (the ``llm`` extra): ``attn_implementation="ndpkit"``
and :class:`NdpkitCache`, decode attention on the card during ``model.generate``
(:mod:`ndpkit.engines.attention.hf`)."""
from ndpkit.engines.attention.hf import *  # noqa: F401,F403 (the public API is the engine module's)
from ndpkit.engines.attention.hf import __all__  # noqa: F401
