"""attention: decode attention over a card-resident KV cache (after the HPU and INF²;
docs/engines/attention.md)."""
from __future__ import annotations

import enum

from ndpkit_spec.engine import EngineSpec
from ndpkit_spec.regs import Access, Field, Register
from ndpkit_spec.shell import engine_block

__all__ = ["BLOCK", "ENGINE", "KvFormat", "SOFTMAX_BLOCK", "DESCRIPTOR_FIELDS", "DESCRIPTOR_BYTES",
           "FLAG_APPEND", "STATUS_DONE", "HEAD_DIMS", "MAX_GROUP", "MAX_KV_HEADS", "BLOCK_SIZES",
           "MAX_TABLE_ENTRIES"]


class KvFormat(enum.IntEnum):
    """Element formats (register codes)."""
    FP32 = 0
    FP16 = 1
    BF16 = 2


#: tokens per online-softmax block
SOFTMAX_BLOCK = 128

#: one request descriptor: 16 little-endian uint32 words (64 bytes), in this order (words 14-15 reserved).
#: block_table, blocks and pool_blocks are read in paged commands only (shape.block_size != 0):
#: the request's uint32 block ids, how many, and the blocks in the layer's K and V pools
DESCRIPTOR_FIELDS = ("q", "out", "k", "v", "k_new", "v_new", "length", "capacity", "window", "flags", "status",
                     "block_table", "blocks", "pool_blocks")
DESCRIPTOR_BYTES = 64
FLAG_APPEND = 1
STATUS_DONE = 1 << 31            # status word: bit 31 = the engine processed the request, bits 0-7 its ErrorCode
HEAD_DIMS = (64, 128)
MAX_GROUP = 16
MAX_KV_HEADS = 64
#: tokens per block of a paged KV cache (shape.block_size; 0 there: contiguous slots)
BLOCK_SIZES = (16, 32, 64, 128)
#: most entries in a paged request's block table (its ``blocks``)
MAX_TABLE_ENTRIES = 1024

BLOCK = engine_block("attention", [
    Register("format", 0x40, [
        Field("q", 0, 2, Access.RW, doc="Query format: 0 fp32, 1 fp16, 2 bf16."),
        Field("kv", 4, 2, Access.RW, doc="KV-cache format: 1 fp16, 2 bf16."),
        Field("out", 8, 2, Access.RW, doc="Output format: 0 fp32, 1 fp16, 2 bf16 (RNE)."),
    ]),
    Register.single("table", 0x44, Access.RW, doc="Request descriptor table: `requests` entries of 64 bytes "
                    "(docs/engines/attention.md), word aligned; the engine writes each entry's status word."),
    Register.single("requests", 0x48, Access.RW, doc="Requests in the batch (>= 1)."),
    Register("shape", 0x4C, [
        Field("head_dim", 0, 8, Access.RW, doc="d: 64 or 128."),
        Field("group", 8, 8, Access.RW, doc="G: query heads per KV head, 1..16 (1 = multi-head attention)."),
        Field("kv_heads", 16, 8, Access.RW, doc="KV heads per request, 1..64."),
        Field("block_size", 24, 8, Access.RW, doc="Paged KV cache: tokens per block, 16, 32, 64 or 128 (the "
              "descriptors' k and v are block pools, block_table their ids); 0: contiguous slots."),
    ]),
    Register.single("scale", 0x50, Access.RW, doc="float32 softmax scale folded into q (usually 1/sqrt(d))."),
], doc="Decode attention over a card-resident KV cache for a batch of requests (one query token each, GQA), "
       "one pass over K and V with block online softmax, bit-exact to ndpkit.engines.attention.golden. The cache is "
       "contiguous slots (shape.block_size 0) or paged: per layer a K and a V pool of blocks, "
       "row(h, id, t) = pool + ((h * pool_blocks + id) * block_size + t) * head_dim * 2, each request naming its "
       "block ids (vLLM's block tables). Whole-command "
       "checks (formats, shape, requests, table) fail the command with nothing written; a request that fails "
       "its own checks gets its code in its status word and the rest of the batch runs; cpl_aux counts the "
       "failed requests.")

ENGINE = EngineSpec(
    name="attention", kind=3, block=BLOCK,
    summary="decode attention (GQA, block online softmax) for a batch of requests over a card-resident KV cache",
    gateware="ndpkit_hw.engines.attention:AttentionEngine",
    golden="ndpkit.engines.attention.golden",
    client="ndpkit.engines.attention.client:AttentionClient",
    device_params={"attention_lanes": "lanes"},
    # "ecp5": the build that fits the LFE5UM5G-85F for its routed Fmax (the default needs more block RAM)
    # "gqa": the lanes that keep a 512-bit port's pace at G = 4 (the card's grouped-query build)
    # "gqa_pairs": the same with pair_words (odd groups, G = 7: a pass a head; the lane table's L = 128)
    configs={"default": {"data_width": 128, "lanes": 16}, "max": {"data_width": 512, "lanes": 32},
             "gqa": {"data_width": 512, "lanes": 128},
             "gqa_pairs": {"data_width": 512, "lanes": 128, "pair_words": True},
             "ecp5": {"data_width": 64, "lanes": 8}},
    config_label=lambda p: f"{p['lanes']} MAC lanes" + (", pair_words" if p.get("pair_words") else ""),
)
