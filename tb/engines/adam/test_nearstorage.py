"""The near-storage optimizer (ndpkit.engines.adam.nearstorage) on model and sim cards: parameters
and moments in a storage file, chunks streamed through reused card buffers on one or
two devices, dense and compressed gradients; every step bit-exact to the golden
pipeline (per-chunk top-k with error feedback -> densify -> adam_step on the whole
arrays), and the host link carries only gradients and the parameter copy."""
import numpy as np
import pytest

import ndpkit
from ndpkit.arith import fp
from ndpkit.engines.adam.golden import Mode
from ndpkit.engines.adam.nearstorage import NearStorageAdam, StorageFile, golden_step

URI = "{}?data_width=128&engines=dma_copy,adam,decomp&mem_size=4M"
# on sim cards this is a long run (two simulated cards, several steps): `make sim`
KINDS = [pytest.param("model", id="model"),
         pytest.param("sim", id="sim", marks=[pytest.mark.sim, pytest.mark.long,
                                              pytest.mark.xdist_group("device_sim_adam")])]


@pytest.fixture(scope="module", params=KINDS)
def devs(request):
    devices = [ndpkit.open(URI.format(request.param)) for _ in range(2)]
    yield devices
    for d in devices:
        d.close()


def _golden_steps(p0, grads, chunk, *, density, grad_format, mode, lr, wd):
    p, m, v = fp.bits(p0), np.zeros(p0.size, np.uint32), np.zeros(p0.size, np.uint32)
    residual = np.zeros(p0.size, np.float32)
    for t, g in enumerate(grads, 1):
        p, m, v = golden_step(p, m, v, g, t, chunk=chunk, lr=lr, weight_decay=wd, mode=mode,
                              grad_format=grad_format, density=density, residual=residual)
    return p, m, v, fp.fp32_to_fp16(p)


@pytest.mark.parametrize("ndev, density, grad_format, buffers", [(1, None, "fp32", 2), (2, 0.05, "fp16", 2),
                                                                 (2, None, "bf16", 1)])
def test_steps_bit_exact(devs, tmp_path, ndev, density, grad_format, buffers):
    rng = np.random.default_rng(7)
    n, chunk, steps = 1000, 128, 4
    p0 = rng.normal(0, 0.5, n).astype(np.float32)
    grads = [rng.normal(0, 1e-2, n).astype(np.float32) for _ in range(steps)]
    storage = StorageFile(tmp_path / "state.bin", n, chunk)
    storage.set_params(p0)
    storage.set_moments(np.zeros(n), np.zeros(n))
    opt = NearStorageAdam(devs[:ndev], storage, lr=1e-3, weight_decay=0.01, grad_format=grad_format,
                          param_copy="fp16", density=density, buffers=buffers)
    for g in grads:
        copy = opt.step(g)
    p, m, v, want_copy = _golden_steps(p0, grads, chunk, density=density, grad_format=grad_format,
                                       mode=Mode.ADAMW, lr=1e-3, wd=0.01)
    assert np.array_equal(fp.bits(storage.params()), p)
    got_m, got_v = storage.moments()
    assert np.array_equal(fp.bits(got_m), m) and np.array_equal(fp.bits(got_v), v)
    assert np.array_equal(copy, want_copy)
    # the host link carried the gradient (or pairs) down and the fp16 copy up, nothing of p, m, v
    t = opt.last.traffic
    gsize = 4 if grad_format == "fp32" else 2
    down = n * gsize if density is None else opt.last.pairs * (4 + gsize)
    assert t["host_to_card"] == down and t["card_to_host"] == 2 * n
    assert t["storage_to_card"] == t["card_to_storage"] == storage.chunks * 12 * chunk
    assert opt.host_link_bytes() < opt.host_link_baseline() / 4
    opt.close()
    storage.close()


def test_skip_nonfinite_and_errors(devs, tmp_path):
    n, chunk = 100, 32
    storage = StorageFile(tmp_path / "s.bin", n, chunk)
    storage.set_params(np.ones(n))
    storage.set_moments(np.zeros(n), np.zeros(n))
    opt = NearStorageAdam(devs[0], storage, param_copy="fp32")
    g = np.full(n, 1e-3, np.float32)
    g[7] = np.nan
    assert opt.step(g, skip_nonfinite=True) is None and opt.skipped == 1 and opt.t == 0
    assert np.array_equal(storage.params(), np.ones(n, np.float32))
    out = opt.step(g)                      # not skipped: NaN propagates per IEEE, counted
    assert opt.last.nonfinite == 1 and np.isnan(out[7]) and np.all(np.isfinite(np.delete(out, 7)))
    with pytest.raises(ValueError, match="elements"):
        opt.step(np.zeros(n + 1, np.float32))
    with pytest.raises(ValueError, match="multiple of the bus lanes"):
        NearStorageAdam(devs[0], StorageFile(tmp_path / "t.bin", 10, 6))
    with pytest.raises(ValueError, match="param_copy"):
        NearStorageAdam(devs[0], storage, param_copy="fp8")
    opt.close()
