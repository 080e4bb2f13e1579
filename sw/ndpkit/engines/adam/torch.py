"""PyTorch glue of the adam engine: :class:`NearStorageAdam`, a ``torch.optim.Optimizer`` whose step runs
on ndpkit cards next to the storage holding the optimizer state.

    opt = ndpkit.torch.NearStorageAdam(model.parameters(), devices=[dev], lr=1e-3,
                                       weight_decay=0.01, storage_dir="/mnt/ssd/optim")
    ...  loss.backward(); opt.step(); opt.zero_grad()

It stands in for ``torch.optim.AdamW`` (``adamw=False``: ``torch.optim.Adam`` with L2
decay): per parameter group the fp32 master parameters and both moments live in a
storage file (:class:`ndpkit.engines.adam.nearstorage.StorageFile`); a step sends the gradients to
the card(s), the card updates the state in place next to the storage, and the new
parameters come back into the model (16-bit for fp16/bf16 models: the engine's copy;
fp32 models get the fp32 parameters).  The arithmetic is DeepSpeed CPU Adam's order
(``ndpkit.engines.adam.golden``), not PyTorch's, so results differ from ``torch.optim.AdamW``
by rounding (see docs/engines/adam.md for the measured bound).

- Param groups: each has its own state file; ``lr`` (schedulers), betas, eps and
  weight decay are read from the group at every step.  A parameter without a gradient
  is updated with a zero gradient (decay and momentum still apply) - unlike torch,
  which skips it.
- GradScaler: ``scaler.step(opt)`` works as with any optimizer (it unscales the
  gradients and skips the step on inf/NaN).  ``skip_nonfinite=True`` makes the
  optimizer itself skip a step whose gradients hold inf/NaN.
- ``state_dict()``/``load_state_dict()`` use torch Adam's layout (``step``,
  ``exp_avg``, ``exp_avg_sq`` per parameter, plus ``master`` with the fp32
  parameters), so state moves between this optimizer and ``torch.optim.AdamW``.
- ``torch.distributed``: with an initialised process group each rank owns one shard of
  every group's flattened parameters (ZeRO stage-1 style): gradients are averaged and
  each rank keeps its shard (reduce-scatter; gloo has none, so all-reduce then slice),
  updates it on its own card(s), and the updated shards are all-gathered into every
  rank's model.  Do not also wrap the model in DDP (the optimizer already averages).
  ``state_dict()`` then holds the rank's shard (``shard`` entries), to be loaded by the
  same rank of the same world size.
- ``density``: top-k gradient compression with error feedback per chunk before the
  gradients cross the host link; the card decompresses inside the update.
"""
from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from ndpkit.engines.adam.golden import Mode
from ndpkit.engines.adam.nearstorage import NearStorageAdam as _Core, StorageFile

__all__ = ["NearStorageAdam"]

_FORMAT_OF_DTYPE = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


