"""RecordBatch v2 (magic 2): the format trilog stores on disk and sends on the wire.

Byte layout (big-endian; seed 003, "Record Batch"):

    offset  size  field
    0       8     base_offset             patched by the broker on append
    8       4     batch_length            bytes that follow this field
    12      4     partition_leader_epoch
    16      1     magic                   2
    17      4     crc                     CRC-32C of bytes 21 .. end
    21      2     attributes              bits 0-2 codec, 3 timestamp type (1 = log append),
                                          4 transactional, 5 control, 6 delete horizon
    23      4     last_offset_delta
    27      8     first_timestamp (base timestamp)
    35      8     max_timestamp
    43      8     producer_id
    51      2     producer_epoch
    53      4     base_sequence
    57      4     record_count
    61      ...   records (compressed as a whole when the codec is not none)

    Record:
        length varint | attributes int8 | timestamp_delta varlong | offset_delta varint
        | key_length varint | key | value_length varint | value
        | header_count varint | (key_length varint | key | value_length varint | value) * n

A ``RecordBatch`` decodes the 61-byte header eagerly and the records only when iterated;
that is what lets the broker validate and store a batch without touching its records.
This module is the one source of the layout: ``BatchHeader`` and ``read_batch_header`` give
the header alone, ``check_batch_header`` reads it and applies the one rule a header must
pass (in ``RecordBatch.validate``, and in storage's append, recovery and reads),
and ``batch_crc`` computes the checksum the ``crc`` field holds.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from trilog._time import now_ms
from trilog.errors import LocalProtocolError, RemoteProtocolError
from trilog.records import _codecs
from trilog.records._control import (
    ControlRecordType,
    EndTxnMarker,
    encode_end_txn_marker_record,
    find_control_key,
    find_control_value,
    parse_control_type,
    parse_end_txn_marker,
)
from trilog.records._crc import crc32c
from trilog.records._errors import CheckedBatch, CorruptRecordsError
from trilog.records._native import speedups
from trilog.records._types import BytesLike, RecordHeaders
from trilog.records._varint import _TABLE, _TABLE_LIMIT, decode_varint, encode_varint

MAGIC = 2
#: A v2 batch header: base_offset, batch_length, partition_leader_epoch, magic, crc,
#: attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id,
#: producer_epoch, base_sequence, records_count.
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # base_offset + batch_length: what precedes ``batch_length`` bytes
#: base_offset and batch_length, the prefix every record format shares (v0/v1: offset and
#: message size): what walking a buffer of batches reads
BATCH_PREFIX = struct.Struct(">qi")
PARTITION_LEADER_EPOCH_OFFSET = 12  # not covered by the CRC, as the base offset is not
MAGIC_OFFSET = 16  # where every record format keeps its magic byte
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
#: The smallest legal ``batch_length``: a header with no records.
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD

_OFFSET = struct.Struct(">q")
_CRC_FIELD = struct.Struct(">I")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

CREATE_TIME, LOG_APPEND_TIME = 0, 1
NO_TIMESTAMP = -1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

_new_tuple = tuple.__new__


class BatchHeader(NamedTuple):
    """The 61-byte header of a v2 batch, field by field as the layout above.

    What storage reads from its files and checks at append, recovery and reads without
    touching a record: ``read_batch_header`` reads one, ``check_batch_header`` reads and
    checks it.
    """

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the batch takes in a log or a buffer, including offset and length fields."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression_type(self) -> int:
        return self.attributes & COMPRESSION_MASK


_unpack_header = HEADER.unpack_from
#: The codec ids of attributes bits 0-2 that name a codec (0..4), as a set of bools by id.
_KNOWN_CODEC = tuple(codec in _codecs.CODEC_NAMES for codec in range(COMPRESSION_MASK + 1))


def read_batch_header(buffer: Any, position: int = 0) -> BatchHeader:
    """The header of the batch at ``buffer[position:]``, unchecked (``check_batch_header``
    reads and checks); ``CorruptRecordsError`` if fewer than 61 bytes are left."""
    try:
        header: BatchHeader = _new_tuple(BatchHeader, _unpack_header(buffer, position))
    except struct.error:
        raise _too_short(buffer, position) from None
    return header


def check_batch_header(buffer: Any, position: int = 0, from_producer: bool = False) -> BatchHeader:
    """The header of the v2 batch at ``buffer[position:]``, checked by the one rule every v2
    batch header must pass; ``CorruptRecordsError`` if it fails (or fewer than 61 bytes are
    left).

    Every header: magic 2; a ``batch_length`` of at least a bare header (49); a codec id
    Kafka knows (0..4); neither ``record_count`` nor ``last_offset_delta`` negative, and at
    least ``record_count - 1`` offsets after the base (a batch that log compaction thinned
    holds fewer records than offsets, possibly none).

    ``from_producer`` adds Kafka's rule for a batch as a producer sends it (its
    ``LogValidator``): at least one record and one offset per record
    (``last_offset_delta == record_count - 1``).

    Only the header is judged: whether the batch fits its buffer (``header.size``), its
    CRC-32C (``batch_crc``) and any size limit are the caller's to check.
    """
    header: BatchHeader = _new_tuple(
        BatchHeader, check_batch_header_fields(buffer, position, from_producer)
    )
    return header


def check_batch_header_fields(
    buffer: Any, position: int = 0, from_producer: bool = False
) -> tuple[int, ...]:
    """``check_batch_header``, returning the header's 13 fields as a plain tuple in
    ``BatchHeader``'s order: for a hot path that unpacks them at once (storage's append
    checks every batch it is given this way; a named tuple would cost as much again).

    The good case is one unpacking and one condition; the complaint is worked out only for
    a bad header.
    """
    try:
        fields: tuple[int, ...] = _unpack_header(buffer, position)
    except struct.error:
        raise _too_short(buffer, position) from None
    _b, length, _e, magic, _c, attributes, delta, _f, _m, _p, _pe, _s, count = fields
    if (
        magic != MAGIC
        or length < MIN_BATCH_LENGTH
        or not _KNOWN_CODEC[attributes & COMPRESSION_MASK]
        or delta < 0
        or count < 0
        or delta < count - 1
        or (from_producer and (count == 0 or delta != count - 1))
    ):
        raise CorruptRecordsError(_header_complaint(_new_tuple(BatchHeader, fields)))
    return fields


def _too_short(buffer: Any, position: int) -> CorruptRecordsError:
    return CorruptRecordsError(
        f"{len(buffer) - position} bytes are too few for a record batch header"
    )


def _header_complaint(header: BatchHeader) -> str:
    """What is wrong with a header that ``check_batch_header`` refused."""
    if header.magic != MAGIC:
        return f"record batch magic {header.magic}, expected 2"
    if header.batch_length < MIN_BATCH_LENGTH:
        return f"record batch length {header.batch_length} is too small"
    if not _KNOWN_CODEC[header.compression_type]:
        return f"record batch has unknown codec id {header.compression_type}"
    return (f"record batch counts disagree: {header.record_count} records, "
            f"last offset delta {header.last_offset_delta}")


def batch_crc(buffer: Any, position: int, size: int) -> int:
    """The CRC-32C that the ``crc`` field of the batch at ``buffer[position : position +
    size]`` should hold (it covers the attributes to the end of the batch)."""
    view = buffer if type(buffer) is memoryview else memoryview(buffer)  # never a copy
    return crc32c(view[position + ATTRIBUTES_OFFSET : position + size])


class Header(NamedTuple):
    key: str
    value: bytes | None


class Record(NamedTuple):
    """One record of a batch, with absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    timestamp_type: int = CREATE_TIME


