"""The partitions this broker holds, and the one path that appends to them (Kafka's
``ReplicaManager``).

**One append path.**  Every write to a partition's log goes through here: a client's produce
and the group coordinator's offset commits (``append_records``, Kafka's ``appendRecords``)
and a follower's copy of its leader's batches (``append_as_follower``).  Each append is
checked the same way (the partition exists and is led here, internal topics are the
coordinators' only, ``min.insync.replicas`` for ``acks=all``), stamped with the leader
epoch, written by ``Log.append`` (which checks the idempotent producers' sequences under the
log's lock: ``storage/_producer_state.py``), and then wakes the fetches parked on the
partition and moves the high watermark.  The appends of one request are written in one go:
on the event loop when they are a quick page-cache write (``Log.cheap_append``), else in one
hop to a worker thread.  An ``acks=all`` append is answered once every in-sync replica has
it (``Appended.wait``, Kafka's ``DelayedProduce``): the high watermark passed its records,
or the request's timeout did.

**Where partitions come from.**  In a ZooKeeper cluster the controller says
(``_leadership.py``: LeaderAndIsr makes this broker a partition's leader or follower);
standalone, ``LocalReplicaManager`` leads every partition of the log dirs as their only
replica (high watermark = log end, nothing to wait for), so the APIs that append have no
standalone branch.

**The leader's side.**  A follower's fetch offset is its log end (``follower_fetched``): the
high watermark moves to the smallest log end of the in-sync replicas, a follower that caught
up joins the ISR, one that has not for ``replica.lag.time.max.ms`` leaves it.  An ISR change
is written through the ``IsrChannel`` (ZooKeeper's conditional write, then the controller is
told: ``_isr.py``) before it is adopted here.

Runs in the trio thread; log I/O goes to worker threads (or runs inline, timed).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple, Protocol

import trio

from trilog._topic import PartitionKey
from trilog import _time
from trilog._topic import validate_topic_name
from trilog.broker._limits import RateLimitedLog
from trilog.broker.cluster import INTERNAL_TOPICS
from trilog.broker.replication._partition import FollowerState, Partition
from trilog.errors import (
    NO_ERROR,
    ApiError,
    CorruptMessageError,
    KafkaStorageError,
    NotEnoughReplicasAfterAppendError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
    UnsupportedCodecError,
    UnsupportedCompressionTypeError,
)
from trilog.records import MAGIC_OFFSET, legacy_to_v2
from trilog.storage import CHEAP_APPEND_BYTES, INLINE_APPENDS, AppendOrigin  # (re-exported)

if TYPE_CHECKING:
    from trilog.broker.replication._purgatory import FetchPurgatory
    from trilog.storage import Log, LogAppendInfo, LogManager

#: What a partition's records come as: a request's view of its frame, or bytes built here.
Buffer = bytes | bytearray | memoryview

#: Builds a named tuple without its Python-level ``__new__`` (the append path's results).
_new_tuple = tuple.__new__

log = logging.getLogger("trilog.broker.replicas")
#: A full disk fails every append: one log line per partition and minute.
_storage_faults = RateLimitedLog(log, 60.0)


#: how often the ISR check looks at the clock, to notice this broker's own stalls
STALL_TICK_S = 0.25
#: a tick this much later than asked for is a stall of the broker (a pause, starvation);
#: at most a quarter of ``replica.lag.time.max.ms``
STALL_MS = 1000


def stall_ms(previous_s: float, now_s: float, tick_s: float, threshold_ms: float) -> int:
    """How long the loop stood still between two ticks ``tick_s`` apart that were seen at
    ``previous_s`` and ``now_s`` (0 when the lateness is below ``threshold_ms``)."""
    late = int((now_s - previous_s - tick_s) * 1000)
    return late if late >= threshold_ms else 0


class AppendResult(NamedTuple):
    """One partition's answer to an append."""

    error: int = NO_ERROR
    base_offset: int = -1
    log_start_offset: int = -1
    log_append_time: int = -1  # the time LogAppendTime stamped, or -1
    end_offset: int = -1  # the log end offset after the append (acks=all waits for it)
    size: int = 0  # bytes appended (0 for a duplicate)
    records: int = 0

    @classmethod
    def of(cls, info: LogAppendInfo) -> AppendResult:
        result: AppendResult = _new_tuple(cls, (
            NO_ERROR, info.first_offset, info.log_start_offset, info.log_append_time,
            info.log_end_offset, info.size_in_bytes, info.record_count))
        return result


