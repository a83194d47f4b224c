"""``Log``: one partition's log, a list of segments of which only the last is written.

Append path (the broker's hot path): validate every batch of the buffer once from its
61-byte header (sizes, magic, counts, codec, CRC-32C; never a record: ``_append``), then
under the log's lock assign offsets by patching only each batch's 8-byte base offset
(``writev`` of the patched offsets and the untouched rest, or one copy for many-batch
buffers), roll if the active segment says so (``LogSegment.should_roll``), write with one
system call, index, and publish the new end.  Readers take no lock: they work from an
immutable ``LogSnapshot`` (segments, log end offset, committed size of the active segment)
that an append replaces in one assignment after its bytes are in the file.  Opening and
recovery are ``_loader``'s.

``Log`` is made of parts, each with its own job: ``LocalLog`` (``_local_log``, held) owns the
segment files and every change to their list; ``LogReader`` (``_reads``, a base class)
answers the reads from the published snapshot; ``SegmentRemovals`` (``_removals``, a base
class) takes segments out: retention, DeleteRecords, truncation, the cleaner's swap; the
producer state (``_producer_state``, held: idempotence and transactions) with its snapshots
(``_producer_snapshot``) and its building (``_producer_load``).  This module holds what ties
them together: opening, the append path, flushing, the high watermark, the last stable
offset and leader epochs, the locks, closing.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from trilog import _time
from trilog.errors import CorruptMessageError, RecordListTooLargeError, TrilogError
from trilog.records import CRC32C_HARDWARE
from trilog.storage._append import (
    OVERLAP_CRC_BYTES,
    AppendOrigin,
    Batches,
    OverlappedCrcCheck,
    ProducerBatch,
    WritePlan,
    assign_offsets,
    assign_offsets_stamped,
    batch_epochs,
    check_batches,
    keep_offsets,
    producer_batches,
)
from trilog.storage._config import NEVER, LogConfig
from trilog.storage._epochs import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    LeaderEpochCache,
    load_leader_epochs,
)
from trilog.storage._files import fsync_dir, remove_dir_durably
from trilog.storage._local_log import LocalLog
from trilog.storage._producer_load import ProducerStateLoad, load_producer_state
from trilog.storage._producer_snapshot import ProducerSnapshots, sync_files
from trilog.storage._producer_state import ProducerInfo, ProducerStateManager
from trilog.storage._reads import LogReader, LogSnapshot
from trilog.storage._removals import SegmentRemovals
from trilog.storage._segment import LogSegment

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

logger = logging.getLogger("trilog.storage")
_T = TypeVar("_T")

#: ``Log.cheap_append``: appends up to this size are a page-cache write of microseconds.
CHEAP_APPEND_BYTES = 64 * 1024
#: Larger appends up to this size are cheap too, with the hardware CRC-32C, while the event
#: loop's appends are quick: a MiB reaches the page cache in ~0.1-0.3 ms here, less than the
#: hop to a worker thread and back costs (~60 us of CPU and as much wall time: two thread
#: wake-ups; 13 % of a broker's CPU under librdkafka's 1 MB produce requests).  The event
#: loop times each append it makes (``INLINE_APPENDS.run``): one that held it over
#: ``SLOW_INLINE_APPEND_S`` (the kernel throttling writers while dirty pages go to disk, a
#: slow or failing disk) sends the larger ones back to worker threads for
#: ``SLOW_COOL_DOWN_S``; the first one after that tries again.
INLINE_APPEND_BYTES = 2 * 1024 * 1024
SLOW_INLINE_APPEND_S = 0.02
SLOW_COOL_DOWN_S = 10.0


class InlineAppends:
    """Whether appends larger than ``CHEAP_APPEND_BYTES`` may run on an event loop now, from
    how long the event loop's own appends took: one per process, as the page cache is."""

    __slots__ = ("slow_until",)

    def __init__(self) -> None:
        self.slow_until = 0.0  # perf_counter time before which large appends use threads

    def took(self, seconds: float) -> None:
        """An append on the event loop held it ``seconds``."""
        if seconds > SLOW_INLINE_APPEND_S:
            if self.fast():
                logger.info("an append held the event loop %.1f ms: appends over %d KiB go "
                            "to worker threads for %.0f s", seconds * 1000,
                            CHEAP_APPEND_BYTES // 1024, SLOW_COOL_DOWN_S)
            self.slow_until = time.perf_counter() + SLOW_COOL_DOWN_S

    def fast(self) -> bool:
        return time.perf_counter() >= self.slow_until

    def run(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)``: an append made on the event loop, timed (``took``)."""
        started = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.took(time.perf_counter() - started)


INLINE_APPENDS = InlineAppends()


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
    log_append_time: int  # the time the log stamped the batches with, or -1 (CreateTime)
    #: the batch repeats one its producer sent before (idempotence): nothing was appended,
    #: ``first_offset`` is where the first one went
    duplicate: bool = False


def parse_partition_dir_name(name: str) -> tuple[str, int]:
    """``"my-topic-3"`` -> ``("my-topic", 3)``; ``ValueError`` if it is not such a name."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit() or not partition.isascii():
        raise ValueError(f"{name!r} is not <topic>-<partition>")
    return topic, int(partition)


_new_tuple = tuple.__new__  # builds a named tuple without its Python-level __new__ (hot path)


def _refused_epoch(leader_epoch: int, assign_offsets: bool) -> ValueError:
    return ValueError(f"leader_epoch={leader_epoch} with assign_offsets={assign_offsets}: a "
                      "leader stamps an epoch >= 0, a follower keeps the batches' own")


_CLIENT = AppendOrigin.CLIENT


def _origin(assign_offsets: bool, origin: AppendOrigin) -> AppendOrigin:
    """Who appends: an append that keeps its offsets is REPLICATION, whatever is said."""
    if not assign_offsets:
        return AppendOrigin.REPLICATION
    if origin is AppendOrigin.REPLICATION:
        raise ValueError("a REPLICATION append keeps its offsets (assign_offsets=False)")
    return origin


class Log(LogReader, SegmentRemovals):
    """The log of one partition: ``<dir>/<20-digit base offset>.log|.index|.timeindex``.

    Invariants: the segments' own (``LocalLog``: ordered by base offset, holding increasing
    offsets, only the last one growing); the first segment's base offset <=
    ``log_start_offset`` <= ``log_end_offset`` (DeleteRecords may move the log start into a
    segment: what lies below it is never read again); ``log_end_offset`` is one past the
    last appended offset; ``recovery_point`` <= LEO and everything below it has been
    fsynced; a reader never sees part of an append nor bytes at or past the log end offset
    of its call.

    Replication (``replicated=True``, Kafka's ``UnifiedLog``): the ``high_watermark`` is set
    by its owner (``update_high_watermark``, ``maybe_increment_high_watermark``) and stays
    within [log start offset, LEO]; reads for consumers pass it as ``max_offset``; retention
    deletes no segment holding offsets at or above it.  Standalone (the default) the high
    watermark is the log end offset, as before replication.  Either way the log keeps a
    leader-epoch cache (``leader_epoch_cache``, ``<dir>/leader-epoch-checkpoint``) of the
    ``partition_leader_epoch`` its batches carry: appends that stamp a leader's epoch
    (``leader_epoch``) or keep a leader's batches (``assign_offsets=False``) add to it, and
    truncation, DeleteRecords and retention keep it in step with the log.  Batches written
    without an epoch (-1, a standalone broker's) add nothing.

    Transactions (Kafka's KIP-98): the producer state (``_producer_state``) is exact for
    every batch the log holds, built at opening from the newest snapshot
    (``<dir>/<offset>.snapshot``, written at each roll and at a clean close) and the headers
    after it, and kept by every append; ``last_stable_offset`` (<= the high watermark, >=
    the log start offset) is the first offset of the oldest transaction not yet decided (or
    whose marker is not yet below the high watermark), and each segment's ``.txnindex``
    holds the transactions aborted by markers in it (``aborted_transactions``).  Truncation
    rebuilds the state from a snapshot at or below the new end; retention keeps the newest
    snapshot and those at or above the log start offset.

    Thread-safe.  Appends, rolls, truncation, retention and close serialise on one lock
    (held for the write system call, never for an fsync); ``flush`` serialises with other
    flushes and takes the append lock only to snapshot and to publish the recovery point;
    ``read``, the offset lookups and ``end_offset_for_epoch`` take no lock at all
    (copy-on-write segment list and epoch entries).  The changes that delete segment files
    (retention, ``delete_records_before``, truncation, the log cleaner's
    ``replace_segments``) and ``close`` also serialise on a second lock, taken before the
    others and never by an append, so that a segment swap and a deletion never interleave
    on disk.  An append that starts a new epoch writes the leader-epoch checkpoint (an
    fsync) under the lock, before its bytes, as Kafka does: once per epoch.  The parts keep
    to these locks: ``LocalLog`` and the producer state change only under the append lock,
    ``LogReader`` takes none, ``SegmentRemovals`` says which of them it holds when.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        config: LogConfig | None = None,
        *,
        recovery_point: int = 0,
        needs_recovery: bool = True,
        topic: str | None = None,
        partition: int | None = None,
        log_start_offset: int = 0,
        replicated: bool = False,
        high_watermark: int | None = None,
        clean_shutdown: bool = False,
        listed: bool = False,
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
        self._delete_lock = threading.Lock()  # before _flush_lock and _lock (see above)
        self._closed = False
        if not listed:  # (``listed``: a log dir's listing found it, no syscall)
            os.makedirs(self.directory, exist_ok=True)
        self._unflushed_messages = 0
        self._first_unflushed_ms: int | None = None
        self._replicated = replicated
        self._epochs = LeaderEpochCache(None)  # until the segments are loaded
        self._producer_state = ProducerStateManager()
        # Held while opening: the segment file cache closes no file of this log meanwhile.
        with self._lock:
            self._open(recovery_point, needs_recovery, log_start_offset, high_watermark,
                       clean_shutdown and not needs_recovery)

    def _open(self, recovery_point: int, needs_recovery: bool, log_start_offset: int,
              high_watermark: int | None, clean_shutdown: bool) -> None:
        """While opening, under the append lock: the segments, the producer state, the
        leader epochs.  ``clean_shutdown``: the log was closed cleanly, so no producer
        snapshot means no producer (``close`` writes one whenever there is one)."""
        self._local = local = LocalLog(self.directory, self.config, recovery_point,
                                       needs_recovery, guard=self._lock)
        self._snapshots = ProducerSnapshots(self.directory, local.snapshot_offsets)
        self._log_start_offset = max(log_start_offset, local.base_offsets[0])
        restarted = self._log_start_offset > local.log_end_offset
        if restarted:
            # Segments were lost below a checkpointed log start (Kafka deletes them all).
            logger.warning("%s: log end offset %d is below the log start offset %d; "
                           "restarting the log there", self.directory, local.log_end_offset,
                           self._log_start_offset)
            self._restart_at(self._log_start_offset)
        # Standalone the high watermark follows the log end offset; replicated it starts
        # from the checkpointed one (or the log start offset) and _publish clamps it.
        self._high_watermark = self._log_start_offset if high_watermark is None else high_watermark
        if clean_shutdown and self._snapshots.latest is None:
            self._producer_state.reset()  # (no replay of every header: see close)
            self._producer_load = ProducerStateLoad(None, local.log_end_offset, 0, 0)
        else:
            self._producer_load = self._load_producers(local.first_recovered)
        self._publish()
        self._epochs = load_leader_epochs(
            self.directory, self._log_start_offset, local.log_end_offset, local.batch_epochs(),
            empty=local.log_end_offset == local.base_offsets[0], discard=restarted,
            none_if_missing=not self._replicated and not local.epoch_checkpoint)

    def _load_producers(self, rebuild_from: int | None) -> ProducerStateLoad:
        """Under every lock (or while opening): build the producer state from the newest
        snapshot at or below the log end (and ``rebuild_from``, from where the segments'
        ``.txnindex`` files are rebuilt) and the batch headers after it."""
        local = self._local
        return load_producer_state(
            self._producer_state, self._snapshots, local.segments, self._log_start_offset,
            local.log_end_offset, rebuild_from=rebuild_from, now_ms=_time.now_ms(),
            expiration_ms=self.config.producer_id_expiration_ms,
            high_watermark=self._high_watermark if self._replicated else None)

    def _publish(self) -> None:
        """Replace the readers' snapshot (one atomic attribute assignment), with the high
        watermark brought within [log start, log end] (standalone: the log end), and the
        last stable offset below it."""
        local = self._local
        leo = local.log_end_offset
        if self._replicated:
            self._high_watermark = hw = min(max(self._high_watermark, self._log_start_offset),
                                            leo)
            self._producer_state.on_high_watermark(hw)
        else:
            self._high_watermark = hw = leo
        self._snapshot = LogSnapshot(
            local.segments,
            local.base_offsets,
            self._log_start_offset,
            leo,
            hw,
            local.active.size,
            self._stable_offset(hw, self._log_start_offset),
        )

    def _stable_offset(self, high_watermark: int, log_start: int) -> int:
        """The last stable offset under ``high_watermark`` (see ``last_stable_offset``)."""
        first = self._producer_state.first_unstable_offset
        if first is None or first >= high_watermark:
            return high_watermark
        return first if first > log_start else log_start

    # -- properties ----------------------------------------------------------------------

    @property
    def replicated(self) -> bool:
        """Whether the high watermark is set by its owner rather than following the LEO."""
        return self._replicated

    @property
    def leader_epoch_cache(self) -> LeaderEpochCache:
        """The epochs of this log's batches (read it; the log changes it)."""
        return self._epochs

    @property
    def latest_epoch(self) -> int | None:
        """The latest leader epoch of the log (Kafka's ``latestEpoch``), or None."""
        return self._epochs.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(epoch, end_offset)`` for a follower whose latest epoch
        is ``epoch`` (``LeaderEpochCache.end_offset_for`` with this log's end offset):
        the largest epoch <= ``epoch`` this log knows and where it ends here, or
        ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)`` (-1, -1).  No lock."""
        return self._epochs.end_offset_for(epoch, self._snapshot.log_end_offset)

    @property
    def recovery_point(self) -> int:
        return self._local.recovery_point

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

    def cheap_append(self, nbytes: int) -> bool:
        """Would an append of ``nbytes`` be only a quick page-cache write (no fsync by
        message count; small, or up to ``INLINE_APPEND_BYTES`` with the hardware CRC while
        no recent inline append was slow)?  Callers on an event loop append those inline,
        not in a thread, through ``INLINE_APPENDS.run`` (which times them)."""
        if self.config.flush_interval_messages != NEVER:
            return False
        return nbytes <= CHEAP_APPEND_BYTES or (
            nbytes <= INLINE_APPEND_BYTES and CRC32C_HARDWARE and INLINE_APPENDS.fast())

    def append(
        self,
        buffer: ReadableBuffer,
        *,
        assign_offsets: bool = True,
        now_ms: int | None = None,
        leader_epoch: int | None = None,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> LogAppendInfo:
        """Append one or more v2 batches (e.g. a produce request's ``records``).

        Each batch is validated once; the append is all or nothing.  Raises
        ``CorruptMessageError`` for an empty buffer, garbage, a partial batch, a header that
        fails ``check_batch_header`` (not v2, counts that disagree, an unknown codec) or
        a CRC mismatch, and ``MessageTooLargeError`` for a batch above ``max_message_bytes``
        or an append above ``segment_bytes``.  The log assigns the offsets, and then wants
        Kafka's producer rule (at least one record, one offset per record); with
        ``assign_offsets=False`` (replication, tests) the batches keep their offsets, which
        must increase from the log end offset.  Flushes when ``flush_interval_messages``
        messages are unflushed.

        With ``message_timestamp_type`` LogAppendTime, batches whose offsets the log assigns
        are stamped with the append time (``now_ms``; Kafka's rule: ``log_append_time`` of
        the answer); batches with kept offsets are stored as they come.

        Leader epochs: with ``leader_epoch`` (a leader's append) each batch's
        ``partition_leader_epoch`` is set to it and the cache records it, if new; with
        ``assign_offsets=False`` (a follower's) the cache records the batches' own (-1
        skipped), and ``leader_epoch`` is refused (``ValueError``), as is a negative one.

        Producers (``_producer_state``), by ``origin``: a CLIENT may not append control
        batches (``InvalidRecordError``); its sequence numbers are checked, and a batch it
        resent is not appended (the answer says where it went: ``duplicate``); a
        COORDINATOR's markers and transactional offset commits are checked for producer and
        coordinator epochs only; ``assign_offsets=False`` is REPLICATION, not checked.
        Refusals: ``OutOfOrderSequenceNumberError``, ``InvalidProducerEpochError``,
        ``InvalidTxnStateError``, ``TransactionCoordinatorFencedError``.  Every append is
        recorded: transactions open and close, aborts reach the ``.txnindex``.
        """
        if leader_epoch is not None and (not assign_offsets or leader_epoch < 0):
            raise _refused_epoch(leader_epoch, assign_offsets)
        mv = memoryview(buffer)
        if mv.itemsize != 1 or mv.ndim != 1:
            mv = mv.cast("B")
        config = self.config
        stamp = assign_offsets and config.log_append_time
        # Else the CRCs are checked beside the write; a stamped batch gets a new CRC, so its
        # own is checked before.
        small = stamp or len(mv) < OVERLAP_CRC_BYTES
        batches = check_batches(mv, config.max_message_bytes, assign_offsets, small)
        if len(mv) > config.segment_bytes:
            raise RecordListTooLargeError(
                f"append of {len(mv)} bytes exceeds the segment size {config.segment_bytes}"
            )
        if origin is not _CLIENT or not assign_offsets:
            origin = _origin(assign_offsets, origin)
        pbatches = producer_batches(mv, batches, assign_offsets, origin)  # None: no producer
        crc_check = None if small else OverlappedCrcCheck(mv, batches)
        now = now_ms if now_ms is not None else _time.now_ms()
        try:
            with self._lock:
                if pbatches is not None:
                    duplicate_of = self._producer_state.check_batches(pbatches, origin)
                    if duplicate_of is not None:  # resent: answered with its first offset
                        return self._duplicate(duplicate_of)
                plan, log_start, flush_now = self._append_locked(
                    mv, batches, assign_offsets, now, crc_check, stamp, leader_epoch, pbatches
                )
        finally:
            if crc_check is not None:
                crc_check.release()
        if flush_now:
            self.flush()
        _data, _infos, first, last, records, max_ts, offset_of_max_ts = plan
        return _new_tuple(  # without LogAppendInfo's Python-level __new__
            LogAppendInfo,
            (first, last, last + 1, max_ts, offset_of_max_ts, records, len(batches), len(mv),
             log_start, now if stamp else -1, False),
        )

    def _duplicate(self, first_offset: int) -> LogAppendInfo:
        """The answer to a batch its producer resent: its first offset, nothing appended."""
        leo = self._local.log_end_offset
        return LogAppendInfo(first_offset, first_offset, leo, -1, -1, 0, 0, 0,
                             self._log_start_offset, -1, True)

    def _append_locked(
        self,
        mv: memoryview,
        batches: Batches,
        assign: bool,
        now: int,
        crc_check: OverlappedCrcCheck | None,
        stamp: bool = False,
        leader_epoch: int | None = None,
        pbatches: list[ProducerBatch] | None = None,
    ) -> tuple[WritePlan, int, bool]:
        """Under the lock: offsets, epochs, roll, write, producers, publish.  Return the plan
        written, the log start offset, and whether ``flush_interval_messages`` asks for a
        flush now."""
        if self._closed:
            raise TrilogError(f"append to closed log {self.directory}")
        local = self._local
        leo = local.log_end_offset
        if stamp:
            plan = assign_offsets_stamped(mv, batches, leo, now, leader_epoch)
        elif assign:
            plan = assign_offsets(mv, batches, leo, leader_epoch)
        else:
            plan = keep_offsets(mv, batches)
        data, infos, first, last, records, _max_ts, _offset_of_max_ts = plan
        if first < leo:
            raise CorruptMessageError(f"append at offset {first} below the log end offset {leo}")
        # The epochs reach their checkpoint before the bytes reach the segment (Kafka's
        # order): the file never lacks an epoch the log holds.
        if leader_epoch is not None:
            epochs_changed = self._epochs.assign(leader_epoch, first)
        elif not assign:
            epochs_changed = self._epochs.assign_all(
                [(e, base) for e, base in batch_epochs(mv, batches) if e >= 0])
        else:
            epochs_changed = False
        try:
            segment = local.active
            if segment.should_roll(len(mv), last, now, self.config):
                segment = self._roll(first)
                if segment.would_overflow_index(last):  # (should_roll checked the old one)
                    raise CorruptMessageError(
                        "append spans more offsets than a segment can index")
            segment.append(data, len(mv), infos, now,
                           None if crc_check is None else crc_check.verify)
        except BaseException:
            if epochs_changed:
                try:
                    self._epochs.truncate_from_end(leo)  # no entry for bytes never written
                except OSError as exc:  # opening cuts it off again
                    logger.warning("%s: cannot write %s: %s", self.directory,
                                   LEADER_EPOCH_CHECKPOINT_FILE, exc)
            raise
        local.log_end_offset = last + 1
        segments, bases, log_start, old_leo, hw, _size, lso = self._snapshot
        if not self._replicated:
            hw = self._high_watermark = last + 1
        if pbatches is not None:  # before the publication: the new LSO goes with the new end
            for aborted in self._producer_state.apply(pbatches, first if assign else 0,
                                                      hw if self._replicated else None):
                segment.txn_index.append(aborted)
            lso = self._stable_offset(hw, log_start)
        elif lso == old_leo:
            lso = hw  # nothing was unstable, and nothing became so
        else:
            lso = self._stable_offset(hw, log_start)
        self._snapshot = _new_tuple(  # LogSnapshot without its Python-level __new__ (hot path)
            LogSnapshot, (segments, bases, log_start, last + 1, hw, segment.size, lso)
        )
        self._unflushed_messages += records
        if self._first_unflushed_ms is None:
            self._first_unflushed_ms = now
        flush_now = self._unflushed_messages >= self.config.flush_interval_messages
        return plan, log_start, flush_now

    def roll(self) -> int:
        """Start a new segment now (if the active one holds data); return its base offset."""
        with self._lock:
            self._check_open()
            local = self._local
            if local.active.size > 0:
                self._roll(local.log_end_offset)
            return local.active.base_offset

    def _roll(self, base_offset: int) -> LogSegment:
        """Under the lock: make a new active segment starting at ``base_offset``, snapshot
        the producer state there (the state of every batch below it; fsynced by the next
        flush, which the roll asks for), and publish it."""
        segment = self._local.roll(base_offset)
        self._snapshots.write(base_offset, self._producer_state.snapshot_entries())
        self._publish()
        return segment

    def _check_open(self) -> None:
        if self._closed:
            raise TrilogError(f"log {self.directory} is closed")

    # -- flushing ------------------------------------------------------------------------

    def flush(self, offset: int | None = None) -> None:
        """fsync the segments holding offsets below ``offset`` (default: the log end
        offset) and their indexes, then advance ``recovery_point``.  Does not block appends
        for the duration of the fsync."""
        with self._flush_lock:
            with self._lock:
                if self._closed:
                    return
                local = self._local
                leo = local.log_end_offset
                target = leo if offset is None else min(offset, leo)
                if target <= local.recovery_point and not local.dir_dirty:
                    return  # (a roll's snapshot waits: a roll makes the directory dirty)
                dirty = local.unflushed(target)
                full = target == leo
                messages = self._unflushed_messages if full else 0
                dir_dirty, local.dir_dirty = local.dir_dirty, False
                snapshots = self._snapshots.take_unsynced()
                started = _time.now_ms()
            for segment in dirty:
                segment.flush()
            sync_files(self.directory, snapshots)
            if dir_dirty:
                fsync_dir(self.directory)
            with self._lock:
                local.recovery_point = max(local.recovery_point, target)
                if full:
                    self._unflushed_messages -= messages
                    self._first_unflushed_ms = started if self._unflushed_messages else None

    def flush_due(self, now_ms: int | None = None) -> bool:
        """Whether ``maybe_flush`` has work: unflushed data older than
        ``flush_interval_ms``, or a rolled segment not yet fsynced."""
        local = self._local
        if local.roll_flush_offset > local.recovery_point:
            return True
        interval = self.config.flush_interval_ms
        first = self._first_unflushed_ms
        if interval is None or first is None:
            return False
        return (now_ms if now_ms is not None else _time.now_ms()) - first >= interval

    def maybe_flush(self, now_ms: int | None = None) -> bool:
        """Flush what the time policy (``flush_interval_ms``) or a roll asks for; return
        whether anything was flushed.  The broker's flush timer calls this (through
        ``LogManager.flush_due_logs``)."""
        interval = self.config.flush_interval_ms
        first = self._first_unflushed_ms
        now = now_ms if now_ms is not None else _time.now_ms()
        if interval is not None and first is not None and now - first >= interval:
            self.flush()
            return True
        local = self._local
        if local.roll_flush_offset > local.recovery_point:
            self.flush(local.roll_flush_offset)
            return True
        return False

    # -- replication: the high watermark and leader epochs -------------------------------

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark to ``offset`` brought within [log start offset, log end
        offset] (Kafka's ``updateHighWatermark``: a follower takes the leader's, which may lie
        past its own log end); return the new high watermark.  ``TrilogError`` unless the
        log is ``replicated`` (a standalone log's high watermark is its log end offset)."""
        with self._lock:
            self._check_replicated()
            self._high_watermark = offset
            self._publish()
            return self._high_watermark

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """Move the high watermark forward to ``offset`` (at most the log end offset), never
        back (Kafka's ``maybeIncrementHighWatermark``: a leader's, from its ISR's log end
        offsets); return whether it moved.  ``TrilogError`` unless ``replicated``."""
        with self._lock:
            self._check_replicated()
            old = self._high_watermark
            if offset <= old:
                return False
            self._high_watermark = offset
            self._publish()
            return self._high_watermark > old

    def _check_replicated(self) -> None:
        if not self._replicated:
            raise TrilogError(f"{self.topic}-{self.partition} is not replicated: its high "
                              "watermark is its log end offset")

    def assign_epoch_start_offset(self, epoch: int, start_offset: int | None = None) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` (default: the log end offset) in
        the leader-epoch cache (Kafka's ``maybeAssignEpochStartOffset``, which a broker calls
        on becoming leader, so that OffsetForLeaderEpoch knows its epoch before its first
        append); return whether the cache changed.  ``ValueError`` for a negative epoch."""
        with self._lock:
            self._check_open()
            start = self._local.log_end_offset if start_offset is None else start_offset
            return self._epochs.assign(epoch, start)

    # -- producers and transactions ------------------------------------------------------

    def producers(self) -> list[ProducerInfo]:
        """The producers this log knows (Kafka's ``activeProducers``, what DescribeProducers
        answers), least recently written first."""
        with self._lock:
            return [entry.info() for entry in self._producer_state.entries()]

    def ongoing_transactions(self) -> list[tuple[int, int]]:
        """``(first_offset, producer_id)`` of each transaction open in this log, oldest
        first (the first one is what holds the last stable offset back)."""
        with self._lock:
            return self._producer_state.ongoing_transactions()

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Forget the producers that have not written for ``producer_id_expiration_ms``
        and have no transaction open (Kafka's ``removeExpiredProducers``, which the broker
        runs every ``producer.id.expiration.check.interval.ms``); return how many went."""
        now = now_ms if now_ms is not None else _time.now_ms()
        with self._lock:
            return self._producer_state.remove_expired(
                now, self.config.producer_id_expiration_ms)

    # -- closing -------------------------------------------------------------------------

    def close(self, *, sync: bool = True) -> None:
        """Flush everything, write the final index entries and a producer state snapshot at
        the log end offset, close every file.  ``sync=False``: nothing is fsynced (the
        caller syncs the whole file system, then calls ``synced``).

        Every file is closed even when the flush fails (a full or failing disk); the first
        such error is raised afterwards, so the caller knows this log needs recovery."""
        with self._delete_lock, self._flush_lock, self._lock:
            if self._closed:
                return
            self._local.active.seal_time_index()
        error: OSError | None = None
        try:
            if sync:
                self.flush()
        except OSError as exc:
            error = exc
        with self._delete_lock, self._flush_lock, self._lock:
            if self._closed:
                return
            self._closed = True
            # The producer state at the log end: the next opening replays nothing.  Not
            # fsynced (two fsyncs a log would slow a broker's shutdown): one a power loss
            # tears fails its CRC, and the opening replays from the roll's snapshot.
            error = error or self._snapshot_at_close()
            closing_error = self._local.close(sync)  # closes every file whatever happened
            error = error or closing_error
        if error is not None:
            raise error

    def synced(self) -> None:
        """After ``close(sync=False)``: the caller synced the file system, so everything
        written is durable (the recovery point moves to the log end offset)."""
        with self._lock:
            local = self._local
            local.recovery_point = max(local.recovery_point, local.log_end_offset)

    def _snapshot_at_close(self) -> OSError | None:
        """Under every lock, closing: the producer state at the log end, unless a snapshot
        there is already written (nothing was appended since) or there is no producer and
        no snapshot at all (an opening after a clean shutdown then knows there is none:
        Kafka's rule too).  An error if it cannot be written: the opening after a clean
        shutdown trusts it, so the caller must not call this shutdown clean."""
        snapshots = self._snapshots
        leo = self._local.log_end_offset
        if leo in snapshots.offsets:
            return None
        entries = list(self._producer_state.snapshot_entries())
        if not entries and snapshots.latest is None:
            return None
        snapshots.write(leo, entries)
        if leo not in snapshots.offsets:
            return OSError(f"{self.directory}: cannot write the producer snapshot at {leo}")
        return None

    def _close_handles(self) -> None:
        """Close every descriptor without flushing anything: what a crash leaves behind
        (for tests; the data already written stays in the files)."""
        with self._lock:
            self._closed = True
            self._local.close_handles()

    def delete(self) -> None:
        """Close and remove the whole partition directory (renamed to ``*.deleted`` first,
        so a crash halfway leaves a name the next start removes).  Waits for a swap of
        the log cleaner in progress."""
        with self._delete_lock:
            self._close_handles()
            remove_dir_durably(self.directory)