class RecordBatch(CheckedBatch):
    """A view of one v2 batch inside a buffer; the header is decoded, the records are not.

    ``buffer[position : position + size]`` holds the batch.  Construction checks only that
    the header fits and the magic is 2; ``validate()`` checks sizes and the CRC.
    """

    __slots__ = (
        "attributes",
        "base_offset",
        "base_sequence",
        "batch_length",
        "buffer",
        "crc",
        "first_timestamp",
        "last_offset_delta",
        "magic",
        "max_timestamp",
        "partition_leader_epoch",
        "position",
        "producer_epoch",
        "producer_id",
        "record_count",
    )
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    def __init__(self, buffer: BytesLike, position: int = 0) -> None:
        if len(buffer) - position < HEADER_SIZE:
            raise CorruptRecordsError("record batch shorter than its 61-byte header")
        (
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.first_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.record_count,
        ) = HEADER.unpack_from(buffer, position)
        self.buffer = buffer
        self.position = position

    # -- header-derived facts -----------------------------------------------------------

    @property
    def size(self) -> int:
        """Bytes the batch takes in the log, including offset and length fields."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression_type(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control_batch(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    def end_txn_marker(self) -> EndTxnMarker | None:
        """The transaction marker of this control batch (``read_end_txn_marker``): None when
        the log cleaner emptied it; ``CorruptRecordsError`` for a malformed one."""
        return read_end_txn_marker(self.buffer, self.position)

    def __repr__(self) -> str:
        return (
            f"RecordBatch(base_offset={self.base_offset}, last_offset_delta="
            f"{self.last_offset_delta}, size={self.size}, records={self.record_count})"
        )

    # -- checks ---------------------------------------------------------------------------

    @property
    def header(self) -> BatchHeader:
        return read_batch_header(self.buffer, self.position)

    def compute_crc(self) -> int:
        return batch_crc(self.buffer, self.position, self.size)

    def validate(self) -> None:
        """Check the header (``check_batch_header``), that the batch fits its buffer, and
        the CRC-32C; raise ``CorruptRecordsError`` if anything is off."""
        check_batch_header(self.buffer, self.position)
        if self.position + self.size > len(self.buffer):
            raise CorruptRecordsError("record batch extends past the end of its buffer")
        computed = self.compute_crc()
        if computed != self.crc:
            raise CorruptRecordsError(
                f"record batch CRC mismatch: stored {self.crc:#010x}, computed {computed:#010x}"
            )

    # -- records, decoded lazily -----------------------------------------------------------

    def records_bytes(self, max_decompressed_size: int | None = None) -> bytes:
        """The (decompressed) record section."""
        raw = memoryview(self.buffer)[self.position + HEADER_SIZE : self.position + self.size]
        codec = self.compression_type
        if codec == _codecs.NONE:
            return bytes(raw)
        return _codecs.decompress(codec, raw, max_size=max_decompressed_size)

    def __iter__(self) -> Iterator[Record]:
        return self.iter_records()

    def iter_records(self, max_decompressed_size: int | None = None, *,
                     topic_partition: tuple[str, int] | None = None,
                     record_cls: type = Record) -> Iterator[Record]:
        """The records (a control batch has none for the caller), decoded at this call.

        A compressed batch is decompressed first, capped at ``max_decompressed_size``
        (``_codecs.DEFAULT_MAX_DECOMPRESSED_SIZE`` by default).  Raises ``CorruptRecordsError``
        on malformed records; does not check the CRC (``validate()`` does).

        With ``topic_partition``, each record is a ``record_cls`` built straight from
        ``(topic, partition, offset, timestamp, key, value, headers, timestamp_type)``: the
        consumer's records without a second tuple per record.
        """
        return iter(self.decode(max_decompressed_size, topic_partition=topic_partition,
                                record_cls=record_cls))

    def decode(self, max_decompressed_size: int | None = None, *,
               topic_partition: tuple[str, int] | None = None,
               record_cls: type = Record) -> list[Any]:
        """The records as a list (see ``iter_records``): one pass over the batch."""
        if self.is_control_batch:
            return []
        if self.position + self.size > len(self.buffer) or self.batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordsError("record batch extends past the end of its buffer")
        if self.compression_type == _codecs.NONE:
            # Records straight out of the caller's buffer: no copy of the section.
            data, start, end = self.buffer, self.position + HEADER_SIZE, self.position + self.size
        else:
            data = self.records_bytes(max_decompressed_size)
            start, end = 0, len(data)
        return decode_records(
            data,
            start,
            end,
            self.record_count,
            self.base_offset,
            self.first_timestamp,
            self.max_timestamp if self.attributes & TIMESTAMP_TYPE_MASK else None,
            topic_partition,
            record_cls,
            Header,
        )

    def records(self) -> list[Record]:
        return self.decode()


def _decode_records(
    data: BytesLike,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_ts: int,
    log_append_ts: int | None,
    topic_partition: tuple[str, int] | None,
    record_cls: type,
    header_cls: type,
) -> list[Any]:
    """Decode ``count`` records from ``data[pos:end]`` into ``record_cls`` tuples.

    The consumer's per-record hot path, in pure Python (``_speedups.decode_records`` is its
    C twin).  Varints of one and two bytes (values within +-8191: nearly every field of
    nearly every record) are decoded inline, as a function call costs more than the
    decoding; longer ones go to ``decode_varint``.  ``IndexError`` from running off the end
    becomes ``CorruptRecordsError``.

    It is deliberately one long function (the one exception to trilog's 80-line limit):
    splitting the six fields or the varint decoding into helpers would add a Python call
    per field per record, which costs more than the decoding itself, and keeps the locals
    (``data``, ``pos``, ``append``) out of the fast local-variable slots.
    """
    if type(data) is not bytes:  # keys and values are sliced out as bytes
        data, pos, end = bytes(memoryview(data)[pos:end]), 0, end - pos
    ts_type = CREATE_TIME if log_append_ts is None else LOG_APPEND_TIME
    topic, partition = topic_partition if topic_partition is not None else (None, None)
    prefixed = topic_partition is not None
    varint = decode_varint
    no_headers: tuple[Header, ...] = ()
    out: list[Any] = []
    append = out.append
    try:
        for _ in range(count):
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:  # two bytes: lengths of 64 .. 8191
                b = (b & 0x7F) | (data[pos + 1] << 7)
                length = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                length, pos = varint(data, pos)
            record_end = pos + length
            if length < 6 or record_end > end:  # six one-byte fields at least
                raise CorruptRecordsError("record length runs past the end of its batch")
            pos += 1  # attributes: unused
            b = data[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                ts_delta, pos = varint(data, pos)
            b = data[pos]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                offset_delta, pos = varint(data, pos)
            b = data[pos]
            if b < 0x80:
                key_len = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                key_len = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                key_len, pos = varint(data, pos)
            if key_len < 0:
                key = None
            else:
                key = data[pos : pos + key_len]
                pos += key_len
            b = data[pos]
            if b < 0x80:
                value_len = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:  # two bytes: lengths of 64 .. 8191
                b = (b & 0x7F) | (data[pos + 1] << 7)
                value_len = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                value_len, pos = varint(data, pos)
            if value_len < 0:
                value = None
            else:
                value = data[pos : pos + value_len]
                pos += value_len
            if data[pos] == 0:  # zero headers
                pos += 1
                headers = no_headers
            else:
                headers, pos = _decode_headers(data, pos, header_cls)
            if pos != record_end:
                raise CorruptRecordsError("record fields do not add up to its length")
            timestamp = base_ts + ts_delta if log_append_ts is None else log_append_ts
            if prefixed:
                append(_new_tuple(record_cls, (topic, partition, base_offset + offset_delta,
                                               timestamp, key, value, headers, ts_type)))
            else:
                append(_new_tuple(record_cls, (base_offset + offset_delta, timestamp, key, value,
                                               headers, ts_type)))
    except (IndexError, RemoteProtocolError) as exc:
        if isinstance(exc, CorruptRecordsError):
            raise
        raise CorruptRecordsError(f"malformed record in batch: {exc}") from exc
    return out


def _decode_headers(data: bytes, pos: int, header_cls: type) -> tuple[tuple[Header, ...], int]:
    header_count, pos = decode_varint(data, pos)
    if header_count < 0:
        raise CorruptRecordsError("record with a negative header count")
    hs: list[Header] = []
    for _h in range(header_count):
        hk_len, pos = decode_varint(data, pos)
        if hk_len < 0:
            raise CorruptRecordsError("record header with a null key")
        hkey = data[pos : pos + hk_len].decode("utf-8", "replace")
        pos += hk_len
        hv_len, pos = decode_varint(data, pos)
        if hv_len < 0:
            hval = None
        else:
            hval = data[pos : pos + hv_len]
            pos += hv_len
        hs.append(_new_tuple(header_cls, (hkey, hval)))
    return tuple(hs), pos


decode_records = speedups.decode_records if speedups is not None else _decode_records


_PRODUCER_FIELDS = struct.Struct(">qhi")  # producer_id, producer_epoch, base_sequence
_PRODUCER_OFFSET = 43


def restamp_producer(data: bytes, producer_id: int, producer_epoch: int,
                     base_sequence: int) -> bytes:
    """The batch with another producer id, epoch and base sequence (and so a new CRC): for
    an idempotent producer that starts its sequences afresh before sending it."""
    buf = bytearray(data)
    _PRODUCER_FIELDS.pack_into(buf, _PRODUCER_OFFSET, producer_id, producer_epoch,
                               base_sequence)
    _CRC_FIELD.pack_into(buf, CRC_OFFSET, batch_crc(buf, 0, len(buf)))
    return bytes(buf)


def patch_base_offset(buffer: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Overwrite a batch's base offset in place (not covered by the CRC)."""
    _OFFSET.pack_into(buffer, position, base_offset)


_ATTRIBUTES_FIELD = struct.Struct(">h")
_MAX_TIMESTAMP_OFFSET = 35


def stamp_log_append_time(buffer: bytearray | memoryview, position: int, size: int,
                          timestamp: int) -> None:
    """Mark the batch at ``buffer[position : position + size]`` as stamped by the log at
    ``timestamp`` (Kafka's ``DefaultRecordBatch.setMaxTimestamp(LOG_APPEND_TIME, now)``):
    the timestamp-type attribute bit set, ``max_timestamp`` the append time, the CRC-32C
    recomputed; ``first_timestamp`` and the records are left as the producer wrote them
    (a reader takes every record's timestamp from ``max_timestamp``).  In place."""
    (attributes,) = _ATTRIBUTES_FIELD.unpack_from(buffer, position + ATTRIBUTES_OFFSET)
    _ATTRIBUTES_FIELD.pack_into(buffer, position + ATTRIBUTES_OFFSET,
                                attributes | TIMESTAMP_TYPE_MASK)
    _OFFSET.pack_into(buffer, position + _MAX_TIMESTAMP_OFFSET, timestamp)
    _CRC_FIELD.pack_into(buffer, position + CRC_OFFSET, batch_crc(buffer, position, size))


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: RecordHeaders | None = (),
) -> bytes:
    """One record's bytes, length prefix included.

    Records without headers are encoded from the varint table when every number is small
    (timestamp deltas within 8 s, offsets, lengths under 8 KiB): the common case.
    """
    table, limit = _TABLE, _TABLE_LIMIT
    if not headers and -limit <= timestamp_delta < limit and 0 <= offset_delta < limit:
        if key is None:
            key_len, key = b"\x01", b""  # varint -1
        else:
            n = len(key)
            key_len = table[n + limit] if n < limit else encode_varint(n)
        if value is None:
            value_len, value = b"\x01", b""
        else:
            n = len(value)
            value_len = table[n + limit] if n < limit else encode_varint(n)
        ts_part = table[timestamp_delta + limit]
        od_part = table[offset_delta + limit]
        # attributes byte + header count byte = 2
        n = 2 + len(ts_part) + len(od_part) + len(key_len) + len(key) + len(value_len) + len(value)
        return b"".join((table[n + limit] if n < limit else encode_varint(n), b"\x00", ts_part,
                         od_part, key_len, key, value_len, value, b"\x00"))
    parts = [b"\x00", encode_varint(timestamp_delta), encode_varint(offset_delta)]
    if key is None:
        parts.append(b"\x01")  # varint -1
    else:
        parts.append(encode_varint(len(key)))
        parts.append(key)
    if value is None:
        parts.append(b"\x01")
    else:
        parts.append(encode_varint(len(value)))
        parts.append(value)
    if headers:
        parts.append(encode_varint(len(headers)))
        for hkey, hvalue in headers:
            if hkey is None:
                raise TypeError("a header key must be str or bytes, not None")
            hk = hkey.encode("utf-8") if isinstance(hkey, str) else hkey
            parts.append(encode_varint(len(hk)))
            parts.append(hk)
            if hvalue is None:
                parts.append(b"\x01")
            else:
                parts.append(encode_varint(len(hvalue)))
                parts.append(hvalue)
    else:
        parts.append(b"\x00")
    body = b"".join(parts)
    return encode_varint(len(body)) + body


