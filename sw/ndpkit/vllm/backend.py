"""vLLM's CPU attention backend with every decode step on the card (imported by vLLM
from the class path :func:`ndpkit.vllm.register` gives it; needs ``vllm``).

The builder asks vLLM to put the batch's decodes first (``reorder_batch_threshold``
1) and splits it: requests with one new token run on the card
(:class:`~ndpkit.vllm.card.CardAttention`), the others (prompts, chunks of prompts) run
through vLLM's own CPU attention on their slice of the batch, and their keys and values
go to the card.  vLLM's own cache update (``do_kv_cache_update``, before ``forward``)
still fills its host blocks, so prompts attend over them as before.
"""
from __future__ import annotations

import atexit
import dataclasses
import os

import numpy as np
import torch
from vllm.config import get_current_vllm_config
from vllm.model_executor.models.utils import extract_layer_index
from vllm.v1.attention.backend import AttentionType
from vllm.v1.attention.backends.cpu_attn import (CPUAttentionBackend, CPUAttentionBackendImpl,
                                                 CPUAttentionMetadata, CPUAttentionMetadataBuilder)
from vllm.v1.attention.backends.utils import split_decodes_and_prefills
from vllm.v1.worker.ubatch_utils import UBatchSlice, _make_metadata_with_slice

from ndpkit.engines.attention.golden import BLOCK_SIZES
from ndpkit.vllm.card import CardAttention, check_shape

__all__ = ["NdpkitAttentionBackend", "NdpkitAttentionImpl", "NdpkitMetadataBuilder", "NdpkitMetadata", "card"]

_CARD: dict = {}


def card() -> CardAttention | None:
    """This process's :class:`CardAttention` (None before the first step)."""
    return _CARD.get("card")


def _open_card(kv_cache: torch.Tensor, impl: "NdpkitAttentionImpl") -> CardAttention:
    if "card" in _CARD:
        return _CARD["card"]
    import ndpkit
    from ndpkit.vllm import DEVICE_ENV, VERIFY_ENV
    num_blocks, kv_heads, block_size, _ = kv_cache.shape
    spec = os.environ.get(DEVICE_ENV, "model?engines=attention")
    dev = ndpkit.open(spec)
    try:
        state = CardAttention(
            dev, num_heads=impl.num_heads, kv_heads=kv_heads, head_dim=impl.head_size, block_size=block_size,
            num_blocks=num_blocks, **impl.card_args, verify=os.environ.get(VERIFY_ENV, "0") not in ("", "0"))
    except BaseException:
        dev.close()
        raise
    _CARD.update(card=state, dev=dev)
    atexit.register(_close)
    return state


def _close() -> None:
    state, dev = _CARD.pop("card", None), _CARD.pop("dev", None)
    if state is not None:
        from ndpkit.vllm import report
        report(state)
        state.close()
    if dev is not None:
        dev.close()


@dataclasses.dataclass
class NdpkitMetadata:
    """The batch split: ``num_decodes`` requests (``num_decode_tokens`` tokens, one
    each) first, for the card; ``prefill`` vLLM's CPU metadata of the rest (None: none)."""
    num_decodes: int
    num_decode_tokens: int
    num_actual_tokens: int
    seq_lens: np.ndarray          # (num_decodes,) tokens of each decode request, the new one included
    block_table: np.ndarray       # (num_decodes, max blocks)
    slot_mapping: np.ndarray      # (num_actual_tokens,)
    prefill: CPUAttentionMetadata | None


class NdpkitMetadataBuilder(CPUAttentionMetadataBuilder):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self._init_reorder_batch_threshold(1)

    def build(self, common_prefix_len, common_attn_metadata, fast_build: bool = False) -> NdpkitMetadata:
        cm = common_attn_metadata
        tokens = int(cm.query_start_loc_cpu[cm.num_reqs])
        decodes, prefills, decode_tokens, _ = split_decodes_and_prefills(cm, decode_threshold=1)
        prefill = None
        if prefills:
            if cm.seq_lens_cpu_upper_bound is None:
                cm = cm.replace(seq_lens_cpu_upper_bound=cm.seq_lens.cpu())
            part = _make_metadata_with_slice(UBatchSlice(slice(decodes, cm.num_reqs), slice(decode_tokens, tokens)),
                                             cm)
            prefill = super().build(0, part, fast_build)
        return NdpkitMetadata(
            num_decodes=decodes, num_decode_tokens=decode_tokens, num_actual_tokens=tokens,
            seq_lens=cm.seq_lens[:decodes].cpu().numpy().astype(np.int64),
            block_table=cm.block_table_tensor[:decodes].cpu().numpy(),
            slot_mapping=cm.slot_mapping[:tokens].cpu().numpy().astype(np.int64), prefill=prefill)


