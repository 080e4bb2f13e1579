"""Boards: what `make bitstream BOARD=<name>` builds for.

Each board is a folder beside this module (``tools/ndpkit_tools/boards/<name>/``) with ``board.toml`` (part, PCIe,
memory and the DRAM preset its simulation runs on, flash, the part's resources, the device defaults), its
constraints and a README citing the vendor documents.  :func:`load_board` reads and checks one;
:func:`device_options` merges the board's device defaults with the user's
overrides and rejects what the board cannot hold, before any long step starts.
"""
from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

from ndpkit.options import size
from ndpkit_spec.dram import PRESETS

__all__ = ["BOARDS_DIR", "BoardError", "Board", "board_names", "load_board", "device_options", "engine_clock_mhz", "channels_per_port",
           "card_memory"]

#: one folder per board: board.toml, constraints, README (package data)
BOARDS_DIR = Path(__file__).resolve().parent


class BoardError(ValueError):
    """A board name, a board file or a device parameter the board cannot take."""


def _size(text) -> int:
    try:
        return size(text)
    except ValueError:
        raise BoardError(f"{text!r} is not a size (bytes, or with a unit: 64K, 16M, 1G)") from None


@dataclasses.dataclass
class Board:
    name: str
    folder: Path
    description: str
    vendor: str                 # "xilinx" (Vivado project) or "lattice" (open-source flow)
    part: str
    spec: dict                  # the whole board.toml

    @property
    def pcie(self) -> dict:
        return self.spec.get("pcie", {})

    @property
    def memory(self) -> dict:
        return self.spec["memory"]

    @property
    def sim_preset(self) -> str | None:
        """The DRAM preset (:data:`ndpkit_spec.dram.PRESETS`) the simulated card runs the board's
        memory on (``ndpkit.open("sim?board=<name>")``); None: the ideal memory."""
        return self.memory.get("sim_preset")

    @property
    def memory_bytes(self) -> int:
        return _size(self.memory["size"])

    @property
    def resources(self) -> dict:
        return self.spec["resources"]

    def file(self, key: str) -> Path:
        return self.folder / self.spec[key]


def board_names() -> list[str]:
    return sorted(p.parent.name for p in BOARDS_DIR.glob("*/board.toml"))


def load_board(name: str) -> Board:
    names = board_names()
    if name not in names:
        raise BoardError(f"unknown board {name!r}; boards: {', '.join(names)}")
    folder = BOARDS_DIR / name
    spec = tomllib.loads((folder / "board.toml").read_text())
    for key in ("name", "description", "vendor", "part", "memory", "resources", "device"):
        if key not in spec:
            raise BoardError(f"{folder / 'board.toml'}: missing {key!r}")
    if spec["name"] != name:
        raise BoardError(f"{folder / 'board.toml'}: name {spec['name']!r} is not the folder's name {name!r}")
    if spec["vendor"] not in ("xilinx", "lattice"):
        raise BoardError(f"{folder / 'board.toml'}: vendor must be 'xilinx' or 'lattice'")
    sim_preset = spec["memory"].get("sim_preset")
    if sim_preset is not None and sim_preset not in PRESETS:
        # the DRAM preset ndpkit.open("sim?board=<name>") simulates the board's memory on (left out: ideal)
        raise BoardError(f"{folder / 'board.toml'}: [memory] sim_preset {sim_preset!r} is not a DRAM preset; "
                         f"presets: {', '.join(PRESETS)} (leave the key out for the ideal memory)")
    if spec["vendor"] == "xilinx":
        pcie = spec.get("pcie", {})
        if pcie.get("ip") != "xdma":
            raise BoardError(f"{name}: pcie.ip must be 'xdma'")
        gen, lanes = pcie.get("generation"), pcie.get("lanes")
        if (gen, lanes) not in {(3, 4), (3, 8), (3, 16), (4, 4), (4, 8)}:
            raise BoardError(f"{name}: PCIe Gen{gen} x{lanes} is not an XDMA configuration (Gen3 x4/x8/x16, "
                             f"Gen4 x4/x8)")
    return Board(name=name, folder=folder, description=spec["description"], vendor=spec["vendor"],
                 part=spec["part"], spec=spec)


