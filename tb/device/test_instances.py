"""Engines with several instances, each working in its own memory region (card scale).

The same work on a card with two instances of an engine, over two memory regions (one
memory model each on the sim card), gives bit for bit what one instance gives; a
single call uses every instance (a decode batch over a sharded KV cache, a copy or an
Adam step split over the instances of a region); the instances run at the same time;
and no instance's command touches another instance's region.  On the model and on the
RTL: the dma_copy card in ``make test``, every engine's in ``make sim``.
"""
import numpy as np
import pytest

import ndpkit
from ndpkit import DeviceError, ErrorCode, OutOfDeviceMemory
from ndpkit.engine import CommandGroup
from ndpkit.engines.adam.golden import scalars_for_step
from ndpkit.engines.attention.kvcache import KVCache, ShardedKVCache
from ndpkit.options import OptionError

# one dma_copy instance: the Adam tests' card (one Verilator build fewer; its other engines stay idle)
COPY_ONE = "{}?data_width=128&engines=dma_copy,adam,decomp&mem_size=4M"
COPY_TWO = "{}?data_width=128&engines=dma_copy*2&memory_ports=2&mem_size=4M"
ALL_ONE = "{}?data_width=128&engines=dma_copy,adam,decomp,attention&mem_size=8M"
ALL_TWO = "{}?data_width=128&engines=dma_copy*2,adam*2,decomp*2,attention*2&memory_ports=2&mem_size=8M"
SIM = [pytest.mark.sim, pytest.mark.xdist_group("device_sim_instances")]
SIM_ALL = [pytest.mark.sim, pytest.mark.long, pytest.mark.xdist_group("device_sim_instances_all")]


def _kinds(sim_marks):
    return [pytest.param("model", id="model"), pytest.param("sim", id="sim", marks=sim_marks)]


# -- dma_copy: make test on both transports ------------------------------------------------

@pytest.mark.parametrize("kind", _kinds(SIM))
def test_two_instances_copy_and_fill_bit_identical_to_one(cards, kind, rng):
    one, two = cards(COPY_ONE.format(kind)), cards(COPY_TWO.format(kind))
    assert [c.region for c in two.instances["dma_copy"]] == [0, 1] and two.memory_ports == 2
    results = {}
    for dev in (one, two):
        data = np.random.default_rng(7).integers(0, 256, 1 << 16, dtype=np.uint8)
        outs = []
        for region in range(2):                      # one card: both in its one region
            src = dev.upload(data, region=region if dev is two else None)
            dst = dev.alloc(1 << 16, region=region if dev is two else None)
            assert dev.region_of(dst) == (region if dev is two else 0)
            outs.append((src, dst))
        # the two regions' commands at once: each instance runs its own
        with dev.batch():
            cmds = [dev.copy(dst, src, wait=False) for src, dst in outs]
            cmds += [dev.fill(dst, 0xA5A5_0000 + i, 4096, wait=False) for i, (_, dst) in enumerate(outs)]
        done = [c.wait() for c in cmds]
        assert all(d.ok for d in done)
        if dev is two:
            assert [c.client.instance for c in cmds] == [0, 1, 0, 1]
            if kind == "sim":      # both copies start together and overlap: two ports, two memories
                a, b = done[0], done[1]
                assert a.start == b.start and abs(a.cycles - b.cycles) <= 2
        results[dev is two] = [dst.download(np.uint8) for _, dst in outs]
        dev.free_all()
    for a, b in zip(results[False], results[True]):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("kind", _kinds(SIM))
def test_an_instance_never_touches_another_region(cards, kind):
    """Instance 0 (region 0) told to read or write region 1: OUT_OF_WINDOW before any
    data moves; region 1 is as it was; the next command works."""
    dev = cards(COPY_TWO.format(kind))
    inside = dev.upload(np.arange(4096, dtype=np.uint8), region=0)
    outside = dev.upload(np.arange(4096, dtype=np.uint8)[::-1].copy(), region=1)
    before = outside.read()
    zero = dev.instance("dma_copy", 0)
    for args in ({"op": 0, "src": inside.address, "dst": outside.address, "length": 4096, "pattern": 0},
                 {"op": 0, "src": outside.address, "dst": inside.address, "length": 4096, "pattern": 0},
                 {"op": 1, "src": 0, "dst": outside.address, "length": 4096, "pattern": 7}):
        done = zero.submit(args).wait(check=False)
        assert done.error == ErrorCode.OUT_OF_WINDOW and done.bytes_written == 0 and done.bytes_read == 0
    assert outside.read() == before and inside.read() == bytes(range(256)) * 16
    assert dev.instance("dma_copy", 1).copy(outside, outside.address + 2048, 2048).wait().ok
    dev.free_all()