class _RecordWriter:
    """The record section of a batch being built, in pure Python: the reference twin of
    ``_speedups.RecordWriter`` (same methods, same bytes, same errors).

    ``append`` returns the record's offset delta, or ``None`` when the record would take the
    batch past ``max_bytes`` (a record always fits in an empty batch).  A ``None`` timestamp
    means now.  ``release()``, once the batch is built, drops the encoded records but keeps
    the count and timestamps (the producer's delivery reports read them).
    """

    def __init__(self) -> None:
        self.max_bytes: int | None = None
        self.first_timestamp: int | None = None
        self.max_timestamp = NO_TIMESTAMP
        self.last_offset_delta = -1
        self._parts: list[bytes] | None = []
        self._size = HEADER_SIZE
        self._timestamps: list[int] = []

    def __len__(self) -> int:
        return len(self._timestamps)

    @property
    def size_in_bytes(self) -> int:
        """Uncompressed size of the batch built so far, header included."""
        return self._size

    def append(self, timestamp: int | None, key: bytes | None, value: bytes | None,
               headers: RecordHeaders | None = ()) -> int | None:
        return self._append_at(len(self._timestamps), timestamp, key, value, headers)

    def _append_at(self, offset_delta: int, timestamp: int | None, key: bytes | None,
                   value: bytes | None, headers: RecordHeaders | None) -> int | None:
        if self._parts is None:
            raise ValueError("the batch was built and released: no more records")
        if timestamp is None:
            timestamp = now_ms()
        first_ts = self.first_timestamp if self.first_timestamp is not None else timestamp
        if not _INT64_MIN <= timestamp <= _INT64_MAX or \
                not _INT64_MIN <= timestamp - first_ts <= _INT64_MAX:
            raise OverflowError("a timestamp (and its delta) must fit in 64 bits")
        record = encode_record(offset_delta, timestamp - first_ts, key, value, headers)
        size = self._size + len(record)
        if self.max_bytes is not None and self._timestamps and size > self.max_bytes:
            return None
        self._parts.append(record)
        self._size = size
        self._timestamps.append(timestamp)
        self.first_timestamp = first_ts
        self.last_offset_delta = offset_delta
        if timestamp > self.max_timestamp:  # noqa: PLR1730 - max() is a call: slower here
            self.max_timestamp = timestamp
        return offset_delta

    def getvalue(self) -> bytes:
        """The encoded records."""
        if self._parts is None:
            raise ValueError("the batch was built and released: no more records")
        return b"".join(self._parts)

    def release(self) -> None:
        self._parts = None

    def timestamp_at(self, index: int) -> int:
        if not 0 <= index < len(self._timestamps):
            raise IndexError("no record at that index")
        return self._timestamps[index]


