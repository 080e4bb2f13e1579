"""No public entry point changes the caller's data (model card): every array, tensor,
matrix, graph or dict handed to the driver and its integrations comes back exactly as
it was given — also non-contiguous views and read-only arrays, which a careless
in-place conversion would change or fail on."""
import copy

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

import ndpkit
from ndpkit import graph
from ndpkit.engines.adam.golden import scalars_for_step
from ndpkit.engines.adam.nearstorage import NearStorageAdam as CoreAdam, StorageFile
from ndpkit.engines.attention.client import decode

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def dev():
    with ndpkit.open("model", mem_size="32M") as d:      # every engine
        yield d


def _frozen(a):
    """A read-only, non-contiguous view with the same values (an in-place write fails)."""
    big = np.repeat(np.asarray(a)[..., None], 2, axis=-1)[..., 0]
    big.flags.writeable = False
    return big


def _same(before, after):
    if isinstance(before, np.ndarray):
        return before.dtype == after.dtype and np.array_equal(before, after, equal_nan=True)
    if isinstance(before, torch.Tensor):
        return before.dtype == after.dtype and torch.equal(before, after)
    if sp.issparse(before):
        return all(np.array_equal(getattr(before, k), getattr(after, k)) for k in ("data", "indices", "indptr"))
    if isinstance(before, dict):
        return before.keys() == after.keys() and all(_same(before[k], after[k]) for k in before)
    if isinstance(before, (list, tuple)):
        return len(before) == len(after) and all(_same(b, a) for b, a in zip(before, after))
    if isinstance(before, nx.Graph):
        return nx.to_dict_of_dicts(before) == nx.to_dict_of_dicts(after) and list(before.nodes) == list(after.nodes)
    return before == after


def _check(call, *inputs):
    snapshot = [copy.deepcopy(x) for x in inputs]
    call(*inputs)
    for before, after in zip(snapshot, inputs):
        assert _same(before, after)


def test_buffers_and_engine_commands(dev):
    rng = np.random.default_rng(0)
    data = _frozen(rng.standard_normal(1000).astype(np.float32))
    _check(lambda d: dev.upload(d), data)
    buf = dev.alloc(4000)
    _check(lambda d: buf.write(d), data)
    table = dev.upload(np.arange(4096, dtype=np.float32))
    idx = _frozen(rng.integers(0, 4096, 300))
    _check(lambda i: dev.sg.gather(table, i), idx)
    _check(lambda i, v: dev.sg.scatter(table, i, v), idx, _frozen(rng.standard_normal(300).astype(np.float32)))
    n = 256
    p, m, v, g = (dev.upload(np.full(n, 0.5, np.float32)) for _ in range(4))
    dev.adam.step(p, m, v, g, scalars=scalars_for_step(1, lr=1e-3), n=n)
    dev.free_all()


def test_attention(dev):
    rng = np.random.default_rng(1)
    cache = ndpkit.KVCache(dev, layers=1, slots=2, kv_heads=2, head_dim=64, capacity=32)
    slots = [cache.new_request(), cache.new_request()]
    k, v = _frozen(rng.standard_normal((2, 9, 64))), _frozen(rng.standard_normal((2, 9, 64)))
    for s in slots:
        _check(lambda a, b: cache.prefill(0, s, a, b), k, v)
    q = _frozen(rng.standard_normal((2, 8, 64)).astype(np.float32))
    kn, vn = _frozen(rng.standard_normal((2, 2, 64))), _frozen(rng.standard_normal((2, 2, 64)))
    _check(lambda *a: dev.attention.decode(*a, cache, 0, slots), q, kn, vn)
    _check(lambda *a: decode(*a, cache, 0, slots), q, None, None)
    tq, tk, tv = (torch.randn(2, 8, 1, 64).half(), torch.randn(2, 2, 5, 64).half(), torch.randn(2, 2, 5, 64).half())
    _check(lambda *a: ndpkit.torch.scaled_dot_product_attention(dev, *a, enable_gqa=True), tq, tk, tv)
    _check(lambda *a: ndpkit.torch.decode_attention(dev, *a, cache, 0, slots), tq, tk[:, :, :1], tv[:, :, :1])
    cache.close()


def test_optimizers(dev, tmp_path):
    rng = np.random.default_rng(2)
    storage = StorageFile(tmp_path / "state", 1000, 256)
    storage.set_params(rng.standard_normal(1000))
    storage.set_moments(np.zeros(1000), np.zeros(1000))
    core = CoreAdam([dev], storage, density=0.1)
    _check(lambda gr: core.step(gr), _frozen(rng.standard_normal(1000).astype(np.float32)))
    core.close()
    model = torch.nn.Linear(8, 4)
    opt = ndpkit.torch.NearStorageAdam(model.parameters(), dev, chunk=64)
    model(torch.randn(3, 8)).sum().backward()
    grads = [q.grad.clone() for q in model.parameters()]
    opt.step()
    assert all(torch.equal(q.grad, g) for q, g in zip(model.parameters(), grads))
    saved = opt.state_dict()
    _check(lambda sd: opt.load_state_dict(sd), saved)
    opt.close()


def test_graph_entry_points(dev):
    g = nx.gnm_random_graph(40, 120, seed=3, directed=True)
    for u, w in g.edges:
        g[u][w]["weight"] = (u + w) % 4 + 1
    a = sp.csr_array(nx.to_scipy_sparse_array(g, format="csr"))
    dense = _frozen(a.toarray())
    x = _frozen(np.linspace(-1, 1, 40).astype(np.float32))
    for entry in (g, a, dense):
        _check(lambda e: graph.bfs(e, 0, dev), entry)
        _check(lambda e: graph.sssp(e, 0, dev), entry)
        _check(lambda e: graph.connected_components(e, dev), entry)
        _check(lambda e: graph.pagerank(e, dev), entry)
        _check(lambda e, v: graph.spmv(e, v, dev), entry, x)
    nstart = {v: 1.0 for v in g}
    _check(lambda s: graph.pagerank(g, dev, nstart=s), nstart)
