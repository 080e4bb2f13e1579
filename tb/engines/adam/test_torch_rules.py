"""NearStorageAdam follows torch.optim's rules (model card): hyperparameter checks as
``torch.optim.AdamW`` makes them, options the engine lacks refused wherever they come
from, parameters without a gradient skipped, parameters edited in place honoured, and
card memory given back on every failure path.

The error cases are PyTorch's own: ``torch/testing/_internal/common_optimizers.py``
(``optim_error_inputs_func_adam`` / ``_adamw``, the inputs ``test_optim.py::
test_errors`` runs), run against both optimizers."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ndpkit                                                   # noqa: E402
from ndpkit.errors import DeviceError                           # noqa: E402
from ndpkit.torch import NearStorageAdam                        # noqa: E402
from ndpkit.engines.adam.torch import UNSUPPORTED               # noqa: E402
from ndpkit.engines.adam.nearstorage import StateFileLocked, golden_step   # noqa: E402
from ndpkit.arith import fp                                     # noqa: E402

URI = "model?data_width=128&engines=adam"
REL_BOUND = 2e-5            # torch.optim.AdamW vs the engine's arithmetic (test_torch.py)


@pytest.fixture
def dev():
    with ndpkit.open(URI) as d:
        yield d


def _net(dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).to(dtype)


def _grads(model, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(32, 8, generator=g).to(next(model.parameters()).dtype)
    model.zero_grad(set_to_none=True)
    model(x).float().pow(2).mean().backward()


def _flat(model):
    return torch.cat([p.detach().reshape(-1).float() for p in model.parameters()]).numpy()


def _close(a, b):
    return np.max(np.abs(a - b)) <= REL_BOUND * max(np.max(np.abs(b)), 1e-30)


# -- hyperparameters ------------------------------------------------------------------

def _torch_error_inputs():
    from torch.testing._internal import common_optimizers as co
    cases = co.optim_error_inputs_func_adam("cpu", torch.float32) + co.optim_error_inputs_func_adamw("cpu",
                                                                                                       torch.float32)
    return [pytest.param(c, id=c.optimizer_error_input.desc) for c in cases]


@pytest.mark.filterwarnings("ignore:optimizer contains a parameter group with duplicate parameters")
@pytest.mark.parametrize("case", _torch_error_inputs())
def test_pytorch_error_inputs(dev, case):
    """Each of PyTorch's Adam/AdamW error inputs: NearStorageAdam raises what AdamW raises,
    or (for an option the engine lacks) a ValueError naming that option."""
    inp = case.optimizer_error_input
    params = inp.params if inp.params is not None else [torch.nn.Parameter(torch.randn(1, 1))]
    if case.error_type is UserWarning:
        with pytest.warns(UserWarning, match=case.error_regex):
            NearStorageAdam(params, dev, **inp.kwargs)
        return
    with pytest.raises(case.error_type):
        torch.optim.AdamW(params, **inp.kwargs)
    refused = [o for o in UNSUPPORTED if inp.kwargs.get(o)]
    if refused:
        with pytest.raises(ValueError, match=f"{refused[0]}=True .*does not support {refused[0]}"):
            NearStorageAdam(params, dev, **inp.kwargs)
    else:
        with pytest.raises(case.error_type, match=case.error_regex):
            NearStorageAdam(params, dev, **inp.kwargs)


@pytest.mark.parametrize("kwargs, message", [
    ({"lr": -1e-3}, "Invalid learning rate: -0.001"), ({"lr": float("nan")}, "Invalid learning rate: nan"),
    ({"eps": -1e-8}, "Invalid epsilon value"), ({"eps": float("nan")}, "Invalid epsilon value: nan"),
    ({"weight_decay": -0.1}, "Invalid weight_decay value"),
    ({"weight_decay": float("nan")}, "Invalid weight_decay value: nan"),
    ({"betas": (0.9, 1.0)}, "Invalid beta parameter at index 1"), ({"betas": (-0.1, 0.9)}, "index 0"),
])
def test_hyperparameters_checked_as_torch_does(dev, kwargs, message):
    p = [torch.nn.Parameter(torch.randn(3))]
    with pytest.raises(ValueError, match=message.split(":")[0]):
        torch.optim.AdamW(p, **kwargs)
    with pytest.raises(ValueError, match=message):
        NearStorageAdam(p, dev, **kwargs)
    with pytest.raises(ValueError, match=f"{message}.*param group 1"):     # an added group too
        NearStorageAdam(p, dev).add_param_group({"params": [torch.nn.Parameter(torch.randn(2))], **kwargs})


def test_a_group_changed_to_a_bad_value_stops_the_step(dev):
    model = _net()
    opt = NearStorageAdam(model.parameters(), dev, lr=1e-2, chunk=64)
    _grads(model, 1)
    opt.step()
    before = _flat(model)
    opt.param_groups[0]["eps"] = float("nan")
    with pytest.raises(ValueError, match="Invalid epsilon value: nan.*param group 0"):
        opt.step()
    assert np.array_equal(_flat(model), before)
    opt.close()


# -- options the engine does not have -------------------------------------------------

@pytest.mark.parametrize("option", UNSUPPORTED)
def test_unsupported_options_refused_everywhere(dev, option):
    model = _net()
    with pytest.raises(ValueError, match=f"{option}=True \\(argument\\)"):
        NearStorageAdam(model.parameters(), dev, **{option: True})
    groups = [{"params": list(model[0].parameters())}, {"params": list(model[2].parameters()), option: True}]
    with pytest.raises(ValueError, match=f"{option}=True \\(param group 1\\)"):
        NearStorageAdam(groups, dev)
    opt = NearStorageAdam(list(model[0].parameters()), dev)
    with pytest.raises(ValueError, match=f"{option}=True \\(param group 1\\)"):
        opt.add_param_group({"params": list(model[2].parameters()), option: True})
    saved = opt.state_dict()
    saved["param_groups"][0][option] = True
    with pytest.raises(ValueError, match=f"{option}=True \\(loaded param group 0\\)"):
        opt.load_state_dict(saved)
    assert not opt.param_groups[0][option]              # nothing was loaded
    opt.close()


def test_amsgrad_state_refused(dev):
    model = _net()
    ref = torch.optim.AdamW(model.parameters(), amsgrad=True)
    _grads(model, 1)
    ref.step()
    saved = ref.state_dict()
    opt = NearStorageAdam(model.parameters(), dev)
    with pytest.raises(ValueError, match="amsgrad"):
        opt.load_state_dict(saved)
    for group in saved["param_groups"]:
        group["amsgrad"] = False            # the state still holds max_exp_avg_sq
    with pytest.raises(ValueError, match="max_exp_avg_sq"):
        opt.load_state_dict(saved)
    opt.close()


# -- parameters without a gradient ----------------------------------------------------

def test_parameters_without_a_gradient_are_skipped_as_torch_does(dev):
    """The last layer gets no gradient in steps 2 and 3: torch leaves it and its state
    alone and counts its steps separately; so does NearStorageAdam (bit for bit for the
    skipped values; the per-parameter step counts equal torch's; the parameters follow
    torch.optim.AdamW within the rounding bound throughout)."""
    ours, theirs = _net(), _net()
    opt = NearStorageAdam(ours.parameters(), dev, lr=1e-2, weight_decay=0.1, chunk=64)
    ref = torch.optim.AdamW(theirs.parameters(), lr=1e-2, weight_decay=0.1)
    for step in range(6):
        for model, o in ((ours, opt), (theirs, ref)):
            _grads(model, step)
            if step in (2, 3):
                for p in model[2].parameters():
                    p.grad = None
            before = [p.detach().clone() for p in model[2].parameters()]
            o.step()
            if step in (2, 3):
                assert all(torch.equal(p, b) for p, b in zip(model[2].parameters(), before))
        assert _close(_flat(ours), _flat(theirs)), step
    ours_steps = [float(s["step"]) for s in opt.state_dict()["state"].values()]
    theirs_steps = [float(s["step"]) for s in ref.state_dict()["state"].values()]
    assert ours_steps == theirs_steps == [6, 6, 4, 4]
    opt.close()


def test_a_group_without_gradients_is_not_touched(dev):
    model = _net()
    opt = NearStorageAdam(model.parameters(), dev)
    before = _flat(model)
    opt.step()                                          # no gradients at all
    assert np.array_equal(_flat(model), before) and opt.state_dict()["state"] == {}
    opt.close()


# -- in-place edits ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_in_place_edits_are_honoured(dev, dtype):
    """A parameter zeroed between steps (re-initialisation, pruning) stays zeroed as
    the next step's starting point, as with torch.optim.AdamW, instead of being
    overwritten from the optimizer's fp32 copy."""
    ours, theirs = _net(dtype), _net(dtype)
    opt = NearStorageAdam(ours.parameters(), dev, lr=1e-3, chunk=64)
    ref = torch.optim.AdamW(theirs.parameters(), lr=1e-3)
    for step in range(4):
        if step == 2:
            for model in (ours, theirs):
                with torch.no_grad():
                    model[0].weight.zero_()
                    model[2].bias.add_(1.0)
        for model, o in ((ours, opt), (theirs, ref)):
            _grads(model, step)
            o.step()
    w = ours[0].weight.detach().float().abs().max().item()
    assert w <= 2 * 2e-3                                     # two steps of lr from zero, not the old weights
    diff = np.abs(_flat(ours) - _flat(theirs)).max()
    assert diff <= (2e-5 if dtype == torch.float32 else 2 ** -7 * np.abs(_flat(theirs)).max() + 1e-3)
    opt.close()


