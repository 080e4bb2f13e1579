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
- State is keyed by the tensors it belongs to (a param group's parameters as they are
  at the step: their identities and shapes), not by the group's index: when the group's
  parameters change (DeepSpeed ZeRO-3 steps one sub-group's flat fp32 partition at a
  time in the same group; ZeRO-1/2 hand each group's partition in a one-group list),
  each list of tensors has its own state and its own state file.
- ``partition``: how the parameters relate to the other processes, decided when the
  first step (or ``state_dict``/``load_state_dict``) runs, as are the rank and the world
  size (so an optimizer built before the process group exists is right):

  * ``"shard"`` -- with an initialised process group each rank owns one shard of every
    group's flattened parameters (ZeRO stage-1 style): gradients are averaged and each
    rank keeps its shard (reduce-scatter; gloo has none, so all-reduce then slice),
    updates it on its own card(s), and the updated shards are all-gathered into every
    rank's model.  Do not also wrap the model in DDP (the optimizer already averages).
    ``state_dict()`` then holds the rank's shard (``shard`` entries), to be loaded by
    the same rank of the same world size.
  * ``"given"`` -- the parameters and gradients handed over are this process's whole
    problem (DeepSpeed's partition, its averaged gradients): no collectives, no second
    sharding.
  * ``"auto"`` (default) -- ``"given"`` when DeepSpeed drives the optimizer (the step is
    called from DeepSpeed's engine or ZeRO optimizer, or the parameters are DeepSpeed's
    flat partitions), else ``"shard"``.

- DeepSpeed: settings this optimizer cannot honour are refused at the first step, before
  anything is stepped (:class:`DeepSpeedConfigError`): ZeRO's own optimizer swapping to
  NVMe (``zero_optimization.offload_optimizer.device: "nvme"``: ndpkit's ``storage_dir``
  is the SSD path) and DeepSpeed's fp16 loss scaling with a non-fp32 master.
  :func:`check_deepspeed_config` makes the same checks on a config before
  ``deepspeed.initialize``.  See docs/engines/adam.md, "DeepSpeed".
- State files: ``group<g>-part<k>-rank<r>.state`` in ``storage_dir`` (``r`` the global
  rank when the first step ran), each locked while open; one held by another process
  raises :class:`ndpkit.engines.adam.nearstorage.StateFileLocked` naming the file and
  the holder's pid.
- ``density``: top-k gradient compression with error feedback per chunk before the
  gradients cross the host link; the card decompresses inside the update.
"""
from __future__ import annotations

import math
import sys
import tempfile
import weakref
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from ndpkit.engines.adam.golden import Mode
from ndpkit.engines.adam.nearstorage import NearStorageAdam as _Core, StateFileLocked, StorageFile
from ndpkit.errors import NdpkitError

__all__ = ["NearStorageAdam", "DeepSpeedConfigError", "StateFileLocked", "check_deepspeed_config"]

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


PARTITIONS = ("auto", "shard", "given")


class DeepSpeedConfigError(NdpkitError, ValueError):
    """A DeepSpeed setting NearStorageAdam cannot honour; ``setting`` names it as the
    DeepSpeed config spells it (``"zero_optimization.offload_optimizer.device"``)."""

    def __init__(self, setting: str, message: str):
        self.setting = setting
        super().__init__(f"DeepSpeed {setting}: {message}")


def _get(config, *path, default=None):
    """A value from a DeepSpeed config: a dict (as given to ``deepspeed.initialize``) or a
    ``DeepSpeedConfig`` (``engine._config``), by the dict's key path."""
    if isinstance(config, dict):
        node = config
        for key in path:
            if not isinstance(node, dict) or key not in node:
                return default
            node = node[key]
        return node
    attrs = {("zero_optimization", "offload_optimizer", "device"): ("zero_config", "offload_optimizer", "device"),
             ("zero_optimization", "stage"): ("zero_config", "stage"),
             ("fp16", "enabled"): ("float16_config", "enabled"),
             ("fp16", "fp16_master_weights_and_grads"): ("float16_config", "fp16_master_weights_and_grads")}
    node = config
    for name in attrs.get(path, ()):
        node = getattr(node, name, None)
        if node is None:
            return default
    return default if node is config else node


def _name(value) -> str:
    return str(getattr(value, "value", value)).lower() if value is not None else "none"


def check_deepspeed_config(config, master_dtype=torch.float32) -> None:
    """Raise :class:`DeepSpeedConfigError` for a DeepSpeed config (a dict or a JSON file's
    path as given to ``deepspeed.initialize``, or an engine's ``DeepSpeedConfig``) that NearStorageAdam
    cannot honour, when the parameters it is handed are ``master_dtype``:

    - ``zero_optimization.offload_optimizer.device: "nvme"``: ZeRO-Infinity would swap the
      optimizer state between the host and NVMe itself, on top of NearStorageAdam's own
      ``storage_dir`` (the SSD, next to the card): the state would cross the host link
      twice and live in two places.  Use ``"device": "cpu"`` (or no offload) with
      ``storage_dir`` on the SSD.
    - ``fp16.enabled`` with a non-fp32 master (``fp16.fp16_master_weights_and_grads``,
      or parameters handed over in 16 bits): DeepSpeed's dynamic loss scaling needs the
      fp32 master it unscales into; NearStorageAdam would step loss-scaled 16-bit values.
      Use ``bf16``, or fp16 with DeepSpeed's fp32 master (the default).
    """
    if isinstance(config, (str, Path)):             # a JSON file, as deepspeed.initialize takes it
        import json
        with open(config) as f:
            config = json.load(f)
    device = _name(_get(config, "zero_optimization", "offload_optimizer", "device"))
    if device == "nvme":
        raise DeepSpeedConfigError(
            "zero_optimization.offload_optimizer.device", '"nvme" (ZeRO-Infinity optimizer swapping) would keep '
            "the optimizer state on NVMe a second time beside NearStorageAdam's own storage_dir and move it over "
            'the host link every step; use "device": "cpu" (or no offload_optimizer) and put storage_dir on the SSD')
    if _get(config, "fp16", "enabled"):
        if _get(config, "fp16", "fp16_master_weights_and_grads"):
            raise DeepSpeedConfigError(
                "fp16.fp16_master_weights_and_grads", "true with fp16.enabled: DeepSpeed's loss scaling would hand "
                "NearStorageAdam loss-scaled fp16 master weights; NearStorageAdam needs an fp32 master (set it false, "
                "or use bf16)")
        if master_dtype != torch.float32:
            raise DeepSpeedConfigError(
                "fp16.enabled", f"DeepSpeed's fp16 loss scaling with a {master_dtype} master (parameters handed to "
                "NearStorageAdam): loss scaling needs an fp32 master; use DeepSpeed's fp32 master or bf16")


def _deepspeed_driver(params) -> tuple[bool, object]:
    """(driven, engine): whether DeepSpeed drives this call -- a frame of the ``deepspeed``
    package calls it, or a parameter carries DeepSpeed's partition attributes (``ds_id``,
    ``ds_tensor``) -- and the ``DeepSpeedEngine`` found up the stack (None if not)."""
    engine_module = sys.modules.get("deepspeed.runtime.engine")
    engine_cls = getattr(engine_module, "DeepSpeedEngine", None)
    driven, engine = False, None
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__", "").startswith("deepspeed."):
            driven = True
            me = frame.f_locals.get("self")
            if engine is None and engine_cls is not None and isinstance(me, engine_cls):
                engine = me
        frame = frame.f_back
    if not driven and "deepspeed" in sys.modules:
        driven = any(hasattr(p, "ds_id") or hasattr(p, "ds_tensor") for p in params)
    return driven, engine


class _Part:
    """The state of one list of tensors stepped together (a param group's parameters,
    or the flat partition DeepSpeed hands over for a group or a ZeRO-3 sub-group): its
    core and state file, each parameter's step count, the values last written."""

    def __init__(self, params, group: int, ordinal: int, core: _Core, written: torch.Tensor):
        self.refs = [weakref.ref(p) for p in params]
        self.group, self.ordinal, self.core, self.written = group, ordinal, core, written
        self.steps = np.zeros(len(params), np.int64)

    def holds(self, params) -> bool:
        return len(params) == len(self.refs) and all(r() is p for r, p in zip(self.refs, params))

    def close(self) -> None:
        self.core.close()
        self.core.storage.close()


def _key(params) -> tuple:
    return tuple((id(p), tuple(p.shape), p.dtype) for p in params)


class NearStorageAdam(torch.optim.Optimizer):
    def __init__(self, params, devices, *, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, adamw: bool = True, storage_dir=None, chunk: int = 1 << 16,
                 buffers: int = 2, density: float | None = None, exact_topk: bool = True,
                 skip_nonfinite: bool = False, process_group=None, partition: str = "auto",
                 amsgrad: bool = False, maximize: bool = False,
                 foreach: bool | None = None, fused: bool | None = None, capturable: bool = False,
                 differentiable: bool = False):
        defaults = dict(lr=lr, betas=tuple(betas) if isinstance(betas, (list, tuple)) else betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                        maximize=maximize, foreach=foreach, fused=fused, capturable=capturable,
                        differentiable=differentiable)
        _check_hyperparameters(defaults)
        _refuse_unsupported(defaults, "argument")
        if partition not in PARTITIONS:
            raise ValueError(f"partition must be one of {', '.join(map(repr, PARTITIONS))}, not {partition!r}")
        self._parts: dict[tuple, _Part] = {}
        self._latest: dict[int, _Part] = {}            # per group index: the part stepped last
        self._ordinals: dict[int, int] = {}            # per group index: the last part's number
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
        self.partition = partition
        #: set when the first step (or state_dict/load_state_dict) runs
        self.rank: int | None = None
        self.world: int | None = None
        self.deepspeed: bool | None = None       # whether DeepSpeed drives this optimizer
        self.partition_in_use: str | None = None  # "shard" or "given", once decided
        self._sharding = False                    # "shard" with more than one process
        self._ds_config = None
        self._broken: str | None = None
        self.lanes = max(d.word_bytes // 4 for d in self.devices)
        self.chunk = -(-chunk // self.lanes) * self.lanes

    def add_param_group(self, param_group: dict) -> None:
        where = f"param group {len(self.param_groups)}"
        _refuse_unsupported(param_group, where)
        super().add_param_group(param_group)
        _check_hyperparameters(self.param_groups[-1], where)

    # -- who we are: read when the first step runs --------------------------------------
    def _resolve(self) -> None:
        if self.world is not None:
            return
        params = [p for group in self.param_groups for p in group["params"]]
        driven, engine = _deepspeed_driver(params)
        config = getattr(engine, "_config", None)
        if config is not None:
            check_deepspeed_config(config)
        distributed = dist.is_available() and dist.is_initialized()
        world = dist.get_world_size(self.group) if distributed else 1
        rank = dist.get_rank(self.group) if distributed else 0
        partition = self.partition
        if partition == "auto":
            partition = "given" if driven else "shard"
        elif partition == "shard" and driven and world > 1:
            raise ValueError(
                f"NearStorageAdam(partition='shard') under DeepSpeed with {world} processes: DeepSpeed already "
                "hands each process its partition (ZeRO) or averaged gradients (stage 0); sharding them again "
                "gives wrong results. Use partition='auto' or 'given'")
        self.deepspeed, self._ds_config = driven, config
        self.partition_in_use = partition
        self._sharding = partition == "shard" and world > 1
        self.world, self.rank = world, rank
        self._file_rank = dist.get_rank() if distributed else 0

    # -- per list of tensors: the flat layout and the state ------------------------------
    def _layout(self, params) -> tuple[int, int, int, str]:
        """(n, shard start, shard end, format) of flattened parameters."""
        dtypes = {p.dtype for p in params}
        if len(dtypes) != 1 or next(iter(dtypes)) not in _FORMAT_OF_DTYPE:
            raise TypeError(f"a parameter group must hold one of float32/float16/bfloat16, not {dtypes}")
        n = sum(p.numel() for p in params)
        world, rank = (self.world, self.rank) if self._sharding else (1, 0)
        per = math.ceil(n / world)
        start = min(n, rank * per)
        return n, start, min(n, start + per), _FORMAT_OF_DTYPE[next(iter(dtypes))]

    def _find(self, params) -> _Part | None:
        part = self._parts.get(_key(params))
        return part if part is not None and part.holds(params) else None

    def _part(self, index: int, group: dict) -> _Part:
        """The state of the group's parameters as they are now, made on first use (the
        fp32 master from the parameters, zero moments)."""
        params = group["params"]
        part = self._find(params)
        if part is None:
            # parts whose tensors are gone (or whose id a new tensor reuses): state nobody can step
            for key in [k for k, q in self._parts.items() if any(r() is None for r in q.refs)
                        or k == _key(params)]:
                gone = self._parts.pop(key)
                gone.close()
                self._latest = {i: q for i, q in self._latest.items() if q is not gone}
            n, start, end, fmt = self._layout(params)
            shard = max(1, end - start)
            ordinal = self._ordinals.get(index, -1) + 1
            path = self.storage_dir / f"group{index}-part{ordinal}-rank{self._file_rank}.state"
            storage = StorageFile(path, shard, min(self.chunk, -(-shard // self.lanes) * self.lanes))
            try:
                flat = self._flat([p.detach() for p in params], torch.float32)
                master = np.zeros(shard, np.float32)
                master[:end - start] = flat[start:end].numpy()
                storage.set_params(master)
                storage.set_moments(np.zeros(shard), np.zeros(shard))
                core = _Core(self.devices, storage, mode=self.mode, grad_format=fmt, param_copy=fmt,
                             density=self.density, exact_topk=self.exact_topk, buffers=self.buffers)
            except BaseException:
                storage.close()
                raise
            part = _Part(params, index, ordinal, core,
                         self._flat([p.detach() for p in params], params[0].dtype))
            self._parts[_key(params)] = part
            self._ordinals[index] = ordinal
        core = part.core
        core.lr, core.betas = float(group["lr"]), tuple(float(b) for b in group["betas"])
        core.eps, core.weight_decay = float(group["eps"]), float(group["weight_decay"])
        self._latest[index] = part
        return part

    @property
    def _cores(self) -> dict:
        """Per group index, the core of the part stepped last (the only one, unless
        DeepSpeed ZeRO-3 steps sub-groups)."""
        return {i: part.core for i, part in self._latest.items()}

    def _release_card_memory(self) -> None:
        for part in self._parts.values():
            part.core.release()

    def _honour_edits(self, part: _Part, current: torch.Tensor, start: int, end: int) -> None:
        """Parameters changed in place since the last step (``current``: the part's
        flattened parameters now): their new values become the master copy (for a
        16-bit model, the 16-bit value widened)."""
        bits = torch.int32 if current.dtype == torch.float32 else torch.int16
        changed = torch.nonzero(current[start:end].view(bits) != part.written[start:end].view(bits))
        changed = changed.reshape(-1).numpy()
        if changed.size:
            values = current[start:end][torch.from_numpy(changed)].to(torch.float32).numpy()
            part.core.storage.put(0, changed, values.view(np.uint32))

    @staticmethod
    def _flat(tensors, dtype) -> torch.Tensor:
        return torch.cat([t.reshape(-1).to(dtype) for t in tensors]) if tensors else torch.zeros(0, dtype=dtype)

    # -- the step ------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure=None):
        if self._broken:
            raise RuntimeError(f"NearStorageAdam: {self._broken}; the optimizer state is partly updated: load a "
                               "state_dict (or make a new optimizer) to go on")
        self._resolve()
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        plans = []
        for index, group in enumerate(self.param_groups):
            _check_hyperparameters(group, f"param group {index}")
            params = group["params"]
            if not params:
                continue                                     # DeepSpeed ZeRO-3: another sub-group's turn
            n, start, end, fmt = self._layout(params)
            if self._ds_config is not None:
                check_deepspeed_config(self._ds_config, params[0].dtype)
            has = torch.tensor([p.grad is not None for p in params], dtype=torch.float32)
            if self._sharding:
                dist.all_reduce(has, group=self.group)       # a gradient on any rank counts
            has = has.numpy() > 0
            if not has.any():
                continue                                     # torch: nothing to do for this group
            grads = self._flat([p.grad if p.grad is not None else torch.zeros_like(p) for p in params],
                               params[0].dtype if fmt != "fp32" else torch.float32)
            if self._sharding:
                reduced = grads.to(torch.float32)
                dist.all_reduce(reduced, group=self.group)
                grads = (reduced / self.world).to(grads.dtype)
            plans.append((index, group, n, start, end, fmt, grads[start:end], has))
        if self.skip_nonfinite and not all(bool(torch.isfinite(p[6]).all()) for p in plans):
            bad = torch.ones(1)
        else:
            bad = torch.zeros(1)
        if self._sharding:
            dist.all_reduce(bad, group=self.group)           # every rank skips together
        if bad.item():
            self.skipped += 1
            return loss
        try:                    # every card buffer first: a step short of memory changes nothing
            parts = [self._part(plan[0], plan[1]) for plan in plans]
            for part in parts:
                part.core.allocate()
        except BaseException:
            self._release_card_memory()
            raise
        try:
            for part, (index, group, n, start, end, fmt, shard, has) in zip(parts, plans):
                self._step_part(part, group["params"], n, start, end, fmt, shard, has)
        except BaseException as e:
            self._release_card_memory()
            self._broken = f"a step failed part-way ({type(e).__name__}: {e})"
            raise
        return loss

    def _step_part(self, part: _Part, params, n, start, end, fmt, shard, has) -> None:
        core = part.core
        current = self._flat([p.detach() for p in params], params[0].dtype)
        self._honour_edits(part, current, start, end)
        sizes = np.array([p.numel() for p in params])
        steps = part.steps + has                             # each parameter's own count (torch)
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
        part.steps = steps
        new = _from_numpy(out[:end - start], fmt)
        if self._sharding:
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
        part.written = new

    @property
    def last_stats(self):
        """Per group, the last step's :class:`ndpkit.engines.adam.nearstorage.StepStats`
        (of the part stepped last: under DeepSpeed ZeRO-3 with sub-groups, the last
        sub-group; :attr:`part_stats` has them all)."""
        return {i: part.core.last for i, part in self._latest.items()}

    @property
    def part_stats(self):
        """Every part's last :class:`StepStats`, keyed ``(group index, part ordinal)``."""
        return {(part.group, part.ordinal): part.core.last for part in self._parts.values()}

    def host_link_bytes(self) -> int:
        """Bytes over the host link in every part's last step (the gradients down, the
        parameter copies up): one training step's, when every part steps once a training
        step (as under DeepSpeed, sub-groups included)."""
        return sum(part.core.host_link_bytes() for part in self._parts.values())

    def host_link_baseline(self) -> int:
        """The same parts' step through a ZeRO-Infinity-style offload (DeepSpeed CPU Adam
        with the state swapped to NVMe): p, m, v storage -> host -> storage as well."""
        return sum(part.core.host_link_baseline() for part in self._parts.values())

    # -- state ----------------------------------------------------------------------------
    def state_dict(self):
        self._resolve()
        self.state.clear()
        for index, group in enumerate(self.param_groups):
            params = group["params"]
            part = self._find(params) if params else None
            if part is None:
                continue
            core = part.core
            n, start, end, _ = self._layout(params)
            m, v = (torch.from_numpy(a[:end - start]) for a in core.storage.moments())
            master = torch.from_numpy(core.storage.params()[:end - start])
            steps = part.steps
            if self._sharding:
                self.state[params[0]] = {"step": torch.tensor(float(core.t)),
                                         "steps": torch.from_numpy(steps.copy()),
                                         "shard": (self.rank, self.world, start, end),
                                         "exp_avg": m, "exp_avg_sq": v, "master": master}
                continue
            offset = 0
            for p, step in zip(params, steps):
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
        self._resolve()
        super().load_state_dict(state_dict)
        for index, group in enumerate(self.param_groups):
            params = group["params"]
            states = [self.state.get(p) or None for p in params]
            if not any(states):
                continue
            part = self._part(index, group)
            core = part.core
            n, start, end, _ = self._layout(params)
            size = core.storage.n
            m, v, master = np.zeros(size, np.float32), np.zeros(size, np.float32), np.zeros(size, np.float32)
            first = next(s for s in states if s)
            if "shard" in first:
                rank, world, s0, s1 = first["shard"]
                if not self._sharding or (rank, world, s0, s1) != (self.rank, self.world, start, end):
                    mine = (f"rank {self.rank} of {self.world} with [{start}, {end})" if self._sharding
                            else "not sharding")
                    raise ValueError(f"this state is rank {rank} of {world}'s shard [{s0}, {s1}); this optimizer is "
                                     f"{mine}")
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
            part.steps = steps
            core.t = int(steps.max())
            part.written = self._flat([p.detach() for p in params], params[0].dtype)
        self._broken = None
        self.state.clear()

    def close(self) -> None:
        for part in self._parts.values():
            part.close()
        self._parts.clear()
        self._latest.clear()
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
