"""The one error class the record layer adds to ``trilog.errors``, and the ``is_valid`` both
batch kinds derive from their ``validate``."""

from __future__ import annotations

from trilog.errors import CorruptMessageError, RemoteProtocolError


class CorruptRecordsError(CorruptMessageError, RemoteProtocolError):
    """Record bytes that do not decode: a bad CRC, a bad length, a corrupt compressed payload.

    It is both a ``CorruptMessageError`` (Kafka error code 2, what the broker answers) and a
    ``RemoteProtocolError`` (bytes from a peer or a file that do not decode), so code written
    against either catches it.
    """


class CheckedBatch:
    """Base of ``RecordBatch`` and ``LegacyRecordBatch``: ``is_valid()`` is ``validate()``
    (which raises ``CorruptRecordsError``) as a bool."""

    __slots__ = ()

    def validate(self) -> None:
        raise NotImplementedError

    def is_valid(self) -> bool:
        try:
            self.validate()
        except CorruptRecordsError:
            return False
        return True