def device_options(board: Board, **overrides) -> dict:
    """The device's constructor arguments for ``board``: its defaults, then
    ``overrides`` (None values ignored), checked against what the board holds."""
    from ndpkit_spec.registry import REGISTRY
    options = dict(board.spec["device"])
    options.update({k: v for k, v in overrides.items() if v is not None})
    known = {"engines", "data_width", "attention_lanes", "memory_ports", "clock_mhz", "queue_depth",
             "max_burst_bytes", "max_outstanding"}
    unknown = set(options) - known
    if unknown:
        raise BoardError(f"{board.name}: unknown device parameter(s) {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(sorted(known))}")
    from ndpkit_spec.registry import instance_counts
    from ndpkit_spec.shell import slot_layout
    try:
        counts = instance_counts(options["engines"])
        slot_layout(counts)
    except ValueError as e:
        raise BoardError(f"{board.name}: engines: {e}") from None
    # one entry per engine, `name*N` for N instances (what Device and the Makefile's ENGINES= take)
    options["engines"] = [name if n == 1 else f"{name}*{n}" for name, n in counts.items()]
    engines = list(counts)
    width = options["data_width"]
    widths = (128, 256, 512) if board.vendor == "xilinx" else (32, 64, 128)
    if width not in widths:
        raise BoardError(f"{board.name}: data_width {width} is not one of {', '.join(map(str, widths))}")
    for engine in engines:
        if width < REGISTRY[engine].min_data_width:
            raise BoardError(f"{board.name}: engine {engine!r} needs data_width {REGISTRY[engine].min_data_width}, "
                             f"not {width}")
    channels = board.memory["pseudo_channels"]
    instances = sum(counts.values())
    hbm = board.memory["kind"] == "hbm"
    kind = "HBM pseudo-channels" if hbm else "memory controller ports"
    if hbm and instances > channels:
        # an instance sits next to its own pseudo-channel (its own memory master): more would share one
        raise BoardError(f"{board.name}: {instances} engine instances, but the board has {channels} {kind}, one "
                         f"memory master each: at most {channels} instances (engines {', '.join(options['engines'])})")
    if options.get("memory_ports") is None:          # by default: one port (region) an instance, as far as they go
        options["memory_ports"] = min(instances, channels)
    ports = options["memory_ports"]
    if not isinstance(ports, int) or not 1 <= ports <= channels:
        raise BoardError(f"{board.name}: memory_ports={ports} but the board has {channels} {kind}")
    if ports > instances:
        raise BoardError(f"{board.name}: memory_ports={ports} but the device has only {instances} engine "
                         f"instance(s) (each region needs one): add instances, e.g. engines=attention*{ports}")
    if options.get("attention_lanes") is not None:
        from ndpkit_hw.engines.attention.datapath import lane_shape
        try:
            lane_shape(width, options["attention_lanes"])
        except ValueError as e:
            raise BoardError(f"{board.name}: attention_lanes: {e}") from None
    if board.vendor == "xilinx":        # the resource model (the ECP5 build reports its real use)
        from ndpkit_tools.boards.resources import fit
        fit(board, options)
    if not 1 <= options["clock_mhz"] <= 1000:
        raise BoardError(f"{board.name}: clock_mhz must be 1..1000")
    if board.vendor == "xilinx":        # the engines' clock: refused above what their logic depth supports
        from ndpkit_tools.boards.resources import clock_limit
        limit = clock_limit(options)
        if options["clock_mhz"] > limit.mhz:
            raise BoardError(f"{board.name}: clock_mhz={options['clock_mhz']} is above what the evidence supports: "
                             f"{limit.limit_text}; give clock_mhz <= {limit.mhz}")
        from ndpkit_tools.boards.vivado import mmcm_divisors
        xdma_mhz = board.pcie["axi_clock_mhz"]
        if mmcm_divisors(xdma_mhz, options["clock_mhz"]) is None:
            near = [f for f in range(options["clock_mhz"] - 3, options["clock_mhz"] + 4)
                    if f >= 1 and mmcm_divisors(xdma_mhz, f)]
            raise BoardError(f"{board.name}: clock_mhz={options['clock_mhz']}: the clocking wizard cannot make it "
                             f"exactly from the XDMA's {xdma_mhz} MHz; near it: {', '.join(map(str, near))}")
    options["mem_size"] = card_memory(board, ports)
    options["addr_width"] = max(32, (board.memory_bytes - 1).bit_length())
    return options


def engine_clock_mhz(name: str) -> int:
    """The engines' clock (MHz) of board ``name``'s default build, from its board file.

    >>> engine_clock_mhz("alveo_u280")
    200
    """
    return device_options(load_board(name))["clock_mhz"]


def channels_per_port(board: Board, ports: int) -> int:
    """The pseudo-channels (or controller ports) behind each of ``ports`` memory ports: the
    most, a power of two, that ``ports`` equal regions can take of the board's memory
    (32 ports on 32 pseudo-channels: one each; 20: one each, 12 channels unused; 16: two)."""
    channels = board.memory["pseudo_channels"]
    n = 1
    while ports * n * 2 <= channels:
        n *= 2
    return n


def card_memory(board: Board, ports: int) -> int:
    """Bytes of card memory the device addresses with ``ports`` memory ports: ``ports``
    equal regions of :func:`channels_per_port` channels each, from address 0 (channels
    beyond them are not used)."""
    channel_bytes = board.memory_bytes // board.memory["pseudo_channels"]
    return ports * channels_per_port(board, ports) * channel_bytes
