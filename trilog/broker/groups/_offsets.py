"""The offset manager: committed offsets as records of ``__consumer_offsets``, cached in memory.

Records are Kafka's (``GroupMetadataManager``), so the topic reads the same as Kafka's: an
offset-commit key and value per committed offset, a null value (tombstone) when it is
deleted.  ``trilog.protocol``'s ``_offsets_topic`` has their byte layout and codec.

A group's offsets live in partition ``abs(java hashCode(group)) % partitions`` (see
``partition_for``), led by the group's coordinator.  A partition is **loaded** (read from
its log start to its end, later records winning) before its groups are served; meanwhile
their requests get COORDINATOR_LOAD_IN_PROGRESS.

The topic is **compacted** (``cleanup.policy=compact``, as in Kafka): the broker's log
cleaner keeps only the latest record per key in the segments before the active one, and
drops tombstones after ``delete.retention.ms``.  The cleaner never changes what a load
reads back: offsets keep their order, and every key's latest record stays.

Appends to one partition are serialised by a trio lock (commits, tombstones), and the
cache takes them in the order they reached the log (``ApplyOrder``), so the cache and the
log agree.  They go through the replica manager's one append path, as a produce does (the
leader check, the leader epoch, the wake-up of the fetches parked on the partition, the
high watermark), with ``acks=-1`` as Kafka's commits (``offsets.commit.timeout.ms``): a
commit acknowledged to a client survives the loss of its coordinator.  A commit waits for the replicas without the lock (as Kafka's delayed
produce does), so the commits of one partition, where every member of a group commits, are
replicated together instead of one round trip after another; an expiry or a deletion
first waits for every earlier commit to reach the cache, which it reads.  Kafka's error
mapping applies: too few in-sync replicas or a timeout answer COORDINATOR_NOT_AVAILABLE (the
client retries), lost leadership NOT_COORDINATOR.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
import trio

from trilog._topic import PartitionKey
from trilog import _time
from trilog.broker.replication import AppendOrigin, Appended, ReplicaManager
from trilog.errors import (
    NO_ERROR,
    CoordinatorNotAvailableError,
    CorruptMessageError,
    InvalidCommitOffsetSizeError,
    InvalidFetchSizeError,
    KafkaStorageError,
    MessageTooLargeError,
    NotCoordinatorError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RecordListTooLargeError,
    RequestTimedOutError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from trilog.protocol import (
    OffsetAndMetadata,
    OffsetKey,
    OffsetsRecordError,
    decode_offset_value,
    decode_offsets_key,
    encode_offset_key,
    encode_offset_value,
)
from trilog.records import CorruptRecordsError, RecordBatch, RecordBatchBuilder, iter_batches
from trilog.storage import Log, LogConfig

log = logging.getLogger("trilog.broker.offsets")

OFFSETS_TOPIC = "__consumer_offsets"

#: Tombstone batches are cut at this size (well under ``message.max.bytes``).
TOMBSTONE_BATCH_BYTES = 256 * 1024
#: How much of the log one read takes while loading.
LOAD_READ_BYTES = 1 << 20


# -- the partition of a group -----------------------------------------------------------------


def java_string_hashcode(text: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units,
    as a signed 32-bit int."""
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % groupMetadataTopicPartitionCount``."""
    h = java_string_hashcode(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# -- the records --------------------------------------------------------------------------------


def build_batches(entries: Iterable[tuple[bytes, bytes | None]], now_ms: int,
                  max_bytes: int | None = TOMBSTONE_BATCH_BYTES) -> list[bytes]:
    """``(key, value or None)`` pairs as v2 batches of at most about ``max_bytes`` each
    (None: one batch)."""
    out = []
    builder = RecordBatchBuilder(max_bytes=max_bytes)
    for key, value in entries:
        if builder.append(now_ms, key, value) is None:
            out.append(builder.build())
            builder = RecordBatchBuilder(max_bytes=max_bytes)
            builder.append(now_ms, key, value)
    if len(builder):
        out.append(builder.build())
    return out


#: Offsets a transaction committed but did not end yet: producer id -> group -> offsets.
PendingOffsets = dict[int, dict[str, dict[PartitionKey, OffsetAndMetadata]]]


def log_batches(lg: Log) -> Iterator[RecordBatch]:
    """Blocking: every batch of ``lg`` from its log start to its end, each once, read
    ``LOAD_READ_BYTES`` at a time (what a coordinator's load replays)."""
    offset = lg.log_start_offset
    end = lg.log_end_offset
    while offset < end:
        with lg.read(offset, LOAD_READ_BYTES) as slc:
            data = slc.read()
        if not data:
            break
        for batch in iter_batches(data):
            if batch.next_offset <= offset:
                continue
            offset = batch.next_offset
            yield batch


def read_offsets(lg: Log) -> dict[str, dict[PartitionKey, OffsetAndMetadata]]:
    """Blocking: the committed offsets of a partition of the offsets topic (see
    ``read_offsets_and_pending``)."""
    return read_offsets_and_pending(lg)[0]


def read_offsets_and_pending(lg: Log) -> tuple[dict[str, dict[PartitionKey, OffsetAndMetadata]],
                                               PendingOffsets]:
    """Blocking: replay a partition of the offsets topic into ``{group: {tp: offset}}``, and
    the offsets of transactions not ended yet (TxnOffsetCommit: transactional batches, made
    visible by their producer's COMMIT marker, dropped by its ABORT).

    Later records win; tombstones delete; group-metadata records and records this broker
    cannot parse are skipped (with a warning for the latter)."""
    groups: dict[str, dict[PartitionKey, OffsetAndMetadata]] = {}
    pending: PendingOffsets = {}
    skipped = 0
    for batch in log_batches(lg):
        if batch.is_control_batch:
            marker = batch.end_txn_marker()
            done = pending.pop(batch.producer_id, {})
            if marker is not None and marker.is_commit:
                for group, offsets in done.items():
                    groups.setdefault(group, {}).update(offsets)
            continue
        target = (pending.setdefault(batch.producer_id, {}) if batch.is_transactional
                  else groups)
        try:
            records = batch.records()
        except CorruptRecordsError:
            skipped += batch.record_count
            records = []
        for record in records:
            try:
                _replay(target, record.key, record.value)
            except OffsetsRecordError:
                skipped += 1
    if skipped:
        log.warning("%s-%d: skipped %d records that are not offset commits of a known format",
                    lg.topic, lg.partition, skipped)
    return groups, pending


def _replay(groups: dict[str, dict[PartitionKey, OffsetAndMetadata]], key: bytes | None,
            value: bytes | None) -> None:
    """Apply one record of the offsets topic to ``groups``: set an offset, or delete it
    (tombstone).  Other records (group metadata, no key) change nothing."""
    decoded = None if key is None else decode_offsets_key(key)
    if not isinstance(decoded, OffsetKey):
        return
    tp = (decoded.topic, decoded.partition)
    if value is not None:
        groups.setdefault(decoded.group, {})[tp] = decode_offset_value(value)
    else:
        _forget(groups, decoded.group, tp)


def _forget(groups: dict[str, dict[PartitionKey, OffsetAndMetadata]], group: str,
            tp: PartitionKey) -> None:
    """Drop ``group``'s offset of ``tp``, and the group once it has none."""
    offsets = groups.get(group)
    if offsets is not None:
        offsets.pop(tp, None)
        if not offsets:
            del groups[group]


# -- the manager ----------------------------------------------------------------------------


@dataclass(eq=False)
class _Turn:
    ready: trio.Event = field(default_factory=trio.Event)
    finished: bool = False
    #: the cache change, made in this turn even if its task was cancelled meanwhile
    apply: Callable[[], None] | None = None


class ApplyOrder:
    """The order in which appends to one offsets partition reach its cache: the order they
    reached its log.  A commit waits for its in-sync replicas without the partition's lock
    (the next commit is appended meanwhile), so a later one may be replicated as early;
    each takes a turn when it appends and changes the cache in its turn."""

    def __init__(self) -> None:
        self._queue: deque[_Turn] = deque()

    def take(self) -> _Turn:
        turn = _Turn()
        self._queue.append(turn)
        if len(self._queue) == 1:
            turn.ready.set()
        return turn

    def finish(self, turn: _Turn) -> None:
        """``turn`` is done (or given up): the finished turns at the head make their cache
        changes, in order, and the next one that is not finished goes."""
        turn.finished = True
        queue = self._queue
        while queue and queue[0].finished:
            done = queue.popleft()
            if done.apply is not None:
                done.apply()
        if queue:
            queue[0].ready.set()

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Wait until every earlier append reached the cache, and hold the turn (an expiry
        or a deletion reads the cache to decide what to append)."""
        turn = self.take()
        try:
            await turn.ready.wait()
            yield
        finally:
            self.finish(turn)


@dataclass(eq=False)
class OffsetsPartition:
    """One partition of the offsets topic that this broker coordinates."""

    index: int
    loaded: bool = False
    offsets: dict[str, dict[PartitionKey, OffsetAndMetadata]] = field(default_factory=dict)
    #: the offsets of transactions not ended yet (TxnOffsetCommit), by producer id
    pending: PendingOffsets = field(default_factory=dict)
    #: markers that landed while the partition was loading (producer id -> commit): the
    #: load may have read the log before them, so it applies them when it is done
    ended_while_loading: dict[int, bool] = field(default_factory=dict)
    lock: trio.Lock = field(default_factory=trio.Lock)  # appends, in log order
    order: ApplyOrder = field(default_factory=ApplyOrder)  # cache changes, in log order


class OffsetManager:
    """Committed offsets of the groups whose offsets partitions this broker leads.

    Runs in the trio thread (not thread-safe); appends go through the replica manager's
    append path, loads to worker threads through ``limiter``.  ``begin_load``/``load``
    take a partition on, ``unload`` lets it go.
    """

    def __init__(self, replicas: ReplicaManager, limiter: trio.CapacityLimiter, *,
                 segment_bytes: int, retention_ms: int, commit_timeout_ms: int = 5000) -> None:
        self.replicas = replicas
        self.logs = replicas.logs
        self.limiter = limiter
        self.segment_bytes = segment_bytes
        self.retention_ms = retention_ms
        self.commit_timeout_s = commit_timeout_ms / 1000
        self.partitions: dict[int, OffsetsPartition] = {}

    @staticmethod
    def topic_config(base: LogConfig, segment_bytes: int) -> LogConfig:
        """The offsets topic's log settings: compacted by the log cleaner, never deleted by
        time or size."""
        return base.replace(segment_bytes=segment_bytes, retention_ms=-1, retention_bytes=-1,
                            cleanup_policy=frozenset({"compact"}))

    # -- ownership ----------------------------------------------------------------------------

    def owned(self) -> set[int]:
        return set(self.partitions)

    def is_loaded(self, partition: int) -> bool:
        part = self.partitions.get(partition)
        return part is not None and part.loaded

    def is_loading(self) -> bool:
        return any(not p.loaded for p in self.partitions.values())

    def begin_load(self, partition: int) -> None:
        """Mark the partition as ours and loading (its groups wait for ``load``)."""
        self.partitions.setdefault(partition, OffsetsPartition(partition))

    async def load(self, partition: int) -> None:
        part = self.partitions.get(partition)
        if part is None or part.loaded:
            await trio.lowlevel.checkpoint()
            return
        lg = self.logs.get_log(OFFSETS_TOPIC, partition)
        started = time.monotonic()
        async with part.lock:
            try:
                if lg is not None:
                    offsets, pending = await trio.to_thread.run_sync(
                        read_offsets_and_pending, lg, limiter=self.limiter)
                else:
                    offsets, pending = {}, {}
            except Exception:
                # Not this broker's to serve for now; the coordinator's watcher tries again.
                log.exception("loading %s-%d failed", OFFSETS_TOPIC, partition)
                if self.partitions.get(partition) is part:
                    del self.partitions[partition]
                return
            if self.partitions.get(partition) is not part:
                return  # unloaded meanwhile
            part.offsets = offsets
            part.pending = pending
            part.loaded = True
            for producer_id, commit in part.ended_while_loading.items():
                self.transaction_completed(partition, producer_id, commit)
            part.ended_while_loading.clear()
        log.info("loaded offsets of %d groups from %s-%d in %.3f s", len(offsets),
                 OFFSETS_TOPIC, partition, time.monotonic() - started)

    def unload(self, partition: int) -> None:
        self.partitions.pop(partition, None)

    # -- reads ---------------------------------------------------------------------------------

    def fetch(self, partition: int, group: str) -> dict[PartitionKey, OffsetAndMetadata]:
        part = self.partitions.get(partition)
        if part is None or not part.loaded:
            return {}
        return dict(part.offsets.get(group, {}))

    def pending_partitions(self, partition: int, group: str) -> set[PartitionKey]:
        """The partitions of ``group`` with offsets of a transaction not ended yet."""
        part = self.partitions.get(partition)
        if part is None:
            return set()
        return {tp for by_group in part.pending.values() for tp in by_group.get(group, ())}

    def groups(self) -> set[str]:
        """Every group with committed offsets in a loaded partition."""
        return {g for p in self.partitions.values() if p.loaded for g in p.offsets}

    def has_offsets(self, partition: int, group: str) -> bool:
        part = self.partitions.get(partition)
        return part is not None and bool(part.offsets.get(group))

    # -- writes --------------------------------------------------------------------------------

    async def commit(self, partition: int, group: str,
                     offsets: dict[PartitionKey, OffsetAndMetadata]) -> int:
        """Append the offsets, then cache them; return the error code for all of them."""
        part = self.partitions.get(partition)
        if part is None or not part.loaded:
            await trio.lowlevel.checkpoint()
            return NotCoordinatorError.code
        now = _time.now_ms()
        entries = [(encode_offset_key(group, t, p), encode_offset_value(om))
                   for (t, p), om in offsets.items()]
        async with part.lock:
            if self.partitions.get(partition) is not part:
                return NotCoordinatorError.code
            # One batch: the commit is all or nothing, as in Kafka.
            code, appended = await self._write(partition,
                                               build_batches(entries, now, max_bytes=None))
            if appended is None:
                return code
            turn = part.order.take()
        # The wait for the in-sync replicas holds no lock: commits of one partition (every
        # member of a group commits to the same one) are replicated together.
        try:
            code = await self._replicated(partition, appended)
            if code == NO_ERROR:  # (made in its turn even if this task is cancelled now)
                turn.apply = lambda: part.offsets.setdefault(group, {}).update(offsets)
            await turn.ready.wait()  # answered once the cache has it: read your writes
        finally:
            part.order.finish(turn)
        return code

    async def commit_transactional(self, partition: int, group: str, producer_id: int,
                                   producer_epoch: int,
                                   offsets: dict[PartitionKey, OffsetAndMetadata]) -> int:
        """TxnOffsetCommit: append the offsets as the producer's transactional batch; they
        stay pending (invisible to OffsetFetch) until its transaction's marker lands here
        (``transaction_completed``).  The error code for all of them."""
        part = self.partitions.get(partition)
        if part is None or not part.loaded:
            await trio.lowlevel.checkpoint()
            return NotCoordinatorError.code
        builder = RecordBatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch,
                                     base_sequence=0, is_transactional=True)
        now = _time.now_ms()
        for (t, p), om in offsets.items():
            builder.append(now, encode_offset_key(group, t, p), encode_offset_value(om))
        async with part.lock:
            if self.partitions.get(partition) is not part:
                return NotCoordinatorError.code
            code = await self._append(partition, [builder.build()])
            if code == NO_ERROR:
                part.pending.setdefault(producer_id, {}).setdefault(group, {}).update(offsets)
        return code

    def transaction_completed(self, partition: int, producer_id: int, commit: bool) -> None:
        """The marker of ``producer_id``'s transaction landed in ``partition``: its offsets
        become the committed ones (commit) or are dropped (abort)."""
        part = self.partitions.get(partition)
        if part is None:
            return
        if not part.loaded:
            part.ended_while_loading[producer_id] = commit
            return
        done = part.pending.pop(producer_id, {})
        if commit:
            for group, offsets in done.items():
                part.offsets.setdefault(group, {}).update(offsets)

    def has_pending(self, partition: int, group: str) -> bool:
        """Does a transaction not ended yet hold offsets of ``group``?"""
        part = self.partitions.get(partition)
        return part is not None and any(group in g for g in part.pending.values())

    async def expire(self, partition: int, now_ms: int,
                     has_members: Callable[[str], bool]) -> int:
        """Delete (tombstone) the offsets past their retention of groups without members;
        return how many."""
        part = self.partitions.get(partition)
        if part is None or not part.loaded:
            await trio.lowlevel.checkpoint()
            return 0
        async with part.lock, part.order.turn():
            expired: list[tuple[str, PartitionKey]] = []
            for group, offsets in part.offsets.items():
                if has_members(group):
                    continue
                for tp, om in offsets.items():
                    deadline = (om.expire_timestamp if om.expire_timestamp >= 0
                                else om.commit_timestamp + self.retention_ms)
                    if deadline <= now_ms:
                        expired.append((group, tp))
            if not expired:
                await trio.lowlevel.checkpoint()
                return 0
            entries = [(encode_offset_key(g, t, p), None) for g, (t, p) in expired]
            code = await self._append(partition, build_batches(entries, now_ms))
            if code != NO_ERROR:
                log.warning("could not write %d offset tombstones to %s-%d (error %d)",
                            len(expired), OFFSETS_TOPIC, partition, code)
                return 0
            for group, tp in expired:
                _forget(part.offsets, group, tp)
            log.info("expired %d offsets in %s-%d", len(expired), OFFSETS_TOPIC, partition)
            return len(expired)

    async def delete(self, partition: int, group: str,
                     partitions: Iterable[PartitionKey] | None = None) -> int:
        """Delete ``group``'s committed offsets of ``partitions`` (all of them when None):
        tombstones appended, then the cache forgets them.  Returns the error code
        (DeleteGroups, OffsetDelete); offsets not committed need nothing and are no error."""
        part = self.partitions.get(partition)
        if part is None or not part.loaded:
            await trio.lowlevel.checkpoint()
            return NotCoordinatorError.code
        async with part.lock, part.order.turn():
            if self.partitions.get(partition) is not part:
                return NotCoordinatorError.code
            offsets = part.offsets.get(group, {})
            doomed = list(offsets) if partitions is None else [
                tp for tp in dict.fromkeys(partitions) if tp in offsets]
            if not doomed:
                return NO_ERROR
            entries = [(encode_offset_key(group, t, p), None) for t, p in doomed]
            code = await self._append(partition, build_batches(entries, _time.now_ms()))
            if code != NO_ERROR:
                return code
            for tp in doomed:
                _forget(part.offsets, group, tp)
        log.info("deleted %d committed offsets of group %s", len(doomed), group)
        return NO_ERROR

    async def _append(self, partition: int, batches: list[bytes]) -> int:
        """Append ``batches`` and wait for the in-sync replicas: the answer's error code."""
        code, appended = await self._write(partition, batches)
        if appended is None:
            return code
        return await self._replicated(partition, appended)

    async def _write(self, partition: int, batches: list[bytes]
                     ) -> tuple[int, Appended | None]:
        """Append ``batches`` as one all-or-nothing write through the replica manager's
        append path (the caller holds the partition's lock): the error code, and the
        append to wait for."""
        tp = (OFFSETS_TOPIC, partition)
        appended = await self.replicas.append_records(
            {tp: b"".join(batches)}, acks=-1, origin=AppendOrigin.COORDINATOR)
        code = appended.results[tp].error
        if code != NO_ERROR:
            return _commit_error(code), None
        return NO_ERROR, appended

    async def _replicated(self, partition: int, appended: Appended) -> int:
        """Wait until every in-sync replica has the append (or ``offsets.commit.timeout.ms``
        passes): the answer's error code."""
        await appended.wait(trio.current_time() + self.commit_timeout_s)
        return _commit_error(appended.results[(OFFSETS_TOPIC, partition)].error)


#: What a commit answers when its append answered a code of the left (after Kafka's
#: ``GroupMetadataManager``): the client retries, or finds the coordinator again.
_COMMIT_ERRORS = {
    NotEnoughReplicasError.code: CoordinatorNotAvailableError.code,
    NotEnoughReplicasAfterAppendError.code: CoordinatorNotAvailableError.code,
    RequestTimedOutError.code: CoordinatorNotAvailableError.code,
    KafkaStorageError.code: CoordinatorNotAvailableError.code,  # a full or failing disk
    UnknownServerError.code: CoordinatorNotAvailableError.code,  # a closed log (shutdown)
    NotLeaderOrFollowerError.code: NotCoordinatorError.code,
    UnknownTopicOrPartitionError.code: NotCoordinatorError.code,
    MessageTooLargeError.code: InvalidCommitOffsetSizeError.code,
    RecordListTooLargeError.code: InvalidCommitOffsetSizeError.code,
    InvalidFetchSizeError.code: InvalidCommitOffsetSizeError.code,
    CorruptMessageError.code: UnknownServerError.code,  # our own batch: a bug, logged
}


def _commit_error(code: int) -> int:
    """The answer to a commit whose append answered ``code``."""
    return _COMMIT_ERRORS.get(code, code)
