"""A transaction-level model of the PCIe link between the host and the card.

The simulated transports use it to charge host DMA and register accesses in device
cycles (so engine work and host transfers overlap as they would on a card), and the
benchmark reports the throughput it implies.  It counts TLPs: each carries at most
``max_payload`` bytes plus ``tlp_overhead`` bytes of framing, sequence number, header
and LCRC; reads pay one round trip (``read_latency_ns``) before the completions
stream back.  Link rates: 2.5/5/8/16/32 GT/s for generations 1-5, 8b/10b encoding
for generations 1-2 and 128b/130b from generation 3.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, asdict

__all__ = ["PcieLink", "StorageLink"]

_GT_PER_S = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0}


@dataclass(frozen=True)
class PcieLink:
    gen: int = 3
    lanes: int = 16
    max_payload: int = 256          # bytes per TLP (MPS)
    max_read_request: int = 512     # bytes per read request (MRRS)
    tlp_overhead: int = 24          # STP/SDP framing, sequence, 3-4 DW header, LCRC, DLLP share
    read_latency_ns: float = 800.0  # request out to first completion back
    write_latency_ns: float = 150.0 # a posted write reaching the card

    def __post_init__(self):
        if self.gen not in _GT_PER_S:
            raise ValueError(f"PCIe generation must be one of {sorted(_GT_PER_S)}, not {self.gen}")
        if self.lanes not in (1, 2, 4, 8, 16):
            raise ValueError(f"lanes must be 1, 2, 4, 8 or 16, not {self.lanes}")
        if self.max_payload not in (128, 256, 512, 1024, 2048, 4096):
            raise ValueError(f"max_payload must be a power of two 128..4096, not {self.max_payload}")

    @property
    def raw_bytes_per_ns(self) -> float:
        """Payload-agnostic link rate after line encoding, one direction."""
        encoding = 8 / 10 if self.gen <= 2 else 128 / 130
        return _GT_PER_S[self.gen] * self.lanes * encoding / 8

    @property
    def efficiency(self) -> float:
        return self.max_payload / (self.max_payload + self.tlp_overhead)

    @property
    def peak_bytes_per_ns(self) -> float:
        """Sustained DMA payload rate with full-size TLPs (GB/s)."""
        return self.raw_bytes_per_ns * self.efficiency

    def wire_ns(self, nbytes: int) -> float:
        tlps = math.ceil(nbytes / self.max_payload)
        return (nbytes + tlps * self.tlp_overhead) / self.raw_bytes_per_ns

    def h2c_ns(self, nbytes: int) -> float:
        """Host -> card DMA of ``nbytes`` (posted writes)."""
        return self.write_latency_ns + self.wire_ns(nbytes)

    def c2h_ns(self, nbytes: int) -> float:
        """Card -> host DMA: the card's read requests go out, completions stream back."""
        return self.read_latency_ns + self.wire_ns(nbytes)

    def to_cycles(self, ns: float, clock_mhz: float) -> int:
        return max(1, math.ceil(ns * clock_mhz / 1000))

    def describe(self) -> str:
        return (f"PCIe Gen{self.gen} x{self.lanes}, MPS {self.max_payload} B, MRRS {self.max_read_request} B: "
                f"{self.peak_bytes_per_ns:.2f} GB/s payload peak")

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class StorageLink:
    """Peer-to-peer transfers between an SSD and the card (Smart-Infinity's SmartSSD:
    the SSD and the FPGA behind one PCIe switch, Gen3 x4 upstream), apart from the host
    link.  ``bandwidth_gbps`` is the sustained SSD rate in GB/s (3.0: a Gen3 x4 NVMe
    drive's sequential read), ``latency_us`` the time to the first byte."""
    bandwidth_gbps: float = 3.0
    latency_us: float = 20.0

    def __post_init__(self):
        if not self.bandwidth_gbps > 0 or self.latency_us < 0:
            raise ValueError(f"storage link needs bandwidth_gbps > 0 and latency_us >= 0, not {self}")

    def transfer_ns(self, nbytes: int) -> float:
        return self.latency_us * 1000 + nbytes / self.bandwidth_gbps

    def describe(self) -> str:
        return f"storage P2P {self.bandwidth_gbps:g} GB/s, {self.latency_us:g} us to first byte"

    def as_dict(self) -> dict:
        return asdict(self)