class ClusterView(Protocol):
    """What the replica manager asks of the broker's cluster view."""

    def leader(self, topic: str, partition: int) -> int | None: ...

    def min_insync_replicas(self, topic: str) -> int: ...


class IsrChannel(Protocol):
    """Where a leader's ISR changes go (ZooKeeper's partition state, then the controller)."""

    async def write(self, part: Partition, isr: tuple[int, ...]) -> int | None:
        """Write ``isr`` conditionally on ``part.zk_version``; the new version, or None
        when it was not written (a newer state won, or the store is away)."""
        ...

    async def announce(self, part: Partition) -> None:
        """``part``'s ISR was adopted here: tell the cluster."""
        ...


def partition_error(exc: Exception, what: str, topic: str, partition: int) -> int:
    """The error code of one partition whose ``what`` (append, read...) raised ``exc``;
    call it from the ``except`` block.  A full or failing disk is logged once a minute per
    partition (the next request tries again)."""
    if isinstance(exc, ApiError):
        return exc.code
    if isinstance(exc, UnsupportedCodecError):
        return UnsupportedCompressionTypeError.code
    if isinstance(exc, OSError):
        _storage_faults.error((topic, partition), "%s of %s-%d failed: %s", what, topic,
                              partition, exc)
        return KafkaStorageError.code
    log.exception("%s of %s-%d failed", what, topic, partition)
    return UnknownServerError.code


def is_legacy(records: Buffer) -> bool:
    """Is ``records`` an old client's message set (magic 0 or 1), converted to v2 first?"""
    return len(records) > MAGIC_OFFSET and records[MAGIC_OFFSET] < 2


class _Write(NamedTuple):
    """One partition's part of an append: a leader's (offsets assigned, ``leader_epoch``
    stamped) or a follower's (the leader's offsets and epochs kept)."""

    tp: PartitionKey
    log: Log
    records: Buffer
    leader_epoch: int | None
    follower: bool = False
    #: who appends (a client may not write control batches; the coordinator's markers may)
    origin: AppendOrigin = AppendOrigin.CLIENT


class Appended:
    """What ``append_records`` did, partition by partition (``results``), and the wait of an
    ``acks=all`` append for its in-sync replicas (Kafka's ``DelayedProduce``)."""

    def __init__(self, manager: ReplicaManager, results: dict[PartitionKey, AppendResult],
                 acks: int) -> None:
        self.results = results
        self._manager = manager
        self._waiting = {tp: r.end_offset for tp, r in results.items()
                         if acks == -1 and r.error == NO_ERROR}

    def settled(self) -> bool:
        """Settle what needs no wait; True when nothing is left to wait for."""
        for tp, end in list(self._waiting.items()):
            code = self._manager.replication_error(tp, end)
            if code is not None:
                self._settle(tp, code)
        return not self._waiting

    async def wait(self, deadline: float) -> None:
        """Wait until every in-sync replica has each partition's records, or ``deadline``
        (trio time) passes; ``results`` then holds the answers."""
        for tp, end in list(self._waiting.items()):
            self._settle(tp, await self._manager.wait_replicated(tp, end, deadline))
        await trio.lowlevel.checkpoint()

    def _settle(self, tp: PartitionKey, code: int) -> None:
        del self._waiting[tp]
        if code != NO_ERROR:
            self.results[tp] = AppendResult(code)


