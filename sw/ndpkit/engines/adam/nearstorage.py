"""Near-storage optimizer: Adam/AdamW over parameters and state that live in storage
(Smart-Infinity's flow, on one or more cards).

The fp32 parameters ``p`` and the moments ``m``, ``v`` of ``n`` elements live in a
storage file (:class:`StorageFile`, the SSD: memory-mapped).  A step streams it chunk
by chunk: storage -> card (peer to peer: ``p``, ``m``, ``v`` never cross the host
link), gradient host -> card (dense or top-k compressed pairs), the ``adam`` engine
updates in place, card -> storage, and the updated parameters (a 16-bit copy, or fp32)
card -> host for the model.  Each card has a fixed number of reused buffer slots; a
slot's next chunk is loaded while the engine works on the other slot's (Smart-Infinity's
"data transfer handler"), and chunks go round-robin over the cards and, on a card
with several adam instances, over those (each with its buffers in its own memory region).

Host-link bytes per element and step: the gradient (4 or 2 B dense; 8 or 6 B per kept
pair compressed) down and the parameter copy (2 or 4 B) up, against ZeRO-Infinity's
offload which also moves p, m, v between storage and host both ways (24 B) —
:meth:`NearStorageAdam.host_link_baseline`.
"""
from __future__ import annotations

import fcntl
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ndpkit.arith import fp
from ndpkit.errors import NdpkitError
from ndpkit.engines.adam.golden import AdamScalars, Format, Mode, scalars_for_step
from ndpkit.engines.decomp.golden import Compressed, compress, widen

__all__ = ["StorageFile", "StateFileLocked", "NearStorageAdam", "StepStats", "golden_step"]

_FORMATS = {"fp32": Format.FP32, "fp16": Format.FP16, "bf16": Format.BF16}


def _format(name, what) -> Format:
    try:
        return _FORMATS[name]
    except KeyError:
        raise ValueError(f"{what} must be 'fp32', 'fp16' or 'bf16', not {name!r}") from None


class StateFileLocked(NdpkitError, BlockingIOError):
    """A state file is held by another :class:`StorageFile` (another process, or another
    optimizer in this one): two optimizers writing one file would drift apart silently.
    ``path`` is the state file, ``pid`` the holder's process id (None if it could not be
    read)."""

    def __init__(self, path, pid: int | None):
        self.path, self.pid = Path(path), pid
        who = "an unknown process" if pid is None else \
            (f"this process (pid {pid})" if pid == os.getpid() else f"process {pid}")
        super().__init__(f"optimizer state file {self.path} is in use by {who} (lock {_lock_path(self.path)}): "
                         "give each process (and each optimizer) its own storage_dir, or stop the other one")


def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def _lock(path: Path) -> int:
    """Take ``path``'s lock file (``flock``, exclusive, non-blocking) and write this
    process's id into it; the file descriptor holds the lock until it is closed."""
    lock = _lock_path(path)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            pid = int(text) if text.isdigit() else None
        finally:
            os.close(fd)
        raise StateFileLocked(path, pid) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


