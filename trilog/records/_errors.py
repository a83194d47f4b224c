"""The one error class the record layer adds to ``trilog.errors``."""

from __future__ import annotations

from trilog.errors import CorruptMessageError, RemoteProtocolError


class CorruptRecordsError(CorruptMessageError, RemoteProtocolError):
    """Record bytes that do not decode: a bad CRC, a bad length, a corrupt compressed payload.

    It is both a ``CorruptMessageError`` (Kafka error code 2, what the broker answers) and a
    ``RemoteProtocolError`` (bytes from a peer or a file that do not decode), so code written
    against either catches it.
    """
