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


def _open_card(*, num_blocks: int, kv_heads: int, block_size: int, num_heads: int, head_dim: int,
               layers: int, max_requests: int, max_model_len: int) -> CardAttention:
    """This process's card and its cache (made once; a budget the card cannot hold is
    refused here, naming the numbers)."""
    if "card" in _CARD:
        return _CARD["card"]
    import ndpkit
    from ndpkit.vllm import DEVICE_ENV, VERIFY_ENV
    spec = os.environ.get(DEVICE_ENV, "model?engines=attention")
    dev = ndpkit.open(spec)
    try:
        state = CardAttention(dev, layers=layers, num_heads=num_heads, kv_heads=kv_heads, head_dim=head_dim,
                              block_size=block_size, num_blocks=num_blocks, max_requests=max_requests,
                              max_model_len=max_model_len, verify=os.environ.get(VERIFY_ENV, "0") not in ("", "0"))
    except BaseException:
        dev.close()
        raise
    _CARD.update(card=state, dev=dev)
    atexit.register(_close)
    return state


def _card_args(vllm_config) -> dict:
    return dict(layers=vllm_config.model_config.get_num_layers(vllm_config.parallel_config),
                max_requests=vllm_config.scheduler_config.max_num_seqs,
                max_model_len=vllm_config.model_config.max_model_len)


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
    prefill_first_block: np.ndarray | None    # each prompt token's request's first block id


class NdpkitMetadataBuilder(CPUAttentionMetadataBuilder):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self._init_reorder_batch_threshold(1)
        # vLLM makes the builders once it has sized the KV cache: open the card now, so a
        # budget it cannot hold stops vLLM at start-up
        blocks = vllm_config.cache_config.num_gpu_blocks or vllm_config.cache_config.num_gpu_blocks_override
        if blocks:
            _open_card(num_blocks=blocks, kv_heads=self.num_kv_heads, block_size=self.block_size,
                       num_heads=self.num_heads, head_dim=self.head_dim, **_card_args(vllm_config))

    def build(self, common_prefix_len, common_attn_metadata, fast_build: bool = False) -> NdpkitMetadata:
        cm = common_attn_metadata
        tokens = int(cm.query_start_loc_cpu[cm.num_reqs])
        decodes, prefills, decode_tokens, _ = split_decodes_and_prefills(cm, decode_threshold=1)
        prefill = first_block = None
        if prefills:
            if cm.seq_lens_cpu_upper_bound is None:
                cm = cm.replace(seq_lens_cpu_upper_bound=cm.seq_lens.cpu())
            part = _make_metadata_with_slice(UBatchSlice(slice(decodes, cm.num_reqs), slice(decode_tokens, tokens)),
                                             cm)
            prefill = super().build(0, part, fast_build)
            first_block = np.repeat(part.block_table_tensor[:, 0].cpu().numpy(),
                                    np.diff(part.query_start_loc_cpu.numpy()))
        return NdpkitMetadata(
            num_decodes=decodes, num_decode_tokens=decode_tokens, num_actual_tokens=tokens,
            seq_lens=cm.seq_lens[:decodes].cpu().numpy().astype(np.int64),
            block_table=cm.block_table_tensor[:decodes].cpu().numpy(),
            slot_mapping=cm.slot_mapping[:tokens].cpu().numpy().astype(np.int64), prefill=prefill,
            prefill_first_block=first_block)


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
        #: what the card's cache is sized by besides the KV cache tensor
        self.card_args = _card_args(config)
        check_shape(num_heads=num_heads, kv_heads=num_kv_heads, head_dim=head_size,
                    block_size=block_size if block_size is not None else BLOCK_SIZES[-1])
        super().__init__(num_heads, head_size, scale, num_kv_heads, alibi_slopes, sliding_window, kv_cache_dtype,
                         logits_soft_cap, attn_type, kv_sharing_target_layer_name, sinks)

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, output_scale=None,
                output_block_scale=None):
        if attn_metadata is None:            # vLLM's profiling and warm-up runs
            return output
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("ndpkit's attention backend: fused output quantization is not supported")
        md: NdpkitMetadata = attn_metadata
        num_blocks, kv_heads, block_size, _ = kv_cache.shape
        state = _open_card(num_blocks=num_blocks, kv_heads=kv_heads, block_size=block_size, num_heads=self.num_heads,
                           head_dim=self.head_size, **self.card_args)
        if state.shards[0][0].num_blocks != num_blocks:
            raise ValueError(f"num_blocks: vLLM's KV cache has {num_blocks} blocks, the card's was made for "
                             f"{state.shards[0][0].num_blocks}")
        index = extract_layer_index(layer.layer_name)
        first, end = md.num_decode_tokens, md.num_actual_tokens
        if md.prefill is not None:
            super().forward(layer, query[first:end], key[first:end], value[first:end], kv_cache, md.prefill,
                            output[first:end])
            state.prefill(index, md.slot_mapping[first:end], _numpy(key[first:end]), _numpy(value[first:end]),
                          md.prefill_first_block)
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
