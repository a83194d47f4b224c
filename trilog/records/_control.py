"""Control records: the commit and abort markers that end a transaction (Kafka's
``ControlRecordType`` and ``EndTransactionMarker``).

A control batch is a v2 batch whose attributes have the control bit (and, for a
transaction marker, the transactional bit), holding one record whose key and value follow
their own schemas (big-endian):

    key    4 bytes   version int16 (0) | type int16       ABORT 0, COMMIT 1
    value  6 bytes   version int16 (0) | coordinator_epoch int32   (a transaction marker's)

A newer version may append fields to either; a reader takes the fields it knows and needs
at least their bytes.  Kafka writes the marker's record with every delta 0 and no headers,
so it is 17 bytes with its length prefix:

    0x20  length varint (16) | 0x00 attributes | 0x00 timestamp_delta | 0x00 offset_delta
    0x08  key_length varint (4)   | key (4 bytes)
    0x0c  value_length varint (6) | value (6 bytes)
    0x00  header count

This module is the record's side (the key and value bytes, and finding them in a record);
``_v2`` builds and reads whole control batches with it.
"""

from __future__ import annotations

import enum
import struct
from typing import Any, NamedTuple

from trilog.errors import RemoteProtocolError
from trilog.records._errors import CorruptRecordsError
from trilog.records._varint import decode_varint, encode_varint

#: The key of a control record: version, type.
CONTROL_KEY = struct.Struct(">hh")
#: The value of a transaction marker: version, coordinator epoch.
END_TXN_MARKER_VALUE = struct.Struct(">hi")
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0


class ControlRecordType(enum.IntEnum):
    """What a control record says (Kafka's ``ControlRecordType``; the KRaft types are not
    trilog's to write)."""

    ABORT = 0
    COMMIT = 1


class EndTxnMarker(NamedTuple):
    """A transaction marker: how the transaction ended, and the epoch of the transaction
    coordinator that wrote it (a marker of an older coordinator is fenced)."""

    control_type: ControlRecordType
    coordinator_epoch: int

    @property
    def is_commit(self) -> bool:
        return self.control_type is ControlRecordType.COMMIT


def encode_end_txn_marker_record(control_type: ControlRecordType, coordinator_epoch: int
                                 ) -> bytes:
    """The one record of a marker's control batch, length prefix included (all deltas 0)."""
    key = CONTROL_KEY.pack(CONTROL_KEY_VERSION, control_type)
    value = END_TXN_MARKER_VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)
    body = b"".join((b"\x00\x00\x00", encode_varint(len(key)), key,
                     encode_varint(len(value)), value, b"\x00"))
    return encode_varint(len(body)) + body


def find_control_key(data: Any, pos: int, end: int) -> tuple[int, int, int]:
    """Where the key of the control record at ``data[pos:]`` lies: ``(key_position,
    next_position, limit)``, ``next_position`` being where its value's length follows and
    ``limit`` where the record (or ``data``) ends.  The record must fit its batch, which ends
    at ``end``; its key (at least the 4 bytes of its schema) must lie in ``data``, which may
    end before the batch does (a reader of headers reads a prefix).  Only the record's
    leading varints are read.  ``CorruptRecordsError`` if they run past either end or say
    nonsense."""
    try:
        length, pos = decode_varint(data, pos)
        if length < 6 or pos + length > end:
            raise CorruptRecordsError("control record length runs past the end of its batch")
        limit = min(pos + length, len(data))
        pos += 1  # attributes
        _ts_delta, pos = decode_varint(data, pos)
        _offset_delta, pos = decode_varint(data, pos)
        key_length, pos = decode_varint(data, pos)
    except RemoteProtocolError as exc:
        raise _malformed(exc) from exc
    if key_length < CONTROL_KEY.size or pos + key_length > limit:
        raise CorruptRecordsError(f"control record key of {key_length} bytes, expected at "
                                  f"least {CONTROL_KEY.size} in its record")
    return pos, pos + key_length, limit


def find_control_value(data: Any, pos: int, limit: int) -> tuple[int, int]:
    """``(value_position, value_length)`` of the control record whose value's length is at
    ``data[pos]`` (``find_control_key``'s ``next_position`` and ``limit``)."""
    try:
        value_length, pos = decode_varint(data, pos)
    except RemoteProtocolError as exc:
        raise _malformed(exc) from exc
    if pos + max(value_length, 0) > limit:
        raise CorruptRecordsError("control record value runs past the end of its record")
    return pos, value_length


def _malformed(exc: RemoteProtocolError) -> CorruptRecordsError:
    if isinstance(exc, CorruptRecordsError):
        return exc
    return CorruptRecordsError(f"malformed control record: {exc}")


def parse_control_type(data: Any, key_position: int) -> int:
    """The type id of a control record whose key starts at ``key_position`` (4 bytes there,
    checked by the caller); ``CorruptRecordsError`` for a negative key version."""
    version, type_id = CONTROL_KEY.unpack_from(data, key_position)
    if version < 0:
        raise CorruptRecordsError(f"control record key version {version}: corrupt")
    return int(type_id)


def parse_end_txn_marker(data: Any, type_id: int, value_position: int, value_length: int
                         ) -> EndTxnMarker:
    """The marker of a control record of type ``type_id`` whose value lies at
    ``value_position`` (Kafka's ``EndTransactionMarker.deserializeValue``)."""
    if type_id not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise CorruptRecordsError(f"control record type {type_id} is not a transaction marker")
    if value_length < END_TXN_MARKER_VALUE.size:
        raise CorruptRecordsError(f"transaction marker value of {value_length} bytes, expected "
                                  f"at least {END_TXN_MARKER_VALUE.size}")
    version, coordinator_epoch = END_TXN_MARKER_VALUE.unpack_from(data, value_position)
    if version < 0:
        raise CorruptRecordsError(f"transaction marker version {version}: corrupt")
    return EndTxnMarker(ControlRecordType(type_id), coordinator_epoch)
