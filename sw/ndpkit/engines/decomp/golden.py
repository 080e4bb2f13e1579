"""Sparse gradients: the host compressor and the golden decompressor.

A compressed gradient of a chunk of ``n`` elements is ``k`` (index, value) pairs:
``uint32`` absolute indices into the chunk and values in fp32, fp16 or bf16 (bit
patterns).  Two decompression modes (the ``decomp`` engine's; this module is its
specification):

- **stream**: indices strictly ascending, every index < n; the pairs merge into a
  dense gradient stream (zeros elsewhere) that feeds the updater directly.
- **scatter** (any order, Smart-Infinity compatible): a dense buffer is zero-filled,
  then pairs are written in array order: a repeated index keeps the *last* value;
  index ``SENTINEL`` (0xFFFFFFFF) marks padding and is skipped.

Decompressed values are the exact fp32 widening of the stored values (+0 where no
pair names the element).

Compressor (:func:`compress`): exact top-k by magnitude (``np.argpartition``), or an
approximate threshold top-k (the threshold is the (1 - k/n) quantile of the
magnitudes of a random sample; every element at or above it is kept, so the count
is close to, not exactly, k), with error feedback: the residual (what was not sent,
including the 16-bit rounding of what was) is added to the next step's gradient.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ndpkit_spec.codes import ErrorCode
from ndpkit.arith import fp
from ndpkit_spec.engines.adam import Format
from ndpkit_spec.engines.decomp import SENTINEL
from ndpkit.transfer import check_ranges

__all__ = ["SENTINEL", "Compressed", "compress", "decompress_stream", "decompress_scatter", "check_stream",
           "stream_stop", "good_prefix", "densify", "widen"]



@dataclass
class Compressed:
    indices: np.ndarray     # uint32, ascending
    values: np.ndarray      # uint32 (fp32) or uint16 (fp16/bf16) bit patterns
    fmt: Format
    n: int

    @property
    def k(self) -> int:
        return len(self.indices)

    @property
    def nbytes(self) -> int:
        return self.indices.nbytes + self.values.nbytes


def widen(values, fmt: Format) -> np.ndarray:
    """Stored values -> fp32 bit patterns (exact)."""
    fmt = Format(fmt)
    if fmt == Format.FP32:
        return np.asarray(values, dtype=np.uint32)
    return fp.fp16_to_fp32(values) if fmt == Format.FP16 else fp.bf16_to_fp32(values)


def _narrow(bits32, fmt: Format) -> np.ndarray:
    if fmt == Format.FP32:
        return bits32.astype(np.uint32)
    return fp.fp32_to_fp16(bits32) if fmt == Format.FP16 else fp.fp32_to_bf16(bits32)


def compress(grad, k: int, *, residual=None, fmt: Format = Format.FP32, exact: bool = True,
             rng: np.random.Generator | None = None, sample: int = 65536) -> tuple[Compressed, np.ndarray]:
    """Top-k of ``grad + residual`` by magnitude; returns (compressed, new residual)."""
    x = np.asarray(grad, dtype=np.float32).ravel()
    n = x.size
    if not 0 < k <= n:
        raise ValueError(f"k must be in 1..{n}, not {k}")
    if residual is not None:
        x = x + np.asarray(residual, dtype=np.float32).ravel()
    mag = np.abs(x)
    if exact:
        chosen = np.sort(np.argpartition(mag, n - k)[n - k:]) if k < n else np.arange(n)
    else:
        rng = rng or np.random.default_rng(0)
        probe = mag if n <= sample else mag[rng.integers(0, n, sample)]
        threshold = np.quantile(probe, 1 - k / n)
        chosen = np.flatnonzero(mag >= threshold)
    fmt = Format(fmt)
    values = _narrow(fp.bits(x[chosen]), fmt)
    sent = np.zeros(n, dtype=np.float32)
    sent[chosen] = fp.floats(widen(values, fmt))
    return Compressed(chosen.astype(np.uint32), values, fmt, n), x - sent


def stream_stop(indices, n: int, lanes: int = 1) -> tuple[ErrorCode, str | None, int]:
    """The stream mode's rules, as the hardware meets them: ``(code, field, updated)``.

    0 < k <= n (ZERO_LENGTH / BAD_FIELD before anything runs); then pairs in order: the
    first pair whose index is >= n (OUT_OF_WINDOW) or not above the previous index
    (BAD_FIELD; duplicates included) stops the stream before the vector of ``lanes``
    elements that holds the previous pair: ``updated`` elements (a multiple of
    ``lanes``) were decompressed before it.  ``updated == n`` when the pairs are good."""
    idx = np.asarray(indices, dtype=np.int64)
    if idx.size == 0:
        return ErrorCode.ZERO_LENGTH, "k", 0
    if idx.size > n:
        return ErrorCode.BAD_FIELD, "k", 0
    j = good_prefix(idx, n)
    if j == idx.size:
        return ErrorCode.OK, None, n
    updated = 0 if j == 0 else (int(idx[j - 1]) // lanes) * lanes
    return (ErrorCode.OUT_OF_WINDOW if idx[j] >= n else ErrorCode.BAD_FIELD), "indices", updated


def good_prefix(indices, n: int) -> int:
    """How many leading pairs keep the stream rules (index < n, strictly ascending)."""
    idx = np.asarray(indices, dtype=np.int64)
    bad = idx >= n
    bad[1:] |= idx[1:] <= idx[:-1]
    hits = np.flatnonzero(bad)
    return int(hits[0]) if hits.size else idx.size


def check_stream(indices, n: int) -> tuple[ErrorCode, str | None]:
    """(code, field) of :func:`stream_stop`."""
    return stream_stop(indices, n)[:2]


def densify(indices, values, n: int) -> np.ndarray:
    """Dense array of ``n`` elements in the values' own format (zeros elsewhere); for
    good stream-mode pairs this is what the decompressor feeds the updater."""
    values = np.asarray(values)
    dense = np.zeros(n, dtype=values.dtype)
    dense[np.asarray(indices, dtype=np.int64)] = values
    return dense


def decompress_stream(indices, values, fmt: Format, n: int) -> np.ndarray:
    """Dense fp32 bit patterns of a stream-mode gradient (raises on a rule violation)."""
    code, field = check_stream(indices, n)
    if code:
        raise ValueError(f"stream-mode pairs break the rules: {code.name} ({field})")
    dense = np.zeros(n, dtype=np.uint32)
    dense[np.asarray(indices, dtype=np.int64)] = widen(values, fmt)
    return dense


def decompress_scatter(indices, values, fmt: Format, n: int) -> np.ndarray:
    """Scatter mode: zero-fill, then pairs in array order (last wins, sentinels skipped).
    An index other than the sentinel that is >= n is an error (ValueError)."""
    idx = np.asarray(indices, dtype=np.uint64)
    keep = idx != SENTINEL
    if np.any(idx[keep] >= n):
        raise ValueError("an index is >= n")
    dense = np.zeros(n, dtype=np.uint32)
    _scatter_last_wins(dense, idx[keep].astype(np.int64), widen(values, fmt)[keep])
    return dense


def _scatter_last_wins(dense, indices, values):
    # NumPy leaves the winner of repeated fancy-index writes unspecified: pick the last
    # occurrence of each index explicitly
    unique, first_in_reversed = np.unique(indices[::-1], return_index=True)
    dense[unique] = values[::-1][first_in_reversed]


# ---- the decomp engine's command (scatter mode): validation order and effect ---------

def command_ranges(cmd: dict, word_bytes: int) -> dict[str, tuple[int, int]]:
    """(address, byte length, rounded up to whole words) of the arrays a command names."""
    size = 4 if cmd["format"] == Format.FP32 else 2

    def words(nbytes):
        return -(-nbytes // word_bytes) * word_bytes

    return {"dst": (cmd["dst"], words(cmd["count"] * size)), "idx": (cmd["idx"], words(cmd["pairs"] * 4)),
            "val": (cmd["val"], words(cmd["pairs"] * size))}


def check(cmd: dict, *, word_bytes: int, window_base: int, window_size: int) -> tuple[int, str | None]:
    """(ErrorCode, offending argument) in the hardware's order (ndpkit_hw/engines/decomp/engine.py)."""
    if cmd["format"] > 2:
        return ErrorCode.BAD_FIELD, "fmt"
    if cmd["count"] == 0:
        return ErrorCode.ZERO_LENGTH, "n"
    if cmd["pairs"] == 0:
        return ErrorCode.ZERO_LENGTH, "pairs"
    return check_ranges(command_ranges(cmd, word_bytes), word_bytes, window_base, window_size)


