"""The adam engine through the driver, on the model and on a sim card (128-bit bus,
4 lanes: the same RTL as the 512-bit build, a quicker Verilator build): multi-step
runs bit-exact to the golden model (dense and sparse gradients), the decomp engine,
bad commands rejected with nothing written."""
import numpy as np
import pytest

import ndpkit
from ndpkit import DeviceError, ErrorCode
from ndpkit.arith import fp
from ndpkit.engines.decomp import golden as decomp
from ndpkit.engines.adam.golden import Format, Mode, adam_step, scalars_for_step

from tb.device.test_device import Guarded

URI = "{}?data_width=128&engines=dma_copy,adam,decomp&mem_size=4M"
KINDS = [pytest.param("model", id="model"),
         pytest.param("sim", id="sim", marks=[pytest.mark.sim, pytest.mark.xdist_group("device_sim_adam")])]


@pytest.fixture(scope="module", params=KINDS)
def dev(request):
    with ndpkit.open(URI.format(request.param)) as device:
        yield device


@pytest.mark.parametrize("mode, grad_format, copy_format, n",
                         [(Mode.ADAMW, "fp16", "fp16", 1001), (Mode.ADAM, "fp32", None, 64),
                          (Mode.ADAMW, "bf16", "bf16", 7)])
def test_ten_steps_bit_exact(dev, rng, mode, grad_format, copy_format, n):
    np_rng = np.random.default_rng(rng.randrange(1 << 30))
    p = np_rng.normal(0, 0.5, n).astype(np.float32)
    m = np.zeros(n, np.float32)
    v = np.zeros(n, np.float32)
    bufs = {name: Guarded(dev, -(-n * 4 // 16) * 16, rng, fill=False) for name in ("p", "m", "v", "g")}
    copy = Guarded(dev, -(-n * 2 // 32) * 32, rng, fill=False) if copy_format else None
    for name, arr in (("p", p), ("m", m), ("v", v)):
        bufs[name].outer.write(arr, 4096)
    want = (fp.bits(p), fp.bits(m), fp.bits(v))
    fmt = Format[grad_format.upper()]
    for step in range(1, 11):
        g32 = np_rng.normal(0, 1e-2, n).astype(np.float32)
        g = fp.bits(g32) if fmt == Format.FP32 else (fp.fp32_to_fp16(fp.bits(g32)) if fmt == Format.FP16
                                                    else fp.fp32_to_bf16(fp.bits(g32)))
        bufs["g"].outer.write(g, 4096)
        sc = scalars_for_step(step, lr=1e-3, weight_decay=0.01, mode=mode)
        done = dev.adam.step(bufs["p"].address, bufs["m"].address, bufs["v"].address, bufs["g"].address, n=n,
                             scalars=sc, mode=mode, grad_format=grad_format,
                             copy=copy.address if copy else None, copy_format=copy_format)
        assert done.ok and done.aux == 0
        *want, want_copy, _ = adam_step(*want, g, sc, mode=mode, grad_format=fmt,
                                        copy_format=Format[copy_format.upper()] if copy_format else None)
        for name, w in zip("pmv", want):
            got = np.frombuffer(bufs[name].outer.read(4 * n, 4096), np.uint32)
            assert np.array_equal(got, w), f"step {step}: {name} differs"
        if copy:
            assert np.array_equal(np.frombuffer(copy.outer.read(2 * n, 4096), np.uint16), want_copy)
    for b in list(bufs.values()) + ([copy] if copy else []):
        b.check_guards()


def test_bad_commands_write_nothing(dev, rng):
    n = 100
    bufs = {name: Guarded(dev, 400, rng) for name in ("p", "m", "v", "g")}
    sc = scalars_for_step(1, lr=1e-3)
    a = {k: b.address for k, b in bufs.items()}
    cases = [
        (dict(a, n=0), ErrorCode.ZERO_LENGTH, "n"),
        (dict(a, m=a["p"]), ErrorCode.OVERLAP, "m"),
        (dict(a, g=a["g"] + 4), ErrorCode.UNALIGNED, "g"),
        (dict(a, v=dev.mem_base + dev.mem_size - 64), ErrorCode.OUT_OF_WINDOW, "v"),
    ]
    for args, code, field in cases:
        args = dict(args)
        count = args.pop("n", n)
        with pytest.raises(DeviceError) as err:
            dev.adam.step(args["p"], args["m"], args["v"], args["g"], n=count, scalars=sc)
        assert err.value.code == code and err.value.field == field, (args, err.value)
        for b in bufs.values():
            assert b.read() == b.contents
            b.check_guards()
    with pytest.raises(ValueError, match="grad_format"):
        dev.adam.step(a["p"], a["m"], a["v"], a["g"], n=n, scalars=sc, grad_format="fp8")
    # non-finite gradients are counted; the next command works
    g = np.full(n, 1e-3, np.float32)
    g[[3, 50]] = [np.inf, np.nan]
    bufs["g"].outer.write(g, 4096)
    done = dev.adam.step(a["p"], a["m"], a["v"], a["g"], n=n, scalars=sc)
    assert done.ok and done.aux == 2


@pytest.mark.parametrize("grad_format, density", [("fp16", 0.05), ("fp32", 0.3), ("bf16", 0.01)])
def test_sparse_steps_bit_exact(dev, rng, grad_format, density):
    """Ten steps with top-k compressed gradients (error feedback on the host): the fused
    stream mode, and the same pairs through decomp.scatter + a dense step, both equal
    the golden pipeline (compress -> NumPy densify -> adam_step) bit for bit."""
    np_rng = np.random.default_rng(rng.randrange(1 << 30))
    n = 1500
    k = max(1, int(n * density))
    fmt = Format[grad_format.upper()]
    size = 4 if fmt == Format.FP32 else 2
    p0 = np_rng.normal(0, 0.5, n).astype(np.float32)
    state = {}
    for path in ("stream", "scatter"):
        bufs = {name: dev.alloc(4 * n) for name in ("p", "m", "v", "dense")}
        bufs["p"].write(p0)
        bufs["m"].write(np.zeros(n, np.float32))
        bufs["v"].write(np.zeros(n, np.float32))
        bufs["idx"], bufs["val"] = dev.alloc(4 * k), dev.alloc(size * k + 64)
        state[path] = bufs
    want = (fp.bits(p0), np.zeros(n, np.uint32), np.zeros(n, np.uint32))
    residual = None
    for step in range(1, 11):
        g = np_rng.normal(0, 1e-2, n).astype(np.float32)
        c, residual = decomp.compress(g, k, residual=residual, fmt=fmt)
        sc = scalars_for_step(step, lr=1e-3, weight_decay=0.01)
        dense = decomp.densify(c.indices, c.values, n)
        *want, _, _ = adam_step(*want, dense, sc, grad_format=fmt)
        for path, b in state.items():
            b["idx"].write(c.indices)
            b["val"].write(c.values)
            if path == "stream":
                done = dev.adam.step(b["p"], b["m"], b["v"], b["val"], n=n, indices=b["idx"], pairs=c.k,
                                     scalars=sc, grad_format=grad_format)
            else:
                got = dev.decomp.scatter(b["dense"], b["idx"], b["val"], n=n, pairs=c.k, fmt=grad_format)
                assert got.aux == c.k
                assert np.array_equal(np.frombuffer(b["dense"].read(size * n), c.values.dtype), dense)
                done = dev.adam.step(b["p"], b["m"], b["v"], b["dense"], n=n, scalars=sc, grad_format=grad_format)
            assert done.ok
            for name, w in zip("pmv", want):
                assert np.array_equal(np.frombuffer(b[name].read(4 * n), np.uint32), w), f"{path} step {step}: {name}"
    for bufs in state.values():
        for b in bufs.values():
            b.free()


def test_sparse_bad_pairs(dev, rng):
    """Stream mode: a duplicate or an index >= n stops the update at a vector boundary
    (cpl aux = elements updated), nothing past it changes, the next command works."""
    n = 200
    lanes = dev.word_bytes // 4
    bufs = {name: Guarded(dev, 4 * n, rng) for name in ("p", "m", "v", "g", "idx")}
    a = {k: b.address for k, b in bufs.items()}
    sc = scalars_for_step(1, lr=1e-3)
    vals = np.full(8, 1e-2, np.float32)
    bufs["g"].outer.write(vals, 4096)
    for indices, code in (([1, 50, 90, 90, 120], ErrorCode.BAD_FIELD), ([3, 77, 250], ErrorCode.OUT_OF_WINDOW)):
        bufs["idx"].outer.write(np.array(indices, np.uint32), 4096)
        before = {k: b.read() for k, b in bufs.items()}
        with pytest.raises(DeviceError) as err:
            dev.adam.step(a["p"], a["m"], a["v"], a["g"], n=n, indices=a["idx"], pairs=len(indices), scalars=sc)
        assert err.value.code == code and err.value.field == "indices"
        _, _, updated = decomp.stream_stop(indices, n, lanes)
        assert updated % lanes == 0 and updated < n
        for name in "pmv":
            now = bufs[name].read()
            assert now[4 * updated:] == before[name][4 * updated:], f"{name} changed past element {updated}"
            bufs[name].check_guards()
    with pytest.raises(DeviceError) as err:
        dev.adam.step(a["p"], a["m"], a["v"], a["g"], n=n, indices=a["idx"], pairs=n + 1, scalars=sc)
    assert err.value.code == ErrorCode.BAD_FIELD and err.value.field == "pairs"
    bufs["idx"].outer.write(np.array([0, 5, 199], np.uint32), 4096)
    assert dev.adam.step(a["p"], a["m"], a["v"], a["g"], n=n, indices=a["idx"], pairs=3, scalars=sc).ok


def test_decomp_scatter_rules(dev, rng):
    """Repeats keep the last value, sentinels are skipped, an index >= n stops the
    command after the pairs before it; bad fields write nothing."""
    n = 300
    dst = Guarded(dev, 4 * n, rng)
    idx = Guarded(dev, 64 * 4, rng)
    val = Guarded(dev, 64 * 4, rng)
    indices = np.array([5, 7, 5, decomp.SENTINEL, 299, 0, 7], np.uint32)
    values = np.arange(1, 8, dtype=np.uint32) * 1000
    idx.outer.write(indices, 4096)
    val.outer.write(values, 4096)
    done = dev.decomp.scatter(dst.address, idx.address, val.address, n=n, pairs=7)
    assert done.aux == 6
    got = np.frombuffer(dst.outer.read(4 * n, 4096), np.uint32)
    assert np.array_equal(got, decomp.decompress_scatter(indices, values, Format.FP32, n))
    assert got[5] == 3000 and got[7] == 7000 and got[0] == 6000 and np.count_nonzero(got) == 4
    dst.check_guards()
    indices[4] = 300
    idx.outer.write(indices, 4096)
    with pytest.raises(DeviceError) as err:
        dev.decomp.scatter(dst.address, idx.address, val.address, n=n, pairs=7)
    assert err.value.code == ErrorCode.OUT_OF_WINDOW and err.value.field == "indices"
    got = np.frombuffer(dst.outer.read(4 * n, 4096), np.uint32)
    assert np.array_equal(got, decomp.decompress_scatter(indices[:4], values[:4], Format.FP32, n))
    dst.check_guards()
    dst.outer.write(np.arange(n, dtype=np.uint32), 4096)
    dst.contents = dst.read()
    for kwargs, code, field in ((dict(n=0), ErrorCode.ZERO_LENGTH, "n"), (dict(n=n, pairs=0), ErrorCode.ZERO_LENGTH,
                                "pairs"), (dict(n=n, dst_shift=4), ErrorCode.UNALIGNED, "dst")):
        shift = kwargs.pop("dst_shift", 0)
        with pytest.raises(DeviceError) as err:
            dev.decomp.scatter(dst.address + shift, idx.address, val.address, **{"pairs": 7, **kwargs})
        assert (err.value.code, err.value.field) == (code, field)
        assert dst.read() == dst.contents
        dst.check_guards()
    with pytest.raises(ValueError, match="fmt"):
        dev.decomp.scatter(dst.address, idx.address, val.address, n=n, pairs=7, fmt="int8")
