"""``Cleaner``: one cleaning of one compacted log (Kafka's ``Cleaner``).

1. **Map.** The dirty section (from the first dirty offset to the first uncleanable one,
   which is at most the last stable offset) is read record by record into an ``OffsetMap``
   of key -> latest offset, until it is read or the map is full (then only what fits is
   cleaned: the map's ``latest_offset`` is where this cleaning ends and the next begins).
   Records of aborted transactions are not mapped: they never hide a committed record.
2. **Group.** The segments from the log's first one to that end are grouped into runs of
   at most ``segment_bytes`` (``group_segments_by_size``); each run becomes one segment.
3. **Rewrite.** Each run is copied into a ``<base>.log.cleaned`` segment batch by batch:
   a record stays if it is past the map's end, or if it holds its key's latest offset and
   has a value or is a tombstone still within ``delete_retention_ms`` (segments modified
   after the delete horizon keep their tombstones).  A batch that keeps every record is
   copied as it is; a thinned one is rebuilt (``rebuild_batch``: same base and last offset,
   producer fields, leader epoch, codec); an emptied one goes, except the last batch of an
   active producer (its sequence numbers) and the last batch of the run (so that the
   cleaned segment ends where the run did: what a crash's recovery relies on).  Records
   without a key are dropped, as Kafka does.
4. **Swap.** ``Log.replace_segments`` swaps the cleaned segment in (the ``.cleaned`` /
   ``.swap`` protocol; ``_loader`` finishes or undoes it after a crash).

Never touches the active segment.  Offsets and order never change; only records go.
Reads its sources through its own descriptors, so retention or a swap elsewhere never makes
it read another file; a source that went meanwhile makes ``replace_segments`` refuse the
run, and the cleaning stops there (``complete`` is False).  Blocking; one ``Cleaner`` per
thread.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Iterator
from typing import NamedTuple

from trilog import _time
from trilog.errors import TrilogError
from trilog.records import (
    CONTROL_MASK,
    HEADER_SIZE,
    ControlRecordType,
    CorruptRecordsError,
    Record,
    RecordBatch,
    batch_crc,
    check_batch_header,
    read_batch_header,
    rebuild_batch,
)
from trilog.storage._compaction import (
    CleanableRange,
    SegmentFacts,
    delete_horizon_ms,
    group_segments_by_size,
)
from trilog.storage._loader import CLEANED_SUFFIX
from trilog.storage._log import Log
from trilog.storage._offset_map import OffsetMap
from trilog.storage._segment import LogSegment
from trilog.storage._txn_index import AbortedTxn

logger = logging.getLogger("trilog.storage.cleaner")

#: Bytes read from a segment at a time (a larger batch is read whole).
READ_CHUNK = 1 << 20
#: Bytes of cleaned batches gathered before one write.
WRITE_CHUNK = 1 << 20


class CleanerStoppedError(TrilogError):
    """The cleaner was asked to stop (the broker is shutting down); the cleaning of this
    log was abandoned before its next swap, leaving the log as it was."""


@dataclasses.dataclass
class CleanerStats:
    """The counters of one cleaning (Kafka's ``CleanerStats``)."""

    map_bytes_read: int = 0
    map_records_read: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_written: int = 0
    tombstones_removed: int = 0
    invalid_records: int = 0  # records without a key: dropped
    aborted_records_removed: int = 0  # records of aborted transactions
    segments_replaced: int = 0
    segments_written: int = 0
    buffer_utilization: float = 0.0
    started_ms: int = 0
    ended_ms: int = 0

    @property
    def records_removed(self) -> int:
        return self.records_read - self.records_written


class CleanOutcome(NamedTuple):
    end_offset: int  # where the map ended: the log is clean below it (if complete)
    complete: bool  # every run was swapped in (False: a source went meanwhile)
    stats: CleanerStats


class Cleaner:
    """Cleans one log at a time into cleaned segments (see the module's description).

    ``map_memory_bytes`` bounds the offset map (``log.cleaner.dedupe.buffer.size`` shared
    by the threads); ``should_stop()`` is asked before every batch; ``on_step`` is handed
    to ``Log.replace_segments`` (for crash tests).  Not thread-safe: one per thread.
    """

    def __init__(
        self,
        map_memory_bytes: int,
        *,
        should_stop: Callable[[], bool] | None = None,
        on_step: Callable[[str], None] | None = None,
    ) -> None:
        self.offset_map = OffsetMap(map_memory_bytes)
        self._should_stop = should_stop or (lambda: False)
        self._on_step = on_step

    def clean(self, log: Log, rng: CleanableRange, now_ms: int | None = None) -> CleanOutcome:
        """Clean ``log`` whose dirty section is ``rng`` (from ``cleanable_range``)."""
        stats = CleanerStats(started_ms=now_ms if now_ms is not None else _time.now_ms())
        segments = log.segments
        clean_below = [s for s in segments if s.base_offset < rng.first_dirty_offset]
        horizon = delete_horizon_ms(
            clean_below[-1].last_modified_ms if clean_below else None,
            log.config.delete_retention_ms,
        )
        offset_map = self.offset_map
        self._build_offset_map(log, segments, rng, stats)
        end_offset = offset_map.latest_offset + 1
        stats.buffer_utilization = offset_map.utilization
        producers = _last_batches_of_producers(log)
        cleanable = [s for s in segments[:-1] if s.base_offset < end_offset]
        facts = [
            SegmentFacts(s.base_offset, s.size, 0, 8 * len(s.offset_index),
                         12 * len(s.time_index))
            for s in cleanable
        ]
        groups = group_segments_by_size(
            facts, log.config.segment_bytes, log.config.max_index_size,
            rng.first_uncleanable_offset,
        )
        complete = True
        for group in groups:
            run = tuple(cleanable[i] for i in group)
            run_end = segments[segments.index(run[-1]) + 1].base_offset
            aborted = _AbortedTransactions(log.aborted_transactions(run[0].base_offset, run_end))
            cleaned = self._clean_run(log, run, horizon, producers, aborted, stats)
            if not log.replace_segments(cleaned, run, self._on_step):
                complete = False
                logger.info("%s: cleaning stopped at segment %d, which changed meanwhile",
                            log.directory, run[0].base_offset)
                break
            stats.segments_replaced += len(run)
            stats.segments_written += 1
        offset_map.clear()
        stats.ended_ms = _time.now_ms()
        return CleanOutcome(end_offset, complete, stats)

    # -- 1. the offset map ----------------------------------------------------------------

    def _build_offset_map(
        self, log: Log, segments: tuple[LogSegment, ...], rng: CleanableRange,
        stats: CleanerStats,
    ) -> None:
        """Map the dirty section's keys to their latest offsets, until it is read or the map
        is full (Kafka's ``buildOffsetMap``); aborted transactions' records are left out."""
        offset_map = self.offset_map
        offset_map.clear()
        start, end = rng.first_dirty_offset, rng.first_uncleanable_offset
        aborted = _AbortedTransactions(log.aborted_transactions(start, end))
        for i, segment in enumerate(segments[:-1]):
            next_base = min(segments[i + 1].base_offset, end)
            if segment.base_offset >= end:
                break
            if next_base <= start:
                continue
            position = segment.offset_index.lookup(start)[1] if segment.base_offset < start else 0
            if self._map_segment(segment, position, start, aborted, stats):
                return  # full
            # Offsets may have gaps: the segment covers everything below the next one.
            offset_map.update_latest_offset(next_base - 1)

    def _map_segment(
        self, segment: LogSegment, position: int, start: int,
        aborted: _AbortedTransactions, stats: CleanerStats,
    ) -> bool:
        """Add the segment's records from ``position`` on; True when the map filled up."""
        offset_map = self.offset_map
        for _position, batch in self._batches(segment, position):
            stats.map_bytes_read += batch.size
            if batch.last_offset < start:
                continue
            if not aborted.discards(batch):
                for record in batch.decode():
                    stats.map_records_read += 1
                    key = record.key
                    if key is None or record.offset < start:
                        continue
                    if not offset_map.put(key, record.offset):
                        return True
            offset_map.update_latest_offset(batch.last_offset)
        return False

    # -- 3. the rewrite -------------------------------------------------------------------

    def _clean_run(
        self,
        log: Log,
        run: tuple[LogSegment, ...],
        horizon: int,
        producers: dict[int, int],
        aborted: _AbortedTransactions,
        stats: CleanerStats,
    ) -> LogSegment:
        """Write ``run`` cleaned into a ``.cleaned`` segment, flushed, with the last
        source's modification time and the ``.txnindex`` entries of its sources (every
        marker stays)."""
        cleaned = LogSegment.create(log.directory, run[0].base_offset, log.config,
                                    suffix=CLEANED_SUFFIX)
        try:
            writer = _SegmentWriter(cleaned, stats)
            for n, segment in enumerate(run):
                retain_deletes = segment.last_modified_ms > horizon
                last_source = n == len(run) - 1
                end = segment.size
                for position, batch in self._batches(segment, 0):
                    if position + batch.size == end and last_source:
                        keep_empty = True  # the run's last batch: the cleaned segment's end
                    else:
                        keep_empty = producers.get(batch.producer_id) == batch.last_offset
                    data = self._filter(batch, retain_deletes, keep_empty,
                                        aborted.discards(batch), stats)
                    if data is not None:
                        writer.add(data, batch.last_offset)
                stats.bytes_read += end
            writer.close()
            for segment in run:
                for entry in segment.txn_index.entries():
                    cleaned.txn_index.append(entry)
            cleaned.on_become_inactive()
            cleaned.flush()
            cleaned.set_last_modified(run[-1].last_modified_ms)
        except BaseException:
            cleaned.delete()
            raise
        return cleaned

    def _filter(
        self, batch: RecordBatch, retain_deletes: bool, keep_empty: bool, aborted: bool,
        stats: CleanerStats,
    ) -> bytes | memoryview | None:
        """The batch as the cleaned segment holds it: whole, rebuilt with fewer records,
        empty, or None (gone).  Kafka's ``shouldRetainRecord`` decides each record; a
        batch of an aborted transaction keeps none."""
        whole = memoryview(batch.buffer)[batch.position : batch.position + batch.size]
        if batch.is_control_batch:
            return whole  # markers stay (see the module docstring)
        records = batch.decode()
        if aborted:
            stats.aborted_records_removed += len(records)
            kept: list[Record] = []
        else:
            kept = self._kept(records, retain_deletes, stats)
        stats.records_read += len(records)
        stats.records_written += len(kept)
        if not kept:
            return rebuild_batch(batch, ()) if keep_empty else None
        if len(kept) == len(records):
            return whole
        return rebuild_batch(batch, kept)

    def _kept(self, records: list[Record], retain_deletes: bool, stats: CleanerStats
              ) -> list[Record]:
        """The records of a batch that stay (Kafka's ``shouldRetainRecord``)."""
        offset_map = self.offset_map
        latest = offset_map.latest_offset
        kept: list[Record] = []
        for record in records:
            if record.offset > latest:
                kept.append(record)
            elif record.key is None:
                stats.invalid_records += 1
            elif record.offset >= offset_map.get(record.key):
                if record.value is not None or retain_deletes:
                    kept.append(record)
                else:
                    stats.tombstones_removed += 1
        return kept

    # -- reading --------------------------------------------------------------------------

    def _batches(self, segment: LogSegment, position: int) -> Iterator[tuple[int, RecordBatch]]:
        """``(file position, batch)`` of an inactive segment from ``position`` (a batch
        boundary) to its end, read through a private descriptor, each header and CRC-32C
        checked (a batch is never rewritten with a new CRC unless its own was right).
        Raises ``CorruptRecordsError`` at anything invalid, ``CleanerStoppedError`` when
        asked to stop; yields nothing if the segment was deleted already (then it is no
        longer in the log, and ``replace_segments`` refuses its run)."""
        fd = segment.dup_fd()
        if fd is None:
            return
        try:
            yield from _read_batches(fd, position, segment.size, self._should_stop,
                                     segment.log_path)
        finally:
            os.close(fd)


class _SegmentWriter:
    """Gathers cleaned batches and appends them to the cleaned segment in large writes."""

    def __init__(self, segment: LogSegment, stats: CleanerStats) -> None:
        self.segment = segment
        self.stats = stats
        self._parts: list[bytes | memoryview] = []
        self._infos: list[tuple[int, int, int]] = []
        self._bytes = 0

    def add(self, data: bytes | memoryview, last_offset: int) -> None:
        max_timestamp = read_batch_header(data).max_timestamp
        self._parts.append(data)
        self._infos.append((len(data), last_offset, max_timestamp))
        self._bytes += len(data)
        if self._bytes >= WRITE_CHUNK:
            self._write()

    def close(self) -> None:
        if self._parts:
            self._write()

    def _write(self) -> None:
        data = b"".join(self._parts)
        self.segment.append(data, len(data), self._infos, _time.now_ms())
        self.stats.bytes_written += len(data)
        self._parts, self._infos, self._bytes = [], [], 0


class _AbortedTransactions:
    """Which batches belong to aborted transactions, walking a stretch of the log in order
    (Kafka's ``CleanedTransactionMetadata``): the aborted transactions overlapping the
    stretch (``Log.aborted_transactions``), each ongoing from its first offset until its
    producer's ABORT marker.  Not thread-safe: one cleaning's."""

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self._pending = sorted(aborted, key=lambda t: t.first_offset, reverse=True)
        self._ongoing: set[int] = set()  # producer ids with an aborted transaction ongoing

    def discards(self, batch: RecordBatch) -> bool:
        """Whether ``batch`` (the next in offset order) is a data batch of an aborted
        transaction; a control batch is never discarded, and an ABORT marker ends its
        producer's aborted transaction."""
        pending = self._pending
        while pending and pending[-1].first_offset <= batch.last_offset:
            self._ongoing.add(pending.pop().producer_id)
        if batch.is_control_batch:
            marker = batch.end_txn_marker()
            if marker is not None and marker.control_type is ControlRecordType.ABORT:
                self._ongoing.discard(batch.producer_id)
            return False
        return batch.is_transactional and batch.producer_id in self._ongoing


def _read_batches(
    fd: int, position: int, end: int, should_stop: Callable[[], bool], name: str
) -> Iterator[tuple[int, RecordBatch]]:
    pos = position
    while pos < end:
        if should_stop():
            raise CleanerStoppedError("the log cleaner is stopping")
        buf = os.pread(fd, min(READ_CHUNK, end - pos), pos)
        rel = 0
        while len(buf) - rel >= HEADER_SIZE:
            header = check_batch_header(buf, rel)
            size = header.size
            if rel + size > len(buf):
                if rel == 0:  # one batch larger than a chunk: read it whole
                    buf = os.pread(fd, size, pos)
                    if len(buf) < size:
                        break
                    continue
                break
            if batch_crc(buf, rel, size) != header.crc:
                raise CorruptRecordsError(
                    f"{name}: the batch at byte {pos + rel} fails its CRC-32C")
            yield pos + rel, RecordBatch(buf, rel)
            rel += size
        if rel == 0:
            raise CorruptRecordsError(f"{name}: no whole batch at byte {pos} of {end}")
        pos += rel


def _last_batches_of_producers(log: Log) -> dict[int, int]:
    """``{producer id: last offset of its last data batch}`` over the whole log (Kafka's
    ``lastRecordsOfActiveProducers``; markers, which follow, are kept anyway): those
    batches stay, even emptied, so that the producers' sequence numbers survive cleaning."""
    last: dict[int, int] = {}
    for header in log.batch_headers(tail_bytes=1 << 62):
        if header.producer_id >= 0 and not header.attributes & CONTROL_MASK:
            last[header.producer_id] = header.base_offset + header.last_offset_delta
    return last
