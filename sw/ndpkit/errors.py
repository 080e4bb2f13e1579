"""The driver's exceptions.  Every failure the driver reports is one of these."""
from __future__ import annotations

from ndpkit_spec.codes import ErrorCode

__all__ = ["NdpkitError", "DeviceError", "DeviceTimeout", "TransportClosed", "OutOfDeviceMemory",
           "RegisterAccessError", "DmaError", "CacheClosed"]


class NdpkitError(Exception):
    """Base class of every ndpkit exception."""


class DeviceError(NdpkitError):
    """A command completed with an error code.

    ``engine`` is the engine's name, ``code`` the :class:`ErrorCode`, ``field`` the
    command argument the code points at (for example ``"dst"`` for an
    OUT_OF_WINDOW destination), ``tag`` the command's tag.
    """

    def __init__(self, engine: str, code: int, field: str | None = None, tag: int | None = None,
                 detail: str = ""):
        self.engine, self.field, self.tag = engine, field, tag
        try:
            self.code = ErrorCode(code)
            name = self.code.name
        except ValueError:
            self.code, name = code, f"code {code}"
        where = f" (argument {field!r})" if field else ""
        super().__init__(f"{engine}: {name}{where}{': ' + detail if detail else ''}")


class DeviceTimeout(NdpkitError, TimeoutError):
    """The device did not answer (an interrupt or a completion) within the timeout."""


class TransportClosed(NdpkitError, ConnectionError):
    """The connection to the device is gone (closed, or the simulator process died)."""


class CacheClosed(NdpkitError, ValueError):
    """A :class:`ndpkit.KVCache` (or a ``ShardedKVCache``) was used after ``close()``: its
    card memory is freed.  A ``ValueError`` too, as Python's I/O on a closed file."""


class OutOfDeviceMemory(NdpkitError, MemoryError):
    """The device-memory allocator has no free range of the requested size."""


class GuardViolation(NdpkitError):
    """A guard region beside a buffer changed: something wrote outside its buffers."""


class RegisterAccessError(NdpkitError):
    """A BAR0 access was answered with an AXI error (an offset with no register)."""

    def __init__(self, address: int, resp: int, write: bool):
        self.address, self.resp, self.write = address, resp, write
        kind = {2: "SLVERR", 3: "DECERR"}.get(resp, f"resp {resp}")
        super().__init__(f"BAR0 {'write' if write else 'read'} at {address:#06x} answered {kind}")


class DmaError(NdpkitError):
    """A host DMA failed: the range is outside card memory, or the bus answered an error."""