def test_a_command_across_regions_or_where_no_instance_works_is_refused():
    with ndpkit.open("model?data_width=128&engines=dma_copy*2,adam&memory_ports=2&mem_size=4M") as dev:
        a, b = dev.alloc(4096, region=0), dev.alloc(4096, region=1)
        with pytest.raises(ValueError, match=r"its buffers are in several \('dst' in region 0, 'src' in region 1\)"):
            dev.copy(a, b)
        # adam's only instance works in region 0 (instances dealt round-robin: dma_copy 0, 1, adam 0)
        assert [c.region for c in dev.instances["adam"]] == [0]
        p, m, v, g = (dev.alloc(4096, region=1) for _ in range(4))
        with pytest.raises(ValueError, match=r"argument 'p' is in memory region 1, where no adam instance works "
                                             r"\(its instances work in region\(s\) 0\)"):
            dev.adam.step(p, m, v, g, scalars=scalars_for_step(1, lr=1e-3))
        # engine=: the buffers where an instance of the engine works, the one call then runs
        near = [dev.upload(np.zeros(1024, np.float32), engine="adam") for _ in range(4)]
        assert {dev.region_of(b) for b in near} == {0}
        assert dev.adam.step(*near, scalars=scalars_for_step(1, lr=1e-3)).ok
        with pytest.raises(ValueError, match="engine: this card has no 'attention' instance"):
            dev.alloc(64, engine="attention")
        with pytest.raises(ValueError, match="give region or engine, not both"):
            dev.alloc(64, region=0, engine="adam")
        with pytest.raises(OutOfDeviceMemory, match=r"region 1 \[0x200000, \+0x200000\): no free range of \d+ bytes .* free in the region"):
            dev.alloc(4 << 20, region=1)
        with pytest.raises(ValueError, match="region must be 0..1"):
            dev.alloc(64, region=2)
        with pytest.raises(ValueError, match="this card has 2 dma_copy instance"):
            dev.instance("dma_copy", 2)


@pytest.mark.parametrize("uri, option, message", [
    ("model?engines=dma_copy*2&memory_ports=3", "memory_ports", "3 is more than the 2 engine instance"),
    ("model?engines=dma_copy*2&memory_ports=2&mem_size=3M", "memory_ports", "does not cut mem_size"),
    ("model?engines=attention*60", "engines", "further engine instances need slots up to"),
    ("model?engines=adam*0", "engines", "instance count 0 is below 1"),
    ("model?engines=adam*x", "engines", "instance count 'x' is not an integer"),
])
def test_instance_counts_beyond_the_card_are_refused(uri, option, message):
    with pytest.raises(OptionError, match=message) as err:
        ndpkit.open(uri)
    assert err.value.option == option


def test_one_region_two_instances_split_a_copy_and_an_adam_step():
    """Two instances in one region: one call runs on both (a CommandGroup), bit-identical."""
    n = 5000
    rng = np.random.default_rng(3)
    p0, g0 = rng.normal(0, 1, n).astype(np.float32), rng.normal(0, 1e-2, n).astype(np.float32)
    sc = scalars_for_step(1, lr=1e-3, weight_decay=0.01)
    out = {}
    for uri in ("model?data_width=128&engines=dma_copy,adam&mem_size=4M",
                "model?data_width=128&engines=dma_copy*2,adam*2&mem_size=4M"):
        with ndpkit.open(uri) as dev:
            bufs = [dev.upload(x) for x in (p0, np.zeros(n, np.float32), np.zeros(n, np.float32), g0)]
            copy = dev.alloc(2 * n)
            cmd = dev.adam.step(*bufs, scalars=sc, copy=copy, copy_format="bf16", wait=False)
            assert isinstance(cmd, CommandGroup) == ("*2" in uri)
            done = cmd.wait()
            assert done.ok and done.bytes_read >= 16 * n
            dst = dev.alloc(4 * n)
            c = dev.copy(dst, bufs[0], wait=False)
            assert isinstance(c, CommandGroup) == ("*2" in uri)
            c.wait()
            out[uri] = [b.download(np.uint32)[:n] for b in bufs[:3]] + [copy.download(np.uint16)[:n],
                                                                         dst.download(np.uint32)[:n]]
    a, b = out.values()
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


# -- every engine: the model in make test, the RTL in make sim ------------------------------

def _attention_work(dev, rng_seed=11):
    """A decode loop over a KV cache: appends, GQA, three steps; returns the outputs."""
    rng = np.random.default_rng(rng_seed)
    hkv, d, group = 2, 64, 2
    cache = KVCache(dev, layers=1, slots=4, kv_heads=hkv, head_dim=d, capacity=64, fmt="fp16")
    slots = [cache.new_request() for _ in range(4)]
    for s, length in zip(slots, (3, 17, 40, 9)):
        cache.prefill(0, s, rng.normal(0, 1, (hkv, length, d)), rng.normal(0, 1, (hkv, length, d)))
    outs = []
    for _ in range(3):
        q = rng.normal(0, 1, (4, hkv * group, d)).astype(np.float32)
        kn, vn = rng.normal(0, 1, (4, hkv, d)), rng.normal(0, 1, (4, hkv, d))
        outs.append(dev.attention.decode(q, kn, vn, cache, 0, slots))
    lengths = [cache.length(0, s) for s in slots]
    sharded = isinstance(cache, ShardedKVCache)
    regions = sorted({shard.region for shard in cache.shards}) if sharded else [cache.region]
    cache.close()
    return np.stack(outs), lengths, regions


