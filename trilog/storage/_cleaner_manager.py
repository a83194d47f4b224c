"""``LogCleanerManager``: which compacted log to clean next, how far each is clean, and the
cleaner's counters (Kafka's ``LogCleanerManager``, with the entry point of a pass).

Each log dir's ``cleaner-offset-checkpoint`` (Kafka's name and format, an
``OffsetCheckpoint``) holds, per compacted log, the first dirty offset: everything below it
holds at most one record per key.  A pass picks the log with the largest dirty ratio above
its ``min_cleanable_dirty_ratio`` (``choose_filthiest``), cleans it (``Cleaner``) and
writes the checkpoint.  The broker runs passes from worker threads
(``trilog/broker/_cleaner.py``); storage itself starts no thread.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from typing import Any, Callable, NamedTuple, Protocol

from trilog._topic import PartitionKey
from trilog import _time
from trilog.storage._checkpoint import OffsetCheckpoint
from trilog.storage._cleaner import Cleaner, CleanerStats, CleanerStoppedError
from trilog.storage._compaction import (
    CleanableRange,
    SegmentFacts,
    choose_filthiest,
    cleanable_range,
    first_dirty_offset,
)
from trilog.storage._log import Log

logger = logging.getLogger("trilog.storage.cleaner")

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
#: Kafka's ``log.cleaner.dedupe.buffer.size`` default: 128 MiB for all cleaner threads.
DEFAULT_DEDUPE_BUFFER_SIZE = 128 * 1024 * 1024


class CleanResult(NamedTuple):
    """What one pass did to one log."""

    topic: str
    partition: int
    first_dirty_offset: int
    end_offset: int  # the log is clean below this now (the checkpoint), if complete
    complete: bool
    stats: CleanerStats


class CleanableLogs(Protocol):
    """What the cleaner needs of its ``LogManager``: the log dirs and the logs in them."""

    log_dirs: list[str]

    def logs(self) -> Iterable[Log]: ...

    def get_log(self, topic: str, partition: int) -> Log | None: ...

    def log_dir_of(self, topic: str, partition: int) -> str | None: ...


class LogCleanerManager:
    """The log cleaner of a ``LogManager`` (its ``cleaner`` attribute).

    Thread-safe: ``clean_filthiest`` may run in several threads at once (the broker's
    ``log.cleaner.threads``); a log is cleaned by one of them at a time.  ``stop()`` makes
    running passes give up at their next read (before their next swap), for a shutdown.
    A log whose cleaning failed with an error (a corrupt batch, a full disk) is marked
    uncleanable and skipped until the broker restarts, as in Kafka.
    """

    def __init__(self, manager: CleanableLogs, *,
                 on_step: Callable[[str], None] | None = None) -> None:
        self._manager = manager
        self._on_step = on_step
        self._lock = threading.Lock()
        self._checkpoint_lock = threading.Lock()
        self._stopping = threading.Event()
        self._in_progress: set[PartitionKey] = set()
        self._uncleanable: set[PartitionKey] = set()
        self._checkpoints: dict[PartitionKey, int] = {}
        for log_dir in manager.log_dirs:
            self._checkpoints.update(_checkpoint_file(log_dir).read())
        self._counters: dict[str, float] = dict.fromkeys(
            ("passes", "incomplete_passes", "failed_passes", "bytes_read", "bytes_written",
             "records_read", "records_removed", "tombstones_removed", "segments_replaced",
             "last_pass_ms", "last_buffer_utilization"),
            0,
        )

    # -- passes ---------------------------------------------------------------------------

    def clean_filthiest(self, dedupe_buffer_bytes: int = DEFAULT_DEDUPE_BUFFER_SIZE,
                        now_ms: int | None = None) -> CleanResult | None:
        """Clean the compacted log with the largest dirty ratio above its
        ``min_cleanable_dirty_ratio``, with an offset map of ``dedupe_buffer_bytes``; None
        when no log needs it (the broker then waits ``log.cleaner.backoff.ms``).  Errors
        of the cleaning are logged, not raised."""
        now = now_ms if now_ms is not None else _time.now_ms()
        with self._lock:
            if self._stopping.is_set():
                return None
            candidates = []
            for log in self._manager.logs():
                key = (log.topic, log.partition)
                if (not log.config.compact or log.closed or key in self._in_progress
                        or key in self._uncleanable):
                    continue
                candidates.append(((key, log), self._range(log, now),
                                   log.config.min_cleanable_dirty_ratio))
            chosen = choose_filthiest(candidates)
            if chosen is None:
                return None
            key, log = chosen
            self._in_progress.add(key)
        return self._clean(log, dedupe_buffer_bytes, now)

    def clean_log(self, log: Log, dedupe_buffer_bytes: int = DEFAULT_DEDUPE_BUFFER_SIZE,
                  now_ms: int | None = None) -> CleanResult | None:
        """Clean ``log`` now, whatever its dirty ratio (for tests and tools); None when it
        is being cleaned already or has nothing cleanable."""
        now = now_ms if now_ms is not None else _time.now_ms()
        key = (log.topic, log.partition)
        with self._lock:
            if key in self._in_progress:
                return None
            self._in_progress.add(key)
        return self._clean(log, dedupe_buffer_bytes, now)

    def _clean(self, log: Log, dedupe_buffer_bytes: int, now: int) -> CleanResult | None:
        key = (log.topic, log.partition)
        try:
            rng = self._range(log, now)
            if rng.cleanable_bytes <= 0:
                return None
            cleaner = Cleaner(dedupe_buffer_bytes, should_stop=self._stopping.is_set,
                              on_step=self._on_step)
            outcome = cleaner.clean(log, rng, now)
            if outcome.complete:
                self._done(log, outcome.end_offset)
        except CleanerStoppedError:
            logger.info("%s-%d: cleaning abandoned (stopping)", *key)
            return None
        except Exception as exc:  # a corrupt batch, a full disk: Kafka's uncleanable log
            with self._lock:
                self._uncleanable.add(key)
                self._counters["failed_passes"] += 1
            logger.error("%s-%d: cleaning failed, the log is skipped until a restart: %r",
                         key[0], key[1], exc)
            return None
        finally:
            with self._lock:
                self._in_progress.discard(key)
        self._count(outcome.complete, outcome.stats)
        stats = outcome.stats
        logger.info(
            "%s-%d: cleaned offsets %d..%d in %.3f s: %d of %d records kept, %d -> %d bytes, "
            "%d segments into %d%s", key[0], key[1], rng.first_dirty_offset,
            outcome.end_offset - 1, (stats.ended_ms - stats.started_ms) / 1000,
            stats.records_written, stats.records_read, stats.bytes_read, stats.bytes_written,
            stats.segments_replaced, stats.segments_written,
            "" if outcome.complete else " (stopped early: the log changed meanwhile)")
        return CleanResult(key[0], key[1], rng.first_dirty_offset, outcome.end_offset,
                           outcome.complete, stats)

    def _range(self, log: Log, now: int) -> CleanableRange:
        # Nothing at or above the last stable offset (an undecided transaction; the high
        # watermark, which bounds it) is cleaned: the segment holding it stands in for the
        # active one.
        stable = log.last_stable_offset
        segments = log.segments
        facts = [SegmentFacts(s.base_offset, s.size, s.largest_timestamp) for s in segments]
        with self._checkpoint_lock:
            checkpoint = self._checkpoints.get((log.topic, log.partition))
        first = first_dirty_offset(checkpoint, log.log_start_offset, log.log_end_offset)
        return cleanable_range(facts, first, now, log.config.min_compaction_lag_ms, stable)

    def _done(self, log: Log, end_offset: int) -> None:
        """Record that ``log`` is clean below ``end_offset`` and write its log dir's
        checkpoint (if the log is still the manager's)."""
        key = (log.topic, log.partition)
        if self._manager.get_log(*key) is not log:
            return
        with self._checkpoint_lock:
            self._checkpoints[key] = end_offset
        self._write_checkpoint(self._manager.log_dir_of(*key))

    def _write_checkpoint(self, log_dir: str | None) -> None:
        if log_dir is None:
            return
        with self._checkpoint_lock:
            entries = {key: offset for key, offset in self._checkpoints.items()
                       if self._manager.log_dir_of(*key) == log_dir}
            try:
                _checkpoint_file(log_dir).write(entries)
            except OSError as exc:  # the old file stays: the next pass cleans more again
                logger.warning("%s: cannot write %s: %s", log_dir, CLEANER_CHECKPOINT_FILE, exc)

    def _count(self, complete: bool, stats: CleanerStats) -> None:
        with self._lock:
            c = self._counters
            c["passes"] += 1
            c["incomplete_passes"] += not complete
            c["bytes_read"] += stats.bytes_read + stats.map_bytes_read
            c["bytes_written"] += stats.bytes_written
            c["records_read"] += stats.records_read
            c["records_removed"] += stats.records_removed
            c["tombstones_removed"] += stats.tombstones_removed
            c["segments_replaced"] += stats.segments_replaced
            c["last_pass_ms"] = stats.ended_ms - stats.started_ms
            c["last_buffer_utilization"] = stats.buffer_utilization

    # -- the manager's hooks --------------------------------------------------------------

    def forget(self, topic: str, partition: int, log_dir: str | None) -> None:
        """A log was deleted: drop its checkpoint entry (a topic of that name may come back)."""
        key = (topic, partition)
        with self._lock:
            self._uncleanable.discard(key)
        with self._checkpoint_lock:
            known = self._checkpoints.pop(key, None) is not None
        if known:
            self._write_checkpoint(log_dir)

    def stop(self) -> None:
        """Make running and future passes give up (before their next swap)."""
        self._stopping.set()

    def resume(self) -> None:
        self._stopping.clear()

    # -- what an operator sees -------------------------------------------------------------

    def checkpoints(self) -> dict[PartitionKey, int]:
        """``{(topic, partition): first dirty offset}`` as checkpointed."""
        with self._checkpoint_lock:
            return dict(self._checkpoints)

    def dirty_ratios(self, now_ms: int | None = None) -> dict[PartitionKey, float]:
        """The dirty ratio of every compacted log now (from segment sizes: cheap)."""
        now = now_ms if now_ms is not None else _time.now_ms()
        return {(lg.topic, lg.partition): self._range(lg, now).dirty_ratio
                for lg in self._manager.logs() if lg.config.compact and not lg.closed}

    def statistics(self) -> dict[str, Any]:
        """Plain counters for metrics: passes (complete, incomplete, failed), bytes read and
        written, records read and removed, tombstones removed, segments replaced, the last
        pass's duration and map use, the logs in progress and uncleanable, and each
        compacted log's dirty ratio (``dirty_ratio``: ``{(topic, partition): ratio}``)."""
        with self._lock:
            out: dict[str, Any] = dict(self._counters)
            out["in_progress"] = sorted(self._in_progress)
            out["uncleanable"] = sorted(self._uncleanable)
        out["dirty_ratio"] = self.dirty_ratios()
        return out


def _checkpoint_file(log_dir: str) -> OffsetCheckpoint:
    return OffsetCheckpoint(os.path.join(log_dir, CLEANER_CHECKPOINT_FILE))
