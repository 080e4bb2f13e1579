"""Transports: how the driver reaches a card (see :class:`base.Transport`)."""
from ndpkit.transport.base import Transport

__all__ = ["Transport"]
