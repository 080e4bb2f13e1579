"""DRAM timing presets for the simulated card's memory (the boards' real memories).

A :class:`DramTiming` is one memory channel as its controller sees it: the geometry
(bank groups, banks, the row a bank opens, the bytes one column command moves), the
JEDEC timing set that decides throughput, in cycles of the DRAM clock (tCK), the address
mapping (which address bits pick the bank group, bank, column and row) and the fixed
controller/PHY/port latency.  The gateware model (:mod:`ndpkit_hw.mem.dram`) turns it
into per-beat data times, in the engines' clock, behind the same AXI4 port as the
ideal memory model.

Presets (:data:`PRESETS`), every value cited in :data:`SOURCES`:

``hbm2_pc``
    One HBM2 pseudo-channel of an Alveo U280/U55C: 64-bit, BL4 (32 B a column),
    900 MHz (1800 MT/s, 14.4 GB/s), 16 banks in 4 bank groups, 1 KiB rows; the AMD HBM
    IP's own timing set, its default address map (ROW_BANK_COLUMN with bank-group
    interleave) and refresh period; the fixed latency fitted to Shuhai's page-hit latency.
``ddr4_2400``
    The SmartSSD's x64 DDR4-2400 (four 8 Gb x16 devices, the 4 GB it carries):
    BL8 (64 B a column), 1200 MHz (19.2 GB/s), 8 banks in 2 bank groups, 8 KiB rank rows,
    JESD79-4's 17-17-17 bin, the MIG's default address map (ROW_COLUMN_BANK).

An address mapping is written MSB first as fields ``row``, ``bg``, ``ba``, ``co``, a field
or a bit range of it (``bg[1]``, ``co[4:1]``), e.g. ``"row bg[1] ba co bg[0]"``; the bits
below the column size (the bytes of one column command) are the offset.  Every bit of
``bg``, ``ba`` and ``co`` appears once; ``row`` takes the bits up to the memory's size.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

__all__ = ["DramTiming", "PRESETS", "SOURCES", "MAPPING_FIELDS", "preset", "parse_mapping", "decode_address", "IDEAL"]

IDEAL = "ideal"
MAPPING_FIELDS = ("row", "bg", "ba", "co")

#: the timing fields (tCK) and what each one bounds
TIMING_FIELDS = {
    "tRCD_RD": "activate to read", "tRCD_WR": "activate to write", "tRP": "precharge to activate",
    "tRAS": "activate to precharge", "tCL": "read command to data (RL)", "tCWL": "write command to data (WL)",
    "tCCD_S": "column to column, other bank group", "tCCD_L": "column to column, same bank group",
    "tRRD_S": "activate to activate, other bank group", "tRRD_L": "activate to activate, same bank group",
    "tFAW": "four activates window", "tWR": "write recovery (end of write data to precharge)",
    "tWTR_S": "end of write data to read, other bank group", "tWTR_L": "end of write data to read, same bank group",
    "tRTP": "read to precharge", "tREFI": "refresh interval", "tRFC": "refresh cycle (all banks)",
}


@dataclass(frozen=True)
class DramTiming:
    name: str
    clock_mhz: float            # DRAM command clock (1/tCK)
    data_bits: int              # DQ width of the channel
    burst_length: int           # data beats of one column command (BL/2 tCK on the bus)
    bank_groups: int
    banks_per_group: int
    page_bytes: int             # one row of one bank across the channel's width
    tRCD_RD: int
    tRCD_WR: int
    tRP: int
    tRAS: int
    tCL: int
    tCWL: int
    tCCD_S: int
    tCCD_L: int
    tRRD_S: int
    tRRD_L: int
    tFAW: int
    tWR: int
    tWTR_S: int
    tWTR_L: int
    tRTP: int
    tREFI: int
    tRFC: int
    #: controller + PHY + port pipeline of a read, tCK (page-hit latency minus tCL and the burst)
    read_pipeline: int
    #: the controller acknowledges a posted write this many tCK after its last beat
    write_ack: int
    mapping: str                # the default address mapping (a name of ``mappings`` or a spec)
    mappings: tuple = ()        # (name, spec) pairs the memory's IP offers
    #: read-to-write turnaround beyond RL + BL/2 - WL (JEDEC: 2 tCK of bus idle)
    rtw_gap: int = 2
    #: posted-write buffer of the controller, bytes (writes wait in it and go in groups)
    write_buffer: int = 4096
    #: AXI port clock and width (the rate the controller's user side can carry)
    port_mhz: float = 0.0
    port_bits: int = 0
    description: str = ""

    # -- derived -------------------------------------------------------------
    @property
    def column_bytes(self) -> int:
        return self.data_bits // 8 * self.burst_length

    @property
    def tBURST(self) -> int:
        return self.burst_length // 2

    @property
    def banks(self) -> int:
        return self.bank_groups * self.banks_per_group

    @property
    def columns(self) -> int:
        return self.page_bytes // self.column_bytes

    @property
    def tRTW(self) -> int:
        """Read command to write command (the data bus turns round)."""
        return self.tCL + self.tBURST + self.rtw_gap - self.tCWL

    @property
    def peak_bytes_per_s(self) -> float:
        return self.data_bits / 8 * 2 * self.clock_mhz * 1e6

    def peak_bytes_per_cycle(self, engine_mhz: float) -> float:
        """The peak (reads and writes together, one data bus) in bytes a cycle of an
        ``engine_mhz`` clock.

        >>> PRESETS["hbm2_pc"].peak_bytes_per_cycle(200)
        72.0
        """
        return self.peak_bytes_per_s / (engine_mhz * 1e6)

    def timings(self) -> dict:
        return {name: getattr(self, name) for name in TIMING_FIELDS}

    def mapping_spec(self, mapping: str | None = None) -> str:
        name = self.mapping if mapping is None else mapping
        return dict(self.mappings).get(name, name)

    def with_(self, **changes) -> "DramTiming":
        """A copy with fields changed, validated (a what-if timing set)."""
        out = replace(self, **changes)
        out.validate()
        return out

    def validate(self) -> None:
        """Refuse a geometry or timing set that violates JEDEC's relations, naming the field."""
        def fail(name, why):
            raise ValueError(f"DRAM timing {self.name!r}: {name} {why}")
        for name in ("data_bits", "burst_length", "bank_groups", "banks_per_group", "page_bytes"):
            v = getattr(self, name)
            if not (isinstance(v, int) and v > 0 and v & (v - 1) == 0):
                fail(name, f"must be a positive power of two, not {v!r}")
        if self.burst_length < 2:
            fail("burst_length", "must be at least 2 (data on both clock edges)")
        if self.page_bytes < self.column_bytes:
            fail("page_bytes", f"({self.page_bytes}) is smaller than one column command ({self.column_bytes} B)")
        if not self.clock_mhz > 0:
            fail("clock_mhz", "must be positive")
        for name in TIMING_FIELDS:
            v = getattr(self, name)
            if not (isinstance(v, int) and v >= 0):
                fail(name, f"({TIMING_FIELDS[name]}) must be a whole number of tCK >= 0, not {v!r}")
        for name in ("tRCD_RD", "tRCD_WR", "tRP", "tRAS", "tCL", "tCCD_S", "tRRD_S", "tREFI", "tRFC"):
            if getattr(self, name) < 1:
                fail(name, f"({TIMING_FIELDS[name]}) must be at least 1 tCK")
        rules = [
            ("tRAS", self.tRAS >= self.tRCD_RD, f"({self.tRAS}) must be at least tRCD_RD ({self.tRCD_RD})"),
            ("tRAS", self.tRAS >= self.tRCD_WR, f"({self.tRAS}) must be at least tRCD_WR ({self.tRCD_WR})"),
            ("tCCD_S", self.tCCD_S >= self.tBURST,
             f"({self.tCCD_S}) must be at least the burst's {self.tBURST} tCK on the data bus"),
            ("tCCD_L", self.tCCD_L >= self.tCCD_S, f"({self.tCCD_L}) must be at least tCCD_S ({self.tCCD_S})"),
            ("tRRD_L", self.tRRD_L >= self.tRRD_S, f"({self.tRRD_L}) must be at least tRRD_S ({self.tRRD_S})"),
            ("tFAW", self.tFAW >= self.tRRD_S, f"({self.tFAW}) must be at least tRRD_S ({self.tRRD_S})"),
            ("tWTR_L", self.tWTR_L >= self.tWTR_S, f"({self.tWTR_L}) must be at least tWTR_S ({self.tWTR_S})"),
            ("tREFI", self.tREFI > self.tRFC, f"({self.tREFI}) must exceed tRFC ({self.tRFC})"),
            ("tCWL", self.tRTW >= self.tBURST,
             f"({self.tCWL}) leaves no read-to-write turnaround (tCL + BL/2 + {self.rtw_gap} - tCWL "
             f"= {self.tRTW} < {self.tBURST})"),
        ]
        for name, ok, why in rules:
            if not ok:
                fail(name, why)
        if self.read_pipeline < 0 or self.write_ack < 0:
            fail("read_pipeline" if self.read_pipeline < 0 else "write_ack", "must be >= 0")
        if self.write_buffer < self.column_bytes:
            fail("write_buffer", f"must hold at least one column ({self.column_bytes} B)")
        parse_mapping(self.mapping_spec(), self, None)


