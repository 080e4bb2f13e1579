"""The adam engine through the driver, on the model and on a sim card (128-bit bus,
4 lanes: the same RTL as the 512-bit build, a quicker Verilator build): multi-step
runs bit-exact to the golden model, bad commands rejected with nothing written."""
import numpy as np
import pytest

import ndpkit
from ndpkit import DeviceError, ErrorCode
from ndpkit.golden import fp
from ndpkit.golden.adam import Format, Mode, adam_step, scalars_for_step

from .test_device import Guarded

URI = "{}?data_width=128&engines=dma_copy,adam&mem_size=4M"
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
