"""ndpkit host package: the driver (``ndpkit.open``), golden models, register map,
simulation tooling.  See the README for the API in examples."""
from ndpkit.device import Buffer, Device, open_device as open
from ndpkit.engine import Command, Completion
from ndpkit.errors import (DeviceError, DeviceTimeout, DmaError, GuardViolation, NdpkitError, OutOfDeviceMemory,
                     RegisterAccessError, TransportClosed)
from ndpkit_spec.codes import ErrorCode
from ndpkit_spec.registry import EngineKind

__all__ = ["open", "Device", "Buffer", "Command", "Completion", "ErrorCode", "EngineKind", "NdpkitError",
           "DeviceError", "DeviceTimeout", "DmaError", "GuardViolation", "OutOfDeviceMemory", "RegisterAccessError",
           "TransportClosed"]