_TOKEN = re.compile(r"^(row|bg|ba|co)(?:\[(\d+)(?::(\d+))?\])?$")


def parse_mapping(spec: str, timing: DramTiming, size: int | None) -> list[tuple[str, int, int]]:
    """The address bits of each field, LSB first above the column offset, as
    ``(field, low bit of the field, width)`` runs.  ``size`` (bytes, a power of two) fixes
    the row's width; ``None`` checks the spec alone."""
    widths = {"bg": _log2(timing.bank_groups), "ba": _log2(timing.banks_per_group), "co": _log2(timing.columns)}
    runs, covered, row_seen = [], {k: [0] * w for k, w in widths.items()}, False
    tokens = spec.split()
    if not tokens:
        raise ValueError(f"address mapping of {timing.name!r} is empty")
    for token in tokens:
        match = _TOKEN.match(token)
        if not match:
            raise ValueError(f"address mapping {spec!r}: {token!r} is not a field "
                             f"({', '.join(MAPPING_FIELDS)}) or a bit range of one (bg[1], co[4:1])")
        name, hi, lo = match.group(1), match.group(2), match.group(3)
        if name == "row":
            if hi is not None or row_seen:
                raise ValueError(f"address mapping {spec!r}: row appears once, whole")
            row_seen = True
            runs.append(("row", 0, None))
            continue
        full = widths[name]
        hi = full - 1 if hi is None else int(hi)
        lo = hi if (lo is None and match.group(2) is not None) else (0 if lo is None else int(lo))
        if not 0 <= lo <= hi < max(full, 1) or full == 0:
            if full == 0:
                raise ValueError(f"address mapping {spec!r}: {timing.name!r} has no {name} bits")
            raise ValueError(f"address mapping {spec!r}: {token} outside {name}'s {full} bits")
        for b in range(lo, hi + 1):
            if covered[name][b]:
                raise ValueError(f"address mapping {spec!r}: {name} bit {b} appears twice")
            covered[name][b] = 1
        runs.append((name, lo, hi - lo + 1))
    for name, bits in covered.items():
        missing = [b for b, c in enumerate(bits) if not c]
        if missing:
            raise ValueError(f"address mapping {spec!r} does not cover the memory: {name} bit(s) "
                             f"{missing} of {timing.name!r}'s {len(bits)} are not mapped")
    if not row_seen:
        raise ValueError(f"address mapping {spec!r} does not cover the memory: no row field")
    runs.reverse()                                       # LSB first
    if size is not None:
        if size <= 0 or size & (size - 1):
            raise ValueError(f"a DRAM timing model needs a power-of-two memory size, not {size}")
        row_bits = _log2(size) - _log2(timing.column_bytes) - sum(widths.values())
        if row_bits < 0:
            raise ValueError(f"memory of {size} bytes is smaller than one row in every bank of {timing.name!r} "
                             f"({timing.banks} banks x {timing.page_bytes} B)")
        runs = [(n, lo, row_bits if n == "row" else w) for n, lo, w in runs]
        runs = [r for r in runs if r[2] > 0]
    return runs


