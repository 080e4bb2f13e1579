"""The options :func:`ndpkit.open` takes, per kind of card: type, range, units.  Every
option is checked here before a transport is built, so a bad value is reported by name
with what is allowed (:class:`OptionError`), never as a failure deep inside a transport.

>>> from ndpkit.options import check_options, size
>>> size("64M"), size("1GiB"), size(4096)
(67108864, 1073741824, 4096)
>>> check_options("model", {"mem_size": "abc"})
Traceback (most recent call last):
    ...
ndpkit.options.OptionError: mem_size: 'abc' is not a size (bytes: an integer, or with a unit: 64K, 16M, 1G)

``sim?board=<name>`` simulates a board's build (:func:`board_defaults`): the board's DRAM
preset, engine clock and bus width become the defaults, the options given win:

>>> check_options("sim", {"board": "alveo_u55c"})
{'board': 'alveo_u55c', 'memory': 'hbm2_pc', 'clock_mhz': 225, 'data_width': 512}
>>> check_options("sim", {"board": "alveo_u55c", "memory": "ideal"})["memory"]
'ideal'
"""
from __future__ import annotations

import importlib.util
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ndpkit.errors import NdpkitError
from ndpkit.transport.sim_protocol import DEFAULTS
from ndpkit_spec.dram import IDEAL, PRESETS
from ndpkit_spec.registry import REGISTRY

__all__ = ["OptionError", "Option", "OPTIONS", "check_options", "size", "default_engines", "options_table",
           "DEFAULT_WIDTH", "board_files", "board_defaults"]

#: the bus width of a model or sim card that names none (the transports' default)
DEFAULT_WIDTH = DEFAULTS["data_width"]


def default_engines(data_width: int = DEFAULT_WIDTH) -> list[str]:
    """The engines a ``model`` card carries unless ``engines=`` says otherwise: every
    engine its bus width allows."""
    return [name for name, spec in REGISTRY.items() if data_width >= spec.min_data_width]

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)


class OptionError(NdpkitError, ValueError):
    """A card option with a bad name, type or value; ``option`` names it."""

    def __init__(self, option: str, message: str):
        super().__init__(f"{option}: {message}")
        self.option = option


def size(value) -> int:
    """Bytes from an integer or a string with a binary unit (``64K``, ``16M``, ``1GiB``)."""
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, int):
        return value
    match = _SIZE.match(value) if isinstance(value, str) else None
    if not match:
        raise ValueError(value)
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def _integer(value) -> int:
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return int(value.strip(), 0)
    raise ValueError(value)


def _number(value) -> float:
    if isinstance(value, bool):
        raise ValueError(value)
    return float(value)


def _engines(value) -> list[str]:
    names = [e.strip() for e in value.split(",") if e.strip()] if isinstance(value, str) else \
        [f"{k}*{v}" for k, v in value.items()] if isinstance(value, dict) else list(value)
    if not all(isinstance(e, str) for e in names):
        raise ValueError(value)
    return names


@dataclass(frozen=True)
class Option:
    convert: Callable[[Any], Any]
    kind: str                       # what the value is, for messages
    low: float | None = None
    high: float | None = None
    #: the values allowed, or a function giving them (the boards: read when asked)
    choices: tuple | Callable[[], tuple] = ()
    doc: str = ""

    def values(self) -> tuple:
        """The values allowed (empty: any the conversion takes)."""
        return tuple(self.choices()) if callable(self.choices) else self.choices

    def check(self, name: str, value):
        try:
            out = self.convert(value)
        except (TypeError, ValueError):
            raise OptionError(name, f"{value!r} is not {self.kind}") from None
        choices = self.values()
        if choices and out not in choices or callable(self.choices) and not choices:
            raise OptionError(name, f"{out!r} is not one of {', '.join(map(str, choices)) or '(none installed)'}")
        if self.low is not None and out < self.low or self.high is not None and out > self.high:
            raise OptionError(name, f"{value!r} is outside {self._range()}")
        return out

    def allowed(self) -> str:
        """What the option takes, for the documentation."""
        if self.values():
            return " / ".join(f"`{c}`" for c in self.values())
        if self.low is not None:
            return self._range()
        return self.kind

    def _range(self) -> str:
        show = _size_text if self.convert is size else (lambda v: str(int(v)) if float(v).is_integer() else f"{v:g}")
        return f"{show(self.low)}..{show(self.high)}" if self.high is not None else f">= {show(self.low)}"


