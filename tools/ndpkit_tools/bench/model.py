"""System model: what the engines' measured cycle counts buy at system level.

A deliberately small analytic model (docs/bench/README.md lists every assumption).
The engine inputs are measured, never guessed: the Adam updater's elements per cycle
and the attention engine's steady-state efficiency and fixed cycles per command come
from the RTL benchmarks (``build/perf/*.json``); the platform figures (link, SSD, GPU
and HBM bandwidths) are the published systems' stated setups.  Every function is
pure, so the unit tests check hand-computed cases and monotonicity.

Units: bytes, seconds, bytes per second (``GB`` = 1e9 bytes) unless a name says
otherwise.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

GB = 1e9
GIB = 1 << 30


# --------------------------------------------------------------------------------------
# Storage-offloaded training (Smart-Infinity's setup)
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class OffloadSetup:
    """Smart-Infinity's testbed as the paper states it, with the SSD and GPU rates a
    reader can change.  Mixed-precision training: fp32 master parameters and Adam
    moments (12 B per parameter) live on the SSDs; fp16 parameters are read for the
    forward and backward passes."""
    ssds: int = 10
    ssd_read: float = 3.2 * GB            # per SSD, sequential (PM983-class NVMe; assumption)
    ssd_write: float = 2.0 * GB           # per SSD, sequential (assumption)
    host_link: float = 16 * GB            # shared by every SSD, both directions (Smart-Infinity)
    cpu_adam: float = 2e9                 # ZeRO-Infinity's host Adam, elements/s (assumption)
    gpu_flops: float = 312e12             # A100 dense fp16/bf16
    gpu_utilisation: float = 0.4          # of peak during forward/backward (assumption)
    tokens_per_step: int = 4 * 1024       # batch 4 x sequence 1024 (assumption)
    # the near-storage updater on each card: elements per cycle (measured) x clock (the bench report
    # passes the SmartSSD build's engine clock from its board file, ndpkit_tools.bench.report.offload_figures;
    # this default is a placeholder)
    engine_elements_per_cycle: float = 4.0
    engine_clock: float = 250e6

    @property
    def engine_rate(self) -> float:
        return self.engine_elements_per_cycle * self.engine_clock


# bytes per parameter per step
STATE_BYTES = 12          # fp32 p, m, v
FP16 = 2


def compute_phase(n_params: float, s: OffloadSetup) -> float:
    """Forward and backward: 6 N T flops on the GPU, overlapped with reading the fp16
    parameters twice from the SSDs over the shared link (the same in every scheme)."""
    flops = 6 * n_params * s.tokens_per_step / (s.gpu_flops * s.gpu_utilisation)
    reads = 2 * FP16 * n_params / min(s.host_link, s.ssds * s.ssd_read)
    return max(flops, reads)


def _ssd_time(read_bytes: float, write_bytes: float, s: OffloadSetup) -> float:
    """Every SSD holds 1/n of the states; a NAND device reads and writes in turn."""
    return (read_bytes / s.ssd_read + write_bytes / s.ssd_write) / s.ssds


def baseline_update(n_params: float, s: OffloadSetup) -> float:
    """ZeRO-Infinity: p, m, v from the SSDs to the host and back, the fp16 copy written
    back, Adam on the host CPU; transfers and the update overlap (the best case for
    the baseline)."""
    read, write = STATE_BYTES * n_params, (STATE_BYTES + FP16) * n_params
    return max((read + write) / s.host_link, _ssd_time(read, write, s), n_params / s.cpu_adam)


def gradient_bytes(density: float | None) -> float:
    """Host-to-card bytes per parameter: the fp16 gradient, or top-k pairs (int32 index
    + fp16 value) of the given density."""
    return FP16 if density is None else density * (4 + FP16)


def near_storage_update(n_params: float, s: OffloadSetup, *, overlap: bool = True,
                        density: float | None = None) -> float:
    """The update on the card beside each SSD: only the gradient crosses the shared
    link; p, m, v move SSD <-> card peer to peer, the card writes the fp16 copy back.
    ``overlap`` (Smart-Infinity's transfer handler): the gradient upload, the SSD
    traffic and the engine run concurrently on different chunks; without it, one
    after another.  ``density``: compressed gradients (the engine decompresses)."""
    upload = gradient_bytes(density) * n_params / min(s.host_link, s.ssds * s.ssd_write)
    ssd = _ssd_time(STATE_BYTES * n_params, (STATE_BYTES + FP16) * n_params, s)
    engine = n_params / (s.ssds * s.engine_rate)
    return max(upload, ssd, engine) if overlap else upload + ssd + engine


def training_step(n_params: float, s: OffloadSetup, scheme: str, density: float | None = None) -> float:
    """Seconds per training step; scheme: ``zero-infinity``, ``update-offload``
    (near-storage, serial phases), ``transfer-handler`` (near-storage, overlapped) or
    ``compressed`` (overlapped, top-k gradient of ``density``)."""
    if scheme == "zero-infinity":
        update = baseline_update(n_params, s)
    elif scheme == "update-offload":
        update = near_storage_update(n_params, s, overlap=False)
    elif scheme == "transfer-handler":
        update = near_storage_update(n_params, s, overlap=True)
    elif scheme == "compressed":
        update = near_storage_update(n_params, s, overlap=True, density=0.01 if density is None else density)
    else:
        raise ValueError(f"scheme: unknown {scheme!r}")
    return compute_phase(n_params, s) + update


SCHEMES = ("update-offload", "transfer-handler", "compressed")


def training_speedups(n_params: float, s: OffloadSetup, density: float = 0.01) -> dict[str, float]:
    """Each near-storage scheme's speed-up over ZeRO-Infinity for one model and setup."""
    base = training_step(n_params, s, "zero-infinity")
    return {scheme: base / training_step(n_params, s, scheme, density) for scheme in SCHEMES}


# --------------------------------------------------------------------------------------
# Decode with the attention offloaded to cards (the HPU's setup)
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer (Llama-2-7B by default: multi-head attention)."""
    params: float = 6.74e9
    layers: int = 32
    heads: int = 32
    kv_heads: int = 32
    head_dim: int = 128
    bytes_per_value: int = 2              # fp16 weights and KV cache

    @property
    def weight_bytes(self) -> float:
        return self.params * self.bytes_per_value

    def kv_bytes_per_token(self) -> int:
        """K and V of one token over all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.bytes_per_value


@dataclass(frozen=True)
class DecodeSetup:
    """GPU (an L40S, as in the HPU paper) with 0..n attention cards (Alveo U55C)."""
    gpu_bandwidth: float = 864 * GB
    gpu_memory: float = 48 * GB
    gpu_flops: float = 181e12             # L40S dense fp16 tensor
    gpu_efficiency: float = 0.8           # achieved share of memory bandwidth (assumption)
    gpu_reserve: float = 2 * GB           # activations, workspace, CUDA context (assumption)
    card_hbm: float = 460 * GB
    channel_bandwidth: float = 14.4 * GB  # one HBM pseudo-channel: 256 bits at 450 MHz (PG276)
    card_memory: float = 16 * GIB         # the report passes the build's: its instances' channels
    card_link: float = 16 * GB            # PCIe 4.0 x8, per direction
    # our attention engine on the card: port width, clock (the board build's, within what
    # its logic depth supports), the attention instances of the board's default build, the
    # measured steady-state efficiency / fixed cycles per command and the measured scaling
    # of N instances at once over one instance (the report passes all of them: the U55C
    # default build by the resource model, the benches)
    port_bytes: int = 64
    clock: float = 200e6
    engines_per_card: int = 8
    steady_efficiency: float = 1.0
    scaling: float = 1.0
    fixed_cycles: float = 1141.0
    context_in: int = 1024
    context_out: int = 1024

    @property
    def mean_context(self) -> float:
        """The mean cached length over the generated tokens."""
        return self.context_in + (self.context_out - 1) / 2


def gpu_max_batch(m: ModelShape, s: DecodeSetup) -> int:
    """Largest batch whose KV cache at the final context fits beside the weights."""
    free = s.gpu_memory - m.weight_bytes - s.gpu_reserve
    per_sequence = (s.context_in + s.context_out) * m.kv_bytes_per_token()
    return max(0, int(free // per_sequence))


def gpu_step_time(batch: int, m: ModelShape, s: DecodeSetup, with_attention: bool = True) -> float:
    """One decode step on the GPU at its memory (or compute) limit: the weights once per
    step, plus every sequence's KV cache when the GPU runs attention itself."""
    data = m.weight_bytes + (batch * s.mean_context * m.kv_bytes_per_token() if with_attention else 0)
    return max(data / (s.gpu_bandwidth * s.gpu_efficiency), 2 * m.params * batch / s.gpu_flops)


def card_bandwidth(s: DecodeSetup) -> float:
    """KV bytes per second one card streams in the steady state: instances x port bytes
    x clock x the measured per-instance efficiency x the measured scaling of the
    instances together, each instance capped by its pseudo-channel and the card by its HBM."""
    instance = min(s.channel_bandwidth, s.port_bytes * s.clock * s.steady_efficiency * s.scaling)
    return min(s.card_hbm, s.engines_per_card * instance)


def card_step_time(batch: int, cards: int, m: ModelShape, s: DecodeSetup) -> float:
    """Attention of one decode step on ``cards`` cards (batch split evenly): each
    layer is one command per engine (its fixed cycles) plus the KV bytes at the
    card's bandwidth, plus q, k, v in and the output back over the card's link."""
    per_card = math.ceil(batch / cards)
    kv = per_card * s.mean_context * m.kv_bytes_per_token()
    fixed = m.layers * s.fixed_cycles / s.clock
    hidden = m.heads * m.head_dim * m.bytes_per_value
    kv_new = 2 * m.kv_heads * m.head_dim * m.bytes_per_value
    link = per_card * m.layers * (hidden + kv_new + hidden) / s.card_link
    return kv / card_bandwidth(s) + fixed + link


def decode_throughput(batch: int, cards: int, m: ModelShape | None = None, s: DecodeSetup | None = None) -> float:
    """Tokens per second.  With cards, the GPU runs the linear layers and the cards the
    attention on staggered sub-batches (the HPU's pipelining), so a step takes the
    longer of the two."""
    m, s = m or ModelShape(), s or DecodeSetup()
    if batch <= 0:
        raise ValueError("batch: must be positive")
    if cards == 0:
        return batch / gpu_step_time(batch, m, s)
    return batch / max(gpu_step_time(batch, m, s, with_attention=False), card_step_time(batch, cards, m, s))


def cards_fit(batch: int, cards: int, m: ModelShape, s: DecodeSetup) -> bool:
    """Whether the batch's KV cache at the final context fits in the cards' memory."""
    per_sequence = (s.context_in + s.context_out) * m.kv_bytes_per_token()
    return math.ceil(batch / cards) * per_sequence <= s.card_memory


def setup_dict(setup) -> dict:
    """A setup as JSON-ready numbers (for the report's assumption tables)."""
    return asdict(setup)

