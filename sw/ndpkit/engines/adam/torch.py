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

- torch.optim's rules: hyperparameters are validated as ``torch.optim.AdamW`` does (at
  construction, for every added group, and at each step, since schedulers change them);
  ``amsgrad``, ``maximize``, ``foreach``, ``fused``, ``capturable`` and ``differentiable``
  are refused (``ValueError`` naming the option) at construction, in param groups and in
  loaded state dicts.  A parameter without a gradient is skipped as torch skips it:
  its values and state stay as they were and its own ``step`` count does not advance
  (a group whose parameters have different counts is updated in one pass per count).
  A parameter changed in place between steps (``p.data.mul_(...)``, loading weights)
  is honoured: the step starts from the changed value.
- Param groups: each has its own state file; ``lr`` (schedulers), betas, eps and
  weight decay are read from the group at every step.
- Card memory: every buffer is allocated before anything is updated, so a step that
  fails for memory (``OutOfDeviceMemory``) changes nothing and holds no card memory; a
  step that fails part-way (the card or its link failing) gives back its card memory and
  leaves the optimizer refusing further steps until a ``load_state_dict``.
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
#: torch.optim.AdamW options the adam engine has no mode for
UNSUPPORTED = ("amsgrad", "maximize", "foreach", "fused", "capturable", "differentiable")


def _check_hyperparameters(group: dict, where: str = "") -> None:
    """``torch.optim.AdamW``'s checks and messages (NaN fails every one), with the
    argument named and, for a param group, which one."""
    lr, betas, eps, weight_decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
    context = f" ({where})" if where else ""

    def fail(message):
        raise ValueError(message + context)
    if isinstance(lr, torch.Tensor) and lr.numel() != 1:
        fail("Tensor lr must be 1-element")
    if not 0.0 <= lr:
        fail(f"Invalid learning rate: {lr} (lr must be >= 0)")
    if not 0.0 <= eps:
        fail(f"Invalid epsilon value: {eps} (eps must be >= 0)")
    if len(betas) != 2:
        fail(f"Invalid betas: {betas} (betas must be a pair)")
    for i in (0, 1):
        if isinstance(betas[i], torch.Tensor) and betas[i].numel() != 1:
            fail(f"Tensor betas[{i}] must be 1-element")
        if not 0.0 <= betas[i] < 1.0:
            fail(f"Invalid beta parameter at index {i}: {betas[i]} (betas must be in [0, 1))")
    if not 0.0 <= weight_decay:
        fail(f"Invalid weight_decay value: {weight_decay} (weight_decay must be >= 0)")
    if not (all(isinstance(b, float) for b in betas) or all(isinstance(b, torch.Tensor) for b in betas)):
        fail("betas must be either both floats or both Tensors")


def _refuse_unsupported(group: dict, where: str) -> None:
    for option in UNSUPPORTED:
        if group.get(option):
            raise ValueError(f"{option}={group[option]!r} ({where}): NearStorageAdam does not support {option} "
                             "(the adam engine has no such mode); use torch.optim.AdamW for it")


