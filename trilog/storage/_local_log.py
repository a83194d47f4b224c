"""``LocalLog``: the segment files of one partition's log (Kafka's ``LocalLog``).

Which segments there are, which one is written, how far they are fsynced, and every change
to that list: a roll, a truncation, a restart at an offset, taking out the oldest, the log
cleaner's swap.  What lies above the segments is ``Log``'s: the log start offset, the high
watermark, leader epochs and producers, the locks, and the snapshot readers work from.
Opening and recovery are ``_loader``'s.
"""

from __future__ import annotations

import logging
import threading
from bisect import bisect_right
from collections.abc import Iterator

from trilog.storage._config import LogConfig
from trilog.storage._loader import load_segments
from trilog.storage._segment import LogSegment, walk_batches

logger = logging.getLogger("trilog.storage")


class LocalLog:
    """The segments of one partition's log: ``<dir>/<20-digit base offset>.log|.index|.timeindex``.

    Invariants: ``segments`` is never empty and is ordered by base offset (``base_offsets``
    are theirs), its segments holding increasing offsets; only the last (``active``) grows;
    ``log_end_offset`` is one past the last offset written; ``recovery_point`` <=
    ``log_end_offset`` and everything below it has been fsynced, as has the directory
    unless ``dir_dirty``; ``roll_flush_offset`` (<= ``log_end_offset``) is where the latest
    roll started a segment: it asks for a flush up to there.

    Not thread-safe: ``Log`` calls it under its locks, as each method says: the append lock
    for every change; the delete lock too, taken before it, for those that take segments
    out of the list.  ``Log`` reads ``recovery_point`` and ``roll_flush_offset`` without a
    lock only where a value a moment old does no harm (the recovery-point checkpoint, the
    flush timer).  Readers never use it: they work from ``Log``'s published snapshot and
    read a segment through a descriptor of their own, so unlinking or closing a segment
    never makes them read another file.
    """

    def __init__(
        self, directory: str, config: LogConfig, recovery_point: int, needs_recovery: bool,
        *, guard: threading.Lock | None = None,
    ) -> None:
        self.directory = directory
        self.config = config
        #: The append lock, every segment's ``guard`` (the file cache's rule).
        self.guard = guard
        loaded = load_segments(directory, config, recovery_point, needs_recovery)
        self._set_segments(loaded.segments)
        self.log_end_offset = self.active.next_offset
        self.recovery_point = max(min(loaded.recovery_point, self.log_end_offset),
                                  self.base_offsets[0])
        self.dir_dirty = loaded.created
        self.roll_flush_offset = 0
        #: The base offset of the first segment the opening recovered, or None: the
        #: ``.txnindex`` files from there on are rebuilt with the producer state.
        self.first_recovered = loaded.first_recovered
        #: The producer snapshots the opening found (``ProducerSnapshots`` takes them).
        self.snapshot_offsets = loaded.snapshot_offsets
        #: Whether the directory held a leader-epoch checkpoint.
        self.epoch_checkpoint = loaded.epoch_checkpoint

    def _set_segments(self, segments: tuple[LogSegment, ...]) -> None:
        self.segments = segments
        self.base_offsets = tuple(s.base_offset for s in segments)
        self.active = segments[-1]
        guard = self.guard
        for segment in segments:
            segment.guard = guard

    def batch_epochs(self) -> Iterator[tuple[int, int]]:
        """``(partition_leader_epoch, base_offset)`` of every batch, oldest first (a walk of
        every header; while opening)."""
        for segment in self.segments:
            if not segment.size:
                continue
            for _pos, _size, header in walk_batches(segment.fd, 0, segment.size, chunk=1 << 20):
                yield header.partition_leader_epoch, header.base_offset
            segment.release_fd()  # (opening leaves no file open)

    def count_below(self, offset: int) -> int:
        """Under the append lock: how many of the oldest segments hold only offsets below
        ``offset`` (the next segment starts at or below it; never the active one)."""
        segments = self.segments
        n = 0
        while n < len(segments) - 1 and segments[n + 1].base_offset <= offset:
            n += 1
        return n

    def unflushed(self, target: int) -> tuple[LogSegment, ...]:
        """Under the append lock: the segments holding offsets in [``recovery_point``,
        ``target``), at least one."""
        bases, rp = self.base_offsets, self.recovery_point
        # Segment i covers [bases[i], bases[i+1]).
        lo = max(0, bisect_right(bases, rp) - 1)
        hi = max(lo + 1, bisect_right(bases, max(target - 1, rp)))
        return self.segments[lo:hi]

    # -- changes under the append lock ---------------------------------------------------

    def roll(self, base_offset: int) -> LogSegment:
        """Under the append lock: make a new active segment starting at ``base_offset``.
        On failure (e.g. a full disk) the old one stays active."""
        old = self.active
        new = LogSegment.create(self.directory, base_offset, self.config)
        try:
            old.on_become_inactive()
        except BaseException:
            new.delete()
            raise
        self._set_segments(self.segments + (new,))
        self.dir_dirty = True
        self.roll_flush_offset = base_offset
        logger.debug("%s: rolled new segment at offset %d", self.directory, base_offset)
        return new

    def drop_oldest(self, n: int) -> tuple[LogSegment, ...]:
        """Under the delete and append locks: take the ``n`` oldest segments out of the list
        (never the active one).  The caller deletes their files after releasing the append
        lock, still holding the delete lock; readers holding slices of them keep reading
        through their own descriptors."""
        if not n:
            return ()
        dead = self.segments[:n]
        self._set_segments(self.segments[n:])
        self.recovery_point = max(self.recovery_point, self.base_offsets[0])
        self.dir_dirty = True
        return dead

    def truncate_to(self, offset: int) -> None:
        """Under every lock: drop every batch holding offsets >= ``offset``, which lies
        above the first segment's base offset (whole batches: the log end offset becomes
        the end of the last batch kept); the segments starting at or after it are deleted."""
        segments = list(self.segments)
        while segments[-1].base_offset >= offset:
            segments.pop().delete()
        segments[-1].truncate_to(offset)
        self._set_segments(tuple(segments))
        self.log_end_offset = self.active.next_offset
        self._cut_back()

    def restart_at(self, offset: int) -> None:
        """Under every lock (or while opening): delete every segment and start empty at
        ``offset``."""
        for segment in self.segments:
            segment.delete()
        self._set_segments((LogSegment.create(self.directory, offset, self.config),))
        self.log_end_offset = offset
        self._cut_back()

    def _cut_back(self) -> None:
        """After the log end offset moved back: what was flushed above it is gone."""
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.roll_flush_offset = min(self.roll_flush_offset, self.log_end_offset)
        self.dir_dirty = True

    def holds_inactive_run(self, run: tuple[LogSegment, ...]) -> bool:
        """Under the append lock: ``run`` is a non-empty run of consecutive inactive
        segments."""
        segments = self.segments
        if not run or run[0] not in segments:
            return False
        i = segments.index(run[0])
        return segments[i : i + len(run)] == run and i + len(run) < len(segments)

    def replace(self, new: LogSegment, old: tuple[LogSegment, ...]) -> None:
        """Under the append lock, the delete lock held since ``holds_inactive_run(old)``:
        ``new`` takes the place of ``old`` in the list (the cleaner's swap)."""
        i = self.segments.index(old[0])
        self._set_segments(self.segments[:i] + (new,) + self.segments[i + len(old):])

    # -- closing -------------------------------------------------------------------------

    def close(self, sync: bool = True) -> OSError | None:
        """Under every lock, the log closed: write the indexes out (fsynced if ``sync``) and
        close every file.  Every file is closed even when an index write fails; the first
        such error is returned."""
        error: OSError | None = None
        for segment in self.segments:
            try:
                segment.flush_indexes(fsync=sync)
            except OSError as exc:
                error = error or exc
            segment.close()
        return error

    def close_handles(self) -> None:
        """Under the append lock, the log closed: close every descriptor without writing
        anything (what a crash leaves behind)."""
        for segment in self.segments:
            segment.close()