def decode_address(runs: list[tuple[str, int, int]], column_bytes: int, offset: int) -> dict[str, int]:
    """The fields (``bg``, ``ba``, ``co``, ``row``) of byte ``offset`` under ``runs``
    (:func:`parse_mapping` with a size), as the gateware model decodes it.

    >>> t = PRESETS["hbm2_pc"]
    >>> runs = parse_mapping(t.mapping_spec(None), t, 1 << 20)
    >>> decode_address(runs, t.column_bytes, 32), decode_address(runs, t.column_bytes, 64)["bg"]
    ({'bg': 1, 'ba': 0, 'co': 0, 'row': 0}, 0)
    """
    fields = {"bg": 0, "ba": 0, "co": 0, "row": 0}
    bit = _log2(column_bytes)
    for name, lo, width in runs:
        fields[name] |= ((offset >> bit) & ((1 << width) - 1)) << lo
        bit += width
    return fields


def _log2(n: int) -> int:
    return int(math.log2(n)) if n > 0 else 0


HBM_MAPPINGS = (
    ("ROW_BANK_COLUMN_BGI", "row bg[1] ba co bg[0]"),   # the IP default: bank-group interleave on
    ("ROW_BANK_COLUMN", "row bg ba co"),
    ("ROW_COLUMN_BANK", "row co bg ba"),
    ("BANK_ROW_COLUMN", "bg ba row co"),
)
DDR4_MAPPINGS = (
    ("ROW_COLUMN_BANK", "row co ba bg"),                # the MIG default
    ("ROW_BANK_COLUMN", "row ba bg co"),
    ("BANK_ROW_COLUMN", "ba bg row co"),
)

