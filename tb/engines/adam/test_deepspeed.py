"""NearStorageAdam as DeepSpeed's client optimizer (DeepSpeed on the CPU accelerator, gloo,
the model card): under ZeRO stages 0-3, with and without CPU optimizer offload, ZeRO-3
sub-groups, fp32 and bf16 (DeepSpeed's ``bf16`` section: DeepSpeed keeps the fp32 master,
the optimizer steps it), in one and two processes, the losses of several steps equal
those of ``torch.optim.AdamW`` under the same DeepSpeed config within rtol 1e-4.

Needs the ``deepspeed`` extra (``DS_BUILD_OPS=0 pip install -e '.[deepspeed]'``); skipped
without it.  Every case runs ``deepspeed.init_distributed``, which JIT-compiles DeepSpeed's
CPU shared-memory communication op the first time on a machine (about 30 s on an idle
two-core machine, minutes under load; cached in ``~/.cache/torch_extensions``), so the
matrix is ``long``: ``make sim`` runs it where the extra is installed, or
``pytest -n 0 -m long tb/engines/adam/test_deepspeed.py`` (about a minute once compiled).
``make test`` keeps the config check, which needs no compile.  The processes are started with torch.multiprocessing
(spawn) and meet over gloo on 127.0.0.1; all cases of one process count run in one set of
processes (one ``deepspeed.initialize`` per case and optimizer)."""
import json
import os
import socket
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
deepspeed = pytest.importorskip("deepspeed")

import ndpkit                                                   # noqa: E402
from ndpkit.engines.adam.torch import DeepSpeedConfigError      # noqa: E402
from ndpkit.torch import NearStorageAdam                        # noqa: E402

URI = "model?data_width=128&engines=adam"
STEPS = 5
RTOL = 1e-4
LR, WD = 1e-2, 0.01
SUB_GROUP_SIZE = 400            # the net below has 1217 parameters: 4 sub-groups under ZeRO-3

#: (stage, offload, sub_groups): offload needs ZeRO (stage >= 1), sub-groups are ZeRO-3's
SETTINGS = [(0, False, False), (1, False, False), (1, True, False), (2, False, False), (2, True, False),
            (3, False, False), (3, True, False), (3, False, True), (3, True, True)]
DTYPES = ("fp32", "bf16")
CASES = [(s, o, g, d) for s, o, g in SETTINGS for d in DTYPES]


def _case_id(case):
    stage, offload, sub, dtype = case
    return f"z{stage}-{'offload' if offload else 'nooffload'}-{'subgroups' if sub else 'whole'}-{dtype}"


def _config(case, world):
    stage, offload, sub, dtype = case
    zero = {"stage": stage}
    if offload:
        zero["offload_optimizer"] = {"device": "cpu"}
    if stage == 3:
        zero["sub_group_size"] = SUB_GROUP_SIZE if sub else 10 ** 9
    cfg = {"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 1,
           "train_batch_size": 16 * world, "zero_optimization": zero,
           "zero_allow_untested_optimizer": True, "zero_force_ds_cpu_optimizer": False,
           "steps_per_print": 10 ** 9, "wall_clock_breakdown": False}
    if dtype == "bf16":
        cfg["bf16"] = {"enabled": True}
    return cfg


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))


def _groups(model):
    """Two param groups (weights decayed, biases not): ZeRO-1/2 step one group at a time."""
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    return [{"params": weights, "weight_decay": WD}, {"params": biases, "weight_decay": 0.0}]


def _batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(16, 16, generator=g)
    return x, (x[:, :1] * 2 - x[:, 1:2]).sin()


def _train(case, world, rank, which, dev, storage_dir):
    model = _net()
    if which == "ndpkit":
        opt = NearStorageAdam(_groups(model), dev, lr=LR, weight_decay=WD, chunk=128, storage_dir=storage_dir)
    else:
        opt = torch.optim.AdamW(_groups(model), lr=LR, weight_decay=WD)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=_config(case, world))
    dtype = torch.bfloat16 if case[3] == "bf16" else torch.float32
    losses = []
    for step in range(STEPS):
        x, y = _batch(rank, step)
        loss = torch.nn.functional.mse_loss(engine(x.to(dtype)).float(), y)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    info = {}
    if which == "ndpkit":
        info = {"partition": opt.partition_in_use, "deepspeed": opt.deepspeed, "parts": len(opt._parts),
                "files": sorted(os.listdir(storage_dir))}
        opt.close()
    engine.destroy()
    return losses, info


def _worker(rank, world, port, cases, out_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_SIZE=str(world), DS_ACCELERATOR="cpu")
    import deepspeed as ds
    t0 = time.time()
    ds.init_distributed(dist_backend="gloo")
    results = {"init_distributed_s": time.time() - t0, "cases": {}}
    with ndpkit.open(URI, mem_size="4M") as dev:
        for case in cases:
            key = _case_id(case)
            storage = os.path.join(out_dir, key)           # shared by the ranks: files named per process
            os.makedirs(storage, exist_ok=True)
            try:
                ref, _ = _train(case, world, rank, "torch", None, None)
                got, info = _train(case, world, rank, "ndpkit", dev, storage)
                results["cases"][key] = {"torch": ref, "ndpkit": got, **info}
            except Exception as e:                        # reported per case, the others go on
                results["cases"][key] = {"error": f"{type(e).__name__}: {e}"}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)
    torch.distributed.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_matrix(world, cases, out_dir, timeout=900):
    """Run ``cases`` in ``world`` spawned processes; returns each rank's results."""
    import torch.multiprocessing as mp
    context = mp.start_processes(_worker, args=(world, _free_port(), cases, str(out_dir)), nprocs=world,
                                 join=False, start_method="spawn")
    deadline = time.monotonic() + timeout
    while not context.join(timeout=5):
        if time.monotonic() > deadline:
            for p in context.processes:
                p.kill()
            raise TimeoutError(f"the DeepSpeed matrix ({world} processes) did not finish in {timeout} s")
    return [json.load(open(os.path.join(out_dir, f"rank{r}.json"))) for r in range(world)]


