"""The card side of the vLLM backend (:mod:`ndpkit.vllm.card`) without vLLM: requests
arriving and finishing at different times over a pool of vLLM-style block ids (shuffled,
freed and reused), prompts written at their slots, decode steps with vLLM's block tables,
sequence lengths and slot mappings -- each output bit-identical to the same request on a
contiguous cache and to the golden model on the cache read back, and within fp16 rounding
of float64 attention.  The vLLM glue itself runs in ``make vllm-demo``."""
from __future__ import annotations

import math

import numpy as np
import pytest

import ndpkit
from ndpkit.engines.attention.kvcache import KVCache
from ndpkit.vllm.card import CardAttention, blocks_that_fit

SPEC = dict(engines="attention", mem_size=64 << 20)


def _reference(q, k, v, scale):
    """float64 attention of one query token: q (H, d), k/v (Hkv, T, d)."""
    heads, hkv = q.shape[0], k.shape[0]
    g = heads // hkv
    out = np.empty(q.shape)
    for h in range(heads):
        s = (k[h // g].astype(np.float64) @ q[h].astype(np.float64)) * scale
        p = np.exp(s - s.max())
        out[h] = (p / p.sum()) @ v[h // g].astype(np.float64)
    return out


@pytest.mark.parametrize("block_size, instances", [(32, 1), (128, 1), (32, 2)])
def test_requests_arrive_and_finish_over_vllm_blocks(block_size, instances):
    """With two attention instances each request is served by the one its first block
    picks; the outputs are those of one card (the contiguous reference)."""
    seed = 1234 + block_size
    print("seed", seed)
    rng = np.random.default_rng(seed)
    layers, heads, hkv, d = 2, 6, 2, 64
    scale = 1 / math.sqrt(d)
    num_blocks = 24
    spec = dict(SPEC, engines=f"attention*{instances}", memory_ports=instances) if instances > 1 else SPEC
    with ndpkit.open("model", **spec) as dev:
        card = CardAttention(dev, layers=layers, num_heads=heads, kv_heads=hkv, head_dim=d, block_size=block_size,
                             num_blocks=num_blocks, max_requests=4, max_model_len=512, verify=True)
        flat = KVCache(dev, layers=layers, slots=4, kv_heads=hkv, head_dim=d, capacity=512,   # the same, contiguous
                       instance=0 if instances > 1 else None)
        free = list(rng.permutation(num_blocks))              # vLLM's free block queue
        live = {}                                              # request -> (blocks, tokens, contiguous slot)
        served = set()                                         # the instances that ran decode steps

        def grow(r, tokens):
            blocks, _, slot = live[r]
            while len(blocks) * block_size < tokens:
                blocks.append(int(free.pop(0)))
            live[r] = (blocks, tokens, slot)

        def slots_of(r, first, count):
            blocks = live[r][0]
            return np.array([blocks[t // block_size] * block_size + t % block_size for t in range(first, first + count)])

        def arrive(r, prompt):
            live[r] = ([], 0, flat.new_request())
            grow(r, prompt)
            for layer in range(layers):
                k, v = rng.standard_normal((2, prompt, hkv, d)).astype(np.float32)
                card.prefill(layer, slots_of(r, 0, prompt), k, v, np.full(prompt, live[r][0][0]))
                flat.prefill(layer, live[r][2], k.transpose(1, 0, 2), v.transpose(1, 0, 2))

        def step():
            order = sorted(live)
            for r in order:
                grow(r, live[r][1] + 1)
            tables = np.zeros((len(order), 64), np.int32)
            for i, r in enumerate(order):
                tables[i, :len(live[r][0])] = live[r][0]
            seq_lens = np.array([live[r][1] for r in order])
            mapping = np.array([slots_of(r, live[r][1] - 1, 1)[0] for r in order])
            served.update(card.shard_of(tables[:, 0]).tolist())
            for layer in range(layers):
                q = rng.standard_normal((len(order), heads, d)).astype(np.float32)
                kn, vn = rng.standard_normal((2, len(order), hkv, d)).astype(np.float32)
                got = card.decode(layer, q, kn, vn, tables, seq_lens, mapping, scale=scale)
                want = dev.attention.decode(q, kn, vn, flat, layer, [live[r][2] for r in order], scale=scale)
                assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), "paged != contiguous"
                for i, r in enumerate(order):
                    k, v = (widen(x) for x in flat.read(layer, live[r][2]))
                    ref = _reference(q[i], k, v, scale)
                    np.testing.assert_allclose(got[i], ref, rtol=2e-3, atol=2e-3)

        def finish(r):
            blocks, _, slot = live.pop(r)
            free.extend(blocks)                                   # reused by later requests
            flat.free(slot)

        arrive("a", 40)
        step()
        arrive("b", block_size - 1)                               # its next token opens a new block
        step()
        step()
        finish("a")
        arrive("c", 2 * block_size)                               # in a's freed blocks
        for _ in range(3):
            step()
        assert card.mismatches == 0
        assert len(card.shards) == instances and served == set(range(instances))
        assert card.decode_steps == 6 * layers
        assert card.decode_tokens == (1 + 2 + 2 + 3 * 2) * layers
        assert card.prefill_tokens == (40 + block_size - 1 + 2 * block_size) * layers
        card.close()
        flat.close()


def widen(bits):
    """fp16 bit patterns as float64."""
    return np.asarray(bits, np.uint16).view(np.float16).astype(np.float64)


def test_refusals_name_the_field():
    with ndpkit.open("model", **SPEC) as dev:
        common = dict(layers=2, num_heads=4, kv_heads=2, head_dim=64, block_size=128, num_blocks=4,
                      max_requests=2, max_model_len=256)
        for change, words in ((dict(head_dim=96), "head_dim"), (dict(block_size=256), "block_size"),
                              (dict(num_heads=40), "group"), (dict(kv_heads=3), "group")):
            with pytest.raises(ValueError, match=words):
                CardAttention(dev, **{**common, **change})
        fit = blocks_that_fit(dev, layers=2, kv_heads=2, head_dim=64, block_size=128)
        free = dev.allocator.free_bytes
        with pytest.raises(ValueError, match=rf"num_blocks: .*{fit + 1} blocks.*num_gpu_blocks_override={fit}"):
            CardAttention(dev, **{**common, "num_blocks": fit + 1})
        assert dev.allocator.free_bytes == free                      # refused before anything was allocated
        card = CardAttention(dev, **{**common, "num_blocks": fit})
        q = np.zeros((1, 4, 64), np.float32)
        kv = np.zeros((1, 2, 64), np.float32)
        with pytest.raises(ValueError, match="slot_mapping"):    # vLLM's slot is not where the token goes
            card.decode(0, q, kv, kv, np.array([[3]]), np.array([5]), np.array([3 * 128 + 5]), scale=0.125)
        with pytest.raises(ValueError, match="max_requests=2"):
            card.decode(0, np.zeros((3, 4, 64), np.float32), np.zeros((3, 2, 64), np.float32),
                        np.zeros((3, 2, 64), np.float32), np.zeros((3, 1), int), np.ones(3, int), np.arange(3),
                        scale=0.125)
        card.close()
