"""ndpkit host package: the driver (``ndpkit.open``), golden models, register map,
simulation tooling.  See the README for the API in examples."""
from .device import Buffer, Device, open_device as open
from .engine import Command, Completion
from .errors import (DeviceError, DeviceTimeout, DmaError, GuardViolation, NdpkitError, OutOfDeviceMemory,
                     RegisterAccessError, TransportClosed)
from .codes import ErrorCode, EngineKind

__all__ = ["open", "Device", "Buffer", "Command", "Completion", "ErrorCode", "EngineKind", "NdpkitError",
           "DeviceError", "DeviceTimeout", "DmaError", "GuardViolation", "OutOfDeviceMemory", "RegisterAccessError",
           "TransportClosed"]
