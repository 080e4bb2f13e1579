"""The user-facing device: ``ndpkit.open(uri)`` returns a :class:`Device`.

>>> import numpy as np, ndpkit
>>> with ndpkit.open("model") as dev:                # or "sim", or "/dev/xdma0"
...     src = dev.upload(np.arange(1 << 16, dtype=np.float32))
...     dst = dev.alloc(src.size)
...     done = dev.copy(dst, src)                     # runs on the card, waits
...     assert (dst.download(np.float32) == np.arange(1 << 16)).all()
...     print(done.ok, done.bytes_written)
True 262144

URIs: ``model``, ``sim``, ``xdma:/dev/xdma0`` (or just ``/dev/xdma0``),
``uart:/dev/ttyUSB1`` (a card behind the UART bridge, e.g. the ECP5 board;
``uart:model`` puts the bridge's protocol in front of a model card), each with
optional ``?key=value&...`` options: for ``model`` and ``sim`` ``mem_size`` (``16M``,
``1G``), ``engines`` (comma list), ``queue_depth``, ``data_width``; for ``sim`` also
``read_latency``, ``write_latency``, ``waves`` (a .fst/.vcd path), ``dma``
(``backdoor`` or ``axi``), ``memory`` (``ideal`` or a DRAM preset), ``board`` (simulate a
board's build: ``sim?board=alveo_u55c`` runs on its DRAM preset, at its engine clock and
width, :func:`ndpkit.options.board_defaults`); for ``xdma`` ``channel`` and ``events`` (see
:mod:`ndpkit.transport.xdma`); for ``uart`` ``baud`` and ``timeout``; for every kind ``guard`` (bytes of guard region
around every buffer, see :class:`Device`).
"""
from __future__ import annotations

import contextlib
import os
import urllib.parse

import numpy as np

from ndpkit_spec.registry import REGISTRY, by_kind
from ndpkit.engine import Command, Completion
from ndpkit.errors import DeviceTimeout, GuardViolation, NdpkitError, TransportClosed
# Buffer and the allocators live in the driver's bottom module; they are importable from
# here too (ndpkit.device.Buffer, ndpkit.device.Allocator), where they were first
from ndpkit.memory import Allocator, Buffer, RegionAllocator, as_bytes
from ndpkit.options import DEFAULT_WIDTH, check_options, default_engines
from ndpkit.regs.access import RegisterFile
from ndpkit_spec.shell import ENGINE_STRIDE, GLOBAL, NDPKIT_MAGIC, VERSION, region_bounds
from ndpkit.transport.base import Transport

__all__ = ["open_device", "Device", "Buffer", "Allocator", "RegionAllocator", "parse_uri"]

def parse_uri(uri: str) -> tuple[str, str | None, dict]:
    """(kind, path, options) of a device URI; option values stay text (see
    :func:`ndpkit.options.check_options`)."""
    if not isinstance(uri, str):
        raise TypeError(f"uri: a device URI string such as 'model', 'sim' or 'xdma:/dev/xdma0', "
                        f"not {type(uri).__name__}")
    parsed = urllib.parse.urlsplit(uri)
    if uri.startswith("/"):
        kind, path = "xdma", parsed.path
    elif parsed.scheme in ("", "model", "sim") and parsed.path in ("model", "sim") or \
            parsed.scheme in ("model", "sim") and not parsed.path:
        kind, path = (parsed.path or parsed.scheme), None
    elif parsed.scheme in ("xdma", "uart") and parsed.path:
        kind, path = parsed.scheme, parsed.path
    else:
        raise ValueError(f"uri: unknown device {uri!r}: use 'model', 'sim', 'xdma:/dev/xdma0' or "
                         f"'uart:/dev/ttyUSB1' (with ?options)")
    return kind, path, dict(urllib.parse.parse_qsl(parsed.query, keep_blank_values=True))