class ReplicaManager:
    """The replicas this broker holds in a cluster (see the module docstring)."""

    def __init__(self, broker_id: int, logs: LogManager, purgatory: FetchPurgatory,
                 limiter: trio.CapacityLimiter, cluster: ClusterView, *,
                 message_max_bytes: int, lag_max_ms: int = 30_000,
                 isr_channel: IsrChannel | None = None) -> None:
        self.broker_id = broker_id
        self.logs = logs
        self.purgatory = purgatory
        self.limiter = limiter
        self.cluster = cluster
        self.message_max_bytes = message_max_bytes
        self.lag_max_ms = lag_max_ms
        self.isr_channel = isr_channel
        self.partitions: dict[PartitionKey, Partition] = {}
        self._nursery: trio.Nursery | None = None  # ISR writes run here (run())

    async def run(self) -> None:
        """The leader's background work: ISR writes, and shrinking ISRs that lag."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._shrink_isr_periodically)

    # -- which partitions --------------------------------------------------------------------

    def partition(self, tp: PartitionKey) -> Partition | None:
        return self.partitions.get(tp)

    def is_leader(self, tp: PartitionKey) -> bool:
        part = self.partition(tp)
        return part is not None and part.leader == self.broker_id

    def leader_partition(self, tp: PartitionKey) -> Partition:
        """The partition, which this broker leads; else the error a request for it gets:
        ``UNKNOWN_TOPIC_OR_PARTITION`` (``INVALID_TOPIC_EXCEPTION`` for an illegal name)
        when the cluster does not know it, ``NOT_LEADER_OR_FOLLOWER`` when another leads."""
        part = self.partition(tp)
        if part is not None and part.leader == self.broker_id:
            return part
        if self.cluster.leader(*tp) is None:
            validate_topic_name(tp[0])
            raise UnknownTopicOrPartitionError(f"{tp[0]}-{tp[1]} does not exist")
        raise NotLeaderOrFollowerError(f"broker {self.broker_id} does not lead {tp[0]}-{tp[1]}")

    def check_leader_epoch(self, tp: PartitionKey, current_leader_epoch: int) -> None:
        part = self.partition(tp)
        if part is None:
            raise NotLeaderOrFollowerError(f"broker {self.broker_id} holds no {tp[0]}-{tp[1]}")
        part.check_leader_epoch(current_leader_epoch)

    # -- the one append path -----------------------------------------------------------------

    async def append_records(self, entries: Mapping[PartitionKey, Buffer | None], *,
                             acks: int, origin: AppendOrigin = AppendOrigin.CLIENT
                             ) -> Appended:
        """Append each partition's records as its leader (see the module docstring): the
        answer per partition, and for ``acks=-1`` the wait for the in-sync replicas."""
        results: dict[PartitionKey, AppendResult] = {}
        writes: list[_Write] = []
        for tp, records in entries.items():
            try:
                part = self._appendable(tp, records, acks, origin)
                lg = self.logs.get_log(*tp)
                if lg is None:
                    raise UnknownTopicOrPartitionError(f"{tp[0]}-{tp[1]} has no log here")
            except ApiError as exc:
                results[tp] = AppendResult(exc.code)
                continue
            assert records is not None
            writes.append(_new_tuple(_Write, (tp, lg, records, part.stamped_epoch, False,
                                              origin)))
        if writes:
            results.update(await self._write(writes))
        else:
            await trio.lowlevel.checkpoint()
        return Appended(self, results, acks)

    def _appendable(self, tp: PartitionKey, records: Buffer | None, acks: int,
                    origin: AppendOrigin) -> Partition:
        part = self.leader_partition(tp)
        if origin is AppendOrigin.CLIENT and tp[0] in INTERNAL_TOPICS:
            raise TopicAuthorizationFailedError(f"{tp[0]} is internal")
        if records is None or len(records) == 0:
            raise CorruptMessageError("empty record set")
        if acks == -1:
            part.check_min_isr(self.cluster.min_insync_replicas(tp[0]))
        return part

    async def append_as_follower(self, tp: PartitionKey, records: Buffer) -> AppendResult:
        """Append the leader's batches as they are (their offsets and epochs kept)."""
        lg = self.logs.get_log(*tp)
        if lg is None:
            await trio.lowlevel.checkpoint()
            return AppendResult(UnknownTopicOrPartitionError.code)
        results = await self._write([_Write(tp, lg, records, None, follower=True)])
        return results[tp]

    async def _write(self, writes: list[_Write]) -> dict[PartitionKey, AppendResult]:
        """Write every partition's records in one go, then wake the fetches parked on them
        and move the leaders' high watermarks."""
        if self._inline(writes):
            # A page-cache write: cheaper here than the hop to a worker thread and back.
            # (No checkpoint of its own: the callers' loops yield between requests.)
            results = INLINE_APPENDS.run(self._write_all, writes)
        else:
            results = await trio.to_thread.run_sync(self._write_all, writes,
                                                    limiter=self.limiter)
        for w in writes:
            result = results[w.tp]
            if result.error == NO_ERROR and result.size:
                self.purgatory.data_appended(w.tp, result.size)
                if w.log.replicated:  # (else the high watermark is the log end already)
                    part = self.partitions.get(w.tp)
                    if part is not None and part.leader == self.broker_id:
                        self.maybe_advance_high_watermark(part)
        return results

    def appends_inline(self, appends: Iterable[tuple[PartitionKey, Buffer]], *,
                       follower: bool = False) -> bool:
        """Would these appends (of one request) run on the event loop?  (No, if a log is
        missing: they fail anyway.)"""
        writes = []
        for tp, records in appends:
            lg = self.logs.get_log(*tp)
            if lg is None:
                return False
            writes.append(_Write(tp, lg, records, None, follower))
        return self._inline(writes)

    @staticmethod
    def _inline(writes: list[_Write]) -> bool:
        """May ``writes`` run on the event loop: a page-cache write of microseconds, or of a
        fraction of a millisecond for a MiB while writes are fast (``Log.cheap_append``)?
        Not an old client's large message set: converting it is Python work."""
        total = 0
        for w in writes:
            total += len(w.records)
        for w in writes:
            if not w.log.cheap_append(total):
                return False
            if total > CHEAP_APPEND_BYTES and not w.follower and is_legacy(w.records):
                return False
        return True

    def _write_all(self, writes: list[_Write]) -> dict[PartitionKey, AppendResult]:
        """Blocking (a worker thread, or inline): each partition's append; never raises."""
        out = {}
        for w in writes:
            try:
                records = w.records
                if not w.follower and is_legacy(records):
                    # An old client's message set: the log keeps only v2.
                    records = b"".join(legacy_to_v2(records,
                                                    max_batch_bytes=self.message_max_bytes))
                info = w.log.append(records, assign_offsets=not w.follower,
                                    leader_epoch=w.leader_epoch,
                                    origin=AppendOrigin.REPLICATION if w.follower else w.origin)
                out[w.tp] = AppendResult.of(info)
            except Exception as exc:
                out[w.tp] = AppendResult(partition_error(exc, "append", *w.tp))
        return out

    # -- acks=all ------------------------------------------------------------------------------

    def replication_error(self, tp: PartitionKey, end_offset: int) -> int | None:
        """An ``acks=all`` append that ends at ``end_offset``: its answer now, or None while
        the high watermark is below it (Kafka's ``checkEnoughReplicasReachOffset``)."""
        part = self.partition(tp)
        lg = self.logs.get_log(*tp)
        if part is None or lg is None or part.leader != self.broker_id:
            return NotLeaderOrFollowerError.code
        if lg.high_watermark < end_offset:
            return None
        if len(part.isr) < self.cluster.min_insync_replicas(tp[0]):
            return NotEnoughReplicasAfterAppendError.code
        return NO_ERROR

    async def wait_replicated(self, tp: PartitionKey, end_offset: int,
                              deadline: float) -> int:
        """Wait until the high watermark reaches ``end_offset`` (every in-sync replica has
        the records) or ``deadline`` passes: the answer's error code."""
        while True:
            code = self.replication_error(tp, end_offset)
            if code is not None:
                await trio.lowlevel.checkpoint()
                return code
            if trio.current_time() >= deadline:
                await trio.lowlevel.checkpoint()
                return RequestTimedOutError.code
            part = self.partition(tp)
            assert part is not None
            with trio.move_on_at(deadline):
                await part.changed.wait()

    # -- the leader's side ---------------------------------------------------------------------

    def follower_fetched(self, tp: PartitionKey, replica_id: int, fetch_offset: int,
                         current_leader_epoch: int) -> None:
        """A follower's fetch of ``tp`` at ``fetch_offset`` (its log end offset): Kafka's
        ``updateFollowerFetchState``.  Raises the ApiError the fetch gets."""
        part = self.partition(tp)
        if part is None or part.leader != self.broker_id:
            raise NotLeaderOrFollowerError(
                f"broker {self.broker_id} does not lead {tp[0]}-{tp[1]}")
        part.check_leader_epoch(current_leader_epoch)
        state = part.followers.get(replica_id)
        if state is None:
            raise NotLeaderOrFollowerError(
                f"broker {replica_id} is not a replica of {tp[0]}-{tp[1]}")
        lg = self.logs.get_log(*tp)
        if lg is None:
            raise NotLeaderOrFollowerError(f"{tp[0]}-{tp[1]} has no log here")
        state.fetched(fetch_offset, lg.log_end_offset, _time.now_ms())
        if replica_id not in part.isr:
            entry = lg.leader_epoch_cache.latest_entry
            epoch_start = entry.start_offset if entry is not None else 0
            if part.may_join_isr(replica_id, lg.high_watermark, epoch_start):
                self._start_isr_update(part, [r for r in part.replicas
                                              if r in part.isr or r == replica_id])
        self.maybe_advance_high_watermark(part)

    def maybe_advance_high_watermark(self, part: Partition) -> None:
        lg = self.logs.get_log(*part.tp)
        if lg is None or not lg.replicated:
            return
        if lg.maybe_increment_high_watermark(part.high_watermark_bound(self.broker_id,
                                                                       lg.log_end_offset)):
            self.purgatory.high_watermark_moved(part.tp)
            part.signal()

    def reset_followers(self, part: Partition) -> None:
        """``part`` just became led here: every follower starts unknown, the in-sync ones
        as caught up now (Kafka's ``makeLeader``)."""
        now = _time.now_ms()
        part.followers = {r: FollowerState(last_caught_up_ms=now if r in part.isr else 0)
                          for r in part.replicas if r != self.broker_id}

    async def _shrink_isr_periodically(self) -> None:
        """Every ``replica.lag.time.max.ms / 2``, drop the followers that lag from the ISRs
        led here.  The loop ticks more often than that to notice this broker's own stalls
        (``stall_ms``), which are credited to its followers first (``Partition.credit_stall``)."""
        interval = self.lag_max_ms / 2000
        tick, threshold = min(STALL_TICK_S, interval), min(STALL_MS, self.lag_max_ms / 4)
        last = trio.current_time()
        next_check = last + interval
        while True:
            await trio.sleep(tick)
            now = trio.current_time()
            stalled = stall_ms(last, now, tick, threshold)
            last = now
            if stalled:
                log.warning("this broker stood still for %d ms; its followers' lag does not "
                            "count that time", stalled)
                now_ms = _time.now_ms()
                for part in self.partitions.values():
                    if part.leader == self.broker_id:
                        part.credit_stall(stalled, now_ms)
            if now >= next_check:
                next_check = now + interval
                self._shrink_lagging()

    def _shrink_lagging(self) -> None:
        now = _time.now_ms()
        for part in list(self.partitions.values()):
            if part.leader != self.broker_id or part.isr_update_pending:
                continue
            lagging = part.lagging(self.broker_id, now, self.lag_max_ms)
            if lagging:
                log.info("%s-%d: followers %s fell behind for %d ms; shrinking the ISR",
                         part.topic, part.partition, sorted(lagging), self.lag_max_ms)
                self._start_isr_update(part, [r for r in part.isr if r not in lagging])

    def _start_isr_update(self, part: Partition, isr: list[int]) -> None:
        if self.isr_channel is None or self._nursery is None:
            return  # a standalone broker has no followers whose state could change
        part.isr_update_pending = True
        self._nursery.start_soon(self._update_isr, part, tuple(isr))

    async def _update_isr(self, part: Partition, isr: tuple[int, ...]) -> None:
        """Write a new ISR (conditionally), then adopt it and tell the cluster."""
        assert self.isr_channel is not None
        try:
            version = await self.isr_channel.write(part, isr)
            if version is None:
                return
            if self.partitions.get(part.tp) is not part or part.leader != self.broker_id \
                    or version <= part.zk_version:
                return  # (a newer state reached this broker while the write was under way)
            log.info("%s-%d: ISR %s -> %s", part.topic, part.partition, list(part.isr),
                     list(isr))
            part.isr, part.zk_version = isr, version
            self.maybe_advance_high_watermark(part)
            part.signal()
            await self.isr_channel.announce(part)
        finally:
            part.isr_update_pending = False


class LocalReplicaManager(ReplicaManager):
    """A standalone broker's replica manager: it leads every partition of its log dirs as
    their only replica (no leader epoch, high watermark = log end, nothing to wait for)."""

    def partition(self, tp: PartitionKey) -> Partition | None:
        part = self.partitions.get(tp)
        if self.cluster.leader(*tp) != self.broker_id:  # no such topic (deleted, say)
            if part is not None:
                del self.partitions[tp]
            return None
        if part is None:
            part = self.partitions[tp] = Partition.local(tp, self.broker_id)
        return part
