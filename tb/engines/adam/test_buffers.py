"""``dev.adam.step`` and ``dev.decomp.scatter`` refuse a command that reaches past a
Buffer it names (the shell only checks the engine's window), naming the argument, and
nothing on the card changes; raw card addresses stay possible (model card)."""
import numpy as np
import pytest

import ndpkit
from ndpkit.engines.adam.golden import scalars_for_step


@pytest.fixture(scope="module")
def dev():
    with ndpkit.open("model", engines=("adam", "decomp"), mem_size=1 << 20) as d:
        yield d


def _card(dev):
    return dev.transport.dma_read(dev.mem_base, dev.mem_size)


@pytest.mark.parametrize("short", ["p", "m", "v", "g", "copy"])
def test_adam_step_longer_than_a_buffer_is_refused(dev, short):
    n = 256
    bufs = {name: dev.upload(np.ones(n if name != "copy" else n // 2, np.float32)) for name in ("p", "m", "v", "g")}
    bufs["copy"] = dev.alloc(2 * n)
    small = dev.alloc(bufs[short].size // 2)                   # half what n needs
    neighbour = dev.upload(np.full(1024, 7, np.uint8))
    args = dict(bufs, **{short: small})
    before = _card(dev)
    with pytest.raises(ValueError, match=f"argument '{short}'"):
        dev.adam.step(args["p"], args["m"], args["v"], args["g"], copy=args["copy"], copy_format="fp16",
                      scalars=scalars_for_step(1, lr=1e-3), n=n)
    assert _card(dev) == before
    assert (neighbour.download(np.uint8) == 7).all()
    dev.free_all()


def test_adam_step_within_its_buffers_and_by_address_still_run(dev):
    n = 256
    p, m, v, g = (dev.upload(np.full(n, 0.5, np.float32)) for _ in range(4))
    assert dev.adam.step(p, m, v, g, scalars=scalars_for_step(1, lr=1e-3)).ok
    assert dev.adam.step(p.address, m.address, v.address, g.address, scalars=scalars_for_step(2, lr=1e-3), n=n).ok
    dev.free_all()


def test_decomp_scatter_longer_than_a_buffer_is_refused(dev):
    dst = dev.alloc(4 * 100)
    idx = dev.upload(np.arange(8, dtype=np.uint32))
    val = dev.upload(np.ones(8, np.float32))
    dst.write(np.full(400, 0xAB, np.uint8).tobytes())
    before = _card(dev)
    with pytest.raises(ValueError, match="argument 'dst'"):
        dev.decomp.scatter(dst, idx, val, n=200, pairs=8)
    with pytest.raises(ValueError, match="argument 'indices'"):
        dev.decomp.scatter(dst, idx, val, n=100, pairs=40)
    with pytest.raises(ValueError, match="argument 'values'"):
        dev.decomp.scatter(dst, dev.upload(np.arange(40, dtype=np.uint32)), val, n=100, pairs=40)
    assert _card(dev)[:val.address + val.size] == before[:val.address + val.size]   # dst, idx, val untouched
    assert dev.decomp.scatter(dst, idx, val, n=100, pairs=8).ok
    dev.free_all()


def test_decomp_pairs_default_counts_the_uploaded_pairs_not_the_padding(dev):
    """10 pairs upload into whole 64-byte bus words (16 slots): the default ``pairs`` is
    10, so the padding never lands as (index 0, value 0) pairs."""
    indices = dev.upload(np.arange(3, 13, dtype=np.uint32))
    values = dev.upload(np.arange(1, 11, dtype=np.float32))
    assert indices.size == 64 and indices.nbytes == 40
    dst = dev.upload(np.full(16, 9, np.float32))
    done = dev.decomp.scatter(dst, indices, values, n=16)
    assert done.aux == 10
    want = np.zeros(16, np.float32)
    want[3:13] = np.arange(1, 11)
    assert np.array_equal(dst.download(np.float32, 16), want)
    dev.free_all()
