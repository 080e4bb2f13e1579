"""ndpkit host package: the driver (``ndpkit.open``), golden models, register map,
simulation tooling.  See the README for the API in examples."""
from ndpkit.device import Buffer, Device, open_device as open
from ndpkit.engine import Command, Completion
from ndpkit.engines.attention.kvcache import KVCache, ShardedKVCache
from ndpkit.errors import (CacheClosed, DeviceError, DeviceTimeout, DmaError, GuardViolation, NdpkitError,
                           OutOfDeviceMemory, RegisterAccessError, TransportClosed)
from ndpkit_spec.codes import ErrorCode
from ndpkit_spec.registry import EngineKind

__all__ = ["open", "Device", "Buffer", "Command", "Completion", "KVCache", "ShardedKVCache", "ErrorCode", "EngineKind", "NdpkitError",
           "DeviceError", "DeviceTimeout", "DmaError", "GuardViolation", "OutOfDeviceMemory", "RegisterAccessError",
           "TransportClosed", "CacheClosed"]


def __getattr__(name):
    """``ndpkit.torch`` and ``ndpkit.graph`` after a plain ``import ndpkit``, imported on
    first use (they pull in PyTorch, SciPy and networkx, which the driver does not need)."""
    if name in ("torch", "graph"):
        import importlib
        return importlib.import_module(f"ndpkit.{name}")
    raise AttributeError(f"module 'ndpkit' has no attribute {name!r}")
