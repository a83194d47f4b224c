"""``Log``: one partition's log, a list of segments of which only the last is written.

Append path (the broker's hot path): validate every batch of the buffer once from its
61-byte header (sizes, magic, counts, CRC-32C; never a record), then under the log's lock
assign offsets by patching only each batch's 8-byte base offset (``writev`` of the patched
offsets and the untouched rest, or one copy for many-batch buffers), write with one system
call, index, and publish the new end.  Readers take no lock: they work from an immutable
snapshot of (segments, log end offset, committed size of the active segment) that an
append replaces in one assignment after its bytes are in the file.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
import threading
import time
import uuid
from bisect import bisect_right
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from functools import partial
from typing import NamedTuple

from trilog.errors import (
    CorruptMessageError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    TrilogError,
)
from trilog.records import RecordBatch, crc32c
from trilog.storage._config import LogConfig
from trilog.storage._fetch import FetchSlice
from trilog.storage._retention import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    offsets_before,
    segments_to_delete,
)
from trilog.storage._segment import (
    BATCH_HEADER,
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAX_RELATIVE_OFFSET,
    MIN_BATCH_LENGTH,
    BatchHeader,
    LogSegment,
    now_ms,
    walk_batches,
)

logger = logging.getLogger("trilog.storage")

_OFFSET = struct.Struct(">q")
#: Up to this many batches per append are written with ``writev`` (no copy at all).
_MAX_IOVECS_BATCHES = 256
#: From this many bytes on, the CRC-32C check runs in a helper thread while the bytes are
#: written (both release the GIL); a bad CRC cuts the uncommitted write off again.
_OVERLAP_CRC_BYTES = 256 * 1024
_SUFFIXES = (".log", ".index", ".timeindex")


class LogAppendInfo(NamedTuple):
    """What an append did; all counts come from batch headers."""

    first_offset: int
    last_offset: int
    log_end_offset: int
    max_timestamp: int  # -1 when no batch carries a timestamp
    offset_of_max_timestamp: int
    record_count: int  # sum of last_offset_delta + 1
    batch_count: int
    size_in_bytes: int
    log_start_offset: int


class TimestampOffset(NamedTuple):
    """ListOffsets' answer: the record's timestamp (-1 for EARLIEST/LATEST) and offset."""

    timestamp: int
    offset: int


def parse_partition_dir_name(name: str) -> tuple[str, int]:
    """``"my-topic-3"`` -> ``("my-topic", 3)``; ``ValueError`` if it is not such a name."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit() or not partition.isascii():
        raise ValueError(f"{name!r} is not <topic>-<partition>")
    return topic, int(partition)


def _check_headers(mv: memoryview, max_message_bytes: int, assign_offsets: bool):
    """Walk and check every batch header of an append buffer (not the CRCs).

    Return ``[(position, size, base_offset, last_offset_delta, max_timestamp, crc), ...]``.
    """
    total = len(mv)
    if total == 0:
        raise CorruptMessageError("append of an empty record set")
    unpack = BATCH_HEADER.unpack_from
    batches = []
    pos = 0
    next_offset = -1
    while pos < total:
        if total - pos < HEADER_SIZE:
            raise CorruptMessageError(f"{total - pos} trailing bytes are not a record batch")
        (base, length, _e, magic, crc, _a, delta, _ft, max_ts, _p, _pe, _s, count) = unpack(mv, pos)
        if magic != 2:
            raise CorruptMessageError(f"record batch magic {magic}; the log stores only v2")
        size = length + LOG_OVERHEAD
        if length < MIN_BATCH_LENGTH:
            raise CorruptMessageError(f"record batch length {length} is too small")
        if pos + size > total:
            raise CorruptMessageError("record batch extends past the end of the request")
        if size > max_message_bytes:
            raise MessageTooLargeError(
                f"record batch of {size} bytes exceeds the limit of {max_message_bytes}"
            )
        if count <= 0 or delta < count - 1 or (assign_offsets and delta != count - 1):
            raise CorruptMessageError(
                f"record batch counts disagree: {count} records, last offset delta {delta}"
            )
        if not assign_offsets:
            if base < next_offset:
                raise CorruptMessageError("record batch offsets out of order")
            next_offset = base + delta + 1
        batches.append((pos, size, base, delta, max_ts, crc))
        pos += size
    return batches