if TYPE_CHECKING:  # the C twin has the Python twin's methods, signatures and errors
    _Writer = _RecordWriter
else:
    _Writer = speedups.RecordWriter if speedups is not None else _RecordWriter


class RecordBatchBuilder(_Writer):
    """Appends records and closes them into one v2 batch with a single CRC computation.

    Not thread-safe.  ``append(timestamp, key, value, headers=())`` returns the record's
    offset delta, or ``None`` when the batch is full (``max_bytes`` would be exceeded and
    the batch is not empty); a ``None`` timestamp means now.  The records are encoded by
    the C accelerator when it is built (``trilog.records._native.IMPLEMENTATION``), else by
    ``_RecordWriter`` above.
    """

    def __init__(
        self,
        *,
        compression_type: int = _codecs.NONE,
        base_offset: int = 0,
        timestamp_type: int = CREATE_TIME,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        partition_leader_epoch: int = -1,
        is_transactional: bool = False,
        max_bytes: int | None = None,
    ) -> None:
        super().__init__()
        self.compression_type = compression_type
        self.base_offset = base_offset
        self.timestamp_type = timestamp_type
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.partition_leader_epoch = partition_leader_epoch
        self.is_transactional = is_transactional
        self.max_bytes = max_bytes

    def append_with_offset(
        self,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: RecordHeaders | None = (),
    ) -> int | None:
        """``append`` at an explicit absolute offset, for conversions that keep the gaps of a
        compacted log.  Offsets must increase from ``base_offset``; do not mix with ``append``.
        """
        delta = offset - self.base_offset
        if delta < 0 or (len(self) and delta <= self.last_offset_delta):
            raise LocalProtocolError("offsets in a record batch must increase from its base")
        return self._append_at(delta, timestamp, key, value, headers)

    def build(self) -> bytes:
        """Close the batch: compress the records if asked, write the header, one CRC."""
        body = self.getvalue()
        if self.compression_type != _codecs.NONE:
            body = _codecs.compress(self.compression_type, body)
        attributes = self.compression_type
        if self.timestamp_type == LOG_APPEND_TIME:
            attributes |= TIMESTAMP_TYPE_MASK
        if self.is_transactional:
            attributes |= TRANSACTIONAL_MASK
        first_ts = self.first_timestamp
        buf = bytearray(HEADER_SIZE + len(body))
        HEADER.pack_into(
            buf,
            0,
            self.base_offset,
            HEADER_SIZE - LOG_OVERHEAD + len(body),
            self.partition_leader_epoch,
            MAGIC,
            0,
            attributes,
            max(self.last_offset_delta, 0),
            first_ts if first_ts is not None else NO_TIMESTAMP,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            len(self),
        )
        buf[HEADER_SIZE:] = body
        _CRC_FIELD.pack_into(buf, CRC_OFFSET, batch_crc(buf, 0, len(buf)))
        return bytes(buf)