def open_device(uri: str = "sim", **options) -> "Device":
    """Open a card.  ``options`` add to (and override) the URI's query options; both are
    checked against :data:`ndpkit.options.OPTIONS` (an :class:`~ndpkit.options.OptionError`
    names a bad one).  A ``model`` card carries every engine its bus width allows unless
    ``engines`` says otherwise.  ``sim?board=<name>`` simulates that board's build: its DRAM
    preset, engine clock and bus width are the defaults, which the options given override;
    its engine list is not taken (the sim card keeps ``dma_copy`` unless ``engines`` names
    others: :func:`ndpkit.options.board_defaults`)."""
    kind, path, query = parse_uri(uri)
    query.update(options)
    schema = "uart-model" if kind == "uart" and path == "model" else kind
    query = check_options(schema, query)
    guard = query.pop("guard", None)
    if kind == "model" or schema == "uart-model":
        query.setdefault("engines", default_engines(query.get("data_width", DEFAULT_WIDTH)))
    # only the transport the URI names is imported: each brings what it alone needs (the
    # sim transport's process and socket handling, the model card's golden models, the
    # xdma and uart device files; uart imports pyserial)
    if kind == "model":
        from ndpkit.transport.model import ModelTransport
        transport = ModelTransport(**query)
    elif kind == "sim":
        from ndpkit.transport.sim import SimTransport
        transport = SimTransport(**query)
    elif kind == "uart":
        from ndpkit.transport.uart import UartTransport
        link_options = {k: query.pop(k) for k in ("baud", "timeout") if k in query}
        if path == "model":           # the bridge's protocol in Python, in front of a model card
            from ndpkit.transport.model import ModelTransport
            from ndpkit.transport.uart import BridgeModel
            transport = UartTransport(link=BridgeModel(ModelTransport(**query)), **link_options)
        else:
            transport = UartTransport(path, **link_options)
    else:
        from ndpkit.transport.xdma import XdmaTransport
        transport = XdmaTransport(path, **query)
    try:
        return Device(transport, guard_bytes=guard)
    except BaseException:
        transport.close()
        raise


