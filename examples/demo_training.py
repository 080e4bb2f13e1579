"""The training part of `make demo`: a small PyTorch model trained with its optimizer
step offloaded to a simulated card next to (modelled) storage.

Two copies of one MLP train on the same data, one with dense fp32 gradients and one
with top-k compressed gradients (10 %, error feedback; the card decompresses inside
the update).  Per step: the loss of each, then the bytes that crossed the host link
against a ZeRO-Infinity-style offload that moves p, m and v through the host, and a
bit-exact check of the card's parameters against the golden models
(:func:`ndpkit.engines.adam.nearstorage.golden_step`).
"""
from __future__ import annotations

import tempfile

import numpy as np

from ndpkit.arith import fp
from ndpkit.engines.adam.nearstorage import golden_step

#: the card the training part opens (a 128-bit build with the optimizer engines; the
#: tests use the same configuration, so its Verilator build is shared)
TRAINING_URI = "sim?data_width=128&engines=dma_copy,adam,decomp&mem_size=4M"


def training_session(dev, *, steps: int = 6, seed: int = 0) -> dict:
    import torch
    from ndpkit.torch import NearStorageAdam

    torch.manual_seed(seed)
    x = torch.randn(512, 32)
    y = (x[:, :4].sum(1, keepdim=True) * 0.5).tanh()

    def net():
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(32, 96), torch.nn.GELU(), torch.nn.Linear(96, 96),
                                   torch.nn.GELU(), torch.nn.Linear(96, 1))

    runs = {}
    n = None
    with tempfile.TemporaryDirectory(prefix="ndpkit-demo-") as storage:
        for name, density in (("dense", None), ("top-10%", 0.1)):
            model = net()
            opt = NearStorageAdam(model.parameters(), dev, lr=3e-3, weight_decay=0.01, chunk=2048, density=density,
                                  storage_dir=f"{storage}/{name}")
            flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()]).numpy()
            n = flat.size
            ref = [fp.bits(flat), np.zeros(n, np.uint32), np.zeros(n, np.uint32)]
            residual = np.zeros(n, np.float32)
            losses, link, cycles, exact = [], 0, 0, True
            for t in range(1, steps + 1):
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                g = torch.cat([q.grad.reshape(-1) for q in model.parameters()]).numpy().copy()
                opt.step()
                stats = opt.last_stats[0]
                link += stats.traffic["host_to_card"] + stats.traffic["card_to_host"]
                cycles += stats.device_cycles
                ref = golden_step(*ref, g, t, chunk=opt.chunk, lr=3e-3, weight_decay=0.01, density=density,
                                  residual=residual)
                got = fp.bits(torch.cat([q.detach().reshape(-1) for q in model.parameters()]).numpy())
                exact &= bool(np.array_equal(got, ref[0]))
                losses.append(loss.item())
            baseline = opt._cores[0].host_link_baseline() * steps
            runs[name] = {"losses": losses, "host_link_bytes": link, "baseline_bytes": baseline,
                          "device_cycles": cycles, "bit_exact": exact}
            opt.close()
    return {"parameters": n, "steps": steps, "runs": runs}


def print_training(result: dict) -> bool:
    runs = result["runs"]
    names = list(runs)
    print(f"\ntraining a {result['parameters']}-parameter MLP, optimizer step on the card next to storage")
    print("step " + "".join(f"{'loss (' + k + ')':>20}" for k in names))
    for i in range(result["steps"]):
        print(f"{i + 1:4d} " + "".join(f"{runs[k]['losses'][i]:>20.6f}" for k in names))
    print(f"\n{'':<10}{'host link bytes':>17}{'ZeRO-Infinity-style':>21}{'ratio':>8}{'device cycles':>15}"
          f"{'golden check':>14}")
    ok = True
    for k in names:
        r = runs[k]
        ok &= r["bit_exact"]
        print(f"{k:<10}{r['host_link_bytes']:>17}{r['baseline_bytes']:>21}"
              f"{r['baseline_bytes'] / r['host_link_bytes']:>7.1f}x{r['device_cycles']:>15}"
              f"{'bit-exact' if r['bit_exact'] else 'MISMATCH':>14}")
    return ok
