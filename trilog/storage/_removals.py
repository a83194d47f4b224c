"""``SegmentRemovals``: the changes that take segments out of a partition's log.

Retention and DeleteRecords take them from the start (Kafka's ``deleteOldSegments`` and
``maybeIncrementLogStartOffset``), truncation from the end (``truncateTo``,
``truncateFullyAndStartAt``: a follower's), and the log cleaner's swap replaces a run in the
middle (``replaceSegments``).  ``LocalLog`` changes the segment list; these decide what goes
and keep the offsets, the leader-epoch cache, the producer state and its snapshots in step
with it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from trilog import _time
from trilog.errors import OffsetOutOfRangeError, PolicyViolationError
from trilog.storage._config import LogConfig
from trilog.storage._epochs import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochCache
from trilog.storage._files import fsync_dir
from trilog.storage._loader import CLEANED_SUFFIX, SWAP_SUFFIX
from trilog.storage._local_log import LocalLog
from trilog.storage._producer_load import ProducerStateLoad
from trilog.storage._producer_snapshot import ProducerSnapshots
from trilog.storage._producer_state import ProducerStateManager
from trilog.storage._retention import segments_to_delete
from trilog.storage._segment import LogSegment

logger = logging.getLogger("trilog.storage")


class SegmentRemovals:
    """The changes that take segments out of one partition's log, a base class of ``Log``.

    Each leaves ``Log``'s invariants whole: the first segment's base offset <= the log start
    offset <= the log end offset, the high watermark between them, leader epochs only for
    offsets the log holds (the checkpoint file may lag behind: opening cuts it again), and
    after a truncation no producer state, snapshot or aborted transaction from the batches
    cut (the state is built again from a snapshot at or below the new end, transactions
    whose markers were cut are open again); a reader holding a slice of a removed segment
    keeps its bytes (its own descriptor outlives the unlink).  Retention and DeleteRecords
    delete the producer snapshots below the new log start offset but the newest.

    Thread-safe, on ``Log``'s locks: each takes the delete lock first, so that a swap and a
    deletion never interleave on disk, and the append lock last.  Retention and
    DeleteRecords hold the append lock only to take segments out of the list and publish,
    and unlink their files after releasing it; truncation holds the flush lock and the
    append lock throughout (it cuts the segment appends go to); the swap takes the append
    lock only to check its run and to publish.  A base class rather than a part ``Log``
    holds, because these changes read and write most of ``Log``'s state (declared below)
    under all of its locks.
    """

    # Log's, set in Log.__init__.
    directory: str
    topic: str
    partition: int
    config: LogConfig
    _lock: threading.Lock
    _flush_lock: threading.Lock
    _delete_lock: threading.Lock  # taken before _flush_lock and _lock
    _closed: bool
    _local: LocalLog
    _log_start_offset: int
    _high_watermark: int
    _replicated: bool
    _epochs: LeaderEpochCache
    _producer_state: ProducerStateManager
    _snapshots: ProducerSnapshots
    _producer_load: ProducerStateLoad

    if TYPE_CHECKING:  # Log's too

        def _publish(self) -> None: ...

        def _load_producers(self, rebuild_from: int | None) -> ProducerStateLoad: ...

        def _check_open(self) -> None: ...

        def _close_handles(self) -> None: ...

    # -- from the start: retention and DeleteRecords -------------------------------------

    def delete_old_segments(self, now_ms: int | None = None) -> list[int]:
        """Apply ``retention_ms`` and ``retention_bytes`` (when ``cleanup_policy`` includes
        delete), and delete the segments wholly below the log start offset (always, as
        Kafka's ``deleteLogStartOffsetBreachedSegments``); return the deleted base offsets.

        Whole segments only, oldest first, never the active one, and in a ``replicated`` log
        none holding offsets at or above the high watermark (Kafka's rule).  Readers holding
        slices of a deleted segment keep reading (their descriptors outlive the unlink).
        """
        now = now_ms if now_ms is not None else _time.now_ms()
        config = self.config
        by_retention = config.delete and (config.retention_ms >= 0 or config.retention_bytes >= 0)
        with self._delete_lock:
            with self._lock:
                if self._closed:
                    return []
                local = self._local
                n = local.count_below(self._log_start_offset)
                if by_retention:
                    inactive = [(s.size, s.largest_timestamp) for s in local.segments[:-1]]
                    n = max(n, segments_to_delete(
                        inactive, local.active.size, now, config.retention_ms,
                        config.retention_bytes,
                    ))
                    if self._replicated:
                        n = min(n, local.count_below(self._high_watermark))
                dead = self._drop_oldest(n)
            for segment in dead:
                segment.delete()
            if dead:
                self._epochs_follow_log_start()
        deleted = [s.base_offset for s in dead]
        if not deleted:
            return []
        logger.info(
            "%s: retention deleted segments %s; log start offset now %d",
            self.directory,
            deleted,
            self._log_start_offset,
        )
        return deleted

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords (Kafka's ``maybeIncrementLogStartOffset``): make ``offset`` the log
        start offset, and delete at once the segments that lie wholly below it.

        ``offset`` -1 means the high watermark (as in Kafka's DeleteRecords request).  An
        offset at or below the log start offset changes nothing.  Afterwards reads below
        the new log start offset raise ``OffsetOutOfRangeError``, ``offset_for_timestamp``
        (ListOffsets EARLIEST) answers it, and records below it inside the first segment
        remain on disk but are never served.  The caller persists the new log start offset
        (``LogManager.delete_records_before`` writes ``log-start-offset-checkpoint``).

        Returns the log start offset after the call (Kafka's low watermark).  Raises
        ``OffsetOutOfRangeError`` (carrying the log start and end offsets) for an offset
        above the high watermark or below -1, ``PolicyViolationError`` when the log's
        ``cleanup_policy`` does not include delete (Kafka refuses DeleteRecords on a
        compact-only topic), and ``TrilogError`` when the log is closed.
        """
        if not self.config.delete:
            raise PolicyViolationError(
                f"records of {self.topic}-{self.partition} cannot be deleted: its "
                f"cleanup.policy is {','.join(sorted(self.config.cleanup_policy))}"
            )
        with self._delete_lock:
            with self._lock:
                self._check_open()
                hw = self._high_watermark
                target = hw if offset == -1 else offset
                if target < 0 or target > hw:
                    raise OffsetOutOfRangeError(
                        f"cannot delete records before offset {offset} of "
                        f"{self.topic}-{self.partition}: the high watermark is {hw}",
                        log_start_offset=self._log_start_offset,
                        log_end_offset=hw,
                    )
                if target <= self._log_start_offset:
                    return self._log_start_offset
                self._log_start_offset = target
                dead = self._drop_oldest(self._local.count_below(target))
                self._log_start_moved()
            for segment in dead:
                segment.delete()
            self._epochs_follow_log_start()
        logger.info("%s: log start offset moved to %d (DeleteRecords); %d segments deleted",
                    self.directory, target, len(dead))
        return target

    def _drop_oldest(self, n: int) -> tuple[LogSegment, ...]:
        """Under the delete lock and the lock: take the ``n`` oldest segments out of the
        published list (``LocalLog.drop_oldest``: the caller deletes their files after
        releasing the lock), the log start offset at least the new first segment's base."""
        dead = self._local.drop_oldest(n)
        if dead:
            self._log_start_offset = max(self._log_start_offset, self._local.base_offsets[0])
            self._log_start_moved()
        return dead

    def _log_start_moved(self) -> None:
        """Under the lock, after the log start offset moved up: the producer snapshots
        below it go (but the newest), markers below it are stable, publish."""
        self._snapshots.delete_below(self._log_start_offset)
        self._producer_state.on_log_start_offset(self._log_start_offset)
        self._publish()

    def _epochs_follow_log_start(self) -> None:
        """After the log start offset moved (not under the append lock: the checkpoint
        write fsyncs): drop or clamp the epochs before it.  A failed write is only logged:
        opening cuts the entries to the log start again."""
        try:
            self._epochs.truncate_from_start(self._log_start_offset)
        except OSError as exc:
            logger.warning("%s: cannot write %s: %s", self.directory,
                           LEADER_EPOCH_CHECKPOINT_FILE, exc)

    # -- from the end: truncation --------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Drop every batch holding offsets >= ``offset`` (whole batches: the log end offset
        becomes the end of the last batch kept).  Below the first segment the log is
        emptied and restarts at ``offset`` (``truncate_fully_and_start_at``); the log start
        offset becomes at most ``offset``.  The leader-epoch cache loses the epochs starting
        at or after the new log end, and the high watermark is at most the new log end
        (Kafka's ``truncateTo``).  Readers' open slices keep their bytes only up to the new
        end."""
        with self._delete_lock, self._flush_lock, self._lock:
            self._check_open()
            local = self._local
            if offset >= local.log_end_offset:
                return
            if offset <= local.base_offsets[0]:
                self._restart_at(offset)
            else:
                local.truncate_to(offset)
                self._log_start_offset = min(self._log_start_offset, local.log_end_offset)
            self._after_truncation()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the log empty at ``offset``, which becomes its
        log start and end offset and high watermark, whether it lies below or above the old
        log end (Kafka's ``truncateFullyAndStartAt``: a follower whose log end lies below the
        leader's log start).  The leader-epoch cache is emptied."""
        if offset < 0:
            raise ValueError(f"cannot start a log at offset {offset}")
        with self._delete_lock, self._flush_lock, self._lock:
            self._check_open()
            self._restart_at(offset)
            self._after_truncation()

    def _after_truncation(self) -> None:
        """Under every lock, after the segments were cut (``LocalLog`` brought its recovery
        point, pending roll flush and ``.txnindex`` entries down with them): the producer
        state built again for what is left (Kafka's ``truncateAndReload``), a new snapshot
        (which clamps the high watermark and the last stable offset), the epochs cut."""
        self._producer_load = self._load_producers(None)
        self._publish()
        # After the segments (Kafka's order): a crash in between leaves entries past the
        # log end, which opening removes.
        self._epochs.truncate_from_end(self._local.log_end_offset)

    def _restart_at(self, offset: int) -> None:
        """Under every lock (or while opening): delete every segment and start an empty log
        at ``offset`` (log start and end offsets and high watermark all ``offset``; no
        leader epochs)."""
        self._local.restart_at(offset)
        self._log_start_offset = self._high_watermark = offset
        self._epochs.clear()
        self._snapshots.delete_all()
        self._producer_state.reset()

    # -- in the middle: the log cleaner's swap -------------------------------------------

    def replace_segments(
        self,
        new: LogSegment,
        old: tuple[LogSegment, ...],
        on_step: Callable[[str], None] | None = None,
    ) -> bool:
        """Swap ``new`` in for ``old`` (Kafka's ``replaceSegments``, for the log cleaner).

        ``new`` is a segment written under ``.cleaned`` names (``LogSegment.create(...,
        suffix=".cleaned")``), flushed, with ``old[0]``'s base offset and ending with the last
        batch of ``old[-1]``; ``old`` a run of consecutive inactive segments of this log.  If
        they no longer are (retention, DeleteRecords or truncation took some meanwhile, or
        the log closed), ``new`` is deleted and False returned.  Otherwise: ``new`` is
        renamed to ``.swap`` names and the directory fsynced (the commit point: from here a
        crash completes the swap at the next start, see ``_loader``), ``old``'s files are
        unlinked, ``new`` takes its final names, the new segment list is published, and
        ``old``'s descriptors are closed.  Readers keep a consistent log throughout: until
        the publication they read ``old`` through its descriptors, and a slice taken before
        keeps its bytes.

        ``on_step(name)`` is called before each step ("swap", "unlink", "rename",
        "publish"): tests raise there to act out a crash.  A failure before the commit
        point leaves the log as it was; after it, the log is closed (as Kafka takes a log
        dir offline) and the next start completes the swap.
        """
        step = on_step or _no_step
        with self._delete_lock:
            with self._lock:
                replaceable = not self._closed and self._local.holds_inactive_run(old)
            if not replaceable:
                new.delete()
                return False
            committed = False
            try:
                step("swap")
                new.change_suffix(CLEANED_SUFFIX, SWAP_SUFFIX)
                fsync_dir(self.directory)
                committed = True
                step("unlink")
                for segment in old:
                    segment.unlink_files()
                step("rename")
                new.change_suffix(SWAP_SUFFIX, "")
                fsync_dir(self.directory)
                step("publish")
                with self._lock:
                    self._local.replace(new, old)
                    self._publish()
            except BaseException:
                if not committed:
                    new.delete()
                else:
                    logger.error("%s: the swap of cleaned segment %d failed after its commit "
                                 "point; closing the log (the next start completes the swap)",
                                 self.directory, new.base_offset)
                    new.close()
                    self._close_handles()
                raise
            for segment in old:
                segment.close()
        return True


def _no_step(_name: str) -> None:
    pass
