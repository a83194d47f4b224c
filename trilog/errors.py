"""trilog's exception tree.

    TrilogError
    ├── ProtocolError                bytes that do not follow Kafka's protocol
    │   ├── LocalProtocolError       we were asked to encode something the protocol cannot carry
    │   └── RemoteProtocolError      bytes from a peer (or a file) do not decode
    ├── UnsupportedCodecError        a compression codec whose library is not installed
    └── ApiError                     an error with a Kafka error code (seed 003, "Error Codes")
        ├── OffsetOutOfRangeError    code 1
        ├── CorruptMessageError      code 2
        └── ...                      one class per code in ``ERROR_CODES``

An ``ApiError`` is what a broker answers with, so the same class is raised by the broker's
own storage (and turned into the code on the wire) and by the client when a response
carries the code. Each class knows its ``code``, its protocol ``name`` and whether it is
``retriable``.  This module is pure (stdlib only) so every layer may import it.
"""

from __future__ import annotations

from typing import ClassVar


class TrilogError(Exception):
    """Root of every error trilog raises on purpose."""


class ProtocolError(TrilogError):
    """Bytes that do not follow Kafka's wire or record format."""


class LocalProtocolError(ProtocolError):
    """We were asked to encode something the protocol cannot carry (a bug on our side)."""


class RemoteProtocolError(ProtocolError):
    """Bytes received from a peer (or read from a file) do not decode."""


class UnsupportedCodecError(TrilogError):
    """A compression codec is named whose library is not installed."""


class ApiError(TrilogError):
    """An error that has a Kafka error code.

    Raised locally (the broker's storage raises these; the broker puts ``code`` on the wire)
    and remotely (a client raises the class matching a response's error code).
    """

    code: ClassVar[int] = -1
    name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    retriable: ClassVar[bool] = False
    description: ClassVar[str] = "The server experienced an unexpected error."

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.description)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r}, code={self.code})"


#: code -> ApiError subclass, filled by :func:`_api_error`.
ERROR_CODES: dict[int, type[ApiError]] = {}


def _api_error(code: int, name: str, retriable: bool, description: str):
    """Class decorator registering an ``ApiError`` subclass under its Kafka code."""

    def register(cls: type[ApiError]) -> type[ApiError]:
        cls.code, cls.name, cls.retriable, cls.description = code, name, retriable, description
        if code in ERROR_CODES:
            raise AssertionError(f"error code {code} registered twice")
        ERROR_CODES[code] = cls
        return cls

    return register


def error_for_code(code: int, message: str | None = None) -> ApiError:
    """The exception instance for a Kafka error code (``UnknownServerError`` for unknown codes)."""
    cls = ERROR_CODES.get(code)
    if cls is None:
        err = UnknownServerError(message or f"unknown error code {code}")
        return err
    return cls(message)


def raise_for_code(code: int, message: str | None = None) -> None:
    """Raise the matching ``ApiError`` unless ``code`` is 0 (NONE)."""
    if code:
        raise error_for_code(code, message)


# -- The table.  Codes, names and retriable flags are Kafka's. ------------------------------


@_api_error(-1, "UNKNOWN_SERVER_ERROR", False, "The server experienced an unexpected error.")
class UnknownServerError(ApiError):
    pass


@_api_error(
    1,
    "OFFSET_OUT_OF_RANGE",
    False,
    "The requested offset is not within the range of offsets maintained by the server.",
)
class OffsetOutOfRangeError(ApiError):
    """Carries the valid range when it is known: ``log_start_offset`` .. ``log_end_offset``."""

    def __init__(
        self,
        message: str | None = None,
        *,
        log_start_offset: int | None = None,
        log_end_offset: int | None = None,
    ) -> None:
        super().__init__(message)
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


@_api_error(
    2,
    "CORRUPT_MESSAGE",
    True,
    "This message has failed its CRC checksum, exceeds the valid size, has a null key for a "
    "compacted topic, or is otherwise corrupt.",
)
class CorruptMessageError(ApiError):
    pass


@_api_error(
    3,
    "UNKNOWN_TOPIC_OR_PARTITION",
    True,
    "This server does not host this topic-partition.",
)
class UnknownTopicOrPartitionError(ApiError):
    pass


@_api_error(
    10,
    "MESSAGE_TOO_LARGE",
    False,
    "The request included a message larger than the max message size the server will accept.",
)
class MessageTooLargeError(ApiError):
    pass


@_api_error(
    17,
    "INVALID_TOPIC_EXCEPTION",
    False,
    "The request attempted to perform an operation on an invalid topic.",
)
class InvalidTopicError(ApiError):
    pass
