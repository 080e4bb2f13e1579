"""The attention engine through the driver on the behavioural model
(tb/engines/attention/test_device_sim.py runs them on the RTL): a decode loop over a KV cache with prefill, appends, GQA
and slot reuse, bit-exact to the golden model; torch SDPA equivalence; per-request
and whole-command errors; the paged KV cache (driver and handed-in block ids)."""
import numpy as np
import pytest

import ndpkit
from ndpkit import DeviceError, ErrorCode
from ndpkit.engines.attention.client import RequestError
from ndpkit.arith import fp
from ndpkit.arith.blockfloat import SIG_BITS, V_BITS
from ndpkit.engines.attention.golden import KvFormat, decode, reference
from ndpkit.engines.attention.kvcache import KVCache, to_bits16

URI = "model?engines=attention&mem_size=32M"


@pytest.fixture(scope="module")
def dev():
    with ndpkit.open(URI) as d:
        yield d


def _golden(cache, layer, slot, q, scale, window=0, out_format=KvFormat.FP32):
    k, v = cache.read(layer, slot)
    if window:
        k, v = k[:, -window:], v[:, -window:]
    return fp.floats(decode(q, k, v, scale=scale, q_format=KvFormat.FP32, kv_format=cache.format,
                            out_format=out_format)) if out_format == KvFormat.FP32 else None


@pytest.mark.parametrize("fmt, group, d", [("fp16", 4, 64), ("bf16", 1, 128), ("fp16", 8, 128)])
def test_decode_loop_bit_exact(dev, fmt, group, d, steps=4, layers=2):
    rng = np.random.default_rng(group * d)
    hkv = 2
    cache = KVCache(dev, layers=layers, slots=4, kv_heads=hkv, head_dim=d, capacity=200, fmt=fmt)
    slots = [cache.new_request() for _ in range(3)]
    for layer in range(layers):
        for s, length in zip(slots, (1, 77, 130)):
            cache.prefill(layer, s, rng.normal(0, 1, (hkv, length, d)), rng.normal(0, 1, (hkv, length, d)))
    scale = 1 / np.sqrt(d)
    for step in range(steps):
        for layer in range(layers):
            q = rng.normal(0, 1, (3, group * hkv, d)).astype(np.float32)
            kn = rng.normal(0, 1, (3, hkv, d)).astype(np.float32)
            vn = rng.normal(0, 1, (3, hkv, d)).astype(np.float32)
            before = [int(cache.lengths[layer, s]) for s in slots]
            out = dev.attention.decode(q, kn, vn, cache, layer, slots)
            for i, s in enumerate(slots):
                assert cache.lengths[layer, s] == before[i] + 1
                k, v = cache.read(layer, s)
                assert np.array_equal(k[:, -1], to_bits16(kn[i], cache.format))
                want = _golden(cache, layer, s, q[i], scale)
                assert np.array_equal(fp.bits(out[i]), fp.bits(want)), f"step {step} layer {layer} slot {s}"
                # (q as the engine takes it: rounded to the cache's format, as a model in that format has it)
                q_kv = fp.floats(_widen(to_bits16(q[i], cache.format), cache.format))
                ref = reference(q_kv, fp.floats(_widen(k, cache.format)), fp.floats(_widen(v, cache.format)),
                                scale=float(np.float32(scale)))
                # the engine's weights are in the KV format: PyTorch's SDPA tolerance for it
                atol, rtol = (1e-3, 1e-3) if cache.format == KvFormat.FP16 else (1e-3, 1.6e-2)
                assert np.allclose(out[i], ref, atol=atol, rtol=rtol)
    # free a slot, reuse it for a new request
    cache.free(slots[1])
    s = cache.new_request()
    assert s == slots[1] and cache.lengths[0, s] == 0
    q = rng.normal(0, 1, (1, group * hkv, d)).astype(np.float32)
    kn = rng.normal(0, 1, (1, hkv, d)).astype(np.float32)
    out = dev.attention.decode(q, kn, kn, cache, 0, [s])
    # one token: the output is its value, exactly where the element keeps every bit in the
    # row's block-fixed V (within 2**(V_BITS - significand) of the row's largest magnitude),
    # within the format's SDPA tolerance elsewhere
    value = fp.floats(_widen(to_bits16(kn[0], cache.format), cache.format)).repeat(group, axis=0)
    kept = np.abs(value) >= np.abs(value).max(axis=1, keepdims=True) * 2.0 ** -(V_BITS - SIG_BITS[cache.format])
    assert kept.mean() > 0.9 and np.array_equal(out[0][kept], value[kept])
    assert np.allclose(out[0], value, atol=atol, rtol=rtol)
    cache.close()


