"""Train a small model with DeepSpeed, the optimizer step on an ndpkit card next to the
storage that holds the optimizer state (Smart-Infinity's setting, without a fork of
DeepSpeed), and compare with DeepSpeed's own CPU Adam under the same ZeRO config.

    DS_BUILD_OPS=0 .venv/bin/pip install -e '.[deepspeed]'
    .venv/bin/python examples/deepspeed_train.py                   # model card, ZeRO-2, CPU offload
    .venv/bin/python examples/deepspeed_train.py --stage 3 --sub-group-size 20000
    .venv/bin/python examples/deepspeed_train.py --processes 2     # two processes over gloo
    .venv/bin/python examples/deepspeed_train.py --device sim      # the RTL on Verilator (slow)

The client optimizer is ``ndpkit.torch.NearStorageAdam`` with its ``storage_dir`` (the
SSD); DeepSpeed gets ``zero_allow_untested_optimizer`` and ``zero_force_ds_cpu_optimizer:
false`` (docs/engines/adam.md, "DeepSpeed").  The baseline is DeepSpeed's ``AdamW`` from
the config, which with ``offload_optimizer`` is its CPU Adam (``DeepSpeedCPUAdam``: a JIT
compile of about two minutes the first time; ``--baseline none`` skips it).

Per step it prints both losses, then the bytes that crossed the host link per training
step: NearStorageAdam's measured gradients down and parameter copy up, against DeepSpeed
CPU Adam with its state swapped to NVMe (ZeRO-Infinity: p, m, v between the SSD and the
host both ways as well), and the optimizer state each keeps in host memory.
Runs on a machine without a GPU: DeepSpeed's CPU accelerator, gloo on 127.0.0.1.
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile

os.environ.setdefault("DS_ACCELERATOR", "cpu")

DEVICES = {"model": "model?data_width=128&engines=adam&mem_size=16M",
           "sim": "sim?data_width=128&engines=dma_copy,adam,decomp&mem_size=4M"}


def _config(args, world: int, baseline: bool) -> dict:
    zero = {"stage": args.stage}
    if args.offload and args.stage > 0:
        zero["offload_optimizer"] = {"device": "cpu"}
    if args.stage == 3 and args.sub_group_size:
        zero["sub_group_size"] = args.sub_group_size
    cfg = {"train_micro_batch_size_per_gpu": args.batch, "gradient_accumulation_steps": 1,
           "train_batch_size": args.batch * world, "zero_optimization": zero,
           "steps_per_print": 10 ** 9}
    if baseline:
        cfg["optimizer"] = {"type": "AdamW", "params": {"lr": args.lr, "weight_decay": args.weight_decay}}
    else:
        cfg.update(zero_allow_untested_optimizer=True, zero_force_ds_cpu_optimizer=False)
    if args.bf16:
        cfg["bf16"] = {"enabled": True}
    return cfg


def _model(args):
    import torch
    torch.manual_seed(0)
    w = args.width
    return torch.nn.Sequential(torch.nn.Linear(64, w), torch.nn.GELU(), torch.nn.Linear(w, w), torch.nn.GELU(),
                               torch.nn.Linear(w, 1))


def _batch(rank: int, step: int, batch: int):
    import torch
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(batch, 64, generator=g)
    return x, (x[:, :4].sum(1, keepdim=True) * 0.5).tanh()


def _train(args, rank: int, world: int, dev, storage_dir):
    """One run: DeepSpeed with NearStorageAdam (``dev`` given) or with its own CPU Adam."""
    import deepspeed
    import torch
    from ndpkit.torch import NearStorageAdam

    model = _model(args)
    opt = None
    if dev is not None:
        opt = NearStorageAdam(model.parameters(), dev, lr=args.lr, weight_decay=args.weight_decay,
                              chunk=args.chunk, storage_dir=storage_dir)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=_config(args, world, dev is None),
                                           model_parameters=model.parameters() if dev is None else None)
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    losses, link, baseline = [], [], []
    for step in range(args.steps):
        x, y = _batch(rank, step, args.batch)
        loss = torch.nn.functional.mse_loss(engine(x.to(dtype)).float(), y)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
        if opt is not None:
            link.append(opt.host_link_bytes())
            baseline.append(opt.host_link_baseline())
    parameters = sum(p.numel() for p in model.parameters()) if args.stage < 3 else \
        sum(p.ds_numel for p in model.parameters())
    if opt is not None:
        opt.close()
    engine.destroy()
    return {"losses": losses, "link": link, "baseline": baseline, "parameters": parameters}


def _worker(rank: int, world: int, port: int, args, out: dict | None):
    import deepspeed
    import ndpkit
    if "RANK" not in os.environ or world > 1:           # not started by DeepSpeed's launcher
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                          LOCAL_RANK=str(rank), LOCAL_SIZE=str(world))
    deepspeed.init_distributed(dist_backend="gloo")
    with tempfile.TemporaryDirectory(prefix="ndpkit-ds-") as tmp:
        storage = os.path.join(args.storage_dir or tmp, "optim")   # state files named per rank
        with ndpkit.open(DEVICES[args.device]) as dev:
            ours = _train(args, rank, world, dev, storage)
        theirs = _train(args, rank, world, None, None) if args.baseline == "cpu-adam" else None
    if rank == 0:
        _report(args, world, ours, theirs)
    if out is not None:
        out["ok"] = True


def _report(args, world, ours, theirs):
    n = ours["parameters"]
    print(f"\n{n}-parameter MLP, DeepSpeed ZeRO-{args.stage}"
          f"{' + CPU optimizer offload' if args.offload and args.stage else ''}"
          f"{', bf16' if args.bf16 else ''}, {world} process(es), NearStorageAdam on the {args.device} card")
    print(f"{'step':>4} {'loss (NearStorageAdam)':>24} {'loss (DeepSpeed CPU Adam)':>27}")
    for i, loss in enumerate(ours["losses"]):
        other = f"{theirs['losses'][i]:27.6f}" if theirs else f"{'-':>27}"
        print(f"{i + 1:4d} {loss:24.6f} {other}")
    link, base = ours["link"][-1], ours["baseline"][-1]
    print(f"\nhost-link bytes per training step, rank 0 (its partition of the {n} parameters):")
    print(f"  NearStorageAdam (gradients down, parameter copy up, measured): {link:>12,}")
    print(f"  DeepSpeed CPU Adam, state swapped to NVMe (ZeRO-Infinity):     {base:>12,}   "
          f"({base / link:.1f}x)")
    state = 12 * n // (world if args.stage else 1)
    print(f"optimizer state in host memory, rank 0: NearStorageAdam 0 B (on the SSD); "
          f"DeepSpeed CPU Adam with offload to host memory {state:,} B (fp32 p, m, v)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=sorted(DEVICES), default="model",
                    help="the card: the behavioural model (default) or the RTL on Verilator")
    ap.add_argument("--stage", type=int, choices=(0, 1, 2, 3), default=2, help="ZeRO stage (default 2)")
    ap.add_argument("--no-offload", dest="offload", action="store_false",
                    help="no CPU optimizer offload (default: offload_optimizer.device cpu)")
    ap.add_argument("--sub-group-size", type=int, default=0, help="ZeRO-3 sub_group_size")
    ap.add_argument("--bf16", action="store_true", help="DeepSpeed's bf16 section (DeepSpeed keeps the fp32 master)")
    ap.add_argument("--processes", type=int, default=1, help="processes (gloo on 127.0.0.1)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--width", type=int, default=192, help="hidden width of the MLP")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--chunk", type=int, default=4096, help="NearStorageAdam's chunk (elements)")
    ap.add_argument("--storage-dir", default=None, help="where the optimizer state lives (the SSD); default: a "
                    "temporary folder")
    ap.add_argument("--baseline", choices=("cpu-adam", "none"), default="cpu-adam",
                    help="also train with DeepSpeed's CPU Adam (first use compiles it: about two minutes)")
    args = ap.parse_args(argv)
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        print("DeepSpeed is not installed: DS_BUILD_OPS=0 .venv/bin/pip install -e '.[deepspeed]'", file=sys.stderr)
        return 2
    if args.baseline == "cpu-adam" and not (args.offload and args.stage > 0):
        args.baseline = "none"          # DeepSpeed uses its CPU Adam only with optimizer offload
        print("(no CPU optimizer offload: no DeepSpeed CPU Adam baseline)")
    if args.processes == 1:
        _worker(0, 1, _free_port(), args, None)
    else:
        import torch.multiprocessing as mp
        mp.start_processes(_worker, args=(args.processes, _free_port(), args, None), nprocs=args.processes,
                           start_method="spawn")
    return 0


if __name__ == "__main__":
    sys.exit(main())