def execute(memory: np.ndarray, cmd: dict, *, word_bytes: int, base: int = 0, window_base: int | None = None,
            window_size: int | None = None) -> tuple[int, int, int, int]:
    """Apply an accepted scatter command to ``memory`` (uint8 from card address ``base``):
    zero-fill, then pairs in order until a non-sentinel index >= n.  Returns (error,
    bytes read, bytes written, pairs written)."""
    n, k = cmd["count"], cmd["pairs"]
    dtype = np.uint32 if cmd["format"] == Format.FP32 else np.uint16
    size = np.dtype(dtype).itemsize
    ranges = command_ranges(cmd, word_bytes)
    indices = memory[cmd["idx"] - base:cmd["idx"] - base + 4 * k].view(np.uint32).astype(np.int64)
    values = memory[cmd["val"] - base:cmd["val"] - base + size * k].view(dtype)
    real = indices != SENTINEL
    bad = np.flatnonzero(real & (indices >= n))
    stop = int(bad[0]) if bad.size else k
    keep = real[:stop]
    dst = memory[cmd["dst"] - base:cmd["dst"] - base + size * n].view(dtype)
    dst[:] = 0
    _scatter_last_wins(dst, indices[:stop][keep], values[:stop][keep])
    written = int(keep.sum())
    error = ErrorCode.OUT_OF_WINDOW if bad.size else ErrorCode.OK
    return int(error), ranges["idx"][1] + ranges["val"][1], n * size + written * size, written
