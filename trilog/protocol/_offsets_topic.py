"""The records of ``__consumer_offsets``: Kafka's offset-commit keys and values.

Byte layout (Kafka's ``GroupMetadataManager``; the message specs ``OffsetCommitKey``,
``OffsetCommitValue`` and ``GroupMetadataKey``), so the topic reads the same as Kafka's::

    key     int16 version, then by version
      0, 1  OffsetCommitKey     string group | string topic | int32 partition
      2     GroupMetadataKey    string group
    value   of an offset-commit key (null: a tombstone, the offset is deleted);
            int16 version, then OffsetCommitValue by version
      0     int64 offset |                    string metadata | int64 commit ts
      1     int64 offset |                    string metadata | int64 commit ts | int64 expire ts
      2     int64 offset |                    string metadata | int64 commit ts
      3     int64 offset | int32 leader epoch | string metadata | int64 commit ts

    string: int16 length N >= 0, then N bytes of UTF-8; integers big-endian

Kafka 2.1+ writes value v3, or v1 when the commit asked for its own retention
(OffsetCommit v2-4 ``retention_time_ms``); so does ``encode_offset_value``.  Keys are
written as v1.  A group-metadata key's value (the group's members) is not decoded here: the
offset manager only needs to know the record is not an offset.  Other key versions (Kafka's
newer group types) decode to None; value versions past 3 (v4 is a flexible version) are
errors.  Bytes after the last field are ignored, as Kafka's readers ignore them.

Decoding runs on ``protocol``'s ``Reader``, so every length is checked against the bytes
that remain before anything is allocated, and any malformed record raises
``OffsetsRecordError``.  Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, TypeVar

from trilog.errors import RemoteProtocolError
from trilog.protocol._primitives import INT16, INT32, INT64, STRING, Reader, Writer
from trilog.protocol._schema import Field, Struct

_T = TypeVar("_T")


class OffsetKey(NamedTuple):
    """The key of a committed offset: which group, topic and partition."""

    group: str
    topic: str
    partition: int


class OffsetAndMetadata(NamedTuple):
    """A committed offset as ``__consumer_offsets`` stores it (timestamps in ms)."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    #: Only when the commit asked for its own retention (value v1); else -1.
    expire_timestamp: int = -1


class OffsetsRecordError(RemoteProtocolError, ValueError):
    """A ``__consumer_offsets`` key or value that does not decode.

    A ``RemoteProtocolError`` like every decoding error of ``protocol/``, and a
    ``ValueError`` because a record of an unknown format is a bad value to its reader (the
    offset manager skips such records)."""


# Kafka's message specs, declared as ``_messages`` declares the APIs (the version of a
# record is its first int16, not a request header's).
_OFFSET_KEY = Struct("OffsetCommitKey", [
    Field("group", STRING),
    Field("topic", STRING),
    Field("partition", INT32),
])
_GROUP_KEY = Struct("GroupMetadataKey", [Field("group", STRING)])
_OFFSET_VALUE = Struct("OffsetCommitValue", [
    Field("offset", INT64),
    Field("leader_epoch", INT32, "3+", default=-1),
    Field("metadata", STRING),
    Field("commit_timestamp", INT64),
    Field("expire_timestamp", INT64, "1", default=-1),
])
_OFFSET_KEY_VERSIONS = (0, 1)
_GROUP_KEY_VERSION = 2
_OFFSET_VALUE_VERSIONS = range(4)


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    """The key (v1) of an offset commit."""
    return _encode(_OFFSET_KEY, 1, OffsetKey(group, topic, partition))


def encode_offset_value(om: OffsetAndMetadata) -> bytes:
    """The value of an offset commit: v1 if it has its own expiry, else v3."""
    return _encode(_OFFSET_VALUE, 1 if om.expire_timestamp >= 0 else 3, om)


def decode_offsets_key(data: bytes | bytearray | memoryview) -> OffsetKey | str | None:
    """An ``OffsetKey``, the group id of a group-metadata key, or None for a key version
    this module does not know.  ``OffsetsRecordError`` if malformed."""

    def read(r: Reader, version: int) -> OffsetKey | str | None:
        if version in _OFFSET_KEY_VERSIONS:
            return _read_as(OffsetKey, _OFFSET_KEY, r, version)
        if version == _GROUP_KEY_VERSION:
            group: str = _GROUP_KEY.codec(version).read(r).group
            return group
        return None

    return _decode("key", data, read)


def decode_offset_value(data: bytes | bytearray | memoryview) -> OffsetAndMetadata:
    """The value of an offset commit, versions 0-3.  ``OffsetsRecordError`` for anything
    else."""

    def read(r: Reader, version: int) -> OffsetAndMetadata:
        if version not in _OFFSET_VALUE_VERSIONS:
            raise OffsetsRecordError(f"unknown offset commit value version {version}")
        return _read_as(OffsetAndMetadata, _OFFSET_VALUE, r, version)

    return _decode("offset commit value", data, read)


def _encode(struct: Struct, version: int, value: object) -> bytes:
    w = Writer()
    INT16.write(w, version)
    struct.codec(version).write(w, value)  # reads the tuple's fields by name
    return w.getvalue()


def _decode(what: str, data: bytes | bytearray | memoryview,
            read: Callable[[Reader, int], _T]) -> _T:
    r = Reader(data)
    try:
        return read(r, r.int16())
    except OffsetsRecordError:
        raise
    except RemoteProtocolError as exc:
        raise OffsetsRecordError(f"{what}: {exc}") from None


def _read_as(cls: Callable[..., _T], struct: Struct, r: Reader, version: int) -> _T:
    """Read ``struct`` at ``version`` into the named tuple ``cls`` of the same fields."""
    value = struct.codec(version).read(r)
    return cls(**{name: getattr(value, name) for name in struct.field_names})