def _size_text(n) -> str:
    for unit in "TGMK":
        if n and n % _UNITS[unit.lower()] == 0:
            return f"{n // _UNITS[unit.lower()]}{unit}"
    return f"{n:g}"


_SIZE_KIND = "a size (bytes: an integer, or with a unit: 64K, 16M, 1G)"
_CARD = {
    "mem_size": Option(size, _SIZE_KIND, 4096, 1 << 40, doc="card memory"),
    "mem_base": Option(size, _SIZE_KIND, 0, 1 << 48, doc="card address of the memory"),
    "data_width": Option(_integer, "an integer", choices=(64, 128, 256, 512, 1024), doc="bus width in bits"),
    "engines": Option(_engines, "a list of engine names",
                      doc="engines on the card, comma list, `name*N` for N instances (model: every engine by "
                          "default; sim: dma_copy)"),
    "memory_ports": Option(_integer, "an integer", 1, 64,
                           doc="memory regions (ports), each instance working in one; sim: one memory model each"),
    "queue_depth": Option(_integer, "an integer", 1, 64, doc="commands each engine queues"),
    "clock_mhz": Option(_integer, "an integer", 1, 1000, doc="the engines' clock in MHz, for per-second figures"),
    "mem_queue": Option(_integer, "an integer", 1, 4096,
                        doc="memory requests in flight (default 16; 64 with a DRAM preset)"),
    "memory": Option(str, "a memory name", choices=(IDEAL, *PRESETS),
                     doc="the card memory's timing: `ideal` (fixed latency, each direction at full rate) or a "
                         "DRAM preset (`hbm2_pc`: a U55C/U280 HBM2 pseudo-channel a port, `ddr4_2400`: the "
                         "SmartSSD's DDR4); sim only, the model has no timing; with `board=` the board's preset "
                         "by default"),
    "link": Option(dict, "a dict of PCIe link parameters", doc="modelled PCIe link"),
    "storage": Option(dict, "a dict of storage link parameters", doc="modelled SSD link"),
}
_COMMON = {"guard": Option(size, _SIZE_KIND, 0, 1 << 30, doc="guard bytes around every buffer")}
#: every option of every kind of card
OPTIONS: dict[str, dict[str, Option]] = {
    "model": {**_CARD, **_COMMON},
    "sim": {**_CARD, **_COMMON,
            # narrower buses cannot carry the DMA's 4 KiB bursts in AXI4's 256 beats
            "data_width": Option(_integer, "an integer", choices=(128, 256, 512), doc="bus width in bits"),
            "read_latency": Option(_integer, "an integer", 0, 100_000, doc="memory read latency, cycles"),
            "write_latency": Option(_integer, "an integer", 0, 100_000, doc="memory write latency, cycles"),
            "waves": Option(str, "a path", doc="waveform file (.fst or .vcd)"),
            "dma": Option(str, "a string", choices=("backdoor", "axi"), doc="host DMA path"),
            "attention_lanes": Option(_integer, "an integer", 4, 1024,
                                      doc="attention MAC lanes (default: the port rate, data_width / 8)"),
            "board": Option(str, "a board name", choices=lambda: tuple(board_files()),
                            doc="simulate a board's build (tools/ndpkit_tools/boards/): its DRAM preset "
                                "(`memory`), engine clock, bus width and attention lanes by default, the options "
                                "given win; not its engines (`engines=` names them: "
                                "`ndpkit.options.board_defaults`)"),
            "start_timeout": Option(_number, "a number", 1, 1e6, doc="seconds to wait for the simulator"),
            "reply_timeout": Option(_number, "a number", 1, 1e6, doc="seconds to wait for a reply")},
    "xdma": {**_COMMON, "channel": Option(_integer, "an integer", 0, 3, doc="XDMA H2C/C2H channel")},
    "uart": {**_COMMON,
             "baud": Option(_integer, "an integer", 300, 100_000_000, doc="serial baud rate"),
             "timeout": Option(_number, "a number", 0.01, 3600, doc="seconds per reply")},
}
OPTIONS["uart-model"] = {**OPTIONS["model"], **OPTIONS["uart"]}


