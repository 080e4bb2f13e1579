"""ndpkit.torch.NearStorageAdam: a torch optimizer whose step runs on cards (model
transport here, one sim run), against the golden model (bit-exact) and against
torch.optim.AdamW (the outside oracle: rounding differences only, within a bound)."""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ndpkit                                                   # noqa: E402
from ndpkit.arith import fp# noqa: E402
from ndpkit.engines.adam.golden import Format, Mode                     # noqa: E402
from ndpkit.engines.adam.nearstorage import golden_step                      # noqa: E402
from ndpkit.torch import NearStorageAdam                        # noqa: E402

URI = "model?data_width=128&engines=adam"
#: torch.optim.AdamW vs NearStorageAdam after 100 steps of the MLP below: measured
#: 2.0e-6 (max |dp| / max |p|); the bound leaves room for other seeds and BLAS builds
ORACLE_REL_BOUND = 2e-5


def _ordered(a):
    b = a.view(np.int32).astype(np.int64)
    return np.where(b < 0, -(b & 0x7FFFFFFF), b)


def _net(dtype=torch.float32):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)).to(dtype)


def _data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 16, generator=g)
    return x, (x[:, :1] * 2 - x[:, 1:2]).sin()


def _train(model, opt, steps, x, y, each=None):
    for step in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x.to(next(model.parameters()).dtype)).float(), y)
        loss.backward()
        opt.step()
        if each:
            each(step, loss.item())
    return loss.item()


def _flat(model):
    return torch.cat([p.detach().reshape(-1).float() for p in model.parameters()]).numpy()


@pytest.fixture
def dev():
    with ndpkit.open(URI) as d:
        yield d


def test_oracle_torch_adamw_100_steps(dev, capsys):
    """Same network, data and hyper-parameters: the parameters stay within a relative
    bound of torch's over 100 steps (not zero: DeepSpeed's operation order, fma, and
    a division by the corrected sqrt, where torch uses lerp and addcdiv)."""
    x, y = _data()
    a, b = _net(), _net()
    oa = torch.optim.AdamW(a.parameters(), lr=1e-2, weight_decay=0.01)
    ob = NearStorageAdam(b.parameters(), dev, lr=1e-2, weight_decay=0.01, chunk=256)
    rows = []
    for step in range(100):
        la = _train(a, oa, 1, x, y)
        lb = _train(b, ob, 1, x, y)
        pa, pb = _flat(a), _flat(b)
        rows.append((step + 1, int(np.abs(_ordered(pa) - _ordered(pb)).max()),
                     float(np.abs(pa - pb).max() / np.abs(pa).max()), la, lb))
    with capsys.disabled():
        print("\nstep  max-ulp  rel-err   loss(torch)  loss(ndpkit)")
        for r in rows[::10] + rows[-1:]:
            print(f"{r[0]:4d} {r[1]:8d}  {r[2]:.2e}  {r[3]:.6f}     {r[4]:.6f}")
    assert rows[-1][2] < ORACLE_REL_BOUND
    assert abs(rows[-1][3] - rows[-1][4]) <= 0.05 * rows[-1][3] + 1e-5
    ob.close()


@pytest.mark.parametrize("adamw, density", [(True, None), (False, None), (True, 0.1)])
def test_bit_exact_to_golden(dev, adamw, density):
    """Flattened parameters equal the golden pipeline run on the flattened gradients."""
    x, y = _data()
    model = _net()
    opt = NearStorageAdam(model.parameters(), dev, lr=3e-3, weight_decay=0.05, adamw=adamw, chunk=128,
                          density=density)
    mode = Mode.ADAMW if adamw else Mode.ADAM
    p = fp.bits(_flat(model))
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    residual = np.zeros(p.size, np.float32)
    for t in range(1, 11):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        g = torch.cat([q.grad.reshape(-1) for q in model.parameters()]).numpy()
        opt.step()
        p, m, v = golden_step(p, m, v, g, t, chunk=128, lr=3e-3, weight_decay=0.05, mode=mode, density=density,
                              residual=residual)
        assert np.array_equal(fp.bits(_flat(model)), p), f"step {t}"
    opt.close()


def test_state_dict_round_trip_and_torch_compat(dev):
    x, y = _data()
    ref, part = _net(), _net()
    oref = NearStorageAdam(ref.parameters(), dev, lr=1e-2, chunk=128)
    _train(ref, oref, 10, x, y)
    opart = NearStorageAdam(part.parameters(), dev, lr=1e-2, chunk=128)
    _train(part, opart, 5, x, y)
    saved = opart.state_dict()
    assert set(saved["state"][0]) >= {"step", "exp_avg", "exp_avg_sq"} and float(saved["state"][0]["step"]) == 5
    resumed = NearStorageAdam(part.parameters(), dev, lr=1e-2, chunk=128)
    resumed.load_state_dict(saved)
    _train(part, resumed, 5, x, y)
    assert np.array_equal(_flat(part), _flat(ref))
    # the same state loads into torch's AdamW, and back
    torch_opt = torch.optim.AdamW(part.parameters(), lr=1e-2)
    torch_opt.load_state_dict(saved)
    torch_opt.step()
    back = NearStorageAdam(part.parameters(), dev, lr=1e-2, chunk=128)
    back.load_state_dict(torch_opt.state_dict())
    assert back._cores[0].t == 6
    for o in (oref, opart, resumed, back):
        o.close()


