"""Conversion between legacy message sets (magic 0/1) and RecordBatch v2.

Up-conversion (``legacy_to_v2``) is what the broker does to a produce request from a client
older than 0.11: the log stores only v2.  Down-conversion (``v2_to_legacy``) serves fetch
requests of versions that predate v2 (Fetch v0-v3).

Decisions, after the Java broker (``LogValidator``, ``LazyDownConversionRecords``):

* Up-conversion keeps keys, values, magic 1 timestamps and each entry's codec (or applies
  ``compression_type`` to all).  Magic 0 has no timestamps: its records get -1
  (``NO_TIMESTAMP``) unless ``append_time`` is given, which makes the batches log-append-time
  batches stamped with it (what a topic with ``message.timestamp.type=LogAppendTime`` does).
  Offsets come out relative (0, 1, 2, ... across the returned batches) so the broker assigns
  the real ones by patching base offsets; ``preserve_offsets=True`` keeps the source's.
* Down-conversion keeps absolute offsets (inner offsets of a magic 1 wrapper relative, per
  KIP-31), drops headers, and skips control batches and transaction markers.  Each compressed
  v2 batch becomes one wrapper with the same codec; zstd, which legacy messages cannot carry,
  is written uncompressed.  Entries already at or below the target magic pass through as they
  are.  Whole entries are emitted while they fit in ``max_bytes``; if not even the first
  fits, its first ``max_bytes`` bytes are returned, a partial message: that is how a pre-0.10
  broker told a consumer its fetch size was too small.
"""

from __future__ import annotations

from trilog.errors import LocalProtocolError
from trilog.records import _codecs
from trilog.records._errors import CorruptRecordsError
from trilog.records._legacy import NO_TIMESTAMP_TYPE, LegacyMessageSetBuilder, LegacyRecordBatch
from trilog.records._memory import AnyBatch, MemoryRecords
from trilog.records._types import BytesLike
from trilog.records._v2 import CREATE_TIME, LOG_APPEND_TIME, Record, RecordBatchBuilder


def legacy_to_v2(
    buffer: BytesLike,
    *,
    compression_type: int | None = None,
    append_time: int | None = None,
    preserve_offsets: bool = False,
    max_batch_bytes: int | None = None,
    max_decompressed_size: int | None = None,
    validate: bool = True,
) -> list[bytes]:
    """Up-convert a magic 0/1 message set into v2 batches.

    One batch per run of consecutive entries with the same codec and timestamp type (one
    batch in the usual case of a client's produce request), split further so that no batch
    exceeds ``max_batch_bytes`` uncompressed.  With ``validate`` every message's CRC32 is
    checked first, wrappers' inner messages included.  Raises ``CorruptRecordsError`` for bad
    input, v2 entries included (they need no conversion).
    """
    groups: list[tuple[tuple[int, int], list[LegacyRecordBatch]]] = []  # ((codec, ts_type), ..)
    for entry in MemoryRecords(buffer, max_decompressed_size=max_decompressed_size).batches():
        if not isinstance(entry, LegacyRecordBatch):
            raise CorruptRecordsError("legacy_to_v2 was given a magic 2 batch")
        if validate:
            entry.validate(deep=True, max_decompressed_size=max_decompressed_size)
        codec = entry.compression_type if compression_type is None else compression_type
        ts_type = LOG_APPEND_TIME if append_time is not None else entry.timestamp_type
        key = (codec, ts_type)
        if groups and groups[-1][0] == key:
            groups[-1][1].append(entry)
        else:
            groups.append((key, [entry]))

    out: list[bytes] = []
    next_offset = 0
    for (codec, ts_type), entries in groups:
        builder = None
        for entry in entries:
            for rec in entry.iter_records(max_decompressed_size):
                timestamp = rec.timestamp if append_time is None else append_time
                offset = rec.offset if preserve_offsets else next_offset
                if builder is not None and _append(builder, offset, timestamp, rec) is None:
                    out.append(builder.build())
                    builder = None
                if builder is None:
                    builder = RecordBatchBuilder(
                        compression_type=codec,
                        base_offset=offset,
                        timestamp_type=LOG_APPEND_TIME
                        if ts_type == LOG_APPEND_TIME
                        else CREATE_TIME,
                        max_bytes=max_batch_bytes,
                    )
                    _append(builder, offset, timestamp, rec)
                next_offset += 1
        if builder is not None:
            out.append(builder.build())
    return out


def _append(builder: RecordBatchBuilder, offset: int, timestamp: int, rec: Record) -> int | None:
    return builder.append_with_offset(offset, timestamp, rec.key, rec.value)


def v2_to_legacy(
    buffer: BytesLike,
    magic: int,
    *,
    compression_type: int | None = None,
    max_bytes: int | None = None,
    max_decompressed_size: int | None = None,
) -> bytes:
    """Down-convert the entries of ``buffer`` (v2, or legacy of a higher magic) to ``magic``.

    ``compression_type`` overrides every entry's codec.  See the module docstring for
    offsets, headers, control batches, zstd and ``max_bytes``.
    """
    if magic not in (0, 1):
        raise LocalProtocolError(f"down-conversion targets magic 0 or 1, not {magic}")
    out: list[bytes] = []
    total = 0
    for entry in MemoryRecords(buffer, max_decompressed_size=max_decompressed_size).batches():
        if entry.is_control_batch:
            continue
        if entry.magic <= magic and compression_type is None:
            converted = bytes(
                memoryview(entry.buffer)[entry.position : entry.position + entry.size]
            )
        else:
            converted = _convert_entry(entry, magic, compression_type, max_decompressed_size)
        if not converted:
            continue
        if max_bytes is not None and total + len(converted) > max_bytes:
            if not out:
                out.append(converted[:max_bytes])
            break
        out.append(converted)
        total += len(converted)
    return b"".join(out)


def _convert_entry(
    entry: AnyBatch, magic: int, compression_type: int | None, cap: int | None
) -> bytes:
    codec = entry.compression_type if compression_type is None else compression_type
    if codec == _codecs.ZSTD:
        codec = _codecs.NONE
    ts_type = entry.timestamp_type
    builder = LegacyMessageSetBuilder(
        magic,
        compression_type=codec,
        timestamp_type=LOG_APPEND_TIME if ts_type == LOG_APPEND_TIME else CREATE_TIME,
    )
    for rec in entry.iter_records(cap):
        timestamp = rec.timestamp if rec.timestamp_type != NO_TIMESTAMP_TYPE else -1
        builder.append(timestamp, rec.key, rec.value, offset=rec.offset)
    return builder.build()