_LAST_OFFSET_DELTA_OFFSET = 23


def rebuild_batch(batch: RecordBatch, records: Iterable[Record]) -> bytes:
    """A batch like ``batch`` holding only ``records`` (some of its own, in order): what
    the log cleaner writes for a batch it thinned (Kafka's ``MemoryRecords.filterTo``).

    The batch keeps its base offset, its last offset (so that the producer's last sequence
    number survives), its producer id, epoch and base sequence, its partition leader epoch,
    its timestamp type and transactional flag, and its codec (the records are compressed
    again with it); each record keeps its offset, timestamp, key, value and headers.  With
    no records left it is Kafka's empty batch: a bare header, uncompressed, both timestamps
    the old max timestamp.  Control batches are not rebuilt (the caller keeps them whole).
    """
    if batch.is_control_batch:
        raise ValueError("control batches are kept whole, not rebuilt")
    builder = RecordBatchBuilder(
        compression_type=batch.compression_type,
        base_offset=batch.base_offset,
        timestamp_type=batch.timestamp_type,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        partition_leader_epoch=batch.partition_leader_epoch,
        is_transactional=batch.is_transactional,
    )
    for record in records:
        builder.append_with_offset(record.offset, record.timestamp, record.key, record.value,
                                   record.headers)
    if not len(builder):
        return _empty_batch(batch)
    buf = bytearray(builder.build())
    struct.pack_into(">i", buf, _LAST_OFFSET_DELTA_OFFSET, batch.last_offset_delta)
    _CRC_FIELD.pack_into(buf, CRC_OFFSET, batch_crc(buf, 0, len(buf)))
    return bytes(buf)