def _adam_work(dev, region):
    rng = np.random.default_rng(5)
    n = 1001
    p = rng.normal(0, 0.5, n).astype(np.float32)
    bufs = [dev.upload(x, region=region) for x in (p, np.zeros(n, np.float32), np.zeros(n, np.float32))]
    g = dev.alloc(4 * n, region=region)
    copy = dev.alloc(2 * n, region=region)
    for step in range(1, 4):
        g.write(rng.normal(0, 1e-2, n).astype(np.float32))
        assert dev.adam.step(*bufs, g, n=n, scalars=scalars_for_step(step, lr=1e-3, weight_decay=0.01),
                             copy=copy, copy_format="fp16").ok
    return [b.download(np.uint32)[:n] for b in bufs] + [copy.download(np.uint16)[:n]]


def _decomp_work(dev, region):
    rng = np.random.default_rng(9)
    n, k = 2048, 100
    idx = np.sort(rng.choice(n, k, replace=False)).astype(np.uint32)
    vals = rng.normal(0, 1, k).astype(np.float32)
    dst = dev.upload(np.full(n, 7, np.float32), region=region)
    dev.decomp.scatter(dst, dev.upload(idx, region=region), dev.upload(vals, region=region), n=n)
    return dst.download(np.uint32)[:n]


@pytest.mark.parametrize("kind", _kinds(SIM_ALL))
def test_every_engine_two_instances_bit_identical_to_one(cards, kind):
    one, two = cards(ALL_ONE.format(kind)), cards(ALL_TWO.format(kind))
    for name in ("dma_copy", "adam", "decomp", "attention"):
        assert [c.region for c in two.instances[name]] == [0, 1], name
    # attention: one KVCache call shards the requests over both instances, one batch runs on both
    got, lengths, regions = _attention_work(two)
    want, want_lengths, _ = _attention_work(one)
    assert regions == [0, 1] and lengths == want_lengths
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    for region in (0, 1):
        for work in (_adam_work, _decomp_work):
            a, b = work(two, region), work(one, None)
            assert all(np.array_equal(x, y) for x, y in zip(a, b)) if isinstance(a, list) else np.array_equal(a, b)
        two.free_all()
        one.free_all()


@pytest.mark.parametrize("kind", _kinds(SIM_ALL))
def test_every_engine_instance_refuses_another_region(cards, kind):
    """Each engine's instance 0, handed addresses in region 1: OUT_OF_WINDOW, nothing written."""
    dev = cards(ALL_TWO.format(kind))
    outside = dev.upload(np.random.default_rng(1).integers(0, 256, 1 << 16, dtype=np.uint8), region=1)
    inside = dev.alloc(1 << 16, region=0)
    before = outside.read()
    a, b = inside.address, outside.address
    n = 256
    commands = {
        "adam": {"format_mode": 1, "format_grad": 0, "format_copy": 0, "format_sparse": 0, "count": n, "p": a,
                 "m": a + 4 * n, "v": b, "g": a + 12 * n, "copy": 0, "pairs": 0, "idx": 0,
                 **scalars_for_step(1, lr=1e-3).bits()},
        "decomp": {"format": 0, "count": 256, "pairs": 16, "idx": a, "val": a + 4096, "dst": b},
        "attention": {"format_q": 1, "format_kv": 1, "format_out": 0, "table": b, "requests": 1,
                      "shape_head_dim": 64, "shape_group": 1, "shape_kv_heads": 1, "shape_block_size": 0,
                      "scale": int(np.float32(0.125).view(np.uint32))},
    }
    for name, args in commands.items():
        done = dev.instance(name, 0).submit(args).wait(check=False)
        assert done.error == ErrorCode.OUT_OF_WINDOW, name
        assert done.bytes_written == 0, name
    assert outside.read() == before
    dev.free_all()


def test_sg_and_graph_instances_bit_identical_to_one():
    """sg and graph (512-bit engines) with two instances on the model: gathers on tables in
    either region, and PageRank on the graph engine, as with one instance."""
    import networkx as nx
    from ndpkit import graph as ngraph
    results = {}
    for uri in ("model?engines=sg,graph&mem_size=16M", "model?engines=sg*2,graph*2&memory_ports=2&mem_size=16M"):
        with ndpkit.open(uri) as dev:
            rng = np.random.default_rng(2)
            table_data = rng.normal(0, 1, 4096).astype(np.float32)
            idx = rng.integers(0, 4096, 500)
            gathered = []
            regions = (0, 1) if dev.memory_ports == 2 else (None,)
            for region in regions:
                table = dev.upload(table_data, region=region)
                gathered.append(dev.sg.gather(table, idx))
                dev.sg.scatter(table, idx[:50], np.arange(50, dtype=np.float32))
                gathered.append(table.download(np.float32)[:4096])
            ranks = ngraph.pagerank(nx.karate_club_graph(), dev)
            results[uri] = (gathered, ranks)
    (g1, r1), (g2, r2) = results.values()
    for x in g2:
        assert any(np.array_equal(x, y) for y in g1)
    assert r1 == r2