class NdpkitAttentionImpl(CPUAttentionBackendImpl):
    def __init__(self, num_heads, head_size, scale, num_kv_heads, alibi_slopes, sliding_window, kv_cache_dtype,
                 logits_soft_cap=None, attn_type=AttentionType.DECODER, kv_sharing_target_layer_name=None,
                 sinks=None):
        unsupported = [name for name, present in (
            ("alibi_slopes", alibi_slopes is not None), ("sliding_window", sliding_window is not None),
            ("logits_soft_cap", bool(logits_soft_cap)), ("sinks", sinks is not None),
            ("kv_sharing_target_layer_name", kv_sharing_target_layer_name is not None),
            ("kv_cache_dtype", kv_cache_dtype != "auto"), ("attn_type", attn_type != AttentionType.DECODER))
            if present]
        if unsupported:
            raise NotImplementedError(f"ndpkit's attention backend: {', '.join(unsupported)} not supported "
                                      f"(decoder self-attention of a plain softmax only)")
        config = get_current_vllm_config()       # (set while vLLM builds the model, not at forward)
        block_size = config.cache_config.block_size
        #: what the card's cache is sized by besides the KV cache tensor (at the first step)
        self.card_args = dict(layers=config.model_config.get_num_layers(config.parallel_config),
                              max_requests=config.scheduler_config.max_num_seqs,
                              max_model_len=config.model_config.max_model_len)
        check_shape(num_heads=num_heads, kv_heads=num_kv_heads, head_dim=head_size,
                    block_size=block_size if block_size is not None else BLOCK_SIZES[-1])
        super().__init__(num_heads, head_size, scale, num_kv_heads, alibi_slopes, sliding_window, kv_cache_dtype,
                         logits_soft_cap, attn_type, kv_sharing_target_layer_name, sinks)

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, output_scale=None,
                output_block_scale=None):
        if attn_metadata is None:            # vLLM's warm-up and profiling runs
            return output
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("ndpkit's attention backend: fused output quantization is not supported")
        md: NdpkitMetadata = attn_metadata
        state = _open_card(kv_cache, self)
        index = extract_layer_index(layer.layer_name)
        first, end = md.num_decode_tokens, md.num_actual_tokens
        if md.prefill is not None:
            super().forward(layer, query[first:end], key[first:end], value[first:end], kv_cache, md.prefill,
                            output[first:end])
            state.prefill(index, md.slot_mapping[first:end], _numpy(key[first:end]), _numpy(value[first:end]))
        if md.num_decodes:
            n = md.num_decode_tokens
            out = state.decode(index, _numpy(query[:n]), _numpy(key[:n]), _numpy(value[:n]), md.block_table,
                               md.seq_lens, md.slot_mapping[:n], scale=self.scale)
            output[:n].copy_(torch.from_numpy(out).reshape(output[:n].shape).to(output.dtype))
            if index == state.layers - 1:
                from ndpkit.vllm import report
                report(state)
        return output


def _numpy(x: torch.Tensor) -> np.ndarray:
    return x.detach().to(torch.float32).cpu().numpy()


class NdpkitAttentionBackend(CPUAttentionBackend):
    """vLLM's ``CPU_ATTN`` with decode attention on the card."""

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None):
        return [b for b in BLOCK_SIZES if b % 32 == 0]        # the engine's and vLLM's CPU kernels' both

    @staticmethod
    def get_impl_cls():
        return NdpkitAttentionImpl

    @staticmethod
    def get_builder_cls():
        return NdpkitMetadataBuilder