def _widen(x, fmt):
    from ndpkit.engines.attention.golden import widen
    return widen(x, fmt)


def test_window_and_out_format(dev):
    rng = np.random.default_rng(1)
    cache = KVCache(dev, layers=1, slots=2, kv_heads=1, head_dim=64, capacity=300)
    s = cache.new_request()
    cache.prefill(0, s, rng.normal(0, 1, (1, 250, 64)), rng.normal(0, 1, (1, 250, 64)))
    q = rng.normal(0, 1, (1, 2, 64)).astype(np.float32)
    out = dev.attention.decode(q, None, None, cache, 0, [s], window=100)
    assert np.array_equal(fp.bits(out[0]), fp.bits(_golden(cache, 0, s, q[0], 1 / 8, window=100)))
    half = dev.attention.decode(q, None, None, cache, 0, [s], out_format="bf16")
    k, v = cache.read(0, s)
    want = decode(q[0], k, v, scale=1 / 8, q_format=KvFormat.FP32, kv_format=KvFormat.FP16, out_format=KvFormat.BF16)
    assert np.array_equal(to_bits16(half[0], KvFormat.BF16), want)
    cache.close()


def test_torch_sdpa_equivalence(dev):
    torch = pytest.importorskip("torch")
    from ndpkit.torch import scaled_dot_product_attention
    g = torch.Generator().manual_seed(3)
    for dtype, (atol, rtol) in ((torch.float16, (1e-3, 1e-3)), (torch.bfloat16, (1e-3, 1.6e-2))):
        q = torch.randn(3, 8, 1, 128, generator=g).to(dtype)
        k = torch.randn(3, 2, 300, 128, generator=g).to(dtype)
        v = torch.randn(3, 2, 300, 128, generator=g).to(dtype)
        want = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
        got = scaled_dot_product_attention(dev, q, k, v, enable_gqa=True)     # the cache in k's own format
        assert got.shape == (3, 8, 1, 128) and got.dtype == dtype
        torch.testing.assert_close(got.float(), want.to(dtype).float(), atol=atol, rtol=rtol)