def _empty_batch(batch: RecordBatch) -> bytes:
    """Kafka's ``DefaultRecordBatch.writeEmptyHeader`` for ``batch``: no records, no codec."""
    attributes = batch.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK)
    buf = bytearray(HEADER_SIZE)
    HEADER.pack_into(
        buf, 0, batch.base_offset, HEADER_SIZE - LOG_OVERHEAD, batch.partition_leader_epoch,
        MAGIC, 0, attributes, batch.last_offset_delta, batch.max_timestamp,
        batch.max_timestamp, batch.producer_id, batch.producer_epoch, batch.base_sequence, 0,
    )
    _CRC_FIELD.pack_into(buf, CRC_OFFSET, batch_crc(buf, 0, len(buf)))
    return bytes(buf)


#: A transaction marker's batch, as Kafka's ``MemoryRecords.withEndTransactionMarker``
#: writes it: transactional and control, no codec, CreateTime, base sequence -1.
END_TXN_MARKER_ATTRIBUTES = TRANSACTIONAL_MASK | CONTROL_MASK


def build_end_txn_marker(*, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                         commit: bool, timestamp_ms: int) -> bytes:
    """One control batch holding a transaction's COMMIT or ABORT marker (78 bytes), byte for
    byte Kafka's: base offset 0 (the log assigns it), no partition leader epoch (-1: the
    leader stamps its own), attributes transactional|control, both timestamps
    ``timestamp_ms``, base sequence -1, one record (``_control``'s layout)."""
    control_type = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    record = encode_end_txn_marker_record(control_type, coordinator_epoch)
    buf = bytearray(HEADER_SIZE + len(record))
    HEADER.pack_into(
        buf, 0, 0, HEADER_SIZE - LOG_OVERHEAD + len(record), -1, MAGIC, 0,
        END_TXN_MARKER_ATTRIBUTES, 0, timestamp_ms, timestamp_ms, producer_id, producer_epoch,
        -1, 1,
    )
    buf[HEADER_SIZE:] = record
    _CRC_FIELD.pack_into(buf, CRC_OFFSET, batch_crc(buf, 0, len(buf)))
    return bytes(buf)