class Device:
    """One card, through any :class:`Transport`."""

    def __init__(self, transport: Transport, *, reset: bool = True, reset_timeout: float = 0.1,
                 guard_bytes: int | None = None):
        """``guard_bytes`` > 0 puts a guard region of at least that many bytes of
        pseudo-random data on both sides of every buffer; freeing a buffer,
        :meth:`check_guards`, :meth:`free_all` and :meth:`close` check them and raise
        :class:`GuardViolation` if a command wrote outside its buffers.  Default: the
        ``NDPKIT_GUARD_BYTES`` environment variable, else 0 (test suites set it)."""
        if guard_bytes is None:
            guard_bytes = int(os.environ.get("NDPKIT_GUARD_BYTES") or 0)
        if not isinstance(guard_bytes, (int, np.integer)) or guard_bytes < 0:
            raise ValueError(f"guard_bytes must be a non-negative number of bytes, not {guard_bytes!r}")
        self.guard_bytes = int(guard_bytes)
        self._guards: dict[int, tuple[int, int, bytes, bytes]] = {}   # address -> (outer, size, below, above)
        self.transport = transport
        #: bytes moved by Buffer transfers since open: the host link each way, and the
        #: storage peer-to-peer path each way
        self.traffic = {"host_to_card": 0, "card_to_host": 0, "storage_to_card": 0, "card_to_storage": 0}
        self.shell = RegisterFile(GLOBAL, transport.read32, transport.write32)
        magic = self.shell.read("id")
        if magic != NDPKIT_MAGIC:
            raise NdpkitError(f"no ndpkit device: BAR0 id reads {magic:#010x}, expected {NDPKIT_MAGIC:#010x}")
        version = self.shell.fields("version")
        if version["major"] != VERSION[0]:
            raise NdpkitError(f"device register interface {version['major']}.{version['minor']} does not match "
                              f"this driver's {VERSION[0]}.{VERSION[1]}")
        build = self.shell.fields("build")
        self.word_bytes, self.queue_depth = build["word_bytes"], build["queue_depth"]
        self.clock_mhz = self.shell.read("clock")
        self.mem_base = self.shell.read("mem_base")
        self.mem_size = self.shell.read("mem_size_lo") | self.shell.read("mem_size_hi") << 32
        layout = self.shell.fields("layout")
        #: memory regions (ports): each engine instance works in one
        self.memory_ports = max(1, layout["regions"])
        self.allocator = RegionAllocator(self.mem_base, self.mem_size, self.memory_ports)
        self.held = False
        present = self.shell.read("engines")
        slots = [spec.kind for spec in REGISTRY.values() if present >> spec.kind & 1]
        slots += range(layout["first_extra_slot"], layout["first_extra_slot"] + layout["extra_slots"])
        #: engine name -> its instances' clients, by instance number
        self.instances: dict[str, list] = {}
        for slot in slots:
            kind = transport.read32(slot * ENGINE_STRIDE)
            try:
                spec = by_kind(kind)
            except KeyError:
                raise NdpkitError(f"slot {slot} holds an engine of kind {kind}, which this driver does not know; "
                                  f"update ndpkit") from None
            place = transport.read32(slot * ENGINE_STRIDE + spec.block.register("place").offset)
            client = spec.client_class()(self, kind, slot=slot, instance=place & 0xFF, region=place >> 8 & 0xFF)
            self.instances.setdefault(spec.name, []).append(client)
        self.instances = {name: sorted(self.instances[name], key=lambda c: c.instance)
                          for name in REGISTRY if name in self.instances}
        #: engine name -> its client: the instance itself on a card of one instance and one
        #: region, else a routing client over the instances (it names a region no instance
        #: works in before anything reaches the card)
        self.engines = {name: clients[0] if len(clients) == 1 and self.memory_ports == 1
                        else clients[0].router(self, clients) for name, clients in self.instances.items()}
        self.shell.write("irq_mask", lines=sum(1 << e.kind for e in self.engines.values()))
        if reset:
            # a previous host may have left commands running or completions queued (it
            # crashed, or closed the card mid-command): drain and reset the engines so
            # none of that is taken for this host's work; a hold it left set is released
            self.soft_reset(timeout=reset_timeout)
            self.shell.write("control", 0)

    # -- memory ----------------------------------------------------------------------
    def region(self, index: int) -> tuple[int, int]:
        """(base, size) of memory region ``index`` (an HBM pseudo-channel on an Alveo card)."""
        return region_bounds(self.mem_base, self.mem_size, self.memory_ports, index)

    def engine_address(self, address: int, region: int) -> int:
        """``address`` as an engine instance working in ``region`` names it: engines
        address 32 bits, so on a card with more memory an instance sees its region at
        the region's address modulo 4 GiB (its memory port adds the upper bits).  An
        address outside the 4 GiB that view covers is left as it is (the command's
        field check or the card then refuses it)."""
        base, size = self.region(region)
        high = base & ~0xFFFF_FFFF if size <= 1 << 32 else 0
        return address - high if high <= address < high + (1 << 32) else address

    def region_of(self, where) -> int | None:
        """The memory region a Buffer or card address lies in (None: outside card memory)."""
        return self.allocator.region_of(where.address if isinstance(where, Buffer) else int(where))

    def alloc(self, size: int, align: int | None = None, *, region: int | None = None,
              engine: str | None = None) -> Buffer:
        """A buffer of ``size`` bytes, rounded up to whole bus words, aligned to ``align``
        (default: one bus word), in memory region ``region`` (default: the first with
        room), or with ``engine`` (a name) in a region where an instance of that engine
        works (of those, the one with the most free bytes).  An engine instance works in
        one region (:meth:`instance`, its ``region``): a command's buffers must be where
        it works, so ``engine=`` is the placement a card with several regions needs::

            p = dev.upload(params, engine="adam")      # then dev.adam.step(p, ...) works on it
        """
        if not isinstance(size, (int, np.integer)) or size <= 0:
            raise ValueError(f"size must be a positive number of bytes, not {size!r}")
        if engine is not None:
            if region is not None:
                raise ValueError("give region or engine, not both")
            region = self.region_for(engine)
        align = self.word_bytes if align is None else align
        rounded = -(-int(size) // self.word_bytes) * self.word_bytes
        if not self.guard_bytes:
            return Buffer(self, self.allocator.alloc(rounded, align, region), rounded, int(size))
        # whole alignment units of guard on each side keep the buffer aligned
        unit = max(align, self.word_bytes)
        guard = -(-self.guard_bytes // unit) * unit
        outer = self.allocator.alloc(rounded + 2 * guard, align, region)
        address = outer + guard
        # the pattern depends only on the address, so two cards given the same
        # allocations (model and sim compared) hold the same bytes
        pattern = np.random.default_rng(address).bytes(2 * guard)
        below, above = pattern[:guard], pattern[guard:]
        self.transport.dma_write(outer, below)
        self.transport.dma_write(address + rounded, above)
        self._guards[address] = (outer, rounded, below, above)
        return Buffer(self, address, rounded, int(size))

    def _release(self, address: int) -> None:
        guards = self._guards.pop(address, None)
        self.allocator.free(address if guards is None else guards[0])
        if guards is not None:          # freed either way; then report a stray write
            self._check_guard(address, *guards)

    def check_guards(self) -> None:
        """Read the guard regions of every live buffer and raise
        :class:`GuardViolation` naming the first one written."""
        for address, guards in list(self._guards.items()):
            self._check_guard(address, *guards)

    def _check_guard(self, address, outer, size, below, above) -> None:
        for side, start, expected in (("below", outer, below), ("above", address + size, above)):
            found = self.transport.dma_read(start, len(expected))
            if found != expected:
                first = next(i for i, (a, b) in enumerate(zip(found, expected)) if a != b)
                raise GuardViolation(f"the guard region {side} the buffer at {address:#x}+{size:#x} was "
                                     f"written: first changed byte at card address {start + first:#x}")

    def free_all(self) -> None:
        """Check every guard, then forget every buffer (the allocator starts afresh)."""
        try:
            self.check_guards()
        finally:
            self._guards.clear()
            self.allocator = RegionAllocator(self.mem_base, self.mem_size, self.memory_ports)

    def region_for(self, engine: str) -> int:
        """The memory region of an instance of ``engine`` with the most free bytes (where
        :meth:`alloc` puts ``engine=`` buffers)."""
        clients = self.instances.get(engine) if isinstance(engine, str) else None
        if not clients:
            raise ValueError(f"engine: this card has no {engine!r} instance (it has "
                             f"{', '.join(self.instances) or 'no engines'})")
        regions = sorted({c.region for c in clients})
        return max(regions, key=lambda r: (self.allocator.regions[r].free_bytes, -r))

    def upload(self, data, align: int | None = None, *, region: int | None = None,
               engine: str | None = None) -> Buffer:
        """Allocate a buffer (in ``region``, or near ``engine``: see :meth:`alloc`) and
        copy ``data`` (bytes or NumPy array) into it."""
        raw = as_bytes(data)
        buf = self.alloc(max(1, len(raw)), align, region=region, engine=engine)
        buf.write(raw)
        return buf

    # -- engines ---------------------------------------------------------------------
    def instance(self, name: str, index: int):
        """Instance ``index`` of engine ``name`` (its commands run there and nowhere else)."""
        clients = self.instances.get(name)
        if clients is None:
            self.engine(name)                      # raises, naming what the card has
        if not isinstance(index, (int, np.integer)) or not 0 <= index < len(clients):
            raise ValueError(f"index: this card has {len(clients)} {name} instance(s), 0..{len(clients) - 1}; "
                             f"not {index!r}")
        return clients[int(index)]

    def engine(self, name: str):
        try:
            return self.engines[name]
        except KeyError:
            raise NdpkitError(f"this device has no {name!r} engine (present: {', '.join(self.engines) or 'none'}); "
                              f"open a card with it: ndpkit.open('model?engines={name}') or engines=[...]") \
                from None

    @property
    def adam(self):
        """The adam engine's client: ``dev.adam.step(p, m, v, g, scalars=...)``."""
        return self.engine("adam")

    @property
    def attention(self):
        """The attention engine's client: ``dev.attention.decode(q, k_new, v_new, cache, layer, slots)``."""
        return self.engine("attention")

    @property
    def decomp(self):
        """The decomp engine's client: ``dev.decomp.scatter(dst, indices, values, n=...)``."""
        return self.engine("decomp")

    @property
    def graph(self):
        """The graph engine's client: ``dev.graph.run(...)``; ``ndpkit.graph.bfs(g, 0, dev)``
        and friends are the user-level entry points."""
        return self.engine("graph")

    @property
    def sg(self):
        """The scatter-gather engine's client: ``dev.sg.gather(table, indices)``,
        ``dev.sg.scatter(table, indices, values)``."""
        return self.engine("sg")

    def _length(self, nbytes, dst, src=None) -> int:
        if nbytes is None:
            sizes = [b.size for b in (dst, src) if isinstance(b, Buffer)]
            if not sizes:
                raise TypeError("nbytes is required when no Buffer gives the size")
            return min(sizes)
        if not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
            raise ValueError(f"nbytes must be a non-negative integer, not {nbytes!r}")
        return int(nbytes)         # (the engine client checks it against the Buffers)

    def copy(self, dst, src, nbytes: int | None = None, *, wait: bool = True) -> Completion | Command:
        """Card-memory copy ``src -> dst`` on the ``dma_copy`` engine.  Returns the
        :class:`Completion` (or, with ``wait=False``, the :class:`Command`)."""
        length = self._length(nbytes, dst, src)
        cmd = self.engine("dma_copy").copy(dst, src, length)
        return cmd.wait() if wait else cmd

    def fill(self, dst, pattern: int, nbytes: int | None = None, *, wait: bool = True) -> Completion | Command:
        """Fill ``dst`` with the 32-bit ``pattern`` on the ``dma_copy`` engine."""
        if not isinstance(pattern, (int, np.integer)) or not 0 <= pattern < 1 << 32:
            raise ValueError(f"pattern must be a 32-bit unsigned integer, not {pattern!r}")
        length = self._length(nbytes, dst)
        cmd = self.engine("dma_copy").fill(dst, int(pattern), length)
        return cmd.wait() if wait else cmd

    @contextlib.contextmanager
    def batch(self):
        """Commands submitted inside the block start together when it ends
        (``control.hold``); at most ``queue_depth`` per engine fit.

        >>> import numpy as np, ndpkit
        >>> with ndpkit.open("model") as dev:
        ...     pairs = [(dev.alloc(4096), dev.upload(np.full(4096, i, np.uint8))) for i in range(3)]
        ...     with dev.batch():
        ...         cmds = [dev.copy(d, s, wait=False) for d, s in pairs]
        ...     print([c.wait().ok for c in cmds], [int(d.download(np.uint8)[0]) for d, _ in pairs])
        [True, True, True] [0, 1, 2]
        """
        self.shell.write("control", hold=1)
        self.held = True
        try:
            yield self
        finally:
            self.held = False
            self.shell.write("control", hold=0)

    def wait_all(self, timeout: float | None = None) -> None:
        """Wait for every submitted command of every engine instance."""
        for clients in self.instances.values():
            for client in clients:
                client.wait_all(timeout)

    # -- device ----------------------------------------------------------------------
    def cycles(self) -> int:
        """The card's free-running cycle counter."""
        while True:
            hi = self.shell.read("cycles_hi")
            lo = self.shell.read("cycles_lo")
            if self.shell.read("cycles_hi") == hi:
                return hi << 32 | lo

    def soft_reset(self, timeout: float = 0.1) -> None:
        """Reset every engine once its running command has finished; queued commands
        are discarded (waiting on them raises QUEUE_FULL-style DeviceError)."""
        self.shell.write("soft_reset", engines=1)
        for _ in range(1000):
            if not self.shell.field("reset_status", "pending"):
                break
            self.transport.wait_irq(0, timeout / 1000)
        else:
            raise DeviceTimeout("soft reset did not complete")
        for client in self.engines.values():
            client.forget()

    def info(self) -> dict:
        v = self.shell.fields("version")
        return {
            **self.transport.describe(),
            "id": f"{self.shell.read('id'):#010x}",
            "version": f"{v['major']}.{v['minor']}",
            "word_bytes": self.word_bytes,
            "queue_depth": self.queue_depth,
            "clock_mhz": self.clock_mhz,
            "engines": list(self.engines),
            "instances": {name: len(clients) for name, clients in self.instances.items()},
            "memory_ports": self.memory_ports,
            "mem_base": self.mem_base,
            "mem_size": self.mem_size,
            "mem_free": self.allocator.free_bytes,
            "cycles": self.cycles(),
        }

    def close(self) -> None:
        """Check the guards of the buffers still allocated (if guards are on and the
        card is still reachable), then close the transport."""
        try:
            if self._guards and not getattr(self.transport, "closed", False):
                try:
                    self.check_guards()
                except TransportClosed:     # the card is gone: nothing left to check
                    pass
        finally:
            self._guards.clear()
            self.transport.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
