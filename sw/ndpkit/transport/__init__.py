"""Transports: how the driver reaches a card (see :class:`base.Transport`)."""
from .base import Transport

__all__ = ["Transport"]
