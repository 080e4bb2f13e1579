"""Card memory as the driver hands it out: :class:`Buffer`, address handling
(:func:`address_of`, :func:`as_bytes`) and the allocators (:class:`Allocator`,
:class:`RegionAllocator`).

The bottom of the driver: this module imports no other driver module but
:mod:`ndpkit.errors` (and the specification), so the device (:mod:`ndpkit.device`), the
command protocol (:mod:`ndpkit.engine`) and every engine client import it at the top
and nothing imports back (``sw/tests/test_package_layers.py`` checks it).  The names
are also importable from :mod:`ndpkit.device`, where they were first, and ``Buffer``
from :mod:`ndpkit`.

A Buffer reaches its card through the :class:`~ndpkit.device.Device` that allocated it
(its ``transport``, ``traffic`` and ``_release``); it never imports the device.
"""
from __future__ import annotations

import bisect

import numpy as np

from ndpkit.errors import OutOfDeviceMemory
from ndpkit_spec.shell import region_bounds

__all__ = ["Buffer", "Allocator", "RegionAllocator", "address_of", "as_bytes"]


class Allocator:
    """First-fit allocator over card memory; frees coalesce with their neighbours."""

    def __init__(self, base: int, size: int):
        self.base, self.size = base, size
        self._free = [(base, size)]         # sorted (address, size)
        self._used: dict[int, int] = {}

    def alloc(self, size: int, align: int) -> int:
        if size <= 0:
            raise ValueError(f"size must be positive, not {size}")
        if align <= 0 or align & (align - 1):
            raise ValueError(f"align must be a power of two, not {align}")
        for i, (start, length) in enumerate(self._free):
            address = -(-start // align) * align
            if address + size <= start + length:
                pieces = [(start, address - start), (address + size, start + length - address - size)]
                self._free[i:i + 1] = [(a, n) for a, n in pieces if n > 0]
                self._used[address] = size
                return address
        largest = max((n for _, n in self._free), default=0)
        raise OutOfDeviceMemory(f"no free range of {size} bytes (aligned to {align}); largest free range "
                                f"{largest} bytes, {self.free_bytes} bytes free in all")

    def free(self, address: int) -> None:
        if address not in self._used:
            raise ValueError(f"{address:#x} is not an allocated buffer (double free?)")
        size = self._used.pop(address)
        i = bisect.bisect(self._free, (address, 0))
        self._free.insert(i, (address, size))
        merged = []
        for start, length in self._free:
            if merged and merged[-1][0] + merged[-1][1] == start:
                merged[-1] = (merged[-1][0], merged[-1][1] + length)
            else:
                merged.append((start, length))
        self._free = merged

    @property
    def free_bytes(self) -> int:
        return sum(n for _, n in self._free)


class RegionAllocator:
    """One :class:`Allocator` per memory region: a buffer lies in one region (the
    region an engine instance works in), asked for by number or, with none asked
    for, the first region with room."""

    def __init__(self, base: int, size: int, regions: int = 1):
        self.regions = [Allocator(*region_bounds(base, size, regions, r)) for r in range(regions)]

    def alloc(self, size: int, align: int, region: int | None = None) -> int:
        if region is not None:
            if not isinstance(region, (int, np.integer)) or isinstance(region, bool) or \
                    not 0 <= region < len(self.regions):
                raise ValueError(f"region must be 0..{len(self.regions) - 1} (the card's memory regions), "
                                 f"not {region!r}")
            allocator = self.regions[int(region)]
            try:
                return allocator.alloc(size, align)
            except OutOfDeviceMemory as e:
                raise OutOfDeviceMemory(f"region {region} [{allocator.base:#x}, +{allocator.size:#x}): "
                                        f"{str(e).replace(' in all', ' in the region')}") from None
        failure = None
        for allocator in self.regions:
            try:
                return allocator.alloc(size, align)
            except OutOfDeviceMemory as e:
                failure = failure or e
        if len(self.regions) == 1:
            raise failure
        largest = max(max((n for _, n in a._free), default=0) for a in self.regions)
        raise OutOfDeviceMemory(f"no region has a free range of {size} bytes (aligned to {align}); largest free "
                                f"range {largest} bytes, {self.free_bytes} bytes free in all {len(self.regions)} "
                                f"regions of {self.regions[0].size} bytes")

    @property
    def size(self) -> int:
        return sum(a.size for a in self.regions)

    def region_of(self, address: int) -> int | None:
        for index, allocator in enumerate(self.regions):
            if allocator.base <= address < allocator.base + allocator.size:
                return index
        return None

    def free(self, address: int) -> None:
        region = self.region_of(address)
        if region is None:
            raise ValueError(f"{address:#x} is not an allocated buffer (double free?)")
        self.regions[region].free(address)

    @property
    def free_bytes(self) -> int:
        return sum(a.free_bytes for a in self.regions)


class Buffer:
    """A range of card memory: ``address`` (card address) and ``size`` bytes (whole bus
    words); ``nbytes`` is what was asked for (``size`` rounded it up), so defaults that
    count elements count the caller's and not the padding.  ``device`` is the
    :class:`~ndpkit.device.Device` that allocated it (:meth:`~ndpkit.device.Device.alloc`)."""

    def __init__(self, device, address: int, size: int, nbytes: int | None = None):
        self.device, self.address, self.size = device, address, size
        self.nbytes = size if nbytes is None else nbytes
        self.freed = False

    def _range(self, offset: int, nbytes: int) -> None:
        if self.freed:
            raise ValueError(f"{self!r} was freed")
        if offset < 0 or nbytes < 0 or offset + nbytes > self.size:
            raise ValueError(f"offset={offset}, nbytes={nbytes} is outside the {self.size}-byte buffer")

    def write(self, data, offset: int = 0) -> None:
        """Host -> card: ``data`` (bytes or a NumPy array) at ``offset``."""
        raw = as_bytes(data)
        self._range(offset, len(raw))
        self.device.transport.dma_write(self.address + offset, raw)
        self.device.traffic["host_to_card"] += len(raw)

    def read(self, nbytes: int | None = None, offset: int = 0) -> bytes:
        """Card -> host: ``nbytes`` (default: to the end) from ``offset``."""
        nbytes = self.size - offset if nbytes is None else nbytes
        self._range(offset, nbytes)
        data = self.device.transport.dma_read(self.address + offset, nbytes)
        self.device.traffic["card_to_host"] += nbytes
        return data

    def write_from_storage(self, data, offset: int = 0) -> None:
        """Storage -> card peer to peer: ``data`` (read from the storage file) lands at
        ``offset`` without crossing the host link where the card has such a path
        (``transport.p2p_native``); otherwise it is an ordinary host DMA."""
        raw = as_bytes(data)
        self._range(offset, len(raw))
        t = self.device.transport
        t.p2p_write(self.address + offset, raw)
        self.device.traffic["storage_to_card" if t.p2p_native else "host_to_card"] += len(raw)

    def read_to_storage(self, nbytes: int | None = None, offset: int = 0) -> bytes:
        """Card -> storage peer to peer (see :meth:`write_from_storage`)."""
        nbytes = self.size - offset if nbytes is None else nbytes
        self._range(offset, nbytes)
        t = self.device.transport
        data = t.p2p_read(self.address + offset, nbytes)
        self.device.traffic["card_to_storage" if t.p2p_native else "card_to_host"] += nbytes
        return data

    def download(self, dtype=np.uint8, count: int | None = None) -> np.ndarray:
        """The buffer's contents as a NumPy array of ``dtype``."""
        dtype = np.dtype(dtype)
        count = self.size // dtype.itemsize if count is None else count
        return np.frombuffer(self.read(count * dtype.itemsize), dtype=dtype).copy()

    def free(self) -> None:
        if not self.freed:
            self.freed = True
            self.device._release(self.address)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def __repr__(self):
        return f"<Buffer {self.address:#x}+{self.size:#x}{' freed' if self.freed else ''}>"


def address_of(value, name: str) -> int:
    """The card address a command argument names: a :class:`Buffer`'s address (a freed
    one is refused) or a card address given as an integer; ``name`` (the argument)
    goes into the ``ValueError``/``TypeError``."""
    if isinstance(value, Buffer):
        if value.freed:
            raise ValueError(f"{name}: {value!r} was freed")
        return value.address
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    raise TypeError(f"{name} must be a Buffer or a card address, not {type(value).__name__}")


def as_bytes(data) -> bytes:
    """``data`` (bytes-like, or a NumPy array of any dtype) as the bytes a DMA moves."""
    return np.ascontiguousarray(data).view(np.uint8).tobytes() if isinstance(data, np.ndarray) else bytes(data)
