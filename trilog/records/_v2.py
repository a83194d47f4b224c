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
"""

from __future__ import annotations

import struct
from typing import Iterable, Iterator, NamedTuple

from trilog.errors import CorruptMessageError, RemoteProtocolError
from trilog.records import _codecs
from trilog.records._crc import crc32c
from trilog.records._varint import decode_varint, encode_varint

MAGIC = 2
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # base_offset + batch_length: what precedes ``batch_length`` bytes
MAGIC_OFFSET = 16
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


class RecordBatch:
    """A view of one v2 batch inside a buffer; the header is decoded, the records are not.

    ``buffer[position : position + size]`` holds the batch.  Construction checks only that
    the header fits and the magic is 2; ``validate()`` checks sizes and the CRC.
    """

    __slots__ = (
        "buffer",
        "position",
        "base_offset",
        "batch_length",
        "partition_leader_epoch",
        "magic",
        "crc",
        "attributes",
        "last_offset_delta",
        "first_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "record_count",
    )

    def __init__(self, buffer, position: int = 0) -> None:
        if len(buffer) - position < HEADER_SIZE:
            raise CorruptMessageError("record batch shorter than its 61-byte header")
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

    def __repr__(self) -> str:
        return (
            f"RecordBatch(base_offset={self.base_offset}, last_offset_delta="
            f"{self.last_offset_delta}, size={self.size}, records={self.record_count})"
        )

    # -- checks ---------------------------------------------------------------------------

    def compute_crc(self) -> int:
        start = self.position + ATTRIBUTES_OFFSET
        end = self.position + self.size
        return crc32c(memoryview(self.buffer)[start:end])

    def is_valid(self) -> bool:
        try:
            self.validate()
        except CorruptMessageError:
            return False
        return True

    def validate(self) -> None:
        """Check magic, sizes and CRC-32C; raise ``CorruptMessageError`` if anything is off."""
        if self.magic != MAGIC:
            raise CorruptMessageError(f"record batch magic {self.magic}, expected 2")
        if self.batch_length < MIN_BATCH_LENGTH:
            raise CorruptMessageError(f"record batch length {self.batch_length} is too small")
        if self.position + self.size > len(self.buffer):
            raise CorruptMessageError("record batch extends past the end of its buffer")
        if self.last_offset_delta < 0 or self.record_count < 0:
            raise CorruptMessageError("record batch has a negative count or offset delta")
        if self.record_count and self.last_offset_delta < self.record_count - 1:
            raise CorruptMessageError("record batch last offset delta is below its record count")
        computed = self.compute_crc()
        if computed != self.crc:
            raise CorruptMessageError(
                f"record batch CRC mismatch: stored {self.crc:#010x}, computed {computed:#010x}"
            )

    # -- records, decoded lazily -----------------------------------------------------------

    def records_bytes(self) -> bytes:
        """The (decompressed) record section."""
        raw = memoryview(self.buffer)[self.position + HEADER_SIZE : self.position + self.size]
        codec = self.compression_type
        if codec == _codecs.NONE:
            return bytes(raw)
        return _codecs.decompress(codec, raw)

    def __iter__(self) -> Iterator[Record]:
        if self.is_control_batch:
            return iter(())
        return _decode_records(self)

    def records(self) -> list[Record]:
        return list(self)


def _decode_records(batch: RecordBatch) -> Iterator[Record]:
    data = batch.records_bytes()
    base_offset = batch.base_offset
    log_append = batch.timestamp_type == LOG_APPEND_TIME
    base_ts = batch.first_timestamp
    ts_type = batch.timestamp_type
    end = len(data)
    pos = 0
    try:
        for _ in range(batch.record_count):
            length, pos = decode_varint(data, pos)
            record_end = pos + length
            if length < 0 or record_end > end:
                raise CorruptMessageError("record length runs past the end of its batch")
            pos += 1  # attributes: unused
            ts_delta, pos = decode_varint(data, pos)
            offset_delta, pos = decode_varint(data, pos)
            key_len, pos = decode_varint(data, pos)
            if key_len < 0:
                key = None
            else:
                key = data[pos : pos + key_len]
                pos += key_len
            value_len, pos = decode_varint(data, pos)
            if value_len < 0:
                value = None
            else:
                value = data[pos : pos + value_len]
                pos += value_len
            header_count, pos = decode_varint(data, pos)
            headers: tuple[Header, ...] = ()
            if header_count > 0:
                hs = []
                for _h in range(header_count):
                    hk_len, pos = decode_varint(data, pos)
                    if hk_len < 0:
                        raise CorruptMessageError("record header with a null key")
                    hkey = data[pos : pos + hk_len].decode("utf-8", "replace")
                    pos += hk_len
                    hv_len, pos = decode_varint(data, pos)
                    if hv_len < 0:
                        hval = None
                    else:
                        hval = data[pos : pos + hv_len]
                        pos += hv_len
                    hs.append(Header(hkey, hval))
                headers = tuple(hs)
            if pos != record_end:
                raise CorruptMessageError("record fields do not add up to its length")
            timestamp = batch.max_timestamp if log_append else base_ts + ts_delta
            yield Record(base_offset + offset_delta, timestamp, key, value, headers, ts_type)
    except RemoteProtocolError as exc:
        raise CorruptMessageError(f"malformed record in batch: {exc}") from exc


def patch_base_offset(buffer: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Overwrite a batch's base offset in place (not covered by the CRC)."""
    _OFFSET.pack_into(buffer, position, base_offset)


