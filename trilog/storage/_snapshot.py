"""``LogSnapshot``: a partition's log as readers see it, and the reads that take no lock.

``Log`` publishes a new ``LogSnapshot`` in one attribute assignment after each change it
makes (an append once its bytes are in the file), so a read works from one consistent
state and never sees part of an append nor bytes at or past the log end offset of its
snapshot.  Segments are read through the reader's own descriptor (``LogSegment.dup_fd``):
a slice keeps its bytes after retention unlinks the segment, and a segment removed after
the snapshot was taken says so (``dup_fd`` gives None) instead of reading another file.
Then ``read`` answers None and ``Log.read`` takes a newer snapshot; the lookups skip it.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Iterator
from typing import NamedTuple

from trilog import _time
from trilog.errors import CorruptMessageError
from trilog.records import BatchHeader, RecordBatch
from trilog.storage._fetch import FetchSlice
from trilog.storage._retention import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, offsets_before
from trilog.storage._segment import LogSegment, walk_batches


class TimestampOffset(NamedTuple):
    """ListOffsets' answer: the record's timestamp (-1 for EARLIEST/LATEST) and offset."""

    timestamp: int
    offset: int


class LogSnapshot(NamedTuple):
    """What readers work from: replaced whole, in one assignment, never changed.

    Invariants, as published: ``segments`` is the log's non-empty, ordered segment list and
    ``base_offsets`` their base offsets; ``log_start_offset`` <= ``high_watermark`` <=
    ``log_end_offset``; the active (last) segment holds whole batches below the log end
    offset up to ``active_size``, which later appends do not change.  (Only a truncation
    changes what an older snapshot's segments hold: a read racing one sees the files as the
    truncation left them.)

    Thread-safe: immutable, and its reads keep no state.
    """

    segments: tuple[LogSegment, ...]
    base_offsets: tuple[int, ...]
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    active_size: int  # the committed size of the active (last) segment

    def read(self, offset: int, max_bytes: int, bound: int) -> FetchSlice | None:
        """``Log.read`` of an ``offset`` in [log start offset, ``bound``), ``bound`` <= the
        log end offset: the slice, or None when a segment it needs was deleted after this
        snapshot was taken (the caller reads again from a newer one)."""
        segments, bases, log_start, leo, hw, active_size = self
        last = len(segments) - 1
        i = bisect_right(bases, offset) - 1
        while i <= last:
            segment = segments[i]
            if segment.base_offset >= bound:
                break  # nothing below the bound from here on
            fd = segment.dup_fd()
            if fd is None:
                return None  # deleted under us: the caller takes a new snapshot
            max_position = active_size if i == last else segment.size
            try:
                if bound < leo and (i == last or bases[i + 1] > bound):
                    # The bound lies in this segment: stop before its batch.
                    cut = segment.translate_offset(fd, bound, max_position)
                    if cut is not None:
                        max_position = cut[0]
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
                high_watermark=hw,
                log_end_offset=leo,
                log_start_offset=log_start,
            )
        return FetchSlice.empty(offset, log_end_offset=leo, log_start_offset=log_start,
                                high_watermark=hw)

    def batch_headers(self, tail_bytes: int) -> Iterator[BatchHeader]:
        """``Log.batch_headers``: the headers of about the last ``tail_bytes``, oldest
        first; a segment deleted meanwhile is skipped."""
        segments, active_size = self.segments, self.active_size
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
        """``Log.offset_for_timestamp`` from this snapshot."""
        segments, _bases, log_start, leo, _hw, active_size = self
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampOffset(-1, log_start)
        if timestamp == LATEST_TIMESTAMP:
            return TimestampOffset(-1, leo)
        last = len(segments) - 1
        for i, segment in enumerate(segments):
            if segment.max_timestamp < timestamp:
                continue
            if i < last and segments[i + 1].base_offset <= log_start:
                continue  # wholly below the log start offset
            fd = segment.dup_fd()
            if fd is None:
                continue
            try:
                max_position = active_size if i == last else segment.size
                found = _search_segment(segment, fd, timestamp, log_start, max_position)
            finally:
                os.close(fd)
            if found is not None:
                return found
        return None

    def offsets_before(self, timestamp: int, max_offsets: int, now_ms: int | None) -> list[int]:
        """``Log.offsets_before`` from this snapshot (``_retention.offsets_before`` decides)."""
        segments, _bases, log_start, leo, _hw, active_size = self
        entries = [(max(s.base_offset, log_start), s.last_modified_ms) for s in segments]
        return offsets_before(
            entries,
            leo,
            active_size == 0,
            now_ms if now_ms is not None else _time.now_ms(),
            timestamp,
            max_offsets,
        )


def _search_segment(
    segment: LogSegment, fd: int, timestamp: int, min_offset: int, max_position: int
) -> TimestampOffset | None:
    """The first record of ``segment`` at or above ``min_offset`` whose timestamp is >=
    ``timestamp`` (Kafka's ``LogSegment.findOffsetByTimestamp``), or None."""
    found = segment.find_by_timestamp(fd, timestamp, max_position)
    if found is None:
        return None
    for position, size, header in walk_batches(fd, found[0], max_position):
        if header.max_timestamp < timestamp or header.last_offset < min_offset:
            continue
        batch = RecordBatch(os.pread(fd, size, position), 0)
        try:
            for record in batch:
                if record.timestamp >= timestamp and record.offset >= min_offset:
                    return TimestampOffset(record.timestamp, record.offset)
        except CorruptMessageError:
            return TimestampOffset(header.max_timestamp, max(header.base_offset, min_offset))
    return None