# -- card memory on failure paths -------------------------------------------------------

def test_a_step_short_of_card_memory_changes_nothing_and_holds_nothing():
    """Two groups whose buffers do not both fit: the step raises OutOfDeviceMemory with
    every card buffer given back and no parameter or state changed."""
    with ndpkit.open(URI, mem_size="16K") as small:
        free = small.allocator.free_bytes
        params = [torch.nn.Parameter(torch.randn(200)), torch.nn.Parameter(torch.randn(200))]
        opt = NearStorageAdam([{"params": [params[0]]}, {"params": [params[1]]}], small, chunk=1024, buffers=2)
        for p in params:
            p.grad = torch.ones_like(p)
        before = [p.detach().clone() for p in params]
        with pytest.raises(ndpkit.OutOfDeviceMemory):
            opt.step()      # group 0's buffers (2 slots x 24 B x 200) fit, group 1's do not
        assert small.allocator.free_bytes == free
        assert all(torch.equal(p, b) for p, b in zip(params, before))
        assert opt.state_dict()["state"] == {}
        opt.close()
        assert small.allocator.free_bytes == free


def test_a_step_failing_part_way_gives_back_card_memory(dev, monkeypatch):
    """The card fails on the third chunk: the step raises, the card memory is free, the
    optimizer refuses to go on from a half-updated state until a state dict is loaded."""
    model = _net()
    opt = NearStorageAdam(model.parameters(), dev, lr=1e-2, chunk=32, buffers=2)
    _grads(model, 1)
    opt.step()
    saved = opt.state_dict()
    free = dev.allocator.size                           # nothing else is on this card
    real = type(dev.adam).step
    calls = {"n": 0}

    def failing(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise DeviceError("adam", 1, "p", detail="injected")
        return real(self, *args, **kwargs)
    monkeypatch.setattr(type(dev.adam), "step", failing)
    _grads(model, 2)
    with pytest.raises(DeviceError, match="injected"):
        opt.step()
    assert dev.allocator.free_bytes == free
    monkeypatch.setattr(type(dev.adam), "step", real)
    with pytest.raises(RuntimeError, match="partly updated"):
        opt.step()
    opt.load_state_dict(saved)
    opt.step()                                          # goes on from the saved state
    opt.close()
    assert dev.allocator.free_bytes == free


# -- state keyed by the tensor; state files per process, locked ----------------------------

def test_state_follows_the_tensor_not_the_group_index(dev, tmp_path):
    """DeepSpeed ZeRO-3 with sub-groups puts a different flat partition in the same param
    group at each step call (and leaves the group empty between them): each tensor has
    its own state, equal bit for bit to the golden model stepping it alone."""
    torch.manual_seed(3)
    tensors = [torch.nn.Parameter(torch.randn(300)), torch.nn.Parameter(torch.randn(500))]
    opt = NearStorageAdam([tensors[0]], dev, lr=1e-2, weight_decay=0.01, chunk=64, storage_dir=tmp_path)
    golden = [(fp.bits(t.detach().numpy().copy()), np.zeros(t.numel(), np.uint32),
               np.zeros(t.numel(), np.uint32)) for t in tensors]
    for t in range(1, 5):
        for i, p in enumerate(tensors):
            p.grad = torch.randn_like(p)
            grad = p.grad.clone()
            opt.param_groups[0]["params"] = [p]
            opt.step()
            opt.param_groups[0]["params"] = []
            assert torch.equal(p.grad, grad)                     # the caller's gradient untouched
            golden[i] = golden_step(*golden[i], grad.numpy(), t, chunk=64, lr=1e-2, weight_decay=0.01)
            assert np.array_equal(fp.bits(p.detach().numpy()), golden[i][0]), (t, i)
    opt.step()                                                   # an empty group: nothing to do
    assert sorted(f.name for f in tmp_path.glob("*.state")) == ["group0-part0-rank0.state",
                                                                "group0-part1-rank0.state"]
    opt.close()


_HOLDER = """
import sys
from ndpkit.engines.adam.nearstorage import StorageFile
s = StorageFile(sys.argv[1], 64, 64)
print("held", flush=True)
sys.stdin.read()
s.close()
"""


def test_a_state_file_held_by_another_process_is_refused(dev, tmp_path):
    """Another process holds the state file this optimizer would use: the step raises
    StateFileLocked naming the file and the holder's pid, nothing changed; once the
    holder lets go the step goes on.  A second optimizer of this process on the same
    storage_dir is refused the same way (naming this process)."""
    import subprocess
    import sys
    path = tmp_path / "group0-part0-rank0.state"
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        model = _net()
        opt = NearStorageAdam(model.parameters(), dev, lr=1e-2, chunk=64, storage_dir=tmp_path)
        _grads(model, 0)
        before = _flat(model)
        with pytest.raises(StateFileLocked, match=f"process {holder.pid}") as e:
            opt.step()
        assert e.value.pid == holder.pid and e.value.path == path and str(path) in str(e.value)
        assert np.array_equal(_flat(model), before) and opt.state_dict()["state"] == {}
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    opt.step()
    assert not np.array_equal(_flat(model), before)
    second = _net()
    other = NearStorageAdam(second.parameters(), dev, storage_dir=tmp_path)
    _grads(second, 0)
    with pytest.raises(StateFileLocked, match="this process") as e:
        other.step()
    assert isinstance(e.value, ndpkit.NdpkitError)
    other.close()
    opt.close()


# -- DeepSpeed tests/unit/ops/adam/test_cpu_adam.py -------------------------------------

@pytest.mark.parametrize("model_size", [64, 22, 55, 127, 1024, 1048576])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_deepspeed_cpu_adam_cases(model_size, dtype):
    """DeepSpeed's CPU-Adam unit test (``test_cpu_adam_opt``): the same random parameter
    and ten random gradients through ``torch.optim.AdamW`` (defaults) and the optimizer
    under test, equal within ``check_equal``'s atol 1e-2; sizes that are not multiples
    of the vector width (22, 55, 127) included.  Here the optimizer under test keeps its
    state on the card; a half-precision model gets the engine's 16-bit copy."""
    with ndpkit.open(URI, mem_size="64M") as dev:
        torch.manual_seed(0)
        start = torch.randn(model_size)
        param = torch.nn.Parameter(start.clone().to(dtype))
        ref = torch.nn.Parameter(start.clone())
        ours, theirs = NearStorageAdam([param], dev), torch.optim.AdamW([ref])
        for _ in range(10):
            grad = torch.randn(model_size)
            param.grad, ref.grad = grad.to(dtype), grad.to(dtype).float()
            ours.step()
            theirs.step()
        np.testing.assert_allclose(param.detach().float().numpy(), ref.detach().numpy(), atol=1e-2,
                                   err_msg="param-update mismatch!")
        ours.close()