def _crc_error(mv: memoryview, batches) -> str | None:
    """Check every batch's CRC-32C; the complaint, or None.  (Returns rather than raises so
    that a helper thread's future holds no traceback, hence no reference to the buffer.)"""
    for pos, size, _base, _delta, _max_ts, crc in batches:
        if crc32c(mv[pos + CRC_START : pos + size]) != crc:
            return f"record batch at byte {pos} of the append fails its CRC-32C"
    return None


def _crc_job(job: list):
    """The helper's side: ``job`` is ``[mv, batches]``, emptied by the appender once done,
    so the executor's work item never keeps the caller's buffer exported."""
    return _crc_error(*job) if job else None


def _verify_crcs(future, job: list) -> None:
    """After the write: the helper's verdict, or our own if it never got a CPU meanwhile
    (so a busy machine costs no more than checking before writing)."""
    try:
        error = _crc_error(*job) if future.cancel() else future.result()
    finally:
        job.clear()
    if error is not None:
        raise CorruptMessageError(error)


_crc_pool_lock = threading.Lock()
_crc_pool: tuple[int, ThreadPoolExecutor] | None = None


def _crc_executor() -> ThreadPoolExecutor:
    """The CRC helper threads of this process (recreated after a fork)."""
    global _crc_pool
    pool = _crc_pool
    if pool is not None and pool[0] == os.getpid():
        return pool[1]
    with _crc_pool_lock:
        if _crc_pool is None or _crc_pool[0] != os.getpid():
            _crc_pool = (
                os.getpid(),
                ThreadPoolExecutor(max_workers=2, thread_name_prefix="trilog-crc"),
            )
        return _crc_pool[1]