PRESETS: dict[str, DramTiming] = {
    "hbm2_pc": DramTiming(
        name="hbm2_pc", clock_mhz=900.0, data_bits=64, burst_length=4, bank_groups=4, banks_per_group=4,
        page_bytes=1024,
        tRCD_RD=13, tRCD_WR=9, tRP=13, tRAS=30, tCL=14, tCWL=4, tCCD_S=2, tCCD_L=3, tRRD_S=4, tRRD_L=4,
        tFAW=15, tWR=15, tWTR_S=4, tWTR_L=8, tRTP=5, tREFI=3510, tRFC=234,
        read_pipeline=76, write_ack=32, mapping="ROW_BANK_COLUMN_BGI", mappings=HBM_MAPPINGS,
        write_buffer=2048, port_mhz=450.0, port_bits=256,
        description="HBM2 pseudo-channel of an Alveo U280/U55C (AMD HBM IP defaults, 900 MHz)"),
    "ddr4_2400": DramTiming(
        name="ddr4_2400", clock_mhz=1200.0, data_bits=64, burst_length=8, bank_groups=2, banks_per_group=4,
        page_bytes=8192,
        tRCD_RD=17, tRCD_WR=17, tRP=17, tRAS=39, tCL=17, tCWL=12, tCCD_S=4, tCCD_L=6, tRRD_S=7, tRRD_L=8,
        tFAW=36, tWR=18, tWTR_S=3, tWTR_L=9, tRTP=9, tREFI=9363, tRFC=420,
        read_pipeline=59, write_ack=48, mapping="ROW_COLUMN_BANK", mappings=DDR4_MAPPINGS,
        write_buffer=4096, port_mhz=300.0, port_bits=512,
        description="SmartSSD DDR4-2400 x64 (four 8 Gb x16 devices, MIG defaults, 4:1 at 300 MHz)"),
}

#: where each preset value comes from
SOURCES = {
    "hbm2_pc": {
        "geometry": "AMD HBM IP (PG276) on the U280: a 256 MiB pseudo-channel is 16K rows x 4 BG x 4 banks x "
                    "32 columns of 32 B (the IP's ADDR_BIT map), 64-bit, BL4; 900 MHz the IP's U280 default",
        "tRCD_RD tRCD_WR tRP tRAS tRRD_S tRRD_L tFAW tWR tWTR_S tWTR_L tRFC tREFI":
            "the AMD HBM IP's timing parameters for the U280 at 900 MHz (USER_tRCDRD 13, USER_tRCDWR 9, tRP 13, "
            "tRAS 30, tRRD 4/4, tFAW 15, tWR 15, tWTR 4/8, tRFC 234, REF_CMD_PERIOD 0xDB6 = 3.9 us)",
        "tCL tCWL": "not set in the IP: DRAMsim3 HBM2 (RL 14, WL 4 tCK)",
        "tCCD_S tCCD_L tRTP": "not set in the IP: burst (2 tCK), gem5's HBM interface (tCCD_L 3, tRTP 5 ns)",
        "read_pipeline": "fitted: Shuhai's page-hit latency, 48 cycles at 450 MHz = 96 tCK, less tCL + BL/2 and the model's two register stages (4 tCK at 450 MHz)",
        "mapping": "the IP default ROW_BANK_COLUMN with BG_INTERLEAVE_EN (row, BG1, BA, CA, BG0)",
        "write_ack write_buffer": "model choices (no published figure): posted writes, 64 columns buffered",
    },
    "ddr4_2400": {
        "geometry": "8 Gb x16 DDR4 (2 BG x 4 banks, 2 KiB page; four devices make the x64 4 GB)",
        "tRCD_RD tRCD_WR tRP tCL tRAS tCCD_S tCCD_L tRRD_S tRRD_L tFAW tWR tWTR_S tWTR_L tRTP tREFI tRFC":
            "JESD79-4 DDR4-2400 17-17-17, x16 (tRRD_S 5.3 ns, tRRD_L 6.4 ns, tFAW 30 ns), tRFC 350 ns at 8 Gb, "
            "tREFI 7.8 us; as in DRAMsim3's DDR4_8Gb_x16_2400",
        "tCWL": "CWL 12, the MIG setting (and Shuhai's U280 DDR4 build)",
        "read_pipeline": "fitted: Shuhai's DDR4 page-hit latency, 22 cycles at 300 MHz = 88 tCK, less CL + BL/2 and the model's two register stages (8 tCK at 300 MHz)",
        "mapping": "the MIG (PG150/PG353) default ROW_COLUMN_BANK",
        "write_ack write_buffer": "model choices (no published figure)",
    },
}

for _t in PRESETS.values():
    _t.validate()


def preset(name: str) -> DramTiming:
    """The preset called ``name``; an unknown name is refused with the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown memory preset {name!r}; known: {IDEAL}, {', '.join(PRESETS)}") from None