def _control_key(buffer: Any, position: int) -> tuple[int, int, int] | None:
    """Where the key of the record of the control batch at ``buffer[position:]`` lies
    (``find_control_key``), or None for a batch the log cleaner emptied.  Only the header
    and the record's leading bytes are read, so ``buffer`` may end after them (a reader of
    headers reads a short prefix of the batch)."""
    (_b, length, _e, magic, _c, attributes, _d, _f, _m, _p, _pe, _s, count) = (
        check_batch_header_fields(buffer, position))
    if not attributes & CONTROL_MASK:
        raise ValueError(f"the batch at {position} is not a control batch")
    if count == 0:
        return None
    if attributes & COMPRESSION_MASK:
        raise CorruptRecordsError("a control batch is never compressed")
    return find_control_key(buffer, position + HEADER_SIZE, position + length + LOG_OVERHEAD)


def control_record_type(buffer: Any, position: int = 0) -> int | None:
    """The type id of the control batch at ``buffer[position:]`` (``ControlRecordType``'s
    values, or another id a newer writer used), read at its record's key without decoding
    the record; None when the batch was emptied by the log cleaner.  ``ValueError`` if the
    batch is not a control batch; ``CorruptRecordsError`` for a malformed one.  ``buffer``
    may end after the key."""
    found = _control_key(buffer, position)
    return None if found is None else parse_control_type(buffer, found[0])