class NearStorageAdam(torch.optim.Optimizer):
    def __init__(self, params, devices, *, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, adamw: bool = True, storage_dir=None, chunk: int = 1 << 16,
                 buffers: int = 2, density: float | None = None, exact_topk: bool = True,
                 skip_nonfinite: bool = False, process_group=None, amsgrad: bool = False, maximize: bool = False,
                 foreach: bool | None = None, fused: bool | None = None, capturable: bool = False,
                 differentiable: bool = False):
        defaults = dict(lr=lr, betas=tuple(betas) if isinstance(betas, (list, tuple)) else betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                        maximize=maximize, foreach=foreach, fused=fused, capturable=capturable,
                        differentiable=differentiable)
        _check_hyperparameters(defaults)
        _refuse_unsupported(defaults, "argument")
        self._cores: dict[int, _Core] = {}
        super().__init__(params, defaults)
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
        self._steps: dict[int, np.ndarray] = {}      # per group: each parameter's own step count
        self._written: dict[int, torch.Tensor] = {}  # per group: the parameter values last written
        self._broken: str | None = None
        self.lanes = max(d.word_bytes // 4 for d in self.devices)
        self.chunk = -(-chunk // self.lanes) * self.lanes

    def add_param_group(self, param_group: dict) -> None:
        where = f"param group {len(self.param_groups)}"
        _refuse_unsupported(param_group, where)
        super().add_param_group(param_group)
        _check_hyperparameters(self.param_groups[-1], where)

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
            try:
                core = _Core(self.devices, storage, mode=self.mode, grad_format=fmt, param_copy=fmt,
                             density=self.density, exact_topk=self.exact_topk, buffers=self.buffers)
            except BaseException:
                storage.close()
                raise
            self._cores[index] = core
            self._steps.setdefault(index, np.zeros(len(group["params"]), np.int64))
            self._written[index] = self._flat([p.detach() for p in group["params"]], group["params"][0].dtype)
        group = self.param_groups[index]
        core.lr, core.betas = float(group["lr"]), tuple(float(b) for b in group["betas"])
        core.eps, core.weight_decay = float(group["eps"]), float(group["weight_decay"])
        return core

    def _release_card_memory(self) -> None:
        for core in self._cores.values():
            core.release()

    def _honour_edits(self, index: int, current: torch.Tensor, start: int, end: int) -> None:
        """Parameters changed in place since the last step (``current``: the group's
        flattened parameters now): their new values become the master copy (for a
        16-bit model, the 16-bit value widened)."""
        bits = torch.int32 if current.dtype == torch.float32 else torch.int16
        changed = torch.nonzero(current[start:end].view(bits) != self._written[index][start:end].view(bits))
        changed = changed.reshape(-1).numpy()
        if changed.size:
            values = current[start:end][torch.from_numpy(changed)].to(torch.float32).numpy()
            self._cores[index].storage.put(0, changed, values.view(np.uint32))

    @staticmethod
    def _flat(tensors, dtype) -> torch.Tensor:
        return torch.cat([t.reshape(-1).to(dtype) for t in tensors]) if tensors else torch.zeros(0, dtype=dtype)

    # -- the step ------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure=None):
        if self._broken:
            raise RuntimeError(f"NearStorageAdam: {self._broken}; the optimizer state is partly updated: load a "
                               "state_dict (or make a new optimizer) to go on")
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        plans = []
        for index, group in enumerate(self.param_groups):
            _check_hyperparameters(group, f"param group {index}")
            n, start, end, fmt = self._layout(group)
            params = group["params"]
            has = torch.tensor([p.grad is not None for p in params], dtype=torch.float32)
            if self.world > 1:
                dist.all_reduce(has, group=self.group)       # a gradient on any rank counts
            has = has.numpy() > 0
            if not has.any():
                continue                                     # torch: nothing to do for this group
            grads = self._flat([p.grad if p.grad is not None else torch.zeros_like(p) for p in params],
                               params[0].dtype if fmt != "fp32" else torch.float32)
            if self.world > 1:
                reduced = grads.to(torch.float32)
                dist.all_reduce(reduced, group=self.group)
                grads = (reduced / self.world).to(grads.dtype)
            plans.append((index, group, n, start, end, fmt, grads[start:end], has))
        if self.skip_nonfinite and not all(bool(torch.isfinite(p[6]).all()) for p in plans):
            bad = torch.ones(1)
        else:
            bad = torch.zeros(1)
        if self.world > 1:
            dist.all_reduce(bad, group=self.group)           # every rank skips together
        if bad.item():
            self.skipped += 1
            return loss
        try:                    # every card buffer first: a step short of memory changes nothing
            for plan in plans:
                self._core(plan[0]).allocate()
        except BaseException:
            self._release_card_memory()
            raise
        try:
            for index, group, n, start, end, fmt, shard, has in plans:
                self._step_group(index, group, n, start, end, fmt, shard, has)
        except BaseException as e:
            self._release_card_memory()
            self._broken = f"a step failed part-way ({type(e).__name__}: {e})"
            raise
        return loss

    def _step_group(self, index, group, n, start, end, fmt, shard, has) -> None:
        core = self._cores[index]
        params = group["params"]
        current = self._flat([p.detach() for p in params], params[0].dtype)
        self._honour_edits(index, current, start, end)
        sizes = np.array([p.numel() for p in params])
        steps = self._steps[index] + has                     # each parameter's own count (torch)
        size = core.storage.n
        elem_has = np.zeros(size, bool)
        elem_has[:end - start] = np.repeat(has, sizes)[start:end]
        elem_step = np.zeros(size, np.int64)
        elem_step[:end - start] = np.repeat(steps, sizes)[start:end]
        full = np.zeros(size, dtype=_np_dtype(shard.dtype))
        full[:end - start] = _to_numpy(shard)
        out = np.zeros(size, dtype=np.float32 if fmt == "fp32" else np.uint16)
        out[:end - start] = _to_numpy(current[start:end])
        for t in np.unique(steps[has]):
            chosen = elem_has & (elem_step == t)
            if chosen[:end - start].all() and end > start:
                core.t = int(t) - 1
                out = core.step(full)
                continue
            # a pass for the elements at this count: the others keep their state exactly
            others = np.flatnonzero(~chosen)
            kept = [core.storage.get(k, others) for k in range(3)]
            residual = core.residual[others].copy() if core.residual is not None else None
            core.t = int(t) - 1
            result = core.step(np.where(chosen, full, 0).astype(full.dtype))
            for k in range(3):
                core.storage.put(k, others, kept[k])
            if residual is not None:
                core.residual[others] = residual
            out[chosen] = result[chosen]
        core.t = int(steps.max())
        self._steps[index] = steps
        new = _from_numpy(out[:end - start], fmt)
        if self.world > 1:
            per = math.ceil(n / self.world)
            padded = torch.zeros(per, dtype=new.dtype)
            padded[:new.numel()] = new
            pieces = [torch.empty_like(padded) for _ in range(self.world)]
            dist.all_gather(pieces, padded, group=self.group)
            new = torch.cat(pieces)[:n]
        offset = 0
        for p, stepped in zip(params, has):
            k = p.numel()
            if stepped:
                p.copy_(new[offset:offset + k].view_as(p).to(p.dtype))
            offset += k
        # what the parameters now hold: the stepped ones' new values, the others' as they were
        self._written[index] = new

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
            steps = self._steps[index]
            if self.world > 1:
                self.state[group["params"][0]] = {"step": torch.tensor(float(core.t)),
                                                  "steps": torch.from_numpy(steps.copy()),
                                                  "shard": (self.rank, self.world, start, end),
                                                  "exp_avg": m, "exp_avg_sq": v, "master": master}
                continue
            offset = 0
            for p, step in zip(group["params"], steps):
                k = p.numel()
                if step:        # torch keeps no state for a parameter it never stepped
                    self.state[p] = {"step": torch.tensor(float(step)),
                                     "exp_avg": m[offset:offset + k].view_as(p).clone(),
                                     "exp_avg_sq": v[offset:offset + k].view_as(p).clone(),
                                     "master": master[offset:offset + k].view_as(p).clone()}
                offset += k
        try:
            return super().state_dict()
        finally:
            self.state.clear()

    def load_state_dict(self, state_dict):
        # refused before anything changes: options the engine does not have, bad values
        for i, group in enumerate(state_dict["param_groups"]):
            _refuse_unsupported(group, f"loaded param group {i}")
            _check_hyperparameters(group, f"loaded param group {i}")
        for key, state in state_dict["state"].items():
            if "max_exp_avg_sq" in state:
                raise ValueError(f"amsgrad state (max_exp_avg_sq) for parameter {key}: NearStorageAdam does not "
                                 "support amsgrad")
        super().load_state_dict(state_dict)
        for index, group in enumerate(self.param_groups):
            params = group["params"]
            states = [self.state.get(p) or None for p in params]
            if not any(states):
                continue
            core = self._core(index)
            n, start, end, _ = self._layout(group)
            size = core.storage.n
            m, v, master = np.zeros(size, np.float32), np.zeros(size, np.float32), np.zeros(size, np.float32)
            first = next(s for s in states if s)
            if "shard" in first:
                rank, world, s0, s1 = first["shard"]
                if (rank, world, s0, s1) != (self.rank, self.world, start, end):
                    raise ValueError(f"this state is rank {rank} of {world}'s shard [{s0}, {s1}); this optimizer is "
                                     f"rank {self.rank} of {self.world} with [{start}, {end})")
                m[:end - start], v[:end - start] = first["exp_avg"].numpy(), first["exp_avg_sq"].numpy()
                master[:end - start] = first["master"].numpy()
                steps = first["steps"].numpy().astype(np.int64) if "steps" in first else \
                    np.full(len(params), int(float(first["step"])), np.int64)
            else:
                zeros = [torch.zeros_like(p, dtype=torch.float32) for p in params]
                flat_m = self._flat([s["exp_avg"] if s else z for s, z in zip(states, zeros)], torch.float32)
                flat_v = self._flat([s["exp_avg_sq"] if s else z for s, z in zip(states, zeros)], torch.float32)
                flat_p = self._flat([s.get("master", p.detach()) if s else p.detach() for s, p in zip(states, params)],
                                    torch.float32)
                m[:end - start], v[:end - start] = flat_m[start:end].numpy(), flat_v[start:end].numpy()
                master[:end - start] = flat_p[start:end].numpy()
                steps = np.array([int(float(s["step"])) if s else 0 for s in states], np.int64)
            core.storage.set_moments(m, v)
            core.storage.set_params(master)
            self._steps[index] = steps
            core.t = int(steps.max())
            self._written[index] = self._flat([p.detach() for p in params], params[0].dtype)
        self._broken = None
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