def max_rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b) / np.abs(b)))


@pytest.fixture(scope="module", params=[1, 2], ids=["1proc", "2proc"])
def matrix(request, tmp_path_factory):
    world = request.param
    out = tmp_path_factory.mktemp(f"ds{world}")
    t0 = time.time()
    results = run_matrix(world, CASES, out)
    print(f"\nDeepSpeed matrix, {world} process(es): {time.time() - t0:.1f} s "
          f"(init_distributed {results[0]['init_distributed_s']:.1f} s)")
    return world, results


@pytest.mark.long
@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_matrix_against_adamw(matrix, case):
    """Every rank's losses over STEPS steps equal AdamW's under the same config (rtol
    1e-4); the optimizer ran in 'given' mode (DeepSpeed detected), one state file per
    part and process."""
    world, results = matrix
    key = _case_id(case)
    for rank, res in enumerate(results):
        got = res["cases"][key]
        assert "error" not in got, f"rank {rank}: {got.get('error')}"
        assert got["deepspeed"] and got["partition"] == "given"
        rel = max_rel(got["ndpkit"], got["torch"])
        assert rel <= RTOL, f"rank {rank}: ndpkit {got['ndpkit']} torch {got['torch']} (max rel {rel:.2e})"
        stage, _, sub, _ = case
        assert got["parts"] > 2 if sub else got["parts"] == 2   # two param groups; ZeRO-3 sub-groups: a part each
    files = sorted(results[0]["cases"][key]["files"])
    ranks = {f.split("-rank")[1].split(".")[0] for f in files if f.endswith(".state")}
    assert ranks == {str(r) for r in range(world)}


# -- settings NearStorageAdam cannot honour ---------------------------------------------

def test_check_deepspeed_config_refuses_nvme_and_fp16_master(tmp_path):
    """The config check alone (no DeepSpeed run): ZeRO-Infinity optimizer swapping to NVMe,
    fp16 loss scaling with a 16-bit master; DeepSpeed's own config object checked too."""
    from ndpkit.engines.adam.torch import check_deepspeed_config
    from deepspeed.runtime.config import DeepSpeedConfig
    nvme = {"train_batch_size": 1, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme",
                                                                                        "nvme_path": "/tmp"}}}
    for config in (nvme, DeepSpeedConfig(nvme)):
        with pytest.raises(DeepSpeedConfigError, match="zero_optimization.offload_optimizer.device") as e:
            check_deepspeed_config(config)
        assert e.value.setting == "zero_optimization.offload_optimizer.device"
    check_deepspeed_config({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(nvme))
    with pytest.raises(DeepSpeedConfigError, match="nvme"):
        check_deepspeed_config(str(path))
    fp16 = {"fp16": {"enabled": True}}
    check_deepspeed_config(fp16)                                 # DeepSpeed's fp32 master: fine
    with pytest.raises(DeepSpeedConfigError, match="fp16.enabled"):
        check_deepspeed_config(fp16, torch.float16)
    with pytest.raises(DeepSpeedConfigError, match="fp16_master_weights_and_grads"):
        check_deepspeed_config({"fp16": {"enabled": True, "fp16_master_weights_and_grads": True}})


def _refused_worker(rank, world, port, out_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
                      DS_ACCELERATOR="cpu")
    import deepspeed as ds
    ds.init_distributed(dist_backend="gloo")
    model = _net()
    before = [p.detach().clone() for p in model.parameters()]
    result = {}
    with ndpkit.open(URI) as dev:
        opt = NearStorageAdam(model.parameters(), dev, lr=LR, chunk=128, storage_dir=os.path.join(out_dir, "s"))
        config = _config((2, False, False, "fp32"), 1)
        config["zero_optimization"]["offload_optimizer"] = {"device": "nvme", "nvme_path": out_dir}
        engine, _, _, _ = ds.initialize(model=model, optimizer=opt, config=config)
        x, y = _batch(0, 0)
        engine.backward(torch.nn.functional.mse_loss(engine(x), y))
        try:
            engine.step()
        except DeepSpeedConfigError as e:
            result = {"setting": e.setting, "message": str(e)}
        result["unchanged"] = all(torch.equal(p.detach(), b) for p, b in zip(model.parameters(), before))
        result["parts"] = len(opt._parts)
        opt.close()
    with open(os.path.join(out_dir, "refused.json"), "w") as f:
        json.dump(result, f)
    torch.distributed.destroy_process_group()


@pytest.mark.long
def test_nvme_optimizer_offload_refused_at_first_step(tmp_path):
    """ZeRO-2 with ``offload_optimizer.device: nvme`` (which DeepSpeed's stage 1/2 accept
    without swapping anything): the first step raises DeepSpeedConfigError naming the
    setting; no parameter changed, no state made."""
    import torch.multiprocessing as mp
    mp.start_processes(_refused_worker, args=(1, _free_port(), str(tmp_path)), nprocs=1, start_method="spawn")
    result = json.load(open(tmp_path / "refused.json"))
    assert result.get("setting") == "zero_optimization.offload_optimizer.device", result
    assert "nvme" in result["message"] and result["unchanged"] and result["parts"] == 0