def read_end_txn_marker(buffer: Any, position: int = 0) -> EndTxnMarker | None:
    """The transaction marker of the control batch at ``buffer[position:]`` (its type and
    coordinator epoch), or None when the batch was emptied by the log cleaner (Kafka: the
    whole transaction is gone).  ``ValueError`` if the batch is not a control batch;
    ``CorruptRecordsError`` for a malformed marker or another control type.  Like
    ``control_record_type`` it reads only the header and the record's first bytes:
    ``buffer`` may end after the value."""
    found = _control_key(buffer, position)
    if found is None:
        return None
    key_position, next_position, limit = found
    type_id = parse_control_type(buffer, key_position)
    value_position, value_length = find_control_value(buffer, next_position, limit)
    return parse_end_txn_marker(buffer, type_id, value_position, value_length)


def build_batch(
    records: Iterable[tuple[Any, ...]],
    *,
    base_offset: int = 0,
    compression_type: int = _codecs.NONE,
) -> bytes:
    """Convenience: a batch from ``(timestamp, key, value[, headers])`` tuples."""
    builder = RecordBatchBuilder(base_offset=base_offset, compression_type=compression_type)
    for rec in records:
        builder.append(*rec)
    return builder.build()


def iter_batches(
    buffer: BytesLike, position: int = 0, end: int | None = None
) -> Iterator[RecordBatch]:
    """Walk the v2 batches in ``buffer[position:end]`` reading only their headers.

    Stops at a partial trailing batch (normal at the end of a fetch response).  Does not
    validate CRCs: call ``validate()`` on the batches that need it.
    """
    if end is None:
        end = len(buffer)
    while end - position >= HEADER_SIZE:
        batch = RecordBatch(buffer, position)
        size = batch.batch_length + LOG_OVERHEAD
        if batch.batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordsError(f"record batch length {batch.batch_length} is too small")
        if position + size > end:
            return
        yield batch
        position += size


def whole_batches_length(data: BytesLike) -> int:
    """How many leading bytes of ``data`` are whole batches (a fetch answer may end with
    part of one, cut at the size limit); only the prefixes are read."""
    pos, end = 0, len(data)
    while end - pos >= LOG_OVERHEAD:
        _base, length = BATCH_PREFIX.unpack_from(data, pos)
        nxt = pos + LOG_OVERHEAD + length
        if length <= 0 or nxt > end:
            break
        pos = nxt
    return pos
