"""The records of ``__transaction_state``: Kafka's transaction log keys and values.

Byte layout (Kafka's ``TransactionLog``; the message specs ``TransactionLogKey`` and
``TransactionLogValue``), so the topic reads the same as Kafka's::

    key     int16 version, then by version
      0     TransactionLogKey    string transactional_id
    value   of a key (null: a tombstone, the transactional id expired);
            int16 version, then TransactionLogValue by version
      0     int64 producer_id | int16 producer_epoch | int32 transaction_timeout_ms
            | int8 transaction_status
            | transaction_partitions: nullable array of
                  (string topic | array of int32 partition_ids)
            | int64 transaction_last_update_timestamp_ms
            | int64 transaction_start_timestamp_ms
      1     the same fields, flexible (KIP-482): compact strings and arrays (uvarint
            length + 1, 0 = null), a tagged-field section after each partition entry and
            after the value; Kafka's tags there: 0 previous_producer_id, 1 next_producer_id
            (int64), 2 client_transaction_version (int16), for KIP-890's transactions

    string: int16 length N >= 0, then N bytes of UTF-8; array: int32 count (-1 = null),
    then the items; integers big-endian

Kafka writes value v0 while the ``transaction.version`` feature is 0, and v1 from 1 on;
``encode_txn_value`` writes v0 (what every Kafka broker reads) and the decoders read both
(v1's tagged fields are skipped: ``TxnLogValue`` does not model KIP-890's producer-id
rotation). An Empty transaction's
partitions are written as null, as Kafka writes them, and read as none whatever the record
holds, as Kafka reads them; a null list in another state is read as no partitions. Keys of
other versions (Kafka's other coordinator record types) decode to None; value versions past
1 are errors. Bytes after the last field are ignored, as Kafka's readers ignore them.

Decoding runs on ``protocol``'s ``Reader``, so every length is checked against the bytes
that remain (and a count against the smallest encoding of its items) before anything is
allocated, and any malformed record raises ``TransactionLogRecordError``.  Pure: no I/O.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from trilog.errors import RemoteProtocolError
from trilog.protocol._primitives import INT8, INT16, INT32, INT64, STRING, Array, Reader, Writer
from trilog.protocol._schema import Field, Struct


class TxnStatus(enum.IntEnum):
    """A transaction's state as ``__transaction_state`` stores it (Kafka's
    ``TransactionState`` ids)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def state_name(self) -> str:
        """The name Kafka gives the state in DescribeTransactions and ListTransactions
        ("Empty", "Ongoing", "PrepareCommit", ...)."""
        return self.name.title().replace("_", "")

    @classmethod
    def from_state_name(cls, name: str) -> TxnStatus | None:
        """The state of a ``state_name`` (ListTransactions' filters); None if unknown."""
        return _BY_STATE_NAME.get(name)


_BY_STATE_NAME = {status.state_name: status for status in TxnStatus}


class TxnLogValue(NamedTuple):
    """A transactional id's state as ``__transaction_state`` stores it (times in ms).

    ``partitions`` are the transaction's partitions as ``(topic, partition)`` pairs (the
    broker's ``PartitionKey``). The record groups them by topic: they are written topic by
    topic in the order each topic first appears, and read back in that order, so a value
    whose pairs are already grouped by topic comes back equal.
    """

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: TxnStatus
    partitions: tuple[tuple[str, int], ...] = ()
    last_update_ms: int = -1
    start_ms: int = -1


class TransactionLogRecordError(RemoteProtocolError, ValueError):
    """A ``__transaction_state`` key or value that does not decode.

    A ``RemoteProtocolError`` like every decoding error of ``protocol/``, and a
    ``ValueError`` because a record of an unknown format is a bad value to its reader."""