def check_options(kind: str, options: dict) -> dict:
    """``options`` converted and checked for a card of ``kind``; raises
    :class:`OptionError` naming the first bad option and what it allows."""
    schema = OPTIONS[kind]
    out = {}
    for name, value in options.items():
        if name not in schema:
            raise OptionError(name, f"not an option of a {kind} card; options: {', '.join(sorted(schema))}")
        out[name] = schema[name].check(name, value)
    from_board = board_defaults(out["board"], out) if "board" in out else {}
    out.update(from_board)
    if "engines" in out:
        from ndpkit_spec.registry import instance_counts
        from ndpkit_spec.shell import slot_layout
        try:
            counts = instance_counts(out["engines"])
            instances = len(slot_layout(counts))
        except ValueError as e:
            raise OptionError("engines", f"{e}; engines: {', '.join(REGISTRY)}") from None
        if not counts:
            raise OptionError("engines", f"no engines; engines: {', '.join(REGISTRY)}")
        if out.get("memory_ports", 1) > instances:
            raise OptionError("memory_ports", f"{out['memory_ports']} is more than the {instances} engine "
                                              f"instance(s) (each region needs one to use it)")
        width = out.get("data_width", DEFAULT_WIDTH)
        narrow = [e for e in counts if width < REGISTRY[e].min_data_width]
        if narrow:
            raise OptionError("data_width", f"{width} is narrower than engine {narrow[0]!r} needs "
                                            f"({REGISTRY[narrow[0]].min_data_width})")
    if out.get("memory", IDEAL) != IDEAL:
        timed = [k for k in ("read_latency", "write_latency") if k in out]
        if timed:
            if "memory" in from_board:
                raise OptionError(timed[0], f"sets the ideal memory's latency; memory={out['memory']} (board "
                                            f"{out['board']}'s preset) times every access itself (banks, rows, "
                                            f"refresh), leave {timed[0]} out or give memory=ideal")
            raise OptionError(timed[0], f"sets the ideal memory's latency; memory={out['memory']} times every "
                                        f"access itself (banks, rows, refresh), leave {timed[0]} out")
    width = out.get("data_width", DEFAULT_WIDTH)
    if "mem_size" in out and "data_width" in schema and out["mem_size"] % (width // 8):
        raise OptionError("mem_size", f"{out['mem_size']} is not a whole number of {width}-bit words")
    ports = out.get("memory_ports", 1)
    if ports > 1:
        from ndpkit.transport.sim_protocol import DEFAULTS as _D
        mem_size, mem_base = out.get("mem_size", _D["mem_size"]), out.get("mem_base", _D["mem_base"])
        region = mem_size // ports
        if mem_size % ports or region & (region - 1) or mem_base % region:
            raise OptionError("memory_ports", f"{ports} does not cut mem_size {mem_size} (at mem_base {mem_base}) "
                                              f"into equal power-of-two regions aligned to their size")
    return out


def board_files() -> dict[str, Path]:
    """Each board's ``board.toml`` by name: the boards ``make bitstream`` builds
    (``tools/ndpkit_tools/boards/<name>/``).  They are the tools package's data, found
    without importing it (the driver imports no tools module: sw/tests/test_package_layers.py;
    the sim card runs in the tools' device server anyway)."""
    spec = importlib.util.find_spec("ndpkit_tools")
    if spec is None or not spec.submodule_search_locations:
        return {}
    root = Path(next(iter(spec.submodule_search_locations)), "boards")
    return {path.parent.name: path for path in sorted(root.glob("*/board.toml"))}


def board_defaults(board: str, given: dict | None = None) -> dict:
    """The sim card options ``sim?board=<board>`` adds to the (checked) options ``given``,
    which win (none of theirs is in the answer): the simulated card of the board's build,
    as far as a small simulation goes, from the board's ``board.toml``:

    - ``memory``: its DRAM preset, ``[memory] sim_preset`` (``hbm2_pc`` on the Alveo
      U55C and U280, ``ddr4_2400`` on the SmartSSD); a board with none (the ECP5's block
      RAM) keeps the ideal memory;
    - ``clock_mhz``: the engines' clock of the build (``[device]``), the clock the DRAM
      preset's timing is counted in;
    - ``data_width``: the build's, where the sim card takes it (128, 256, 512: not the
      ECP5's 64 bits, whose sim card keeps 512);
    - ``attention_lanes``: the build's, when the engines given include attention and the
      width is the build's.

    Not the board's engines: ``engines`` stays the sim card's (``dma_copy``) unless given.
    A board's default list is what fills its part (27 attention instances on the U55C, 25
    with Adam and the decompressor on the U280, all four engines at 512 bits on the
    SmartSSD), and each engine a simulated card carries is minutes more of Verilator build
    on two cores (Adam's and attention's 512-bit datapaths the most) and a slower
    simulation, 27 attention instances far more: name the ones to simulate
    (``sim?board=alveo_u55c&engines=dma_copy,attention``).  Nor its memory
    size (the simulated memory is host RAM: ``mem_size``, 16 MiB by default) or its memory
    ports (one unless ``memory_ports`` is given; the HBM builds put each engine instance on
    a pseudo-channel of its own, which ``memory_ports`` = the instances does).
    """
    given = given or {}
    files = board_files()
    if board not in files:
        raise OptionError("board", f"{board!r} is not one of {', '.join(files) or '(none installed)'}")
    path = files[board]
    try:
        spec = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise OptionError("board", f"{board}: {path}: {e}") from None
    memory, device = spec.get("memory", {}), spec.get("device", {})
    sim = OPTIONS["sim"]
    found = {}
    preset = memory.get("sim_preset")
    if preset is not None:
        if preset not in PRESETS:
            raise OptionError("board", f"{board}: {path}: [memory] sim_preset {preset!r} is not a DRAM preset; "
                                       f"presets: {', '.join(PRESETS)} (leave the key out for the ideal memory)")
        found["memory"] = preset
    if "clock_mhz" in device:
        found["clock_mhz"] = device["clock_mhz"]
    if device.get("data_width") in sim["data_width"].values():
        found["data_width"] = device["data_width"]
    width = given.get("data_width", found.get("data_width", DEFAULT_WIDTH))
    engines = given.get("engines", DEFAULTS["engines"])
    if device.get("attention_lanes") is not None and width == device.get("data_width") and \
            "attention" in {e.split("*")[0].strip() for e in engines}:
        found["attention_lanes"] = device["attention_lanes"]
    out = {}
    for name, value in found.items():
        if name not in given:
            try:
                out[name] = sim[name].check(name, value)
            except OptionError as e:
                section = "memory" if name == "memory" else "device"
                raise OptionError("board", f"{board}: {path}: [{section}] {e}") from None
    return out


_KINDS = {"model": "`model`", "sim": "`sim`", "xdma": "`xdma:/dev/xdma0` (or `/dev/xdma0`)",
          "uart": "`uart:/dev/ttyUSB1`", "uart-model": "`uart:model`"}


def options_table() -> str:
    """The Markdown table of every option of every kind of card (docs/driver.md)."""
    rows = ["| option | cards | takes | what |", "|---|---|---|---|"]
    names = sorted({name for schema in OPTIONS.values() for name in schema})
    for name in names:
        kinds = [k for k in OPTIONS if name in OPTIONS[k] and k != "uart-model"]
        option = next(OPTIONS[k][name] for k in kinds)
        takes = " ; ".join(sorted({f"{k}: {OPTIONS[k][name].allowed()}" if len({OPTIONS[j][name].allowed()
                                   for j in kinds}) > 1 else OPTIONS[k][name].allowed() for k in kinds}))
        rows.append(f"| `{name}` | {', '.join(kinds)} | {takes} | {option.doc} |")
    return "\n".join(rows) + "\n"