def encode_record(offset_delta: int, timestamp_delta: int, key, value, headers=()) -> bytes:
    """One record's bytes, length prefix included."""
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


class RecordBatchBuilder:
    """Appends records and closes them into one v2 batch with a single CRC computation.

    Not thread-safe.  ``append`` returns the record's offset delta, or ``None`` when the
    batch is full (``max_bytes`` would be exceeded and the batch is not empty).
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
        self.compression_type = compression_type
        self.base_offset = base_offset
        self.timestamp_type = timestamp_type
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.partition_leader_epoch = partition_leader_epoch
        self.is_transactional = is_transactional
        self.max_bytes = max_bytes
        self._parts: list[bytes] = []
        self._size = HEADER_SIZE
        self._count = 0
        self._first_timestamp: int | None = None
        self._max_timestamp = NO_TIMESTAMP

    def __len__(self) -> int:
        return self._count

    @property
    def size_in_bytes(self) -> int:
        """Uncompressed size of the batch built so far."""
        return self._size

    def append(self, timestamp: int, key: bytes | None, value: bytes | None, headers=()) -> int | None:
        if self._first_timestamp is None:
            self._first_timestamp = timestamp
        offset_delta = self._count
        record = encode_record(
            offset_delta, timestamp - self._first_timestamp, key, value, headers
        )
        if (
            self.max_bytes is not None
            and self._count
            and self._size + len(record) > self.max_bytes
        ):
            return None
        self._parts.append(record)
        self._size += len(record)
        self._count += 1
        if timestamp > self._max_timestamp:
            self._max_timestamp = timestamp
        return offset_delta

    def build(self) -> bytes:
        """Close the batch: compress the records if asked, write the header, one CRC."""
        body = b"".join(self._parts)
        if self.compression_type != _codecs.NONE:
            body = _codecs.compress(self.compression_type, body)
        attributes = self.compression_type
        if self.timestamp_type == LOG_APPEND_TIME:
            attributes |= TIMESTAMP_TYPE_MASK
        if self.is_transactional:
            attributes |= TRANSACTIONAL_MASK
        first_ts = self._first_timestamp if self._first_timestamp is not None else NO_TIMESTAMP
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
            max(self._count - 1, 0),
            first_ts,
            self._max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self._count,
        )
        buf[HEADER_SIZE:] = body
        _CRC_FIELD.pack_into(buf, CRC_OFFSET, crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
        return bytes(buf)


def build_batch(
    records: Iterable[tuple[int, bytes | None, bytes | None] | tuple],
    *,
    base_offset: int = 0,
    compression_type: int = _codecs.NONE,
) -> bytes:
    """Convenience: a batch from ``(timestamp, key, value[, headers])`` tuples."""
    builder = RecordBatchBuilder(base_offset=base_offset, compression_type=compression_type)
    for rec in records:
        builder.append(*rec)
    return builder.build()


def iter_batches(buffer, position: int = 0, end: int | None = None) -> Iterator[RecordBatch]:
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
            raise CorruptMessageError(f"record batch length {batch.batch_length} is too small")
        if position + size > end:
            return
        yield batch
        position += size
