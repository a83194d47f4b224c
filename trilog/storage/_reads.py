"""The reads of a partition's log, which take no lock: ``LogReader`` over a ``LogSnapshot``.

``Log`` publishes a new ``LogSnapshot`` in one attribute assignment after each change it
makes (an append once its bytes are in the file), so a read works from one consistent
state and never sees part of an append nor bytes at or past the log end offset of its
snapshot.  Segments are read through the reader's own descriptor (``LogSegment.dup_fd``):
a slice keeps its bytes after retention unlinks the segment, and a segment removed after
the snapshot was taken says so (``dup_fd`` gives None) instead of reading another file;
then ``read`` tries again from a newer snapshot and the lookups skip it.

A read_committed fetch reads below the ``last_stable_offset`` (``read``'s ``max_offset``)
and asks ``aborted_transactions`` for the transactions to skip in what it got: both come
from the snapshot and the segments' in-memory ``.txnindex`` entries, without a lock.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Iterator
from typing import NamedTuple

from trilog import _time
from trilog.errors import CorruptMessageError, OffsetOutOfRangeError, TrilogError
from trilog.records import BatchHeader, RecordBatch
from trilog.storage._fetch import FetchSlice
from trilog.storage._retention import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, offsets_before
from trilog.storage._segment import LogSegment, walk_batches
from trilog.storage._txn_index import AbortedTxn


class TimestampOffset(NamedTuple):
    """ListOffsets' answer: the record's timestamp (-1 for EARLIEST/LATEST) and offset."""

    timestamp: int
    offset: int


class LogSnapshot(NamedTuple):
    """What readers work from: replaced whole, in one assignment, never changed.

    Invariants, as published: ``segments`` is the log's non-empty, ordered segment list and
    ``base_offsets`` their base offsets; ``log_start_offset`` <= ``last_stable_offset`` <=
    ``high_watermark`` <= ``log_end_offset``; the active (last) segment holds whole batches
    below the log end offset up to ``active_size``, which later appends do not change.
    (Only a truncation changes what an older snapshot's segments hold: a read racing one
    sees the files as the truncation left them.)
    """

    segments: tuple[LogSegment, ...]
    base_offsets: tuple[int, ...]
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    active_size: int  # the committed size of the active (last) segment
    #: the high watermark, or the first offset of the oldest transaction not yet decided
    #: below it (or whose marker is not yet below it), if lower (Kafka's LSO)
    last_stable_offset: int


class LogReader:
    """The reads of one partition's log, a base class of ``Log``: each works from the
    snapshot ``Log`` last published (``_snapshot``) and takes no lock.

    ``Log`` sets the attributes declared here and replaces ``_snapshot`` after each change;
    nothing here changes them.  A base class rather than a part ``Log`` calls, so that
    ``read``, the broker's fetch path, costs no call of its own.

    Thread-safe: any number of threads read while one appends, flushes or deletes.
    """

    directory: str
    topic: str
    partition: int
    _snapshot: LogSnapshot
    _closed: bool

    @property
    def log_start_offset(self) -> int:
        return self._snapshot.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._snapshot.log_end_offset

    @property
    def high_watermark(self) -> int:
        """The offset below which every record is committed: set by the replica manager
        when ``replicated``, else the log end offset (everything appended is committed)."""
        return self._snapshot.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """The offset below which every transaction is decided (Kafka's LSO): the high
        watermark, or the first offset of the oldest transaction still open (or whose marker
        is not yet below the high watermark), if lower; never below the log start offset.
        What a read_committed consumer reads up to.  No lock, no scan."""
        return self._snapshot.last_stable_offset

    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of [``start_offset``,
        ``end_offset``) must skip (Kafka's ``collectAbortedTransactions``): each transaction
        whose ABORT marker is at or after ``start_offset`` and whose first offset is below
        ``end_offset``, as ``AbortedTxn(producer_id, first_offset)``, in the order of their
        markers.  ``end_offset`` is where the fetched batches end (one past the last offset
        of the slice) or the last stable offset.  Reads the ``.txnindex`` entries of the
        segment holding ``start_offset`` and of later ones, until an entry shows that no
        later one overlaps; no lock, no file read."""
        segments, bases = self._snapshot[:2]
        out: list[AbortedTxn] = []
        for segment in segments[max(bisect_right(bases, start_offset) - 1, 0):]:
            found, complete = segment.txn_index.collect(start_offset, end_offset)
            out += found
            if complete:
                break
        return out

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self._snapshot.segments

    @property
    def active_segment(self) -> LogSegment:
        return self._snapshot.segments[-1]

    @property
    def size_in_bytes(self) -> int:
        snapshot = self._snapshot
        return sum(s.size for s in snapshot.segments[:-1]) + snapshot.active_size

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> FetchSlice:
        """Batches from the one holding ``offset``, up to ``max_bytes`` (the first batch is
        whole even if larger), as a ``FetchSlice`` the caller must close.

        ``max_offset`` bounds the read (Kafka's ``maxOffset``): only whole batches whose last
        offset is below it are returned, even when the first batch is larger than
        ``max_bytes``.  A consumer's fetch passes the ``high_watermark`` (Kafka's
        ``FetchHighWatermark``), a follower's none (``FetchLogEnd``).  An offset at or above
        the bound but not above the log end gives an empty slice.

        ``offset == log_end_offset`` gives an empty slice; an offset below the log start or
        above the log end raises ``OffsetOutOfRangeError`` carrying both.
        """
        for _attempt in range(8):
            if self._closed:
                raise TrilogError(f"read from closed log {self.directory}")
            segments, bases, log_start, leo, hw, active_size, lso = self._snapshot
            if offset == leo:
                return FetchSlice.empty(offset, log_end_offset=leo, log_start_offset=log_start,
                                        high_watermark=hw, last_stable_offset=lso)
            if offset < log_start or offset > leo:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is outside {log_start}..{leo} of "
                    f"{self.topic}-{self.partition}",
                    log_start_offset=log_start,
                    log_end_offset=leo,
                )
            bound = leo if max_offset is None or max_offset > leo else max_offset
            if offset >= bound:
                return FetchSlice.empty(offset, log_end_offset=leo, log_start_offset=log_start,
                                        high_watermark=hw, last_stable_offset=lso)
            last = len(segments) - 1
            i = bisect_right(bases, offset) - 1
            while i <= last:
                segment = segments[i]
                if segment.base_offset >= bound:
                    i = last + 1  # nothing below the bound from here on
                    continue
                fd = segment.dup_fd()
                if fd is None:
                    break  # deleted under us: take a new snapshot
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
                    last_stable_offset=lso,
                )
            else:
                return FetchSlice.empty(offset, log_end_offset=leo, log_start_offset=log_start,
                                        high_watermark=hw, last_stable_offset=lso)
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
        segments, active_size = self._snapshot.segments, self._snapshot.active_size
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
        """ListOffsets v1+: the first record at or above the log start offset whose
        timestamp is >= ``timestamp``.

        ``EARLIEST_TIMESTAMP`` (-2) and ``LATEST_TIMESTAMP`` (-1) give the log start and end
        offsets with timestamp -1.  The first candidate batch is found from headers (time
        index binary search, offset index, header walk); only the records of batches whose
        max timestamp reaches ``timestamp`` are decoded (usually one).  ``None`` when no
        record is that recent.
        """
        segments, _bases, log_start, leo, _hw, active_size, _lso = self._snapshot
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

    def offsets_before(
        self, timestamp: int, max_offsets: int, now_ms: int | None = None
    ) -> list[int]:
        """ListOffsets v0 (Kafka 0.8): segment base offsets of segments last modified at or
        before ``timestamp`` (plus the log end offset for LATEST), newest first."""
        segments, _bases, log_start, leo, _hw, active_size, _lso = self._snapshot
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