class Log:
    """The log of one partition: ``<dir>/<20-digit base offset>.log|.index|.timeindex``.

    Invariants: segments are ordered by base offset and hold increasing offsets; only the
    last (active) segment grows; ``log_start_offset`` is the first segment's base offset;
    ``log_end_offset`` is one past the last appended offset; ``recovery_point`` <= LEO and
    everything below it has been fsynced; a reader never sees part of an append nor bytes
    at or past the log end offset of its call.

    Thread-safe.  Appends, rolls, truncation, retention and close serialise on one lock
    (held for the write system call, never for an fsync); ``flush`` serialises with other
    flushes and takes the append lock only to snapshot and to publish the recovery point;
    ``read`` and the offset lookups take no lock at all (copy-on-write segment list).
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        config: LogConfig | None = None,
        *,
        recovery_point: int = 0,
        needs_recovery: bool = True,
        topic: str | None = None,
        partition: int | None = None,
    ) -> None:
        self.directory = os.path.abspath(os.fspath(directory))
        if topic is None or partition is None:
            try:
                topic, partition = parse_partition_dir_name(os.path.basename(self.directory))
            except ValueError:
                topic, partition = os.path.basename(self.directory), 0
        self.topic = topic
        self.partition = partition
        self.config = config or LogConfig()
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._closed = False
        os.makedirs(self.directory, exist_ok=True)
        self._unflushed_messages = 0
        self._first_unflushed_ms: int | None = None
        self._roll_flush_offset = 0  # a roll asks for a flush up to the new segment's base
        self._dir_dirty = False
        self._recovery_point = recovery_point
        segments = self._load_segments(recovery_point, needs_recovery)
        self._segments: tuple[LogSegment, ...] = segments
        self._active = segments[-1]
        self._log_end_offset = self._active.next_offset
        self._recovery_point = max(
            min(self._recovery_point, self._log_end_offset), segments[0].base_offset
        )
        self._publish()

    # -- loading and recovery ------------------------------------------------------------

    def _load_segments(self, recovery_point: int, needs_recovery: bool):
        bases: list[int] = []
        index_files: list[tuple[int, str]] = []
        for name in os.listdir(self.directory):
            path = os.path.join(self.directory, name)
            if name.endswith((".deleted", ".cleaned", ".swap", ".tmp")):
                _unlink(path)  # left by an interrupted delete or write
                continue
            stem, ext = os.path.splitext(name)
            if ext not in _SUFFIXES or len(stem) != 20 or not stem.isdigit():
                continue
            if ext == ".log":
                bases.append(int(stem))
            else:
                index_files.append((int(stem), path))
        bases.sort()
        known = set(bases)
        for base, path in index_files:
            if base not in known:
                _unlink(path)  # an index whose log is gone
        segments: list[LogSegment] = []
        indexes_written = True
        try:
            for base in bases:
                segments.append(LogSegment.open(self.directory, base, self.config))
            first_unflushed = len(segments)
            if needs_recovery and segments:
                # The segment holding the recovery point and all later ones are re-validated.
                first_unflushed = max(0, bisect_right(bases, recovery_point) - 1)
            i = 0
            while i < len(segments):
                segment = segments[i]
                if i < first_unflushed and segment.load_indexes():
                    i += 1
                    continue
                if i < first_unflushed:
                    logger.warning(
                        "%s: segment %d does not end on a batch boundary; recovering",
                        self.directory,
                        segment.base_offset,
                    )
                    first_unflushed = i
                min_offset = segments[i - 1].next_offset if i else segment.base_offset
                truncated = segment.recover(min_offset)
                os.fsync(segment.fd)  # recovered bytes may only be in the page cache
                try:
                    segment.offset_index.flush()
                    segment.time_index.flush()
                except OSError as exc:
                    # A full disk must not stop a start: the rebuilt indexes serve from
                    # memory, and the next flush writes them.  Until one does, the recovery
                    # point stays where it was, so that a crash recovers these again.
                    logger.warning("%s: cannot write the rebuilt indexes of segment %d: %s",
                                   self.directory, segment.base_offset, exc)
                    indexes_written = False
                if truncated or (segment.size == 0 and i < len(segments) - 1):
                    # Nothing valid may follow an invalid (or lost) stretch: the log is its
                    # longest valid prefix.
                    logger.warning(
                        "%s: truncated %d invalid bytes from segment %d at offset %d",
                        self.directory,
                        truncated,
                        segment.base_offset,
                        segment.next_offset,
                    )
                    for dead in segments[i + 1 :]:
                        logger.warning(
                            "%s: deleting segment %d after the corruption",
                            self.directory,
                            dead.base_offset,
                        )
                        dead.delete()
                    del segments[i + 1 :]
                i += 1
            if needs_recovery and segments and indexes_written:
                self._recovery_point = segments[-1].next_offset
            if not segments:
                segments.append(LogSegment.create(self.directory, 0, self.config))
                self._dir_dirty = True
        except BaseException:
            for segment in segments:
                segment.close()
            raise
        for segment in segments[:-1]:
            segment.on_become_inactive()
        return tuple(segments)

    def _publish(self) -> None:
        """Replace the readers' snapshot (one atomic attribute assignment)."""
        segments = self._segments
        self._state = (
            segments,
            tuple(s.base_offset for s in segments),
            segments[0].base_offset,
            self._log_end_offset,
            self._active.size,
        )

    # -- properties ----------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._state[2]

    @property
    def log_end_offset(self) -> int:
        return self._state[3]

    @property
    def high_watermark(self) -> int:
        """No replication yet: everything appended is committed."""
        return self._state[3]

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self._state[0]

    @property
    def active_segment(self) -> LogSegment:
        return self._state[0][-1]

    @property
    def size_in_bytes(self) -> int:
        segments = self._state[0]
        return sum(s.size for s in segments[:-1]) + self._state[4]

    @property
    def unflushed_messages(self) -> int:
        return self._unflushed_messages

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return (
            f"Log({self.directory!r}, log_start_offset={self.log_start_offset}, "
            f"log_end_offset={self.log_end_offset}, segments={len(self.segments)})"
        )

    # -- appending -----------------------------------------------------------------------

    def append(
        self, buffer, *, assign_offsets: bool = True, now_ms: int | None = None
    ) -> LogAppendInfo:
        """Append one or more v2 batches (e.g. a produce request's ``records``).

        Each batch is validated once; the append is all or nothing.  Raises
        ``CorruptMessageError`` for an empty buffer, garbage, a partial batch, a non-v2
        batch, inconsistent counts or a CRC mismatch, and ``MessageTooLargeError`` for a
        batch above ``max_message_bytes`` or an append above ``segment_bytes``.  With
        ``assign_offsets=False`` (replication, tests) the batches keep their offsets, which
        must increase from the log end offset.  Flushes when ``flush_interval_messages``
        messages are unflushed.
        """
        mv = memoryview(buffer)
        if mv.itemsize != 1 or mv.ndim != 1:
            mv = mv.cast("B")
        config = self.config
        batches = _check_headers(mv, config.max_message_bytes, assign_offsets)
        total = len(mv)
        if total > config.segment_bytes:
            raise RecordListTooLargeError(
                f"append of {total} bytes exceeds the segment size {config.segment_bytes}"
            )
        future = None
        if total < _OVERLAP_CRC_BYTES:
            error = _crc_error(mv, batches)
            if error is not None:
                raise CorruptMessageError(error)
        else:
            job = [mv, batches]
            future = _crc_executor().submit(_crc_job, job)
        now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        try:
            with self._lock:
                if self._closed:
                    raise TrilogError(f"append to closed log {self.directory}")
                leo = self._log_end_offset
                first_offset = leo if assign_offsets else batches[0][2]
                if first_offset < leo:
                    raise CorruptMessageError(
                        f"append at offset {first_offset} below the log end offset {leo}"
                    )
                # Offsets and the write data.
                infos = []
                if assign_offsets:
                    offset = leo
                    if len(batches) <= _MAX_IOVECS_BATCHES:
                        data = []
                        pack = _OFFSET.pack
                        for pos, size, _base, delta, max_ts, _crc in batches:
                            data.append(pack(offset))
                            data.append(mv[pos + 8 : pos + size])
                            offset += delta + 1
                            infos.append((size, offset - 1, max_ts))
                    else:
                        data = bytearray(mv)  # the one copy, for many small batches
                        pack_into = _OFFSET.pack_into
                        for pos, size, _base, delta, max_ts, _crc in batches:
                            pack_into(data, pos, offset)
                            offset += delta + 1
                            infos.append((size, offset - 1, max_ts))
                    last_offset = offset - 1
                else:
                    data = mv
                    for _pos, size, base, delta, max_ts, _crc in batches:
                        infos.append((size, base + delta, max_ts))
                    last_offset = infos[-1][1]
                # Roll first if needed.
                segment = self._active
                if last_offset - segment.base_offset > MAX_RELATIVE_OFFSET or (
                    segment.size > 0
                    and (
                        segment.size + total > config.segment_bytes
                        or now - (segment.rolling_ms or now) >= config.segment_ms
                        or segment.index_full
                    )
                ):
                    segment = self._roll(first_offset)
                if last_offset - segment.base_offset > MAX_RELATIVE_OFFSET:
                    raise CorruptMessageError("append spans more offsets than a segment can index")
                if future is None:
                    segment.append(data, total, infos, now)
                else:
                    segment.append(data, total, infos, now, partial(_verify_crcs, future, job))
                    future = None
                self._log_end_offset = last_offset + 1
                state = self._state
                self._state = (state[0], state[1], state[2], last_offset + 1, segment.size)
                if assign_offsets:
                    records = last_offset + 1 - first_offset
                else:
                    records = sum(b[3] + 1 for b in batches)
                self._unflushed_messages += records
                if self._first_unflushed_ms is None:
                    self._first_unflushed_ms = now
                flush_now = self._unflushed_messages >= config.flush_interval_messages
                log_start = state[2]
        finally:
            if future is not None:  # failed before the write: let the helper let go of mv
                future.cancel()
                wait([future])
                job.clear()
        max_timestamp, offset_of_max = -1, first_offset
        for size, last, max_ts in infos:
            if max_ts > max_timestamp:
                max_timestamp, offset_of_max = max_ts, last
        if flush_now:
            self.flush()
        return LogAppendInfo(
            first_offset,
            last_offset,
            last_offset + 1,
            max_timestamp,
            offset_of_max,
            records,
            len(batches),
            total,
            log_start,
        )

    def roll(self) -> int:
        """Start a new segment now (if the active one holds data); return its base offset."""
        with self._lock:
            self._check_open()
            if self._active.size > 0:
                self._roll(self._log_end_offset)
            return self._active.base_offset

    def _roll(self, base_offset: int) -> LogSegment:
        """Under the lock: make a new active segment starting at ``base_offset``."""
        old = self._active
        new = LogSegment.create(self.directory, base_offset, self.config)
        try:
            old.on_become_inactive()
        except BaseException:  # e.g. a full disk: stay on the old segment
            new.delete()
            raise
        self._segments = self._segments + (new,)
        self._active = new
        self._dir_dirty = True
        self._roll_flush_offset = base_offset
        self._publish()
        logger.debug("%s: rolled new segment at offset %d", self.directory, base_offset)
        return new

    def _check_open(self) -> None:
        if self._closed:
            raise TrilogError(f"log {self.directory} is closed")

    # -- reading -------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int) -> FetchSlice:
        """Batches from the one holding ``offset``, up to ``max_bytes`` (the first batch is
        whole even if larger), as a ``FetchSlice`` the caller must close.

        ``offset == log_end_offset`` gives an empty slice; an offset below the log start or
        above the log end raises ``OffsetOutOfRangeError`` carrying both.
        """
        for _attempt in range(8):
            if self._closed:
                raise TrilogError(f"read from closed log {self.directory}")
            segments, bases, log_start, leo, active_size = self._state
            if offset == leo:
                return FetchSlice.empty(offset, log_end_offset=leo, log_start_offset=log_start)
            if offset < log_start or offset > leo:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is outside {log_start}..{leo} of "
                    f"{self.topic}-{self.partition}",
                    log_start_offset=log_start,
                    log_end_offset=leo,
                )
            last = len(segments) - 1
            i = bisect_right(bases, offset) - 1
            while i <= last:
                segment = segments[i]
                fd = segment.dup_fd()
                if fd is None:
                    break  # deleted under us: take a new snapshot
                max_position = active_size if i == last else segment.size
                try:
                    found = segment.read(fd, offset, max_bytes, max_position)
                except BaseException:
                    os.close(fd)
                    raise
                if found is None:
                    os.close(fd)
                    i += 1
                    continue
                position, length, first_offset = found
                return FetchSlice(
                    fd,
                    position,
                    length,
                    first_offset=first_offset,
                    segment_base_offset=segment.base_offset,
                    high_watermark=leo,
                    log_end_offset=leo,
                    log_start_offset=log_start,
                )
            else:
                return FetchSlice.empty(offset, log_end_offset=leo, log_start_offset=log_start)
        raise OffsetOutOfRangeError(
            f"offset {offset} was deleted while being read",
            log_start_offset=self.log_start_offset,
            log_end_offset=self.log_end_offset,
        )

    def batch_headers(self, tail_bytes: int = 64 << 20) -> Iterator[BatchHeader]:
        """The headers of the batches in about the last ``tail_bytes`` of the log (from a
        batch boundary the offset index gives), oldest first, without reading records: what
        the broker rebuilds its idempotent producers' sequence numbers from after a restart.
        """
        segments, _bases, _start, _leo, active_size = self._state
        ranges = []  # (segment, start, end), newest first
        remaining = tail_bytes
        for segment in reversed(segments):
            end = active_size if segment is segments[-1] else segment.size
            start = 0 if end <= remaining else segment.offset_index.lookup_position(
                end - remaining)
            ranges.append((segment, start, end))
            remaining -= end - start
            if remaining <= 0:
                break
        for segment, start, end in reversed(ranges):
            fd = segment.dup_fd()
            if fd is None:
                continue  # deleted by retention meanwhile
            try:
                for _position, _size, header in walk_batches(fd, start, end, chunk=1 << 20):
                    yield header
            finally:
                os.close(fd)

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """ListOffsets v1+: the first record whose timestamp is >= ``timestamp``.

        ``EARLIEST_TIMESTAMP`` (-2) and ``LATEST_TIMESTAMP`` (-1) give the log start and end
        offsets with timestamp -1.  The batch is found from headers (time index binary
        search, offset index, header walk); only that one batch's records are decoded to
        pick the exact record.  ``None`` when no batch is that recent.
        """
        segments, _bases, log_start, leo, active_size = self._state
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampOffset(-1, log_start)
        if timestamp == LATEST_TIMESTAMP:
            return TimestampOffset(-1, leo)
        last = len(segments) - 1
        for i, segment in enumerate(segments):
            if segment.max_timestamp < timestamp:
                continue
            fd = segment.dup_fd()
            if fd is None:
                continue
            try:
                max_position = active_size if i == last else segment.size
                found = segment.find_by_timestamp(fd, timestamp, max_position)
                if found is None:
                    continue
                position, size, base = found
                data = os.pread(fd, size, position)
            finally:
                os.close(fd)
            return _first_record_at_or_after(data, timestamp, base)
        return None

    def offsets_before(self, timestamp: int, max_offsets: int, now_ms: int | None = None):
        """ListOffsets v0 (Kafka 0.8): segment base offsets of segments last modified at or
        before ``timestamp`` (plus the log end offset for LATEST), newest first."""
        segments, _bases, log_start, leo, active_size = self._state
        entries = [(max(s.base_offset, log_start), s.last_modified_ms) for s in segments]
        return offsets_before(
            entries,
            leo,
            active_size == 0,
            now_ms if now_ms is not None else _now_ms(),
            timestamp,
            max_offsets,
        )

    # -- flushing ------------------------------------------------------------------------

    def flush(self, offset: int | None = None) -> None:
        """fsync the segments holding offsets below ``offset`` (default: the log end
        offset) and their indexes, then advance ``recovery_point``.  Does not block appends
        for the duration of the fsync."""
        with self._flush_lock:
            with self._lock:
                if self._closed:
                    return
                leo = self._log_end_offset
                target = leo if offset is None else min(offset, leo)
                if target <= self._recovery_point and not self._dir_dirty:
                    return
                segments, bases = self._state[0], self._state[1]
                rp = self._recovery_point
                # Segment i covers [bases[i], bases[i+1]): flush those meeting [rp, target).
                lo = max(0, bisect_right(bases, rp) - 1)
                hi = max(lo + 1, bisect_right(bases, max(target - 1, rp)))
                dirty = segments[lo:hi]
                full = target == leo
                messages = self._unflushed_messages if full else 0
                dir_dirty, self._dir_dirty = self._dir_dirty, False
                started = _now_ms()
            for segment in dirty:
                segment.flush()
            if dir_dirty:
                _fsync_dir(self.directory)
            with self._lock:
                self._recovery_point = max(self._recovery_point, target)
                if full:
                    self._unflushed_messages -= messages
                    self._first_unflushed_ms = started if self._unflushed_messages else None

    def flush_due(self, now_ms: int | None = None) -> bool:
        """Whether ``maybe_flush`` has work: unflushed data older than
        ``flush_interval_ms``, or a rolled segment not yet fsynced."""
        if self._roll_flush_offset > self._recovery_point:
            return True
        interval = self.config.flush_interval_ms
        first = self._first_unflushed_ms
        if interval is None or first is None:
            return False
        return (now_ms if now_ms is not None else _now_ms()) - first >= interval

    def maybe_flush(self, now_ms: int | None = None) -> bool:
        """Flush what the time policy (``flush_interval_ms``) or a roll asks for; return
        whether anything was flushed.  The broker's flush timer calls this (through
        ``LogManager.flush_due_logs``)."""
        interval = self.config.flush_interval_ms
        first = self._first_unflushed_ms
        now = now_ms if now_ms is not None else _now_ms()
        if interval is not None and first is not None and now - first >= interval:
            self.flush()
            return True
        if self._roll_flush_offset > self._recovery_point:
            self.flush(self._roll_flush_offset)
            return True
        return False

    # -- retention and truncation ---------------------------------------------------------

    def delete_old_segments(self, now_ms: int | None = None) -> list[int]:
        """Apply ``retention_ms`` and ``retention_bytes``; return the deleted base offsets.

        Whole segments only, oldest first, never the active one.  Readers holding slices
        of a deleted segment keep reading (their descriptors outlive the unlink).
        """
        now = now_ms if now_ms is not None else _now_ms()
        config = self.config
        if config.retention_ms < 0 and config.retention_bytes < 0:
            return []
        with self._lock:
            if self._closed:
                return []
            segments = self._segments
            inactive = [(s.size, s.largest_timestamp) for s in segments[:-1]]
            n = segments_to_delete(
                inactive, self._active.size, now, config.retention_ms, config.retention_bytes
            )
            dead = self._drop_oldest(n)
        for segment in dead:
            segment.delete()
        deleted = [s.base_offset for s in dead]
        if not deleted:
            return []
        logger.info(
            "%s: retention deleted segments %s; log start offset now %d",
            self.directory,
            deleted,
            self.log_start_offset,
        )
        return deleted

    def delete_segments_before(self, offset: int) -> list[int]:
        """Delete the oldest segments while every offset they hold is below ``offset`` (never
        the active one); return their base offsets.  For a log that rewrites its own live
        data further on, as the group coordinator does with a snapshot of the latest offsets
        (Kafka's ``deleteOldSegments`` with a start-offset predicate)."""
        with self._lock:
            if self._closed:
                return []
            segments = self._segments
            n = 0
            while n < len(segments) - 1 and segments[n + 1].base_offset <= offset:
                n += 1
            dead = self._drop_oldest(n)
        for segment in dead:
            segment.delete()
        return [s.base_offset for s in dead]

    def _drop_oldest(self, n: int) -> tuple[LogSegment, ...]:
        """Under the lock: take the ``n`` oldest segments out of the published list (the
        caller deletes their files after releasing the lock; readers holding slices of them
        keep reading through their own descriptors)."""
        if not n:
            return ()
        dead, self._segments = self._segments[:n], self._segments[n:]
        self._recovery_point = max(self._recovery_point, self._segments[0].base_offset)
        self._dir_dirty = True
        self._publish()
        return dead

    def truncate_to(self, offset: int) -> None:
        """Drop every batch holding offsets >= ``offset`` (whole batches: the log end offset
        becomes the end of the last batch kept).  Below the log start offset the log is
        emptied and restarts at ``offset``.  Readers' open slices keep their bytes only up
        to the new end."""
        with self._flush_lock, self._lock:
            self._check_open()
            if offset >= self._log_end_offset:
                return
            segments = list(self._segments)
            if offset <= segments[0].base_offset:
                for segment in segments:
                    segment.delete()
                segments = [LogSegment.create(self.directory, offset, self.config)]
            else:
                while segments[-1].base_offset >= offset:
                    segments.pop().delete()
                segments[-1].truncate_to(offset)
            self._segments = tuple(segments)
            self._active = segments[-1]
            self._log_end_offset = self._active.next_offset
            self._recovery_point = min(self._recovery_point, self._log_end_offset)
            self._roll_flush_offset = min(self._roll_flush_offset, self._log_end_offset)
            self._dir_dirty = True
            self._publish()

    # -- closing -------------------------------------------------------------------------

    def close(self) -> None:
        """Flush everything, write the final index entries, close every file.

        Every file is closed even when the flush fails (a full or failing disk); the first
        such error is raised afterwards, so the caller knows this log needs recovery."""
        with self._flush_lock, self._lock:
            if self._closed:
                return
            self._active.time_index.maybe_append(
                self._active.max_timestamp, self._active.offset_of_max_timestamp
            )
        error: OSError | None = None
        try:
            self.flush()
        except OSError as exc:
            error = exc
        with self._flush_lock, self._lock:
            if self._closed:
                return
            self._closed = True
            for segment in self._segments:
                try:
                    segment.offset_index.flush()
                    segment.time_index.flush()
                except OSError as exc:
                    error = error or exc
                segment.close()
        if error is not None:
            raise error

    def _close_handles(self) -> None:
        """Close every descriptor without flushing anything: what a crash leaves behind
        (for tests; the data already written stays in the files)."""
        with self._lock:
            self._closed = True
            for segment in self._segments:
                segment.close()

    def delete(self) -> None:
        """Close and remove the whole partition directory (renamed to ``*.deleted`` first,
        so a crash halfway leaves a name the next start removes)."""
        self._close_handles()
        parent, name = os.path.split(self.directory)
        doomed = os.path.join(parent, f"{name}.{uuid.uuid4().hex}.deleted")
        os.rename(self.directory, doomed)
        _fsync_dir(parent)
        shutil.rmtree(doomed, ignore_errors=True)


def _first_record_at_or_after(data: bytes, timestamp: int, base_offset: int):
    batch = RecordBatch(data, 0)
    try:
        for record in batch:
            if record.timestamp >= timestamp:
                return TimestampOffset(record.timestamp, record.offset)
    except CorruptMessageError:
        pass
    return TimestampOffset(batch.max_timestamp, base_offset)


def _now_ms() -> int:
    return now_ms()


def _unlink(path: str) -> None:
    try:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
