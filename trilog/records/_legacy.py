"""Legacy message sets (magic 0 and 1), as clients before Kafka 0.11 produce and fetch them.

Byte layout (big-endian; seed 003, "Message sets"):

    offset  size  field
    0       8     offset            absolute, or relative inside a magic 1 wrapper (below)
    8       4     message_size      bytes that follow this field
    12      4     crc               CRC32 (IEEE, zlib's) of bytes 16 .. end
    16      1     magic             0 or 1
    17      1     attributes        bits 0-2 codec, bit 3 timestamp type (magic 1; 1 = log
                                    append time); the rest unused
    18      8     timestamp         magic 1 only: ms since the epoch, -1 for none
    18/26   4     key_length        -1 for a null key
    ..      n     key
    ..      4     value_length      -1 for a null value
    ..      n     value

A message whose codec is not none is a *wrapper*: its value is a whole message set,
compressed, and it has no key.  Offsets of the inner messages:

* magic 0: absolute; the wrapper carries the offset of the last inner message.
* magic 1: relative (0, 1, 2, ...); the wrapper carries the absolute offset of the *last*
  inner message, so inner ``i`` is at ``wrapper.offset - inner[-1].offset + inner[i].offset``
  (KIP-31).  If that base comes out negative (producers write 0 in the wrapper), the inner
  offsets are used as they are, as the Java client does.

Timestamps (magic 1): with log append time set on the wrapper, every inner message takes the
wrapper's timestamp; otherwise each keeps its own.  Magic 0 has no timestamps: its records
read with timestamp -1 and timestamp type ``NO_TIMESTAMP_TYPE`` (-1), as in the Java client.

Kafka forbids a wrapper inside a wrapper; we read up to ``MAX_WRAPPER_DEPTH`` levels (old
third-party producers did nest) and refuse deeper ones, which also bounds the memory a
nested decompression bomb can claim to ``MAX_WRAPPER_DEPTH`` times the decompression cap.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import Any

from trilog.errors import LocalProtocolError
from trilog.records import _codecs
from trilog.records._crc import crc32
from trilog.records._errors import CheckedBatch, CorruptRecordsError
from trilog.records._types import BytesLike, RecordHeaders
from trilog.records._v2 import CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP, Record

LOG_OVERHEAD = 12  # offset + message_size
MAGIC_OFFSET = 16
_PREFIX = struct.Struct(">qiIbb")  # offset, message_size, crc, magic, attributes: 18 bytes
_TIMESTAMP = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_CRC = struct.Struct(">I")
#: crc + magic + attributes + key_length + value_length (+ timestamp for magic 1)
MESSAGE_OVERHEAD = {0: 14, 1: 22}
#: Where the key length sits, from the start of the entry.
_KEY_OFFSET = {0: 18, 1: 26}

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
NO_TIMESTAMP_TYPE = -1
MAX_WRAPPER_DEPTH = 3


def _message_fields(
    buf: BytesLike, pos: int, end: int
) -> tuple[int, int, int, int, int, bytes | None, bytes | None, int]:
    """Decode the entry at ``buf[pos:end]`` (which must hold it all).

    Returns ``(offset, crc, magic, attributes, timestamp, key, value, size)``; key and value
    are ``bytes`` or ``None``.  Raises ``CorruptRecordsError`` when the fields do not fit.
    """
    if end - pos < LOG_OVERHEAD + MESSAGE_OVERHEAD[0]:
        raise CorruptRecordsError("legacy message shorter than its header")
    offset, message_size, crc, magic, attributes = _PREFIX.unpack_from(buf, pos)
    if magic not in MESSAGE_OVERHEAD:
        raise CorruptRecordsError(f"legacy message magic {magic}, expected 0 or 1")
    if message_size < MESSAGE_OVERHEAD[magic]:
        raise CorruptRecordsError(f"legacy message size {message_size} is too small")
    msg_end = pos + LOG_OVERHEAD + message_size
    if msg_end > end:
        raise CorruptRecordsError("legacy message extends past the end of its buffer")
    if magic == 1:
        (timestamp,) = _TIMESTAMP.unpack_from(buf, pos + 18)
        p = pos + 26
    else:
        timestamp = NO_TIMESTAMP
        p = pos + 18
    (key_len,) = _INT32.unpack_from(buf, p)
    p += 4
    if key_len < 0:
        key = None
    else:
        if p + key_len + 4 > msg_end:
            raise CorruptRecordsError("legacy message key runs past the message")
        key = bytes(buf[p : p + key_len])
        p += key_len
    (value_len,) = _INT32.unpack_from(buf, p)
    p += 4
    if value_len < 0:
        value = None
    else:
        if p + value_len > msg_end:
            raise CorruptRecordsError("legacy message value runs past the message")
        value = bytes(buf[p : p + value_len])
        p += value_len
    if p != msg_end:
        raise CorruptRecordsError("legacy message fields do not add up to its size")
    return offset, crc, magic, attributes, timestamp, key, value, msg_end - pos


class LegacyRecordBatch(CheckedBatch):
    """One top-level entry of a magic 0/1 message set: a plain message or a wrapper.

    The shallow counterpart of ``RecordBatch``: the 18- or 26-byte header is decoded on
    construction; key, value, inner messages and the CRC only on demand.  ``last_offset`` is
    the entry's offset (a wrapper carries its last inner offset); ``base_offset`` of a wrapper
    needs decompression and is computed the first time it is asked for.
    """

    __slots__ = (
        "_base_offset",
        "attributes",
        "buffer",
        "crc",
        "magic",
        "message_size",
        "offset",
        "position",
        "timestamp",
    )
    offset: int
    message_size: int
    crc: int
    magic: int
    attributes: int
    timestamp: int

    def __init__(self, buffer: BytesLike, position: int = 0) -> None:
        if len(buffer) - position < LOG_OVERHEAD + MESSAGE_OVERHEAD[0]:
            raise CorruptRecordsError("legacy message shorter than its header")
        (
            self.offset,
            self.message_size,
            self.crc,
            self.magic,
            self.attributes,
        ) = _PREFIX.unpack_from(buffer, position)
        if self.magic == 1:
            if len(buffer) - position < LOG_OVERHEAD + MESSAGE_OVERHEAD[1]:
                raise CorruptRecordsError("legacy message shorter than its header")
            (self.timestamp,) = _TIMESTAMP.unpack_from(buffer, position + 18)
        else:
            self.timestamp = NO_TIMESTAMP
        self.buffer = buffer
        self.position = position
        self._base_offset: int | None = None

    # -- the same facts a v2 RecordBatch gives ------------------------------------------------

    @property
    def size(self) -> int:
        return self.message_size + LOG_OVERHEAD

    @property
    def batch_length(self) -> int:
        """``message_size``, under the name v2 gives the same field."""
        return self.message_size

    @property
    def last_offset(self) -> int:
        return self.offset

    @property
    def next_offset(self) -> int:
        return self.offset + 1

    @property
    def base_offset(self) -> int:
        """First offset in the entry (decompresses a wrapper, once)."""
        if self._base_offset is None:
            if self.compression_type == _codecs.NONE:
                self._base_offset = self.offset
            else:
                first = next(iter(self), None)
                self._base_offset = self.offset if first is None else first.offset
        return self._base_offset

    @property
    def compression_type(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        if self.magic == 0:
            return NO_TIMESTAMP_TYPE
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def max_timestamp(self) -> int:
        return self.timestamp

    is_control_batch = False
    is_transactional = False

    def __repr__(self) -> str:
        return (
            f"LegacyRecordBatch(magic={self.magic}, offset={self.offset}, size={self.size}, "
            f"codec={_codecs.CODEC_NAMES.get(self.compression_type, self.compression_type)})"
        )

    # -- checks ---------------------------------------------------------------------------------

    def compute_crc(self) -> int:
        start = self.position + MAGIC_OFFSET
        return crc32(memoryview(self.buffer)[start : self.position + self.size])

    def validate(self, *, deep: bool = False, max_decompressed_size: int | None = None) -> None:
        """Check sizes and the CRC32; with ``deep``, also every inner message of a wrapper.

        Raises ``CorruptRecordsError``.
        """
        _message_fields(self.buffer, self.position, len(self.buffer))
        computed = self.compute_crc()
        if computed != self.crc:
            raise CorruptRecordsError(
                f"legacy message CRC mismatch: stored {self.crc:#010x}, computed {computed:#010x}"
            )
        if deep and self.compression_type != _codecs.NONE:
            for _ in _expand(
                self.buffer, self.position, len(self.buffer), None, 0, max_decompressed_size, True
            ):
                pass

    # -- records ----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Record]:
        return self.iter_records()

    def iter_records(self, max_decompressed_size: int | None = None) -> Iterator[Record]:
        """The records (decompressing a wrapper, capped at ``max_decompressed_size``)."""
        return _expand(
            self.buffer, self.position, len(self.buffer), None, 0, max_decompressed_size, False
        )

    def records(self) -> list[Record]:
        return list(self)


def _expand(
    buf: BytesLike,
    pos: int,
    end: int,
    wrapper: tuple[int, int] | None,
    depth: int,
    cap: int | None,
    check_crc: bool,
    offset: int | None = None,
) -> Iterator[Record]:
    """Records of the entry at ``buf[pos:]``; ``wrapper`` is ``(timestamp_type, timestamp)`` of
    the enclosing wrapper, ``offset`` the entry's absolute offset when the wrapper computed it.
    """
    own_offset, crc, magic, attributes, timestamp, key, value, size = _message_fields(buf, pos, end)
    if check_crc and depth and crc32(memoryview(buf)[pos + MAGIC_OFFSET : pos + size]) != crc:
        raise CorruptRecordsError(f"inner legacy message at offset {own_offset}: CRC mismatch")
    if offset is None:
        offset = own_offset
    if magic == 0:
        ts_type = NO_TIMESTAMP_TYPE
    elif wrapper is not None and wrapper[0] != NO_TIMESTAMP_TYPE:
        ts_type = wrapper[0]
        if ts_type == LOG_APPEND_TIME:
            timestamp = wrapper[1]
    else:
        ts_type = LOG_APPEND_TIME if attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME
    codec = attributes & COMPRESSION_MASK
    if codec == _codecs.NONE:
        yield Record(offset, timestamp, key, value, (), ts_type)
        return
    if value is None:
        raise CorruptRecordsError(f"compressed legacy message at offset {offset} has no value")
    if codec > _codecs.LZ4:
        raise CorruptRecordsError(f"legacy message with codec id {codec} (0-3 allowed)")
    if depth >= MAX_WRAPPER_DEPTH:
        raise CorruptRecordsError(f"legacy wrappers nested deeper than {MAX_WRAPPER_DEPTH}")
    inner = _codecs.decompress(codec, value, magic=magic, max_size=cap)
    entries = []  # (position, offset) of every inner message
    p = 0
    n = len(inner)
    while p < n:
        if n - p < LOG_OVERHEAD:
            raise CorruptRecordsError("compressed message set ends inside a message")
        inner_offset, inner_size = struct.unpack_from(">qi", inner, p)
        if inner_size < MESSAGE_OVERHEAD[0] or p + LOG_OVERHEAD + inner_size > n:
            raise CorruptRecordsError("compressed message set holds a truncated message")
        entries.append((p, inner_offset))
        p += LOG_OVERHEAD + inner_size
    base = offset - entries[-1][1] if magic > 0 and entries else -1
    for p, inner_offset in entries:
        yield from _expand(
            inner,
            p,
            n,
            (ts_type, timestamp),
            depth + 1,
            cap,
            check_crc,
            base + inner_offset if base >= 0 else inner_offset,
        )


def iter_legacy_batches(
    buffer: BytesLike, position: int = 0, end: int | None = None
) -> Iterator[LegacyRecordBatch]:
    """Walk the top-level entries of a magic 0/1 message set, stopping at a partial tail."""
    if end is None:
        end = len(buffer)
    while end - position >= LOG_OVERHEAD + MESSAGE_OVERHEAD[0]:
        _, message_size = struct.unpack_from(">qi", buffer, position)
        if message_size < MESSAGE_OVERHEAD[0]:
            raise CorruptRecordsError(f"legacy message size {message_size} is too small")
        if position + LOG_OVERHEAD + message_size > end:
            return
        yield LegacyRecordBatch(buffer, position)
        position += LOG_OVERHEAD + message_size


# -- writing --------------------------------------------------------------------------------


def encode_message(
    offset: int, magic: int, attributes: int, timestamp: int, key: bytes | None,
    value: bytes | None,
) -> bytes:
    """One magic 0/1 message, offset and size fields included, CRC computed."""
    if magic not in MESSAGE_OVERHEAD:
        raise LocalProtocolError(f"legacy messages have magic 0 or 1, not {magic}")
    parts = [b""]  # replaced by the 16-byte offset/size/crc prefix
    parts.append(bytes((magic, attributes & 0xFF)))
    if magic == 1:
        parts.append(_TIMESTAMP.pack(timestamp))
    for field in (key, value):
        if field is None:
            parts.append(b"\xff\xff\xff\xff")
        else:
            parts.append(_INT32.pack(len(field)))
            parts.append(bytes(field))
    body = b"".join(parts)
    return struct.pack(">qiI", offset, len(body) + 4, crc32(body)) + body


class LegacyMessageSetBuilder:
    """Builds a magic 0 or 1 message set, one wrapper message when compressed.

    ``append(timestamp, key, value)`` mirrors ``RecordBatchBuilder.append``; records take
    offsets ``base_offset, base_offset + 1, ...`` unless ``offset=`` is given (strictly
    increasing; down-conversion keeps the offsets of a compacted log).  Timestamps are dropped
    for magic 0.  Not thread-safe.
    """

    def __init__(
        self,
        magic: int,
        *,
        compression_type: int = _codecs.NONE,
        base_offset: int = 0,
        timestamp_type: int = CREATE_TIME,
        max_bytes: int | None = None,
    ) -> None:
        if magic not in MESSAGE_OVERHEAD:
            raise LocalProtocolError(f"legacy message sets have magic 0 or 1, not {magic}")
        if compression_type == _codecs.ZSTD:
            raise LocalProtocolError("zstd needs magic 2: legacy messages cannot carry it")
        self.magic = magic
        self.compression_type = compression_type
        self.base_offset = base_offset
        self.timestamp_type = timestamp_type
        self.max_bytes = max_bytes
        self._records: list[tuple[int, int, bytes | None, bytes | None]] = []
        self._size = LOG_OVERHEAD + MESSAGE_OVERHEAD[magic] if compression_type else 0

    def __len__(self) -> int:
        return len(self._records)

    @property
    def size_in_bytes(self) -> int:
        """Size so far, uncompressed (plus the wrapper's overhead when compressing)."""
        return self._size

    def append(
        self,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: RecordHeaders | None = (),
        *,
        offset: int | None = None,
    ) -> int | None:
        """Add a message; return its offset delta, or ``None`` if ``max_bytes`` is reached."""
        if headers:
            raise LocalProtocolError("magic 0 and 1 messages cannot carry headers")
        records = self._records
        if offset is None:
            offset = self.base_offset + len(records)
        elif records and offset <= records[-1][0]:
            raise LocalProtocolError("offsets in a message set must increase")
        size = LOG_OVERHEAD + MESSAGE_OVERHEAD[self.magic]
        size += (0 if key is None else len(key)) + (0 if value is None else len(value))
        if self.max_bytes is not None and records and self._size + size > self.max_bytes:
            return None
        self._size += size
        records.append((offset, timestamp if self.magic else NO_TIMESTAMP, key, value))
        return offset - self.base_offset

    def build(self) -> bytes:
        records = self._records
        if not records:
            return b""
        magic = self.magic
        ts_bit = TIMESTAMP_TYPE_MASK if magic == 1 and self.timestamp_type == LOG_APPEND_TIME else 0
        codec = self.compression_type
        if codec == _codecs.NONE:
            return b"".join(
                encode_message(off, magic, ts_bit, ts, k, v) for off, ts, k, v in records
            )
        first_offset = records[0][0]
        inner = b"".join(
            encode_message(off - first_offset if magic else off, magic, 0, ts, k, v)
            for off, ts, k, v in records
        )
        max_ts = max(ts for _, ts, _, _ in records)
        return encode_message(
            records[-1][0],
            magic,
            codec | ts_bit,
            max_ts,
            None,
            _codecs.compress(codec, inner, magic=magic),
        )


def build_message_set(
    records: Iterable[tuple[Any, ...]],
    *,
    magic: int,
    base_offset: int = 0,
    compression_type: int = _codecs.NONE,
) -> bytes:
    """Convenience: a message set from ``(timestamp, key, value)`` tuples."""
    builder = LegacyMessageSetBuilder(
        magic, base_offset=base_offset, compression_type=compression_type
    )
    for rec in records:
        builder.append(*rec)
    return builder.build()