def test_bad_requests_and_commands(dev):
    rng = np.random.default_rng(4)
    cache = KVCache(dev, layers=1, slots=3, kv_heads=1, head_dim=64, capacity=8)
    slots = [cache.new_request() for _ in range(3)]
    for s, length in zip(slots, (3, 8, 5)):          # slot 1 is full: appending fails
        cache.prefill(0, s, rng.normal(0, 1, (1, length, 64)), rng.normal(0, 1, (1, length, 64)))
    before = cache.read(0, slots[1])
    q = rng.normal(0, 1, (3, 2, 64)).astype(np.float32)
    kn = rng.normal(0, 1, (3, 1, 64)).astype(np.float32)
    with pytest.raises(RequestError) as err:
        dev.attention.decode(q, kn, kn, cache, 0, slots)
    assert err.value.failures == {1: (ErrorCode.OUT_OF_WINDOW, "length")}
    assert np.isnan(err.value.outputs[1]).all() and np.isfinite(err.value.outputs[[0, 2]]).all()
    assert list(cache.lengths[0, slots]) == [4, 8, 6]               # the others appended and ran
    k1, v1 = cache.read(0, slots[1])
    assert np.array_equal(k1, before[0]) and np.array_equal(v1, before[1])
    # whole-command errors: nothing runs, the next command works
    client = dev.attention
    good = {"format_q": 0, "format_kv": 1, "format_out": 0, "table": 0, "requests": 1, "shape_head_dim": 64,
            "shape_group": 2, "shape_kv_heads": 1, "shape_block_size": 0,
            "scale": int(np.float32(0.125).view(np.uint32))}
    for change, code, field in (({"shape_head_dim": 96}, ErrorCode.BAD_FIELD, "head_dim"),
                                ({"format_kv": 0}, ErrorCode.BAD_FIELD, "kv_format"),
                                ({"shape_group": 0}, ErrorCode.BAD_FIELD, "group"),
                                ({"requests": 0}, ErrorCode.ZERO_LENGTH, "requests"),
                                ({"table": dev.mem_size - dev.word_bytes // 2}, ErrorCode.UNALIGNED, "table")):
        with pytest.raises(DeviceError) as e:
            client.submit({**good, **change}).wait()
        assert (e.value.code, e.value.field) == (code, field)
    out = dev.attention.decode(q[[0]], None, None, cache, 0, [slots[0]])
    assert np.isfinite(out).all()
    with pytest.raises(ValueError, match="q must be"):
        dev.attention.decode(q[:, :, :32], None, None, cache, 0, slots)
    with pytest.raises(ValueError, match="head_dim"):
        KVCache(dev, layers=1, slots=1, kv_heads=1, head_dim=96, capacity=4)
    cache.close()


def test_sharded_cache_equals_one_card():
    """Batch-parallel over two cards: the same outputs, bit for bit, as one card."""
    rng = np.random.default_rng(7)
    with ndpkit.open(URI) as a, ndpkit.open(URI) as b:
        check_sharded(a, [a, b], rng)


def check_sharded(single_dev, devices, rng, *, d=64, hkv=2, group=2, steps=2, **many_args):
    """``many_args``: more arguments of the sharded cache (block_size=: paged shards)."""
    from ndpkit.engines.attention.client import decode as decode_any
    from ndpkit.engines.attention.kvcache import ShardedKVCache
    one = KVCache(single_dev, layers=1, slots=4, kv_heads=hkv, head_dim=d, capacity=40)
    many = ShardedKVCache(devices, slots_per_device=2, layers=1, kv_heads=hkv, head_dim=d, capacity=40, **many_args)
    try:
        s1 = [one.new_request() for _ in range(4)]
        s2 = [many.new_request() for _ in range(4)]
        assert sorted(many.locate(s)[0].dev is devices[1] for s in s2) == [False, False, True, True]
        for i, length in enumerate((3, 9, 17, 30)):
            k, v = rng.normal(0, 1, (2, hkv, length, d))
            one.prefill(0, s1[i], k, v)
            many.prefill(0, s2[i], k, v)
        for _ in range(steps):
            q = rng.normal(0, 1, (4, group * hkv, d)).astype(np.float32)
            kn, vn = rng.normal(0, 1, (2, 4, hkv, d)).astype(np.float32)
            want = decode_any(q, kn, vn, one, 0, s1)
            got = decode_any(q, kn, vn, many, 0, s2)
            assert np.array_equal(fp.bits(got), fp.bits(want))
        assert [many.length(0, s) for s in s2] == [int(one.lengths[0, s]) for s in s1]
        for i in range(4):
            assert all(np.array_equal(x, y) for x, y in zip(many.read(0, s2[i]), one.read(0, s1[i])))
    finally:
        one.close()
        many.close()


def _closed_cache_calls(cache, slot, q, kn):
    """Every public use of a cache, by name (``slot`` was an active request before close)."""
    from ndpkit.engines.attention.client import decode as decode_any
    from ndpkit.torch import decode_attention
    import torch
    k = np.zeros((cache.kv_heads, 2, cache.head_dim))
    calls = {
        "new_request": lambda: cache.new_request(),
        "free": lambda: cache.free(slot),
        "length": lambda: cache.length(0, slot),
        "prefill": lambda: cache.prefill(0, slot, k, k),
        "read": lambda: cache.read(0, slot),
        "free_slots": lambda: cache.free_slots,
        "decode": lambda: decode_any(q, kn, kn, cache, 0, [slot]),
        "decode (no append)": lambda: decode_any(q, None, None, cache, 0, [slot]),
        "decode_attention": lambda: decode_attention(None, torch.from_numpy(q)[:, :, None], None, None, cache, 0,
                                                     [slot]),
    }
    if isinstance(cache, KVCache):
        calls.update({"k_addr": lambda: cache.k_addr(0, slot), "v_addr": lambda: cache.v_addr(0, slot),
                      "row_offset": lambda: cache.row_offset(slot, 0, 0),
                      "dev.attention.decode": lambda: cache.dev.attention.decode(q, kn, kn, cache, 0, [slot])})
    return calls


@pytest.mark.parametrize("sharded", [False, True], ids=["KVCache", "ShardedKVCache"])
def test_a_closed_cache_says_so(sharded, monkeypatch):
    """Any use of a closed cache raises CacheClosed (an NdpkitError, and a ValueError as a
    closed file's I/O does), saying the cache is closed: never an IndexError from the
    freed buffers, nothing allocated or run on the card; closing twice is harmless and
    the card keeps working."""
    from ndpkit.engines.attention.kvcache import ShardedKVCache
    rng = np.random.default_rng(11)
    d, hkv = 64, 1
    with ndpkit.open(URI) as a, ndpkit.open(URI) as b:
        if sharded:
            cache = ShardedKVCache([a, b], slots_per_device=1, layers=1, kv_heads=hkv, head_dim=d, capacity=8)
        else:
            cache = KVCache(a, layers=1, slots=2, kv_heads=hkv, head_dim=d, capacity=8)
        slot = cache.new_request()
        cache.prefill(0, slot, rng.normal(0, 1, (hkv, 3, d)), rng.normal(0, 1, (hkv, 3, d)))
        q = rng.normal(0, 1, (1, 2, d)).astype(np.float32)
        kn = rng.normal(0, 1, (1, hkv, d)).astype(np.float32)
        cache.close()
        assert cache.closed and "closed" in repr(cache)
        cache.close()                                   # again: nothing happens

        def refuse(*args, **kwargs):
            raise AssertionError("a call on a closed cache reached the card")
        for card in (a, b):
            for name in ("alloc", "upload"):
                monkeypatch.setattr(card, name, refuse)
            monkeypatch.setattr(card.attention, "submit", refuse)
        for name, call in _closed_cache_calls(cache, slot, q, kn).items():
            with pytest.raises(ndpkit.CacheClosed, match="KV cache is closed") as e:
                call()
            assert isinstance(e.value, ndpkit.NdpkitError) and isinstance(e.value, ValueError), name
        monkeypatch.undo()
        fresh = KVCache(a, layers=1, slots=1, kv_heads=hkv, head_dim=d, capacity=8)
        s = fresh.new_request()
        fresh.prefill(0, s, rng.normal(0, 1, (hkv, 3, d)), rng.normal(0, 1, (hkv, 3, d)))
        assert np.isfinite(a.attention.decode(q, kn, kn, fresh, 0, [s])).all()
        fresh.close()


# ---- the paged KV cache (test_device_sim.py runs the decode loop, the window, the bad
# inputs, the sharded and the two-instance checks on the RTL too) ---------------------------

def _slot_numbers(table, tokens, bs):
    """vLLM's slot numbers of ``tokens`` through a block table."""
    tokens = np.asarray(tokens)
    return np.asarray(table, dtype=np.int64)[tokens // bs] * bs + tokens % bs


def _fill_handed_in(cache, layer, slot, k, v):
    """A serving engine's prefill into a handed-in table: reshape_and_cache, then the length."""
    length = k.shape[1]
    mapping = _slot_numbers(cache.block_table(slot), np.arange(length), cache.block_size)
    cache.write_slots(layer, mapping, np.swapaxes(k, 0, 1), np.swapaxes(v, 0, 1))
    cache.set_length(layer, slot, length)


@pytest.mark.parametrize("fmt, group, d, bs", [("fp16", 4, 64, 16), ("bf16", 1, 128, 32)])
def test_paged_decode_loop_bit_exact(dev, fmt, group, d, bs, steps=3, layers=2):
    """The same prefill and decode steps on a contiguous cache, a paged cache with the
    driver's block ids and a paged cache with ids handed in (a shuffled pool, written as
    vLLM's reshape_and_cache does, slot_mapping checked): outputs bit-identical to each
    other and to the golden model, the caches' contents equal after every step, appends
    crossing into new blocks; then a freed request's blocks reused."""
    rng = np.random.default_rng(200 + bs)
    hkv = 2
    lengths = (bs - 1, bs, 2 * bs + 13)                 # appends at a block's last row, at a block's first row
    geometry = dict(layers=layers, slots=4, kv_heads=hkv, head_dim=d, capacity=3 * bs + 16, fmt=fmt)
    flat = KVCache(dev, **geometry)
    driven = KVCache(dev, **geometry, block_size=bs)
    per = -(-geometry["capacity"] // bs)
    handed = KVCache(dev, **geometry, block_size=bs, num_blocks=4 * per + 5, manage_blocks=False)
    caches = (flat, driven, handed)
    try:
        assert driven.num_blocks == 4 * per and driven.free_blocks == 4 * per
        slots = {c: [c.new_request() for _ in lengths] for c in caches}
        perm = rng.permutation(handed.num_blocks)
        for i, s in enumerate(slots[handed]):
            handed.set_block_table(s, perm[i * per:(i + 1) * per])
        for layer in range(layers):
            for i, length in enumerate(lengths):
                k, v = rng.normal(0, 1, (2, hkv, length, d))
                flat.prefill(layer, slots[flat][i], k, v)
                driven.prefill(layer, slots[driven][i], k, v)
                _fill_handed_in(handed, layer, slots[handed][i], k, v)
        assert [len(driven.block_table(s)) for s in slots[driven]] == [-(-n // bs) for n in lengths]
        scale = 1 / np.sqrt(d)
        for step in range(steps):
            for layer in range(layers):
                q = rng.normal(0, 1, (3, group * hkv, d)).astype(np.float32)
                kn, vn = rng.normal(0, 1, (2, 3, hkv, d)).astype(np.float32)
                before = [int(flat.lengths[layer, s]) for s in slots[flat]]
                mapping = [int(_slot_numbers(handed.block_table(s), n, bs)) for s, n in zip(slots[handed], before)]
                outs = [dev.attention.decode(q, kn, vn, c, layer, slots[c],
                                             **({"slot_mapping": mapping} if c is handed else {})) for c in caches]
                for out in outs[1:]:
                    assert np.array_equal(fp.bits(out), fp.bits(outs[0])), f"step {step} layer {layer}"
                for i in range(3):
                    want = _golden(flat, layer, slots[flat][i], q[i], scale)
                    assert np.array_equal(fp.bits(outs[1][i]), fp.bits(want))
                    contents = [c.read(layer, slots[c][i]) for c in caches]
                    for k, v in contents[1:]:
                        assert np.array_equal(k, contents[0][0]) and np.array_equal(v, contents[0][1])
                    assert [int(c.lengths[layer, slots[c][i]]) for c in caches] == [before[i] + 1] * 3
        final = [n + steps for n in lengths]
        assert [len(driven.block_table(s)) for s in slots[driven]] == [-(-n // bs) for n in final]
        used = set().union(*(set(driven.block_table(s).tolist()) for s in slots[driven]))
        assert len(used) == sum(-(-n // bs) for n in final)             # no block in two tables
        # free a request, reuse its blocks
        gone = set(driven.block_table(slots[driven][1]).tolist())
        free_ids = set(range(driven.num_blocks)) - used | gone
        driven.free(slots[driven][1])
        flat.free(slots[flat][1])
        assert driven.free_blocks == len(free_ids)
        s_d, s_f = driven.new_request(), flat.new_request()
        assert s_d == slots[driven][1] and len(driven.block_table(s_d)) == 0 and driven.lengths[0, s_d] == 0
        k, v = rng.normal(0, 1, (2, hkv, bs + 3, d))
        driven.prefill(0, s_d, k, v)
        flat.prefill(0, s_f, k, v)
        assert set(driven.block_table(s_d).tolist()) <= free_ids
        q = rng.normal(0, 1, (1, group * hkv, d)).astype(np.float32)
        kn = rng.normal(0, 1, (1, hkv, d)).astype(np.float32)
        got = dev.attention.decode(q, kn, kn, driven, 0, [s_d])
        want = dev.attention.decode(q, kn, kn, flat, 0, [s_f])
        assert np.array_equal(fp.bits(got), fp.bits(want))
    finally:
        for c in caches:
            c.close()


def test_paged_window_and_no_append(dev):
    """A sliding window that starts mid-block and a step without append, paged (bs 16)
    against contiguous: bit-identical."""
    rng = np.random.default_rng(21)
    flat = KVCache(dev, layers=1, slots=1, kv_heads=1, head_dim=64, capacity=300)
    paged = KVCache(dev, layers=1, slots=1, kv_heads=1, head_dim=64, capacity=300, block_size=16)
    try:
        sf, sp = flat.new_request(), paged.new_request()
        k, v = rng.normal(0, 1, (2, 1, 250, 64))
        flat.prefill(0, sf, k, v)
        paged.prefill(0, sp, k, v)
        q = rng.normal(0, 1, (1, 2, 64)).astype(np.float32)
        for window in (0, 100, 7):                      # 250 - 100 = 150: token 6 of block 9
            got = dev.attention.decode(q, None, None, paged, 0, [sp], window=window)
            want = dev.attention.decode(q, None, None, flat, 0, [sf], window=window)
            assert np.array_equal(fp.bits(got), fp.bits(want)), window
        assert paged.lengths[0, sp] == 250
    finally:
        flat.close()
        paged.close()


def test_paged_sharded_equals_one_card():
    """Paged shards on two cards (each its own pools and ids): the same outputs as one
    contiguous card, bit for bit."""
    rng = np.random.default_rng(17)
    with ndpkit.open(URI) as a, ndpkit.open(URI) as b:
        check_sharded(a, [a, b], rng, block_size=16)


def test_paged_over_instances():
    """KVCache(block_size=) on a card with two attention instances: paged shards, one per
    instance, the blocks split as the slots are; bit-identical to a one-instance card."""
    two_uri = "model?engines=attention*2&memory_ports=2&mem_size=32M"
    with ndpkit.open(two_uri) as two, ndpkit.open(URI) as one:
        check_paged_over_instances(two, one, np.random.default_rng(23))


def check_paged_over_instances(two, one, rng):
    """``two``: a card with two attention instances, ``one`` a card with one."""
    from ndpkit.engines.attention.kvcache import ShardedKVCache
    many = KVCache(two, layers=1, slots=3, kv_heads=2, head_dim=64, capacity=64, block_size=16, num_blocks=13)
    single = KVCache(one, layers=1, slots=3, kv_heads=2, head_dim=64, capacity=64)
    try:
        assert isinstance(many, ShardedKVCache) and [s.num_blocks for s in many.shards] == [7, 6]
        assert [s.region for s in many.shards] == [0, 1]
        sm, so = [many.new_request() for _ in range(3)], [single.new_request() for _ in range(3)]
        for i, n in enumerate((15, 16, 40)):
            k, v = rng.normal(0, 1, (2, 2, n, 64))
            many.prefill(0, sm[i], k, v)
            single.prefill(0, so[i], k, v)
        for _ in range(2):
            q = rng.normal(0, 1, (3, 4, 64)).astype(np.float32)
            kn, vn = rng.normal(0, 1, (2, 3, 2, 64)).astype(np.float32)
            got = dev_decode(q, kn, vn, many, sm)
            want = dev_decode(q, kn, vn, single, so)
            assert np.array_equal(fp.bits(got), fp.bits(want))
        assert many.free_blocks == 13 - sum(len(many.block_table(s)) for s in sm)
    finally:
        many.close()
        single.close()


def dev_decode(q, kn, vn, cache, slots, layer=0):
    from ndpkit.engines.attention.client import decode as decode_any
    return decode_any(q, kn, vn, cache, layer, slots)


def test_paged_bad_inputs(dev):
    """Bad paged inputs: a handed-in id past the pool fails that request alone (BAD_INDEX
    "block_table", its rows untouched, the others advanced) and the next command works;
    typed errors naming the argument for the rest, nothing changed and no card memory
    left behind on any refusal; the caller's arrays untouched."""
    from ndpkit import NdpkitError
    from ndpkit.engines.attention.kvcache import ShardedKVCache
    rng = np.random.default_rng(31)
    bs, hkv, d = 16, 2, 64
    cache = KVCache(dev, layers=1, slots=4, kv_heads=hkv, head_dim=d, capacity=64, block_size=bs, num_blocks=12,
                    manage_blocks=False)
    try:
        slots = [cache.new_request() for _ in range(3)]
        tables = [np.array([3, 7, 1]), np.array([0, 5, 9]), np.array([11, 2, 4])]
        for s, t, n in zip(slots, tables, (20, 2 * bs, 9)):        # request 1: a full table of two blocks
            cache.set_block_table(s, t)
            k, v = rng.normal(0, 1, (2, hkv, n, d))
            _fill_handed_in(cache, 0, s, k, v)
        bad = np.array([0, 5, cache.num_blocks + 3])                # its append goes to entry 2: past the pool
        kept = bad.copy()
        cache.set_block_table(slots[1], bad)
        assert np.array_equal(bad, kept) and np.array_equal(cache.block_table(slots[1]), [0, 5, 15])
        pools = [cache.k[0].read(), cache.v[0].read()]
        q = rng.normal(0, 1, (3, 2 * hkv, d)).astype(np.float32)
        kn, vn = rng.normal(0, 1, (2, 3, hkv, d)).astype(np.float32)
        given = [x.copy() for x in (q, kn, vn)]
        with pytest.raises(RequestError) as err:
            dev.attention.decode(q, kn, vn, cache, 0, slots)
        assert all(np.array_equal(a, b) for a, b in zip((q, kn, vn), given))
        assert err.value.failures == {1: (ErrorCode.BAD_INDEX, "block_table")}
        assert np.isnan(err.value.outputs[1]).all() and np.isfinite(err.value.outputs[[0, 2]]).all()
        assert list(cache.lengths[0, slots]) == [21, 2 * bs, 10]
        appended = {cache.row_offset(s, h, n) for s, n in ((slots[0], 20), (slots[2], 9)) for h in range(hkv)}
        for before, buf in zip(pools, (cache.k[0], cache.v[0])):
            after = np.frombuffer(buf.read(), np.uint8)
            changed = np.flatnonzero(after != np.frombuffer(before, np.uint8))
            assert {int(c) // (2 * d) * (2 * d) for c in changed} <= appended and changed.size
        out = dev.attention.decode(q[[1]], None, None, cache, 0, [slots[1]])      # attending only: 2 blocks, fine
        assert np.isfinite(out).all()
        # a block another request of the batch uses, as an append target: refused before anything runs
        cache.set_block_table(slots[1], [0, 5, 3])                  # entry 2 is request 0's first block
        free_bytes = dev.allocator.free_bytes
        with pytest.raises(ValueError, match="block_table"):
            dev.attention.decode(q[:2], kn[:2], vn[:2], cache, 0, slots[:2])
        with pytest.raises(ValueError, match="slot_mapping"):
            dev.attention.decode(q[[0]], kn[[0]], vn[[0]], cache, 0, [slots[0]], slot_mapping=[3 * bs + 5])
        assert dev.allocator.free_bytes == free_bytes and list(cache.lengths[0, slots]) == [21, 2 * bs, 10]
        # the handed-in cache's own refusals
        with pytest.raises(ValueError, match="slot_mapping"):
            cache.write_slots(0, [cache.num_blocks * bs], np.zeros((1, hkv, d)), np.zeros((1, hkv, d)))
        with pytest.raises(ValueError, match="k and v"):
            cache.write_slots(0, [0], np.zeros((1, hkv + 1, d)), np.zeros((1, hkv + 1, d)))
        with pytest.raises(ValueError, match="ids"):
            cache.set_block_table(slots[0], np.arange(cache.max_blocks + 1))
        with pytest.raises(ValueError, match="ids"):
            cache.set_block_table(slots[0], [1.5])
        with pytest.raises(ValueError, match="length"):
            cache.set_length(0, slots[2], 3 * bs + 1)
        with pytest.raises(ValueError, match="manage_blocks=False"):
            cache.reserve(slots[0], 10)
    finally:
        cache.close()

    driven = KVCache(dev, layers=1, slots=3, kv_heads=hkv, head_dim=d, capacity=2 * bs, block_size=bs, num_blocks=3)
    try:
        a, b = driven.new_request(), driven.new_request()
        k = rng.normal(0, 1, (hkv, 2 * bs, d))
        given = k.copy()
        driven.prefill(0, a, k, k)                                 # two blocks
        assert np.array_equal(k, given)
        driven.prefill(0, b, k[:, :bs], k[:, :bs])                 # the third
        # out of blocks: refused, nothing changed
        with pytest.raises(NdpkitError, match="blocks"):
            driven.reserve(b, bs + 1)
        free_bytes = dev.allocator.free_bytes
        qn = rng.normal(0, 1, (1, hkv, d)).astype(np.float32)
        q2 = rng.normal(0, 1, (1, 2 * hkv, d)).astype(np.float32)
        with pytest.raises(NdpkitError, match="blocks"):
            dev.attention.decode(q2, qn, qn, driven, 0, [b])
        assert len(driven.block_table(b)) == 1 and driven.lengths[0, b] == bs and driven.free_blocks == 0
        assert dev.allocator.free_bytes == free_bytes
        # a full request: the engine's OUT_OF_WINDOW "length", as in a contiguous slot
        with pytest.raises(RequestError) as err:
            dev.attention.decode(q2, qn, qn, driven, 0, [a])
        assert err.value.failures == {0: (ErrorCode.OUT_OF_WINDOW, "length")}
        with pytest.raises(ValueError, match="manage_blocks=True"):
            driven.set_block_table(a, [0])
        with pytest.raises(ValueError, match="manage_blocks=True"):
            driven.write_slots(0, [0], k[:, :1].swapaxes(0, 1), k[:, :1].swapaxes(0, 1))
        with pytest.raises(ValueError, match="slot_mapping"):
            dev.attention.decode(q2, None, None, driven, 0, [a], slot_mapping=[0])
        # group outside 1..16
        with pytest.raises(ValueError, match=r"1\.\.16"):
            dev.attention.decode(rng.normal(0, 1, (1, 17 * hkv, d)), None, None, driven, 0, [a])
    finally:
        driven.close()

    # the constructor
    args = dict(layers=1, slots=2, kv_heads=1, head_dim=64, capacity=32)
    for change, match in (({"block_size": 24}, r"block_size must be one of \(16, 32, 64, 128\)"),
                          ({"block_size": 8}, r"\(16, 32, 64, 128\)"),
                          ({"block_size": True}, "block_size"),
                          ({"num_blocks": 4}, "num_blocks"),
                          ({"manage_blocks": False}, "manage_blocks"),
                          ({"block_size": 16, "num_blocks": 0}, "num_blocks"),
                          ({"block_size": 16, "capacity": 16 * 1025}, "capacity"),
                          ({"block_size": 16, "num_blocks": 1 << 22}, "num_blocks")):
        free_bytes = dev.allocator.free_bytes
        with pytest.raises(ValueError, match=match):
            KVCache(dev, **{**args, **change})
        assert dev.allocator.free_bytes == free_bytes, change
    free_bytes = dev.allocator.free_bytes
    with pytest.raises(ndpkit.OutOfDeviceMemory):                  # the second pool does not fit: the first freed
        KVCache(dev, **{**args, "layers": 2}, block_size=128, num_blocks=(free_bytes // 2) // (128 * 128) - 8)
    assert dev.allocator.free_bytes == free_bytes
    with pytest.raises(NotImplementedError, match="handed in"):
        ShardedKVCache([dev], slots_per_device=1, **args, block_size=16, manage_blocks=False)
    # the command: a block size the engine does not take
    good = {"format_q": 0, "format_kv": 1, "format_out": 0, "table": 0, "requests": 1, "shape_head_dim": 64,
            "shape_group": 2, "shape_kv_heads": 1, "shape_block_size": 0,
            "scale": int(np.float32(0.125).view(np.uint32))}
    for bs_bad in (8, 200):
        with pytest.raises(DeviceError) as e:
            dev.attention.submit({**good, "shape_block_size": bs_bad}).wait()
        assert (e.value.code, e.value.field) == (ErrorCode.BAD_FIELD, "block_size")


def test_a_closed_paged_cache_says_so():
    """Every paged method of a closed cache (driver ids and handed-in) raises
    CacheClosed, as the contiguous ones do."""
    rng = np.random.default_rng(41)
    with ndpkit.open(URI) as card:
        driven = KVCache(card, layers=1, slots=2, kv_heads=1, head_dim=64, capacity=32, block_size=16)
        handed = KVCache(card, layers=1, slots=2, kv_heads=1, head_dim=64, capacity=32, block_size=16,
                         manage_blocks=False)
        sd, sh = driven.new_request(), handed.new_request()
        driven.prefill(0, sd, rng.normal(0, 1, (1, 3, 64)), rng.normal(0, 1, (1, 3, 64)))
        handed.set_block_table(sh, [1])
        q = rng.normal(0, 1, (1, 2, 64)).astype(np.float32)
        kn = rng.normal(0, 1, (1, 1, 64)).astype(np.float32)
        driven.close()
        handed.close()
        assert "closed" in repr(driven) and "closed" in repr(handed)
        rows = np.zeros((1, 1, 64))
        calls = {**{f"driven {name}": call for name, call in _closed_cache_calls(driven, sd, q, kn).items()},
                 "reserve": lambda: driven.reserve(sd, 20), "blocks_needed": lambda: driven.blocks_needed(sd, 20),
                 "free_blocks": lambda: driven.free_blocks, "block_table": lambda: driven.block_table(sd),
                 "set_length": lambda: driven.set_length(0, sd, 1),
                 "set_block_table": lambda: handed.set_block_table(sh, [0]),
                 "write_slots": lambda: handed.write_slots(0, [0], rows, rows),
                 "handed decode": lambda: card.attention.decode(q, kn, kn, handed, 0, [sh], slot_mapping=[16])}
        for name, call in calls.items():
            with pytest.raises(ndpkit.CacheClosed, match="KV cache is closed"):
                call()


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_a_failed_staging_allocation_leaves_no_card_memory(dev, monkeypatch, paged):
    """A decode step whose n-th staging allocation (descriptors, q, out, k_new, v_new, the
    block tables) fails frees the ones before it; the cache's lengths do not move and
    the next step works."""
    from ndpkit.errors import OutOfDeviceMemory
    rng = np.random.default_rng(51)
    cache = KVCache(dev, layers=1, slots=2, kv_heads=1, head_dim=64, capacity=64,
                    **({"block_size": 16} if paged else {}))
    try:
        s = cache.new_request()
        cache.prefill(0, s, rng.normal(0, 1, (1, 5, 64)), rng.normal(0, 1, (1, 5, 64)))
        q = rng.normal(0, 1, (1, 2, 64)).astype(np.float32)
        kn = rng.normal(0, 1, (1, 1, 64)).astype(np.float32)
        real_alloc = dev.alloc
        for fail_at in range(6 if paged else 5):
            calls = []

            def alloc(*args, **kwargs):
                calls.append(args)
                if len(calls) == fail_at + 1:
                    raise OutOfDeviceMemory("the test's refusal")
                return real_alloc(*args, **kwargs)
            free_bytes = dev.allocator.free_bytes
            monkeypatch.setattr(dev, "alloc", alloc)
            with pytest.raises(OutOfDeviceMemory):
                dev.attention.decode(q, kn, kn, cache, 0, [s])
            monkeypatch.undo()
            assert dev.allocator.free_bytes == free_bytes and cache.lengths[0, s] == 5, fail_at
        out = dev.attention.decode(q, kn, kn, cache, 0, [s])
        assert np.isfinite(out).all() and cache.lengths[0, s] == 6
    finally:
        cache.close()