# Kafka's message specs, declared as ``_messages`` declares the APIs (the version of a
# record is its first int16, not a request header's).
_KEY = Struct("TransactionLogKey", [Field("transactional_id", STRING)])
_VALUE = Struct("TransactionLogValue", [
    Field("producer_id", INT64),
    Field("producer_epoch", INT16),
    Field("transaction_timeout_ms", INT32),
    Field("transaction_status", INT8),
    Field("transaction_partitions", Array(Struct("PartitionsSchema", [
        Field("topic", STRING),
        Field("partition_ids", Array(INT32)),
    ])), nullable="0+"),
    Field("transaction_last_update_timestamp_ms", INT64),
    Field("transaction_start_timestamp_ms", INT64),
], flexible="1+")
_PartitionsSchema = _VALUE.cls.PartitionsSchema
_KEY_VERSION = 0
_VALUE_WRITTEN = 0
_VALUE_VERSIONS = (0, 1)


def encode_txn_key(transactional_id: str) -> bytes:
    """The key (v0) of a transactional id's state."""
    w = Writer()
    INT16.write(w, _KEY_VERSION)
    _KEY.codec(_KEY_VERSION).write(w, _KEY.cls(transactional_id=transactional_id))
    return w.getvalue()


def encode_txn_value(value: TxnLogValue) -> bytes:
    """The value (v0) of a transactional id's state.

    ``ValueError`` for an Empty transaction with partitions (Kafka refuses it too);
    ``LocalProtocolError`` for a field out of its range."""
    status = TxnStatus(value.status)
    if status is TxnStatus.EMPTY and value.partitions:
        raise ValueError(f"an Empty transaction has no partitions: {value.partitions}")
    by_topic: dict[str, list[int]] = {}
    for topic, partition in value.partitions:
        by_topic.setdefault(topic, []).append(partition)
    record = _VALUE.cls(
        producer_id=value.producer_id,
        producer_epoch=value.producer_epoch,
        transaction_timeout_ms=value.timeout_ms,
        transaction_status=int(status),
        transaction_partitions=None if status is TxnStatus.EMPTY else [
            _PartitionsSchema(topic=topic, partition_ids=ids) for topic, ids in by_topic.items()
        ],
        transaction_last_update_timestamp_ms=value.last_update_ms,
        transaction_start_timestamp_ms=value.start_ms,
    )
    w = Writer()
    INT16.write(w, _VALUE_WRITTEN)
    _VALUE.codec(_VALUE_WRITTEN).write(w, record)
    return w.getvalue()


def decode_txn_key(data: bytes | bytearray | memoryview) -> str | None:
    """The transactional id of a key, or None for a key version this module does not know.
    ``TransactionLogRecordError`` if malformed."""
    r = Reader(data)
    try:
        version = r.int16()
        if version != _KEY_VERSION:
            return None
        transactional_id: str = _KEY.codec(version).read(r).transactional_id
        return transactional_id
    except RemoteProtocolError as exc:
        raise TransactionLogRecordError(f"transaction log key: {exc}") from None


def decode_txn_value(data: bytes | bytearray | memoryview | None) -> TxnLogValue | None:
    """The state in a value, versions 0-1; None for a tombstone (a null value).
    ``TransactionLogRecordError`` for anything else."""
    if data is None:
        return None
    r = Reader(data)
    try:
        version = r.int16()
        if version not in _VALUE_VERSIONS:
            raise TransactionLogRecordError(f"unknown transaction log value version {version}")
        record = _VALUE.codec(version).read(r)
    except TransactionLogRecordError:
        raise
    except RemoteProtocolError as exc:
        raise TransactionLogRecordError(f"transaction log value: {exc}") from None
    try:
        status = TxnStatus(record.transaction_status)
    except ValueError:
        raise TransactionLogRecordError(
            f"unknown transaction status {record.transaction_status}") from None
    entries = record.transaction_partitions
    partitions = () if status is TxnStatus.EMPTY or entries is None else tuple(
        (entry.topic, partition) for entry in entries for partition in entry.partition_ids
    )
    return TxnLogValue(
        producer_id=record.producer_id,
        producer_epoch=record.producer_epoch,
        timeout_ms=record.transaction_timeout_ms,
        status=status,
        partitions=partitions,
        last_update_ms=record.transaction_last_update_timestamp_ms,
        start_ms=record.transaction_start_timestamp_ms,
    )