def test_grad_scaler_and_skip(dev):
    x, y = _data()
    model = _net()
    opt = NearStorageAdam(model.parameters(), dev, lr=1e-2, chunk=128, skip_nonfinite=True)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)
    before = _flat(model).copy()
    opt.zero_grad()
    scaler.scale(torch.nn.functional.mse_loss(model(x), y)).backward()
    scaler.step(opt)
    scaler.update()
    assert not np.array_equal(_flat(model), before)          # unscaled gradients, one step taken
    with torch.no_grad():
        next(model.parameters()).grad.fill_(float("inf"))
    now = _flat(model).copy()
    opt.step()                                                # the optimizer's own skip
    assert opt.skipped == 1 and np.array_equal(_flat(model), now)
    opt.close()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16bit_model_gets_the_engine_copy(dev, dtype):
    x, y = _data()
    model = _net(dtype)
    opt = NearStorageAdam(model.parameters(), dev, lr=1e-2, chunk=128)
    first = _train(model, opt, 1, x, y)
    last = _train(model, opt, 30, x, y)
    assert last < first
    master = opt._cores[0].storage.params()
    fmt = Format.BF16 if dtype == torch.bfloat16 else Format.FP16
    want = fp.fp32_to_bf16(fp.bits(master)) if fmt == Format.BF16 else fp.fp32_to_fp16(fp.bits(master))
    got = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(got, want)
    opt.close()


def test_bad_arguments(dev):
    model = _net()
    with pytest.raises(ValueError, match="lr"):
        NearStorageAdam(model.parameters(), dev, lr=-1)
    with pytest.raises(ValueError, match="betas"):
        NearStorageAdam(model.parameters(), dev, betas=(1.0, 0.9))
    mixed = [torch.nn.Parameter(torch.zeros(4)), torch.nn.Parameter(torch.zeros(4, dtype=torch.float16))]
    opt = NearStorageAdam(mixed, dev)
    for q in mixed:
        q.grad = torch.zeros_like(q)
    with pytest.raises(TypeError, match="one of"):
        opt.step()
    with pytest.raises(ValueError, match="partition must be one of"):
        NearStorageAdam(model.parameters(), dev, partition="zero")


def _rank(rank, world, init, out_dir, variant):
    """One rank: ``after`` builds the optimizer once the process group exists, ``before``
    builds it first (rank and world are read at the first step); both share one
    storage_dir (state files named per process).  ``given``: partition='given' by hand,
    each rank stepping its own gradients with no collectives."""
    import torch.distributed as dist
    x, y = _data()
    model = _net()
    storage = os.path.join(out_dir, "state")
    kwargs = dict(lr=1e-2, weight_decay=0.01, chunk=128, storage_dir=storage,
                  partition="given" if variant == "given" else "auto")
    with ndpkit.open(URI) as dev:
        if variant == "before":
            opt = NearStorageAdam(model.parameters(), dev, **kwargs)
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
        if variant != "before":
            opt = NearStorageAdam(model.parameters(), dev, **kwargs)
        for step in range(5):
            opt.zero_grad()
            lo, hi = rank * 128, (rank + 1) * 128           # each rank its half of the batch
            torch.nn.functional.mse_loss(model(x[lo:hi]), y[lo:hi]).backward()
            if step == 2:
                model[2].bias.grad = None                   # skipped this step, as torch does
            opt.step()
        np.save(os.path.join(out_dir, f"rank{rank}.npy"), _flat(model))
        np.save(os.path.join(out_dir, f"shard{rank}.npy"), opt._cores[0].storage.params())
        opt.close()
    dist.destroy_process_group()


def _one_process(dev, x, y, halves):
    """One process stepping on the mean of the given halves' gradients."""
    model = _net()
    opt = NearStorageAdam(model.parameters(), dev, lr=1e-2, weight_decay=0.01, chunk=128)
    for step in range(5):
        opt.zero_grad()
        grads = []
        for lo in halves:
            model.zero_grad()
            torch.nn.functional.mse_loss(model(x[lo:lo + 128]), y[lo:lo + 128]).backward()
            grads.append([q.grad.clone() for q in model.parameters()])
        for q, *gs in zip(model.parameters(), *grads):
            q.grad = sum(gs) / len(gs)
        if step == 2:
            model[2].bias.grad = None
        opt.step()
    opt.close()
    return _flat(model)


@pytest.mark.parametrize("variant", ["after", "before", "given"])
def test_distributed_two_ranks_gloo(dev, tmp_path, variant):
    """Two ranks (gloo), each owning half of the flattened parameters on its own card:
    both end with the same parameters, equal bit for bit to one process stepping on
    the averaged gradients (a parameter without a gradient in one step skipped there),
    whether the optimizer was built after the process group or before it; one state
    file per rank in the shared storage_dir.  ``given``: no sharding, no collectives,
    each rank equal to one process stepping its own half."""
    import torch.multiprocessing as mp
    init = f"file://{tmp_path / 'rendezvous'}"
    mp.spawn(_rank, args=(2, init, str(tmp_path), variant), nprocs=2, join=True)
    r0, r1 = np.load(tmp_path / "rank0.npy"), np.load(tmp_path / "rank1.npy")
    x, y = _data()
    assert sorted(f.name for f in (tmp_path / "state").glob("*.state")) == ["group0-part0-rank0.state",
                                                                           "group0-part0-rank1.state"]
    if variant == "given":
        assert np.array_equal(r0, _one_process(dev, x, y, [0])) and np.array_equal(r1, _one_process(dev, x, y, [128]))
        return
    assert np.array_equal(r0, r1)
    want = _one_process(dev, x, y, [0, 128])
    assert np.array_equal(want, r0)
    n = r0.size
    half = -(-n // 2)
    assert np.array_equal(np.load(tmp_path / "shard1.npy")[:n - half], want[half:])