class StorageFile:
    """``n`` fp32 parameters with their Adam moments in a file, chunk-major: chunk ``c``
    is one record of ``3 * chunk`` words (``p``, ``m``, ``v`` of its elements; the last
    chunk's record is padded), so a chunk moves in one transfer each way.  The file is
    memory-mapped; :meth:`flush` writes it through.

    The file is locked while it is open (``flock`` on ``<path>.lock``, which names the
    holder's pid): a second :class:`StorageFile` on the same path, in this process or
    another, raises :class:`StateFileLocked` before touching the file.  :meth:`close`
    releases it."""

    def __init__(self, path, n: int, chunk: int, *, create: bool = True):
        if n < 1 or chunk < 1:
            raise ValueError(f"n and chunk must be positive, not n={n}, chunk={chunk}")
        self.path, self.n, self.chunk = Path(path), int(n), int(chunk)
        self.chunks = math.ceil(self.n / self.chunk)
        shape = (self.chunks, 3, self.chunk)
        self._lock_fd = _lock(self.path)            # before the file is created or truncated
        try:
            if not create and self.path.stat().st_size != int(np.prod(shape)) * 4:
                raise ValueError(f"{self.path} holds {self.path.stat().st_size} bytes, not a state of n={n}, "
                                 f"chunk={chunk}")
            self.map = np.memmap(self.path, dtype=np.uint32, mode="w+" if create else "r+", shape=shape)
        except BaseException:
            self._unlock()
            raise

    def _unlock(self) -> None:
        fd, self._lock_fd = getattr(self, "_lock_fd", None), None
        if fd is not None:
            os.close(fd)                             # closing the descriptor drops the flock

    def __del__(self):
        self._unlock()

    def chunk_range(self, c: int) -> tuple[int, int]:
        start = c * self.chunk
        return start, min(self.n, start + self.chunk)

    def record(self, c: int) -> np.ndarray:
        """Chunk ``c``'s record (uint32 view of the file: [p | m | v], chunk words each)."""
        return self.map[c]

    def _array(self, which: int) -> np.ndarray:
        return self.map[:, which, :].reshape(-1)[:self.n]

    def params(self) -> np.ndarray:
        return fp.floats(self._array(0)).copy()

    def moments(self) -> tuple[np.ndarray, np.ndarray]:
        return fp.floats(self._array(1)).copy(), fp.floats(self._array(2)).copy()

    def _set(self, which, values):
        values = np.asarray(values, dtype=np.float32).ravel()
        if values.size != self.n:
            raise ValueError(f"expected {self.n} values, got {values.size}")
        flat = np.zeros(self.chunks * self.chunk, dtype=np.uint32)
        flat[:self.n] = fp.bits(values)
        self.map[:, which, :] = flat.reshape(self.chunks, self.chunk)

    def get(self, which: int, index) -> np.ndarray:
        """Array ``which`` (0 ``p``, 1 ``m``, 2 ``v``) at element indices ``index`` (bits)."""
        index = np.asarray(index, dtype=np.int64)
        return np.asarray(self.map[index // self.chunk, which, index % self.chunk])

    def put(self, which: int, index, bits) -> None:
        index = np.asarray(index, dtype=np.int64)
        self.map[index // self.chunk, which, index % self.chunk] = bits

    def set_params(self, p) -> None:
        self._set(0, p)

    def set_moments(self, m, v) -> None:
        self._set(1, m)
        self._set(2, v)

    def flush(self) -> None:
        if self.map is not None:
            self.map.flush()

    def close(self) -> None:
        """Write the file through, unmap it and release its lock (a second call does nothing)."""
        if getattr(self, "map", None) is not None:
            self.flush()
            self.map = None
        self._unlock()


@dataclass
class StepStats:
    """One step's accounting: device cycles per card (the cards run in parallel, so the
    step's device time is the largest), bytes over each path, non-finite gradients."""
    cycles: list = field(default_factory=list)
    traffic: dict = field(default_factory=dict)
    nonfinite: int = 0
    chunks: int = 0
    pairs: int = 0

    @property
    def device_cycles(self) -> int:
        return max(self.cycles) if self.cycles else 0


@dataclass
class _Slot:
    pmv: object          # Buffer: p | m | v, chunk words each
    grad: object         # Buffer: dense gradient or pair values
    idx: object          # Buffer: pair indices
    copy: object         # Buffer: updated parameters for the host
    pending: tuple | None = None     # (chunk, Command)


class NearStorageAdam:
    """Adam/AdamW steps over a :class:`StorageFile` on one or more devices.

    ``param_copy``: what comes back to the host per element, 'fp16'/'bf16' (the engine's
    16-bit copy, what a GPU model in mixed precision uses) or 'fp32' (the parameters
    themselves).  ``density``: None for dense gradients, else the fraction of elements
    kept by top-k compression with error feedback (``exact_topk=False``: the faster
    threshold approximation); the pairs are decompressed inside the update (stream
    mode).  ``buffers``: buffer slots per device (2 overlaps a chunk's transfers with
    the previous chunk's update).
    """

    def __init__(self, devices, storage: StorageFile, *, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, mode: Mode = Mode.ADAMW, grad_format: str = "fp32",
                 param_copy: str = "fp16", density: float | None = None, exact_topk: bool = True,
                 buffers: int = 2):
        self.devices = list(devices) if isinstance(devices, (list, tuple)) else [devices]
        if not self.devices:
            raise ValueError("at least one device is needed")
        if buffers < 1:
            raise ValueError(f"buffers must be at least 1, not {buffers}")
        if density is not None and not 0 < density <= 1:
            raise ValueError(f"density must be in (0, 1], not {density}")
        self.storage = storage
        self.lr, self.betas, self.eps, self.weight_decay = lr, tuple(betas), eps, weight_decay
        self.mode = Mode(mode)
        self.grad_format = _format(grad_format, "grad_format")
        self.param_copy = _format(param_copy, "param_copy")
        self.density, self.exact_topk = density, exact_topk
        self.t = 0
        self.skipped = 0
        self.residual = np.zeros(storage.n, dtype=np.float32) if density is not None else None
        self.last = StepStats()
        for i, d in enumerate(self.devices):
            if "adam" not in d.engines:
                raise ValueError(f"devices[{i}] ({d.transport.kind} card with {', '.join(d.engines)}) has no adam "
                                 f"engine: open it with one, e.g. ndpkit.open('model?engines=adam')")
            lanes = d.word_bytes // 4
            if storage.chunk % lanes:
                raise ValueError(f"chunk ({storage.chunk}) must be a multiple of the bus lanes ({lanes}) so "
                                 f"p, m and v of a chunk start on bus words")
        self.buffers = buffers
        #: (device, adam instance) pairs the chunks go round-robin over: every instance
        #: of every card, each with its buffers in its own memory region
        self.lanes = [(d, client) for d in self.devices for client in d.instances["adam"]]
        self.slots: list[list[_Slot]] = []
        self.allocate()

    # -- card buffers --------------------------------------------------------------------
    def allocate(self) -> None:
        """Allocate every card's buffer slots (if they are not held already); on a
        failure (``OutOfDeviceMemory``) nothing stays allocated."""
        if self.slots:
            return
        c = self.storage.chunk
        sizes = (12 * c, (4 if self.grad_format == Format.FP32 else 2) * c, 4 * c,
                 (4 if self.param_copy == Format.FP32 else 2) * c)
        held = []
        try:
            for d, client in self.lanes:
                row = []
                for _ in range(self.buffers):
                    buffers = []
                    for size in sizes:
                        buffers.append(d.alloc(size, region=client.region))
                        held.append(buffers[-1])
                    row.append(_Slot(*buffers))
                self.slots.append(row)
        except BaseException:
            self.slots = []
            for b in held:
                b.free()
            raise

    def release(self) -> None:
        """Free the card buffers (waiting for commands still running); the state stays
        in storage and :meth:`allocate` (or the next step) takes new buffers."""
        slots, self.slots = self.slots, []
        for row in slots:
            for slot in row:
                if slot.pending:
                    try:
                        slot.pending[1].wait()
                    except Exception:       # the card failed: its buffers are freed all the same
                        pass
                    slot.pending = None
                for b in (slot.pmv, slot.grad, slot.idx, slot.copy):
                    b.free()

    # -- the step ------------------------------------------------------------------------
    def scalars(self, t: int, lr: float, grad_scale: float) -> AdamScalars:
        return scalars_for_step(t, lr=lr, beta1=self.betas[0], beta2=self.betas[1], eps=self.eps,
                                weight_decay=self.weight_decay, mode=self.mode, grad_scale=grad_scale)

    def step(self, grads, *, lr: float | None = None, grad_scale: float = 1.0,
             skip_nonfinite: bool = False) -> np.ndarray | None:
        """One step with the gradient of all ``n`` elements (float32/float16 array, or
        bit patterns in ``grad_format``).  Returns the updated parameters as
        ``param_copy`` (uint16 bit patterns for fp16/bf16, float32 for fp32), or None
        when ``skip_nonfinite`` found an inf/NaN gradient (the step is not taken, as a
        mixed-precision trainer skips it; ``skipped`` counts them)."""
        grads = np.asarray(grads).ravel()
        if grads.size != self.storage.n:
            raise ValueError(f"grads has {grads.size} elements, the state {self.storage.n}")
        g = self._in_format(grads)
        if skip_nonfinite and not np.all(np.isfinite(fp.floats(widen(g, self.grad_format)))):
            self.skipped += 1
            return None
        self.allocate()
        self.t += 1
        scalars = self.scalars(self.t, self.lr if lr is None else lr, grad_scale)
        copy_dtype = np.float32 if self.param_copy == Format.FP32 else np.uint16
        out = np.empty(self.storage.n, dtype=copy_dtype)
        before = [self._snapshot(d) for d in self.devices]
        stats = StepStats(chunks=self.storage.chunks)
        nslots = len(self.slots[0])
        try:
            for c in range(self.storage.chunks):
                lane = c % len(self.lanes)
                slot = self.slots[lane][(c // len(self.lanes)) % nslots]
                if slot.pending:
                    self._finish(slot, out, stats)
                self._start(self.lanes[lane][1], slot, c, g, scalars, stats)
            for slots in self.slots:
                for slot in slots:
                    if slot.pending:
                        self._finish(slot, out, stats)
        except BaseException:
            # the chunks done so far are updated in storage, the rest not: the caller
            # learns of it from the exception; the card memory is given back either way
            self.release()
            raise
        after = [self._snapshot(d) for d in self.devices]
        stats.cycles = [a[0] - b[0] for a, b in zip(after, before)]
        stats.traffic = {k: sum(a[1][k] - b[1][k] for a, b in zip(after, before)) for k in before[0][1]}
        self.last = stats
        return out

    def _in_format(self, grads) -> np.ndarray:
        if grads.dtype == np.float32 or grads.dtype == np.float64 or grads.dtype == np.float16:
            bits = fp.bits(grads.astype(np.float32))
            if self.grad_format == Format.FP32:
                return bits
            return fp.fp32_to_fp16(bits) if self.grad_format == Format.FP16 else fp.fp32_to_bf16(bits)
        want = np.uint32 if self.grad_format == Format.FP32 else np.uint16
        if grads.dtype != want:
            raise TypeError(f"gradient bit patterns for {self.grad_format.name} must be {np.dtype(want)}, "
                            f"not {grads.dtype}")
        return grads

    @staticmethod
    def _snapshot(d):
        return d.cycles(), dict(d.traffic)

    def _start(self, adam, slot: _Slot, c: int, g, scalars: AdamScalars, stats: StepStats) -> None:
        start, end = self.storage.chunk_range(c)
        n, chunk = end - start, self.storage.chunk
        slot.pmv.write_from_storage(self.storage.record(c))
        p, m, v = (slot.pmv.address + k * 4 * chunk for k in range(3))
        copy_fmt = None if self.param_copy == Format.FP32 else self.param_copy.name.lower()
        common = dict(n=n, scalars=scalars, mode=self.mode, grad_format=self.grad_format.name.lower(),
                      copy=None if copy_fmt is None else slot.copy, copy_format=copy_fmt, wait=False)
        if self.density is None:
            slot.grad.write(g[start:end])
            cmd = adam.step(p, m, v, slot.grad, **common)
        else:
            packed = self._compress(g[start:end], start, end)
            slot.idx.write(packed.indices)
            slot.grad.write(packed.values)
            stats.pairs += packed.k
            cmd = adam.step(p, m, v, slot.grad, indices=slot.idx, pairs=packed.k, **common)
        slot.pending = (c, cmd)

    def _compress(self, g, start, end) -> Compressed:
        n = end - start
        k = max(1, round(self.density * n))
        values = fp.floats(widen(g, self.grad_format))
        packed, self.residual[start:end] = compress(values, k, residual=self.residual[start:end],
                                                    fmt=self.grad_format, exact=self.exact_topk)
        return packed

    def _finish(self, slot: _Slot, out, stats: StepStats) -> None:
        c, cmd = slot.pending
        slot.pending = None
        done = cmd.wait()
        stats.nonfinite += done.aux
        start, end = self.storage.chunk_range(c)
        record = slot.pmv.read_to_storage(12 * self.storage.chunk)
        self.storage.record(c)[:] = np.frombuffer(record, np.uint32).reshape(3, self.storage.chunk)
        n = end - start
        if self.param_copy == Format.FP32:       # the parameters themselves, over the host link
            out[start:end] = np.frombuffer(slot.pmv.read(4 * n), np.float32)
        else:
            out[start:end] = np.frombuffer(slot.copy.read(2 * n), np.uint16)

    # -- accounting ------------------------------------------------------------------------
    def host_link_bytes(self) -> int:
        t = self.last.traffic
        return t.get("host_to_card", 0) + t.get("card_to_host", 0)

    def host_link_baseline(self) -> int:
        """ZeRO-Infinity-style offload of the same step: p, m, v storage -> host and back
        (24 B per element), the gradient down to the host and the parameter copy up to
        the accelerator, all over the host's PCIe."""
        n = self.storage.n
        gsize = 4 if self.grad_format == Format.FP32 else 2
        csize = 4 if self.param_copy == Format.FP32 else 2
        return n * (24 + gsize + csize)

    def close(self) -> None:
        self.release()
        self.storage.flush()


def golden_step(p, m, v, grads, t: int, *, chunk: int, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                weight_decay: float = 0.0, mode: Mode = Mode.ADAMW, grad_format: str = "fp32",
                density: float | None = None, residual=None, exact_topk: bool = True):
    """What :meth:`NearStorageAdam.step` computes, from the golden models alone: the
    gradient in ``grad_format`` (top-k per chunk with error feedback when ``density``
    is set; ``residual`` is updated in place), then ``adam_step`` on the whole arrays.
    ``p``, ``m``, ``v``: uint32 bit patterns; returns the new ``(p, m, v)``."""
    from ndpkit.engines.adam.golden import adam_step
    from ndpkit.engines.decomp.golden import densify
    fmt = _format(grad_format, "grad_format")
    g = fp.bits(np.asarray(grads, dtype=np.float32).ravel())
    if fmt != Format.FP32:
        g = fp.fp32_to_fp16(g) if fmt == Format.FP16 else fp.fp32_to_bf16(g)
    if density is not None:
        dense = np.zeros_like(g)
        for s in range(0, g.size, chunk):
            e = min(g.size, s + chunk)
            packed, residual[s:e] = compress(fp.floats(widen(g[s:e], fmt)), max(1, round(density * (e - s))),
                                             residual=residual[s:e], fmt=fmt, exact=exact_topk)
            dense[s:e] = densify(packed.indices, packed.values, e - s)
        g = dense
    scalars = scalars_for_step(t, lr=lr, beta1=betas[0], beta2=betas[1], eps=eps, weight_decay=weight_decay,
                               mode=mode)
    p, m, v, _, _ = adam_step(p, m, v, g, scalars, mode=mode, grad_format=fmt)
    return p, m, v