class NearStorageAdam(torch.optim.Optimizer):
    def __init__(self, params, devices, *, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, adamw: bool = True, storage_dir=None, chunk: int = 1 << 16,
                 buffers: int = 2, density: float | None = None, exact_topk: bool = True,
                 skip_nonfinite: bool = False, process_group=None):
        if not lr >= 0:
            raise ValueError(f"lr must be >= 0, not {lr}")
        if not 0 <= betas[0] < 1 or not 0 <= betas[1] < 1:
            raise ValueError(f"betas must be in [0, 1), not {betas}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))
        self.devices = list(devices) if isinstance(devices, (list, tuple)) else [devices]
        self.mode = Mode.ADAMW if adamw else Mode.ADAM
        self.chunk, self.buffers, self.density, self.exact_topk = chunk, buffers, density, exact_topk
        self.skip_nonfinite = skip_nonfinite
        self.skipped = 0         # steps skipped for inf/NaN gradients
        self._tmp = None
        if storage_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="ndpkit-optim-")
            storage_dir = self._tmp.name
        self.storage_dir = Path(storage_dir)
        self.storage_dir.mkdir(parents=True, exist_ok=True)
        self.group = process_group
        distributed = dist.is_available() and dist.is_initialized()
        self.world = dist.get_world_size(process_group) if distributed else 1
        self.rank = dist.get_rank(process_group) if distributed else 0
        self._cores: dict[int, _Core] = {}
        self.lanes = max(d.word_bytes // 4 for d in self.devices)
        self.chunk = -(-chunk // self.lanes) * self.lanes

    # -- per group: the flat layout and the core --------------------------------------
    def _layout(self, group) -> tuple[int, int, int, str]:
        """(n, shard start, shard end, format) of a group's flattened parameters."""
        params = group["params"]
        dtypes = {p.dtype for p in params}
        if len(dtypes) != 1 or next(iter(dtypes)) not in _FORMAT_OF_DTYPE:
            raise TypeError(f"a parameter group must hold one of float32/float16/bfloat16, not {dtypes}")
        n = sum(p.numel() for p in params)
        per = math.ceil(n / self.world)
        start = min(n, self.rank * per)
        return n, start, min(n, start + per), _FORMAT_OF_DTYPE[next(iter(dtypes))]

    def _core(self, index: int) -> _Core:
        core = self._cores.get(index)
        if core is None:
            group = self.param_groups[index]
            n, start, end, fmt = self._layout(group)
            shard = max(1, end - start)
            path = self.storage_dir / f"group{index}-rank{self.rank}.state"
            storage = StorageFile(path, shard, min(self.chunk, -(-shard // self.lanes) * self.lanes))
            flat = self._flat([p.detach() for p in group["params"]], torch.float32)
            master = np.zeros(shard, np.float32)
            master[:end - start] = flat[start:end].numpy()
            storage.set_params(master)
            storage.set_moments(np.zeros(shard), np.zeros(shard))
            core = _Core(self.devices, storage, mode=self.mode, grad_format=fmt, param_copy=fmt,
                         density=self.density, exact_topk=self.exact_topk, buffers=self.buffers)
            self._cores[index] = core
        group = self.param_groups[index]
        core.lr, core.betas, core.eps, core.weight_decay = group["lr"], tuple(group["betas"]), group["eps"], \
            group["weight_decay"]
        return core

    @staticmethod
    def _flat(tensors, dtype) -> torch.Tensor:
        return torch.cat([t.reshape(-1).to(dtype) for t in tensors]) if tensors else torch.zeros(0, dtype=dtype)

    # -- the step ------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        plans = []
        for index, group in enumerate(self.param_groups):
            n, start, end, fmt = self._layout(group)
            params = group["params"]
            grads = self._flat([p.grad if p.grad is not None else torch.zeros_like(p) for p in params],
                               params[0].dtype if fmt != "fp32" else torch.float32)
            if self.world > 1:
                reduced = grads.to(torch.float32)
                dist.all_reduce(reduced, group=self.group)
                grads = (reduced / self.world).to(grads.dtype)
            shard = grads[start:end]
            plans.append((index, group, n, start, end, fmt, shard))
        if self.skip_nonfinite and not all(bool(torch.isfinite(p[6]).all()) for p in plans):
            bad = torch.ones(1)
        else:
            bad = torch.zeros(1)
        if self.world > 1:
            dist.all_reduce(bad, group=self.group)           # every rank skips together
        if bad.item():
            self.skipped += 1
            return loss
        for index, group, n, start, end, fmt, shard in plans:
            core = self._core(index)
            full = np.zeros(core.storage.n, dtype=_np_dtype(shard.dtype))
            full[:end - start] = _to_numpy(shard)
            out = core.step(full)
            new = _from_numpy(out[:end - start], fmt)
            if self.world > 1:
                per = math.ceil(n / self.world)
                padded = torch.zeros(per, dtype=new.dtype)
                padded[:new.numel()] = new
                pieces = [torch.empty_like(padded) for _ in range(self.world)]
                dist.all_gather(pieces, padded, group=self.group)
                new = torch.cat(pieces)[:n]
            offset = 0
            for p in group["params"]:
                k = p.numel()
                p.copy_(new[offset:offset + k].view_as(p).to(p.dtype))
                offset += k
        return loss

    @property
    def last_stats(self):
        """Per group, the last step's :class:`ndpkit.engines.adam.nearstorage.StepStats`."""
        return {i: c.last for i, c in self._cores.items()}

    # -- state ----------------------------------------------------------------------------
    def state_dict(self):
        self.state.clear()
        for index, group in enumerate(self.param_groups):
            if index not in self._cores:
                continue
            core = self._core(index)
            n, start, end, _ = self._layout(group)
            m, v = (torch.from_numpy(a[:end - start]) for a in core.storage.moments())
            master = torch.from_numpy(core.storage.params()[:end - start])
            step = torch.tensor(float(core.t))
            if self.world > 1:
                self.state[group["params"][0]] = {"step": step, "shard": (self.rank, self.world, start, end),
                                                  "exp_avg": m, "exp_avg_sq": v, "master": master}
                continue
            offset = 0
            for p in group["params"]:
                k = p.numel()
                self.state[p] = {"step": step.clone(), "exp_avg": m[offset:offset + k].view_as(p).clone(),
                                 "exp_avg_sq": v[offset:offset + k].view_as(p).clone(),
                                 "master": master[offset:offset + k].view_as(p).clone()}
                offset += k
        try:
            return super().state_dict()
        finally:
            self.state.clear()

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        for index, group in enumerate(self.param_groups):
            states = [self.state.get(p) for p in group["params"]]
            if not any(states):
                continue
            core = self._core(index)
            n, start, end, _ = self._layout(group)
            first = next(s for s in states if s)
            size = core.storage.n
            m, v, master = np.zeros(size, np.float32), np.zeros(size, np.float32), np.zeros(size, np.float32)
            if "shard" in first:
                rank, world, s0, s1 = first["shard"]
                if (rank, world, s0, s1) != (self.rank, self.world, start, end):
                    raise ValueError(f"this state is rank {rank} of {world}'s shard [{s0}, {s1}); this optimizer is "
                                     f"rank {self.rank} of {self.world} with [{start}, {end})")
                m[:end - start], v[:end - start] = first["exp_avg"].numpy(), first["exp_avg_sq"].numpy()
                master[:end - start] = first["master"].numpy()
            else:
                flat_m = self._flat([s["exp_avg"] for s in states], torch.float32)
                flat_v = self._flat([s["exp_avg_sq"] for s in states], torch.float32)
                flat_p = self._flat([s.get("master", p.detach()) for s, p in zip(states, group["params"])],
                                    torch.float32)
                m[:end - start], v[:end - start] = flat_m[start:end].numpy(), flat_v[start:end].numpy()
                master[:end - start] = flat_p[start:end].numpy()
            core.storage.set_moments(m, v)
            core.storage.set_params(master)
            core.t = int(float(first["step"]))
        self.state.clear()

    def close(self) -> None:
        for core in self._cores.values():
            core.close()
            core.storage.close()
        self._cores.clear()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def _np_dtype(dtype):
    return np.float32 if dtype == torch.float32 else np.uint16


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    """float32 values, or the bit patterns of a 16-bit tensor."""
    if t.dtype == torch.float32:
        return t.numpy()
    return t.contiguous().view(torch.int16).numpy().view(np.uint16)


def _from_numpy(a: np.ndarray, fmt: str) -> torch.Tensor:
    if fmt == "fp32":
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
    bits = torch.from_numpy(np.ascontiguousarray(a, dtype=np.uint16).view(np.int16))
    return bits.view(torch.float16 if fmt == "fp16" else torch.bfloat16)
