"""Plain helpers for the storage tests: batches to append, ways to look inside a log."""

from __future__ import annotations

import os
import struct
import time

from trilog.records import (
    RecordBatchBuilder,
    batch_crc,
    build_batch,
    build_end_txn_marker,
    iter_batches,
    read_batch_header,
)
from trilog.storage import Log


def make_batch(
    count: int = 1,
    *,
    timestamp: int = 1_000,
    value_size: int = 10,
    tag: int = 0,
    compression_type: int = 0,
) -> bytes:
    """A v2 batch of ``count`` records whose values encode ``tag`` and the record index."""
    records = []
    for i in range(count):
        value = f"{tag}:{i}:".encode().ljust(value_size, b"x")
        records.append((timestamp + i, f"k{i}".encode(), value))
    return build_batch(records, compression_type=compression_type)


def with_header(batch: bytes, **fields: int) -> bytes:
    """``batch`` with header fields replaced (``BatchHeader``'s names) and its CRC-32C
    recomputed, so that only the header is off."""
    header = read_batch_header(batch)._replace(**fields)
    data = bytearray(batch)
    struct.pack_into(">qiibIhiqqqhii", data, 0, *header)
    struct.pack_into(">I", data, 17, batch_crc(data, 0, len(data)))
    return bytes(data)


def batches_in(data: bytes) -> list[tuple[int, int, int]]:
    """``(base_offset, last_offset, position)`` of each whole batch in ``data``."""
    out = []
    for batch in iter_batches(data):
        out.append((batch.base_offset, batch.last_offset, batch.position))
    return out


def read_all(log: Log, offset: int | None = None, max_bytes: int = 1 << 20) -> bytes:
    """Every byte from ``offset`` (default: the log start) to the log end, via ``read``."""
    offset = log.log_start_offset if offset is None else offset
    parts = []
    while offset < log.log_end_offset:
        with log.read(offset, max_bytes) as piece:
            data = piece.read()
        assert data, f"empty read at {offset} below the log end {log.log_end_offset}"
        parts.append(data)
        last = batches_in(data)[-1][1]
        offset = last + 1
    return b"".join(parts)


def segment_files(directory) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith(".log"))


def check_indexes(log: Log) -> None:
    """Every index entry names a real batch: offset entries (last offset, position), time
    entries (running max timestamp, last offset of the batch first reaching it)."""
    for segment in log.segments:
        with open(segment.log_path, "rb") as f:
            data = f.read()
        assert len(data) == segment.size
        batches = {b.position: b for b in iter_batches(data)}
        assert sum(b.size for b in batches.values()) == len(data)
        last_offsets = {b.last_offset: b for b in batches.values()}
        for offset, position in segment.offset_index.entries():
            assert position in batches and batches[position].last_offset == offset
        running = -1
        firsts = {}
        for b in sorted(batches.values(), key=lambda b: b.position):
            if b.max_timestamp > running:
                running = b.max_timestamp
                firsts[running] = b.last_offset
        for ts, offset in segment.time_index.entries():
            assert offset in last_offsets and firsts.get(ts) == offset
        if batches:
            assert segment.next_offset == max(b.last_offset for b in batches.values()) + 1
            assert segment.max_timestamp == max(b.max_timestamp for b in batches.values())



# -- transactions --------------------------------------------------------------------------


def now_ms() -> int:
    """A realistic clock for producer batches: a producer idle past
    producer_id_expiration_ms (a day) is forgotten when a snapshot is loaded."""
    return int(time.time() * 1000)


def producer_batch(pid: int, seq: int, count: int = 2, *, epoch: int = 0,
                   transactional: bool = False, key: bytes = b"k",
                   timestamp: int | None = None, tag: int = 0) -> bytes:
    """A batch of producer ``pid`` from sequence ``seq``, transactional or not; record ``i``
    has key ``key + i`` and value ``pid:tag:i``."""
    builder = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                 is_transactional=transactional)
    ts = now_ms() if timestamp is None else timestamp
    for i in range(count):
        builder.append(ts + i, key + b"%d" % i, b"%d:%d:%d" % (pid, tag, i))
    return builder.build()


def txn_batch(pid: int, seq: int, count: int = 2, **kwargs) -> bytes:
    return producer_batch(pid, seq, count, transactional=True, **kwargs)


def marker(pid: int, commit: bool, *, epoch: int = 0, coordinator_epoch: int = 0,
           timestamp: int | None = None) -> bytes:
    """A transaction marker (the coordinator's batch)."""
    return build_end_txn_marker(producer_id=pid, producer_epoch=epoch,
                                coordinator_epoch=coordinator_epoch, commit=commit,
                                timestamp_ms=now_ms() if timestamp is None else timestamp)
