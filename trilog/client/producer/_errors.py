"""The producer's own errors (the broker's come from ``trilog.errors``)."""

from __future__ import annotations

from trilog.errors import TrilogError


class BufferFullError(TrilogError):
    """``send_nowait`` found ``buffer_memory`` full."""


class DeliveryTimeoutError(TrilogError):
    """A record was not acknowledged within ``delivery_timeout_ms``."""


class ProducerClosedError(TrilogError):
    """The producer was closed or cancelled before the record was acknowledged."""
