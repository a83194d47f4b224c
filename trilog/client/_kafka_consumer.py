"""Kafka's consumer, as Python's Kafka clients shape it: subscribe, poll, seek, pause, commit.

    async with trilog.open_consumer("orders", group_id="billing",
                                    bootstrap_servers="127.0.0.1:9092",
                                    auto_offset_reset="earliest") as consumer:
        async for record in consumer:
            ...

The names, meanings and defaults are kafka-python's and aiokafka's (``ConsumerConfig``), so a
script moves over by changing its imports.  A ``Consumer`` is one member of a group
coordinated by the brokers (``_membership.GroupMembership``: JoinGroup, SyncGroup,
heartbeats) when it ``subscribe``\\ s with a ``group_id``; it reads what it is told to with
``assign``; with neither a group nor an assignment it reads every partition of the topics it
subscribes to.

Its parts, all tasks in the consumer's nursery:

- **the group task** (subscribed with a group): join, take the assignment, tell the
  rebalance listener, heartbeat, and on a reason to rejoin (a heartbeat's answer, a changed
  subscription, a topic's new partitions, ``max_poll_interval_ms`` passed) commit what was
  processed (auto-commit), tell the listener the partitions are revoked (or *lost*, when the
  generation ended without us) and join again;
- **the fetchers**: one task per leader broker, each sending Fetch for the assigned
  partitions it leads that are neither paused nor holding an unread fetch; their answers
  wait in each partition's buffer, at most one fetch ahead of what the application reads;
- **the auto-committer**: every ``auto_commit_interval_ms``, the processed offsets.

A record is *returned* when ``__anext__``/``getone``/``getmany`` hands it out (the
partition's ``position`` moves past it) and *processed* when the application asks for more
afterwards.  Auto-commit, revocation and closing commit processed offsets only: a consumer
stopped in the middle of a record reads it again (at least once, never committed before
processed).  ``commit()`` with no argument commits positions: everything returned so far.
"""

from __future__ import annotations

import inspect
import logging
import re
from collections import deque
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from itertools import islice
from typing import Any, NamedTuple, Unpack

import trio

from trilog._concurrency import YieldPacer, unwrap_exception_group
from trilog.client._assignment import check_assignors
from trilog.client._client import Client, open_client
from trilog.client._consumer import (
    ConsumerRecord,
    Deserializer,
    FetchedRecords,
    FetchStatistics,
    FetchWanted,
    fetch_from_node,
    offset_at,
    offset_for_time,
)
from trilog.client._coordinator import Coordinator
from trilog.client._membership import (
    COORDINATOR_ERRORS,
    GENERATION_ERRORS,
    REJOIN_ERRORS,
    GroupMembership,
)
from trilog.client._metadata import ClusterMetadata, Node
from trilog.client._offsets import BrokerOffsetStore
from trilog.net import SecurityOptions, client_security
from trilog.errors import (
    ApiError,
    NetworkError,
    OffsetOutOfRangeError,
    ProtocolError,
    RebalanceInProgressError,
    RequestTimedOutError,
    TrilogError,
)

log = logging.getLogger("trilog.consumer")

EARLIEST_TIME, LATEST_TIME = -2, -1


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class OffsetAndMetadata(NamedTuple):
    """What ``commit`` takes per partition: the next offset to consume, and a note."""

    offset: int
    metadata: str = ""


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


class IllegalStateError(TrilogError):
    """The consumer cannot do that in its state (say, ``subscribe`` after ``assign``)."""


class NoOffsetForPartitionError(TrilogError):
    """``auto_offset_reset="none"`` and a partition has no committed offset (or its
    committed offset is out of range)."""


class ConsumerRebalanceListener:
    """Told when the group moves partitions; override what you need (sync or async).

    Eager rebalances: ``on_partitions_revoked(everything owned)`` before the member rejoins
    (after auto-commit committed the processed offsets), then
    ``on_partitions_assigned(the new assignment)`` (always, even when empty) before any of
    those partitions is fetched, so a ``seek`` there decides where reading starts.
    ``on_partitions_lost`` replaces ``revoked`` when the member learns that the group went on
    without it (its session expired): the partitions may already be another's, so nothing is
    committed.  By default it calls ``on_partitions_revoked``, as Kafka's.

    An exception from a callback stops the consumer: the application's next
    ``__anext__``/``getmany`` (or the end of ``async with``) raises it.
    """

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        pass

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        pass

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        await _maybe_await(self.on_partitions_revoked(lost))


async def _maybe_await(value: Any) -> None:
    if inspect.isawaitable(value):
        await value
    else:
        await trio.lowlevel.checkpoint()


_RESETS = {"earliest": EARLIEST_TIME, "smallest": EARLIEST_TIME,
           "latest": LATEST_TIME, "largest": LATEST_TIME, "none": None}


@dataclass(frozen=True)
class ConsumerConfig:
    """``open_consumer``'s settings, kafka-python's names and defaults; ``ValueError`` for
    a bad one.  See docs/consumer.md for each."""

    bootstrap_servers: str | list[str] = "127.0.0.1:9092"
    group_id: str | None = None
    client_id: str = "trilog-consumer"
    key_deserializer: Deserializer | None = None
    value_deserializer: Deserializer | None = None
    auto_offset_reset: str = "latest"
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5000
    fetch_min_bytes: int = 1
    fetch_max_wait_ms: int = 500
    fetch_max_bytes: int = 52_428_800
    max_partition_fetch_bytes: int = 1_048_576
    max_poll_records: int = 500
    max_poll_interval_ms: int = 300_000
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 3000
    partition_assignment_strategy: tuple[str, ...] = ("range", "roundrobin")
    group_instance_id: str | None = None
    isolation_level: str = "read_uncommitted"
    consumer_timeout_ms: float = float("inf")
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    metadata_max_age_ms: int = 300_000
    exclude_internal_topics: bool = True

    def __post_init__(self) -> None:
        if self.auto_offset_reset not in _RESETS:
            raise ValueError("auto_offset_reset must be 'earliest', 'latest' or 'none' "
                             f"(or 'smallest'/'largest'), not {self.auto_offset_reset!r}")
        if self.isolation_level != "read_uncommitted":
            raise ValueError(f"isolation_level={self.isolation_level!r}: trilog has no "
                             "transactions yet, so only 'read_uncommitted' is possible")
        if self.group_instance_id is not None and (
                not self.group_instance_id or self.group_id is None):
            raise ValueError("group_instance_id (static membership) must be a non-empty "
                             "string, with a group_id")
        if not 0 < self.heartbeat_interval_ms < self.session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be positive and below "
                             "session_timeout_ms")
        for name in ("max_poll_records", "max_poll_interval_ms", "auto_commit_interval_ms",
                     "max_partition_fetch_bytes", "fetch_max_bytes", "request_timeout_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.fetch_max_wait_ms < 0 or self.fetch_min_bytes < 0:
            raise ValueError("fetch_max_wait_ms and fetch_min_bytes must not be negative")
        check_assignors(self.partition_assignment_strategy)

    @property
    def reset_time(self) -> int | None:
        """ListOffsets' time for a partition without a committed offset; None: raise."""
        return _RESETS[self.auto_offset_reset]


def assignor_names(strategy: Any) -> tuple[str, ...]:
    """``partition_assignment_strategy`` as protocol names: a name, or a sequence of names
    or of assignor classes with a ``name`` (kafka-python's ``RoundRobinPartitionAssignor``)."""
    items = [strategy] if isinstance(strategy, str) or hasattr(strategy, "name") else \
        list(strategy)
    return tuple(item if isinstance(item, str) else str(getattr(item, "name", item))
                 for item in items)


class _Partition:
    """One assigned partition's state.  ``position``: the next offset to return (None until
    known); ``fetch_offset``: the next to fetch; ``epoch`` counts seeks, so that a fetch
    answered after one is dropped."""

    __slots__ = ("buffered", "current", "current_end", "epoch", "fetch_offset", "highwater",
                 "paused", "position", "revoking", "tp")

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.position: int | None = None
        self.fetch_offset = -1
        self.paused = False
        self.revoking = False
        self.buffered: deque[FetchedRecords] = deque()
        self.current: Iterator[ConsumerRecord] | None = None
        self.current_end = -1
        self.highwater: int | None = None
        self.epoch = 0

    def seek(self, offset: int) -> None:
        self.position = self.fetch_offset = offset
        self.buffered.clear()
        self.current = None
        self.epoch += 1

    @property
    def deliverable(self) -> bool:
        return not (self.paused or self.revoking)

    @property
    def fetchable(self) -> bool:
        return self.position is not None and not self.paused and not self.buffered


class Consumer:
    """See the module docstring.  Open with ``open_consumer``."""

    def __init__(self, client: Client, nursery: trio.Nursery, holder: trio.Nursery,
                 config: ConsumerConfig) -> None:
        self.config = config
        self._client = client
        self._nursery = nursery
        group = config.group_id
        # Group requests on a connection of their own (a JoinGroup parks there for a whole
        # rebalance); commits and offset fetches on the client's, so that they never wait
        # behind a parked JoinGroup (answers come back in order per connection).
        self._coordinator = Coordinator(client, group, nursery=holder) if group else None
        self._store = (BrokerOffsetStore(client, group, coordinator=Coordinator(client, group))
                       if group else None)
        self._membership = GroupMembership(
            client, self._coordinator, group,
            assignors=config.partition_assignment_strategy,
            session_timeout_ms=config.session_timeout_ms,
            rebalance_timeout_ms=config.max_poll_interval_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            retry_backoff_ms=config.retry_backoff_ms,
            group_instance_id=config.group_instance_id,
        ) if group and self._coordinator else None
        self._backoff_s = config.retry_backoff_ms / 1000
        # What to read.
        self._topics: tuple[str, ...] = ()
        self._joined_topics: tuple[str, ...] = ()
        #: the last assignment (eager sticky assignors keep it in place)
        self._last_assigned: set[TopicPartition] = set()
        self._pattern: re.Pattern[str] | None = None
        self._listener = ConsumerRebalanceListener()
        self._manual = False
        self._subscription_task: trio.CancelScope | None = None
        self._subscription_done = trio.Event()
        self._subscription_done.set()  # no earlier subscription to wait for
        self._assigned_once = trio.Event()
        self._rejoin = trio.Event()
        self._lost = False
        self._group_nursery: trio.Nursery | None = None
        self._heartbeat_scope: trio.CancelScope | None = None
        # The partitions.
        self._parts: dict[TopicPartition, _Partition] = {}
        self._ready: deque[_Partition] = deque()  # partitions with records to hand out
        self._head: _Partition | None = None  # the partition __anext__ reads from now
        self._data = trio.Event()  # set (and replaced) when records arrive or we fail
        self._wakeup = trio.Event()  # set (and replaced) when a partition becomes fetchable
        self._regroup = trio.Event()  # the partitions or their leaders changed
        # Offsets.
        # What the last poll returned (processed once the application asks again): one
        # record's partition and next offset, or a getmany batch.
        self._last_part: _Partition | None = None
        self._last_end = 0
        self._last_many: list[tuple[_Partition, int]] = []
        self._processed: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._commit_lock = trio.Lock()
        # Polls.
        self._polling = 0  # polls under way
        self._polls = 0  # polls started, ever
        self._poll_expired = False
        self._polled = trio.Event()
        self._failure: BaseException | None = None
        self._failure_seen = False
        self._pacer = YieldPacer()
        self._fetch_stats = FetchStatistics()
        self.rebalances = 0

    # -- what to read --------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str] = (), *, pattern: str | None = None,
                  listener: ConsumerRebalanceListener | None = None) -> None:
        """Read ``topics`` (or every topic whose whole name matches ``pattern``, internal
        ones excluded), as the group assigns them; replaces an earlier subscription."""
        if self._manual:
            raise IllegalStateError("subscribe and assign are mutually exclusive: "
                                    "unsubscribe first")
        topics = (topics,) if isinstance(topics, str) else tuple(topics)
        if bool(topics) == (pattern is not None):
            raise ValueError("subscribe takes topics or a pattern, not both or neither")
        self._topics = tuple(sorted(set(topics)))
        self._pattern = re.compile(pattern) if pattern is not None else None
        if listener is not None:
            self._listener = listener
        if self._subscription_task is None:
            # A task per subscription; it starts once the previous one has let go.
            scope, previous = trio.CancelScope(), self._subscription_done
            self._subscription_task, self._subscription_done = scope, trio.Event()
            task = self._run_group if self._membership is not None else self._follow_topics
            self._nursery.start_soon(task, scope, previous, self._subscription_done)
        else:
            self._request_rejoin("the subscription changed")

    def subscription(self) -> set[str]:
        """The topics subscribed to (for a pattern: those it matched at the last join)."""
        return set(self._topics if self._pattern is None else self._joined_topics)

    def unsubscribe(self) -> None:
        """Stop reading: leave the group (revoking the partitions, committing what was
        processed when auto-commit is on) or drop the manual assignment."""
        self._topics, self._pattern = (), None
        if self._subscription_task is not None:
            self._subscription_task.cancel()
            self._subscription_task = None
        if self._manual:
            self._manual = False
            self._set_partitions(set())

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Read exactly ``partitions`` (no group management; commits still go to
        ``group_id``'s offsets when there is one)."""
        if self._subscription_task is not None:
            raise IllegalStateError("subscribe and assign are mutually exclusive: "
                                    "unsubscribe first")
        self._manual = True
        self._set_partitions({TopicPartition(*tp) for tp in partitions})

    def assignment(self) -> set[TopicPartition]:
        return set(self._parts)

    def pause(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        """Stop fetching and returning ``partitions`` until ``resume`` (what was fetched
        already waits)."""
        for tp in partitions:
            self._part(tp).paused = True

    def resume(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        for tp in partitions:
            st = self._part(tp)
            if st.paused:
                st.paused = False
                if st.current is not None or st.buffered:
                    self._mark_ready(st)
        self._wake_fetchers()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, st in self._parts.items() if st.paused}

    def _part(self, tp: TopicPartition | tuple[str, int]) -> _Partition:
        st = self._parts.get(TopicPartition(*tp))
        if st is None:
            raise IllegalStateError(f"{tp[0]}-{tp[1]} is not assigned to this consumer")
        return st

    # -- positions -----------------------------------------------------------------------------

    def seek(self, partition: TopicPartition | tuple[str, int], offset: int) -> None:
        """Return records of ``partition`` from ``offset`` on (records fetched from before
        are dropped)."""
        if offset < 0:
            raise ValueError("offset must not be negative")
        self._part(partition).seek(offset)
        self._wake_fetchers()

    async def seek_to_beginning(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        """Seek ``partitions`` (default: all assigned) to their first offset."""
        await self._seek_to_time(partitions, EARLIEST_TIME)

    async def seek_to_end(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        """Seek ``partitions`` (default: all assigned) to their end."""
        await self._seek_to_time(partitions, LATEST_TIME)

    async def _seek_to_time(self, partitions: Sequence[TopicPartition | tuple[str, int]],
                            time: int) -> None:
        tps = [TopicPartition(*tp) for tp in partitions] or list(self._parts)
        for tp in tps:
            self._part(tp)
        for tp, offset in (await self._offsets_at(tps, time)).items():
            if tp in self._parts:
                self.seek(tp, offset)

    async def position(self, partition: TopicPartition | tuple[str, int]) -> int:
        """The offset of the next record ``partition`` will return (resolved from the
        committed offset, or ``auto_offset_reset``, when not known yet)."""
        st = self._part(partition)
        if st.position is None:
            await self._resolve_positions([st])
        assert st.position is not None
        return st.position

    def highwater(self, partition: TopicPartition | tuple[str, int]) -> int | None:
        """The partition's high watermark as of its last fetch (None before one)."""
        return self._part(partition).highwater

    async def committed(self, partition: TopicPartition | tuple[str, int]) -> int | None:
        """The group's committed offset of ``partition`` (None when there is none)."""
        store = self._need_store("committed")
        tp = TopicPartition(*partition)
        return (await store.fetch([tp])).get(tp)

    async def beginning_offsets(self, partitions: Iterable[TopicPartition | tuple[str, int]]
                                ) -> dict[TopicPartition, int]:
        return await self._offsets_at([TopicPartition(*tp) for tp in partitions],
                                      EARLIEST_TIME)

    async def end_offsets(self, partitions: Iterable[TopicPartition | tuple[str, int]]
                          ) -> dict[TopicPartition, int]:
        """Each partition's end: the offset the next record written will get."""
        return await self._offsets_at([TopicPartition(*tp) for tp in partitions], LATEST_TIME)

    async def offsets_for_times(self, timestamps: Mapping[TopicPartition | tuple[str, int], int]
                                ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the first record with a timestamp (ms) at or after the one
        given: its offset and timestamp, or None when there is none that recent."""
        out: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for tp, ms in timestamps.items():
            if ms < 0:
                raise ValueError("timestamps must not be negative")
            found = await offset_for_time(self._client, tp[0], tp[1], ms)
            out[TopicPartition(*tp)] = OffsetAndTimestamp(*found) if found else None
        return out

    async def _offsets_at(self, tps: Sequence[TopicPartition], time: int
                          ) -> dict[TopicPartition, int]:
        return {tp: await offset_at(self._client, tp.topic, tp.partition, time) for tp in tps}

    async def topics(self) -> set[str]:
        """The topics the cluster has."""
        return set((await self._client.refresh_metadata()).partitions)

    async def partitions_for_topic(self, topic: str) -> set[int] | None:
        meta = await self._client.refresh_metadata([topic])
        parts = meta.partitions_for(topic)
        return set(parts) if parts is not None else None

    # -- reading -------------------------------------------------------------------------------

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        """The next record, waiting for one (``consumer_timeout_ms`` ends the iteration).
        Every call is a cancellation point; while records are at hand it yields to other
        tasks at most once a millisecond."""
        self._poll_started()
        try:
            # The fast path, per record: the partition being read has more at hand.
            st = self._head
            if st is not None and self._failure is None:
                it = st.current
                if it is not None and not st.paused and not st.revoking:
                    record = next(it, None)
                    if record is not None:
                        self._last_part, self._last_end = st, record.offset + 1
                        st.position = self._last_end
                        await trio.lowlevel.checkpoint_if_cancelled()
                        if self._pacer.due():
                            await trio.lowlevel.cancel_shielded_checkpoint()
                        return record
            return await self._next_record()
        finally:
            self._polling -= 1

    async def _next_record(self) -> ConsumerRecord:
        """``__anext__`` past its fast path: the next partition, or a wait."""
        with trio.move_on_after(self.config.consumer_timeout_ms / 1000):
            while True:
                self._raise_failure()
                record = self._take_one()
                if record is not None:
                    await trio.lowlevel.checkpoint_if_cancelled()
                    return record
                await self._data.wait()
        raise StopAsyncIteration

    async def getone(self, *partitions: TopicPartition | tuple[str, int]) -> ConsumerRecord:
        """The next record (of ``partitions`` only, when given), waiting for one."""
        while True:
            batch = await self.getmany(*partitions, timeout_ms=float("inf"), max_records=1)
            for records in batch.values():
                return records[0]

    async def getmany(self, *partitions: TopicPartition | tuple[str, int],
                      timeout_ms: float = 0, max_records: int | None = None
                      ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Up to ``max_records`` (default ``max_poll_records``) records at hand, by
        partition (of ``partitions`` only, when given), waiting up to ``timeout_ms`` for
        the first; ``{}`` when none came."""
        self._poll_started()
        try:
            limit = self.config.max_poll_records if max_records is None else max_records
            only = {TopicPartition(*tp) for tp in partitions} or None
            with trio.move_on_after(timeout_ms / 1000):
                while True:
                    self._raise_failure()
                    batch = self._take_many(limit, only)
                    if batch:
                        self._last_many = [(self._parts[tp], records[-1].offset + 1)
                                           for tp, records in batch.items()]
                        await trio.lowlevel.checkpoint()
                        return batch
                    await self._data.wait()
            return {}
        finally:
            self._polling -= 1

    def _take_one(self) -> ConsumerRecord | None:
        ready = self._ready
        while ready:
            st = ready[0]
            if self._has_data(st):
                if st.current is not None:
                    record = next(st.current, None)
                    if record is not None:
                        self._head = st  # __anext__'s fast path reads on from here
                        self._last_part, self._last_end = st, record.offset + 1
                        st.position = self._last_end
                        return record
                if self._advance(st):
                    ready.rotate(-1)  # the next partition's turn after this fetch
                    continue
            ready.popleft()
        return None

    def _take_many(self, limit: int, only: set[TopicPartition] | None
                   ) -> dict[TopicPartition, list[ConsumerRecord]]:
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        left = limit
        for st in list(self._ready):
            if only is not None and st.tp not in only:
                continue
            while left > 0 and self._has_data(st):
                if st.current is not None:
                    records = list(islice(st.current, left))
                    if records:
                        out.setdefault(st.tp, []).extend(records)
                        st.position = records[-1].offset + 1
                        left -= len(records)
                        if left <= 0:
                            break
                if not self._advance(st):
                    break
            if left <= 0:
                break
        self._ready = deque(st for st in self._ready if self._has_data(st))
        return out

    def _advance(self, st: _Partition) -> bool:
        """``st``'s current fetch is used up: move to its next buffered one.  False when it
        has none."""
        if st.current is not None:
            st.position = max(st.position or 0, st.current_end)  # past compacted gaps
            st.current = None
        if not st.buffered:
            return False
        fetched = st.buffered.popleft()
        st.current = iter(fetched)
        st.current_end = fetched.next_offset
        self._wake_fetchers()  # the next fetch for it may go out now
        return True

    def _has_data(self, st: _Partition) -> bool:
        return self._parts.get(st.tp) is st and st.deliverable and (
            st.current is not None or bool(st.buffered))

    def _mark_ready(self, st: _Partition) -> None:
        if st not in self._ready:
            self._ready.append(st)
        self._data.set()
        self._data = trio.Event()

    # -- polls and processed offsets -----------------------------------------------------------

    def _poll_started(self) -> None:
        """The application asks for records: what it had before is processed."""
        st = self._last_part
        if st is not None:
            self._last_part = None
            if self._parts.get(st.tp) is st:  # not a partition given up meanwhile
                self._processed[st.tp] = self._last_end
        if self._last_many:
            many, self._last_many = self._last_many, []
            for part, end in many:
                if self._parts.get(part.tp) is part:
                    self._processed[part.tp] = end
        self._polling += 1
        self._polls += 1
        if self._poll_expired:
            self._poll_expired = False
            self._polled.set()

    # -- commits -------------------------------------------------------------------------------

    async def commit(self, offsets: Mapping[TopicPartition | tuple[str, int],
                                            OffsetAndMetadata | int] | None = None) -> None:
        """Commit ``offsets`` (each the next offset to consume), or by default every
        assigned partition's position: what this consumer has returned so far.

        Raises ``IllegalGenerationError``, ``UnknownMemberIdError`` or
        ``RebalanceInProgressError`` when the group has moved on (the consumer then rejoins;
        the partitions may already be another member's)."""
        self._need_store("commit")
        values: dict[TopicPartition, int] = {}
        notes: dict[TopicPartition, str] = {}
        async with self._commit_lock:
            if offsets is None:
                values = {tp: st.position for tp, st in self._parts.items()
                          if st.position is not None}
            else:
                for tp, value in offsets.items():
                    key = TopicPartition(*tp)
                    if isinstance(value, int):
                        values[key] = value
                    else:
                        values[key], notes[key] = value.offset, value.metadata
            await self._commit(values, notes)
            # The application said where it is: auto-commit must not take that back.
            self._processed.update((tp, o) for tp, o in values.items() if tp in self._parts)

    async def _commit(self, offsets: dict[TopicPartition, int], notes: dict[TopicPartition, str]
                      ) -> None:
        """Commit ``offsets`` (``_commit_lock`` held)."""
        store = self._need_store("commit")
        if not offsets:
            await trio.lowlevel.checkpoint()
            return
        membership = self._membership if not self._manual else None
        # A member commits as one of its generation; a manual assignment as no member.
        store.generation_id = membership.generation_id if membership else -1
        store.member_id = membership.member_id if membership else ""
        store.group_instance_id = membership.group_instance_id if membership else None
        try:
            await store.commit({(tp.topic, tp.partition): o for tp, o in offsets.items()},
                               {(tp.topic, tp.partition): m for tp, m in notes.items()})
        except REJOIN_ERRORS as exc:
            if isinstance(exc, GENERATION_ERRORS):
                self._lost = True
            self._request_rejoin(f"commit refused: {exc.name}")
            raise
        self._committed.update(offsets)

    async def _commit_processed(self, only: set[TopicPartition] | None = None) -> None:
        """Commit the processed offsets (of ``only``, when given) that changed since the
        last commit (read under the lock: an explicit commit under way comes first)."""
        async with self._commit_lock:
            changed = {tp: off for tp, off in self._processed.items()
                       if tp in self._parts and self._committed.get(tp) != off
                       and (only is None or tp in only)}
            await self._commit(changed, {})

    async def _auto_commit(self) -> None:
        while True:
            await trio.sleep(self.config.auto_commit_interval_ms / 1000)
            if self._membership is not None and not self._manual and \
                    not self._membership.in_generation:
                continue
            try:
                await self._commit_processed()
            except (TrilogError, OSError) as exc:
                log.warning("auto-commit failed: %s", exc)

    def _need_store(self, what: str) -> BrokerOffsetStore:
        if self._store is None:
            raise IllegalStateError(f"{what} needs a group_id: offsets are the group's")
        return self._store

    # -- the group -----------------------------------------------------------------------------

    def _subscribed_topics(self, meta: ClusterMetadata) -> tuple[str, ...]:
        if self._pattern is None:
            return self._topics
        return tuple(sorted(t for t in meta.partitions if self._pattern.fullmatch(t) and not (
            self.config.exclude_internal_topics and t.startswith("__"))))

    def _request_rejoin(self, reason: str) -> None:
        if not self._rejoin.is_set():
            log.info("consumer %s (group %s): rejoining: %s", self._member_name,
                     self.config.group_id, reason)
        self._rejoin.set()

    @property
    def _member_name(self) -> str:
        member = self._membership.member_id if self._membership else ""
        return member or self._client.client_id

    async def _run_group(self, scope: trio.CancelScope, previous: trio.Event,
                         done: trio.Event) -> None:
        """The group task (see the module docstring); ends when unsubscribed or closed.
        The partitions it holds stay its own until it has given them up (a later
        subscription waits for ``done``), unless ``assign`` took over meanwhile."""
        membership = self._membership
        assert membership is not None and self._coordinator is not None
        try:
            with scope:
                await previous.wait()
                async with trio.open_nursery() as nursery:
                    self._group_nursery = nursery
                    nursery.start_soon(self._watch_metadata)
                    nursery.start_soon(self._watch_polls)
                    while True:
                        await self._join(membership)
                        await self._rejoin.wait()
                        if self._poll_expired:
                            await self._give_up_partitions()
                            self._stop_heartbeat()
                            await membership.leave()
                            await self._polled.wait()
        finally:
            self._stop_heartbeat()
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                if self._manual:  # assign() took over: its partitions are not ours to revoke
                    await membership.leave()
                else:
                    await self._leave(membership)
            done.set()

    def _start_heartbeat(self, membership: GroupMembership) -> None:
        self._stop_heartbeat()
        assert self._group_nursery is not None
        scope = self._heartbeat_scope = trio.CancelScope()
        self._group_nursery.start_soon(self._heartbeat, membership, scope)

    def _stop_heartbeat(self) -> None:
        if self._heartbeat_scope is not None:
            self._heartbeat_scope.cancel()
            self._heartbeat_scope = None

    async def _join(self, membership: GroupMembership) -> None:
        """Join the group (again) and take the assignment.  Eager assignors: everything is
        given up first.  Cooperative ones (KIP-429): the member keeps reading while the
        group rebalances and gives up only what the new assignment leaves out, then joins
        once more so that those partitions reach their new owners."""
        cooperative = membership.cooperative
        while True:
            # Heartbeats go on while the partitions are given up (a slow listener must not
            # cost the member its session), and stop when the JoinGroup goes out.
            if not cooperative or self._lost:
                await self._give_up_partitions()
            self._stop_heartbeat()
            self._rejoin = trio.Event()
            try:
                meta = await self._client.refresh_metadata()
                self._joined_topics = self._subscribed_topics(meta)
                owned = set(self._parts) if cooperative else self._last_assigned
                assigned = await membership.join(self._joined_topics, owned)
            except ApiError as exc:
                if isinstance(exc, GENERATION_ERRORS):
                    self._lost = True
                try:
                    await membership.recover(exc)
                except ApiError as fatal:
                    self._fail(fatal)  # ends this subscription's task
                    await trio.lowlevel.checkpoint()
                continue
            except TrilogError as exc:  # a malformed assignment, say: try again
                log.warning("consumer %s (group %s): rebalance failed: %s", self._member_name,
                            self.config.group_id, exc)
                await trio.sleep(self._backoff_s)
                continue
            self._lost = False
            self._start_heartbeat(membership)
            tps = {TopicPartition(t, p) for t, ps in assigned.items() for p in ps}
            revoked = set(self._parts) - tps
            added = tps - set(self._parts)
            if revoked:  # cooperative: only what moves away
                await self._give_up_partitions(revoked, lost=False)
            self._set_partitions(tps)
            self._last_assigned = tps
            self.rebalances += 1
            log.info("consumer %s (group %s, generation %d%s, %s) owns %s", self._member_name,
                     self.config.group_id, membership.generation_id,
                     ", leader" if membership.is_leader else "", membership.protocol,
                     _names(tps))
            await self._tell_listener("on_partitions_assigned", added if cooperative else tps)
            self._assigned_once.set()
            if revoked:
                self._request_rejoin("cooperative rebalance: what was given up goes on to "
                                     "its new owners")
            return

    async def _heartbeat(self, membership: GroupMembership, scope: trio.CancelScope) -> None:
        """Heartbeats until the next JoinGroup; REBALANCE_IN_PROGRESS asks for a rejoin and
        keeps the session alive meanwhile (the group keeps a member that heartbeats while
        it gives its partitions up), any other error asks for a rejoin and stops."""
        with scope:
            while True:
                exc = await membership.heartbeats()
                if scope.cancel_called:
                    return  # answered just as the group task stopped us: stale
                self._request_rejoin(f"heartbeat: {exc.name}")
                if isinstance(exc, RebalanceInProgressError):
                    continue
                if isinstance(exc, GENERATION_ERRORS):
                    self._lost = True
                    membership.in_generation = False
                elif isinstance(exc, COORDINATOR_ERRORS):
                    membership.coordinator.reset()
                return

    async def _give_up_partitions(self, which: set[TopicPartition] | None = None, *,
                                  lost: bool | None = None) -> None:
        """Give up ``which`` (default: every partition): commit what was processed of
        them (auto-commit, and only if the generation is still ours), tell the listener
        (revoked, or lost when the group went on without us), drop them."""
        owned = set(self._parts) if which is None else which & set(self._parts)
        if not owned:
            await trio.lowlevel.checkpoint()
            return
        for tp in owned:
            self._parts[tp].revoking = True  # nothing more is handed out from them
        membership = self._membership
        if lost is None:
            lost = self._lost or (membership is not None and not membership.in_generation)
        if lost:
            await self._tell_listener("on_partitions_lost", owned)
        else:
            if self.config.enable_auto_commit and self._store is not None:
                with trio.move_on_after(self.config.session_timeout_ms / 2000):
                    try:
                        await self._commit_processed(owned)
                    except TrilogError as exc:
                        log.warning("consumer %s: could not commit before rejoining: %s",
                                    self._member_name, exc)
            await self._tell_listener("on_partitions_revoked", owned)
        self._set_partitions(set(self._parts) - owned)

    async def _tell_listener(self, callback: str, partitions: set[TopicPartition]) -> None:
        try:
            await _maybe_await(getattr(self._listener, callback)(set(partitions)))
        except Exception as exc:
            log.error("consumer %s: the rebalance listener's %s raised %r: stopping",
                      self._member_name, callback, exc)
            self._fail(exc)  # ends the subscription's task
            await trio.lowlevel.checkpoint_if_cancelled()

    async def _leave(self, membership: GroupMembership) -> None:
        """Unsubscribed or closing: revoke (committing what was processed) and leave, on a
        connection of this task's own (the consumer's others may be cancelled)."""
        if not membership.member_id:
            self._set_partitions(set())
            return
        assert self._coordinator is not None and self._store is not None
        try:
            async with self._coordinator.connection_in_this_task(), \
                    self._store.coordinator.connection_in_this_task():
                try:
                    if self._failure is None:
                        await self._give_up_partitions()
                finally:
                    await membership.leave()
        except (TrilogError, OSError) as exc:
            log.info("consumer %s: clean leave failed: %s", self._member_name, exc)
        finally:
            self._set_partitions(set())

    async def _watch_metadata(self) -> None:
        """Every ``metadata_max_age_ms``: does a pattern match other topics now, and
        (leader) do the group's topics still have the partitions it assigned?"""
        membership = self._membership
        assert membership is not None
        while True:
            await trio.sleep(self.config.metadata_max_age_ms / 1000)
            try:
                meta = await self._client.refresh_metadata()
            except TrilogError as exc:
                log.debug("metadata refresh failed: %s", exc)
                continue
            if self._subscribed_topics(meta) != self._joined_topics:
                self._request_rejoin("the subscription matches other topics")
            elif membership.is_leader and any(
                    tuple(meta.partitions_for(t) or ()) != parts
                    for t, parts in membership.group_partitions.items()):
                self._request_rejoin("the partitions of a subscribed topic changed")

    async def _watch_polls(self) -> None:
        """Kafka's ``max.poll.interval.ms``: an application that has not asked for records
        for that long is out of the group (its partitions go to the others, from the last
        commit); the member joins again when it asks."""
        limit = self.config.max_poll_interval_ms / 1000
        seen, idle_since = self._polls, trio.current_time()
        while True:
            await trio.sleep(min(limit / 4, 1.0))
            now = trio.current_time()
            if self._polling or self._poll_expired or not self._parts or self._polls != seen:
                seen, idle_since = self._polls, now
                continue
            if now - idle_since >= limit:
                log.warning("consumer %s (group %s): no poll for over max_poll_interval_ms "
                            "(%.0f s): leaving the group; it joins again at the next poll",
                            self._member_name, self.config.group_id, limit)
                self._poll_expired = True
                self._polled = trio.Event()
                self._request_rejoin("max_poll_interval_ms passed")

    async def _follow_topics(self, scope: trio.CancelScope, previous: trio.Event,
                             done: trio.Event) -> None:
        """No group: every partition of the subscribed topics, looked at every
        ``metadata_max_age_ms``."""
        try:
            with scope:
                await previous.wait()
                while True:
                    try:
                        meta = await self._client.refresh_metadata()
                    except TrilogError as exc:
                        log.debug("metadata refresh failed: %s", exc)
                    else:
                        wanted = {TopicPartition(t, p) for t in self._subscribed_topics(meta)
                                  for p in meta.partitions_for(t) or ()}
                        if wanted != set(self._parts):
                            # Partitions kept keep their positions (no group, no commits:
                            # a fresh state would start over from auto_offset_reset).
                            added = wanted - set(self._parts)
                            await self._give_up_partitions(set(self._parts) - wanted)
                            self._set_partitions(wanted)
                            await self._tell_listener("on_partitions_assigned", added)
                        self._assigned_once.set()
                    with trio.move_on_after(self.config.metadata_max_age_ms / 1000):
                        await self._rejoin.wait()
                    self._rejoin = trio.Event()
        finally:
            if not self._manual:
                self._set_partitions(set())
            done.set()

    # -- partitions and fetchers ---------------------------------------------------------------

    def _set_partitions(self, tps: set[TopicPartition]) -> None:
        """Own exactly ``tps``: states kept for the partitions kept, fresh ones (position
        unknown) for the others."""
        for tp, st in self._parts.items():
            if tp not in tps:
                st.current = None  # dropped: nothing more is read from it
        self._parts = {tp: self._parts.get(tp) or _Partition(tp) for tp in sorted(tps)}
        for st in self._parts.values():
            st.revoking = False
        self._ready = deque(st for st in self._ready if self._parts.get(st.tp) is st)
        self._processed = {tp: o for tp, o in self._processed.items() if tp in self._parts}
        self._committed = {tp: o for tp, o in self._committed.items() if tp in self._parts}
        self._regroup.set()

    def _wake_fetchers(self) -> None:
        self._wakeup.set()
        self._wakeup = trio.Event()

    async def _fetch_supervisor(self) -> None:
        """Resolve unknown positions, then run one fetcher per leader broker until the
        partitions or their leaders change."""
        while True:
            self._regroup = trio.Event()
            unknown = [st for st in self._parts.values() if st.position is None]
            if unknown:
                try:
                    await self._resolve_positions(unknown)
                except (NetworkError, RequestTimedOutError, ProtocolError) as exc:
                    log.info("consumer %s: cannot find where to start yet: %s",
                             self._member_name, exc)
                    await trio.sleep(self._backoff_s)
                    continue
                except TrilogError as exc:
                    if isinstance(exc, ApiError) and exc.retriable:
                        await trio.sleep(self._backoff_s)
                        continue
                    self._fail(exc)
                    return
            meta = self._client.metadata.value
            by_node, leaderless = meta.group_by_leader(list(self._parts))
            async with trio.open_nursery() as nursery:
                for node in by_node:
                    nursery.start_soon(self._fetch_from, node, meta)
                if leaderless:
                    nursery.start_soon(self._refresh_then_regroup)
                await self._regroup.wait()
                nursery.cancel_scope.cancel()

    async def _refresh_then_regroup(self) -> None:
        await trio.sleep(self._backoff_s)
        try:
            await self._client.refresh_metadata()
        except TrilogError as exc:
            log.debug("metadata refresh failed: %s", exc)
        self._regroup.set()

    async def _resolve_positions(self, states: Sequence[_Partition]) -> None:
        """Committed offsets (a group's), else ``auto_offset_reset``."""
        committed: dict[tuple[str, int], int] = {}
        if self._store is not None:
            committed = await self._store.fetch([st.tp for st in states])
            self._committed.update((TopicPartition(*tp), o) for tp, o in committed.items())
        for st in states:
            if st.position is not None or self._parts.get(st.tp) is not st:
                continue  # sought meanwhile, or no longer ours
            offset = committed.get(st.tp)
            if offset is None:
                offset = await self._reset_offset(st.tp)
            if st.position is None:
                st.seek(offset)
                self._processed.setdefault(st.tp, offset)

    async def _reset_offset(self, tp: TopicPartition) -> int:
        time = self.config.reset_time
        if time is None:
            raise NoOffsetForPartitionError(
                f"{tp.topic}-{tp.partition} has no committed offset (or it is out of range) "
                "and auto_offset_reset='none'")
        return await offset_at(self._client, tp.topic, tp.partition, time)

    async def _fetch_from(self, node: Node, meta: ClusterMetadata) -> None:
        """Fetch, again and again, the fetchable partitions ``node`` leads."""
        config = self.config
        while True:
            wakeup = self._wakeup
            if self._client.metadata.value is not meta:
                self._regroup.set()  # leaders may have moved
                return
            states = [st for st in self._parts.values()
                      if st.fetchable and meta.leader_for(*st.tp) == node]
            if not states:
                await wakeup.wait()
                continue
            wanted: list[FetchWanted] = [
                (st.tp.topic, st.tp.partition, st.fetch_offset, config.max_partition_fetch_bytes)
                for st in states]
            epochs = [st.epoch for st in states]
            try:
                results = await fetch_from_node(
                    self._client, node, wanted, max_wait_ms=config.fetch_max_wait_ms,
                    min_bytes=config.fetch_min_bytes, key_deserializer=config.key_deserializer,
                    value_deserializer=config.value_deserializer,
                    statistics=self._fetch_stats, max_bytes=config.fetch_max_bytes)
            except TrilogError as exc:
                if isinstance(exc, ApiError) and not exc.retriable and \
                        not isinstance(exc, NetworkError):
                    self._fail(exc)
                    return
                # A lost connection, a timeout, a garbled answer, a failed login: again,
                # from fresh metadata.
                log.debug("fetch from broker %d failed: %s", node.node_id, exc)
                self._client.request_metadata_refresh()
                await trio.sleep(self._backoff_s)
                self._regroup.set()
                return
            for st, epoch, result in zip(states, epochs, results):
                if self._parts.get(st.tp) is not st or st.epoch != epoch:
                    continue  # sought or reassigned meanwhile
                if isinstance(result, FetchedRecords):
                    st.highwater = result.high_watermark
                    if result.next_offset > st.fetch_offset:
                        # Buffered even without records (a batch the cleaner emptied): the
                        # position moves past it when it is read.
                        st.fetch_offset = result.next_offset
                        st.buffered.append(result)
                        if st.deliverable:
                            self._mark_ready(st)
                elif isinstance(result, OffsetOutOfRangeError):
                    await self._out_of_range(st, epoch, result)
                elif result.retriable:
                    self._client.request_metadata_refresh()
                    await trio.sleep(self._backoff_s)
                    self._regroup.set()
                    return
                else:
                    self._fail(result)
                    return

    async def _out_of_range(self, st: _Partition, epoch: int,
                            error: OffsetOutOfRangeError) -> None:
        """``st``'s fetch offset is gone (retention) or beyond the end: reset it as
        ``auto_offset_reset`` says, unless the application sought meanwhile."""
        try:
            offset = await self._reset_offset(st.tp)
        except NoOffsetForPartitionError:
            self._fail(NoOffsetForPartitionError(f"{error}; auto_offset_reset='none'"))
            return
        except TrilogError as exc:
            if isinstance(exc, ApiError) and exc.retriable or isinstance(exc, NetworkError):
                log.info("%s; cannot reset it yet: %s", error, exc)
                await trio.sleep(self._backoff_s)  # the next fetch tries again
                return
            self._fail(exc)
            return
        if self._parts.get(st.tp) is not st or st.epoch != epoch:
            return  # sought or given up meanwhile: that wins
        log.warning("%s; resetting to %d (auto_offset_reset=%r)", error, offset,
                    self.config.auto_offset_reset)
        st.seek(offset)

    # -- failure and closing -------------------------------------------------------------------

    def _fail(self, exc: BaseException) -> None:
        """The consumer stops with ``exc``: the application's next poll raises it, and the
        subscription's task ends (it leaves the group)."""
        if self._failure is None:
            self._failure = exc
        if self._subscription_task is not None:
            self._subscription_task.cancel()
        self._assigned_once.set()  # nobody waits for an assignment any more
        self._data.set()
        self._data = trio.Event()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            self._failure_seen = True
            raise self._failure

    def statistics(self) -> dict[str, Any]:
        """Counters since the consumer opened: the simple consumer's (``records_consumed``,
        ``bytes_consumed``, ``fetches``, ``fetch_latency_*``, ``lag`` of the partitions
        assigned now), ``rebalances`` and ``assigned_partitions``."""
        return {**self._fetch_stats.as_dict(self._parts), "rebalances": self.rebalances,
                "assigned_partitions": len(self._parts)}

    async def _close(self) -> None:
        """Leave the group (revoking, committing processed offsets), or, with a manual
        assignment, commit processed offsets (auto-commit)."""
        if self._subscription_task is not None:
            self._subscription_task.cancel()
        await self._subscription_done.wait()
        if self._manual and self._store is not None and self.config.enable_auto_commit:
            try:
                async with self._store.coordinator.connection_in_this_task():
                    await self._commit_processed()
            except (TrilogError, OSError) as exc:
                log.warning("consumer %s: could not commit on closing: %s",
                            self._member_name, exc)


class KafkaConsumerOptions(SecurityOptions, total=False):
    """``open_consumer``'s keyword arguments (Kafka's consumer), for the facades that pass
    them on (``trilog.sync.Consumer(*topics, **options)``); a test keeps the two the same."""

    bootstrap_servers: str | list[str]
    group_id: str | None
    pattern: str | None
    listener: ConsumerRebalanceListener | None
    client_id: str
    key_deserializer: Deserializer | None
    value_deserializer: Deserializer | None
    auto_offset_reset: str
    enable_auto_commit: bool
    auto_commit_interval_ms: int
    fetch_min_bytes: int
    fetch_max_wait_ms: int
    fetch_max_bytes: int
    max_partition_fetch_bytes: int
    max_poll_records: int
    max_poll_interval_ms: int
    session_timeout_ms: int
    heartbeat_interval_ms: int
    partition_assignment_strategy: Any
    group_instance_id: str | None
    isolation_level: str
    consumer_timeout_ms: float
    request_timeout_ms: int
    retry_backoff_ms: int
    metadata_max_age_ms: int
    exclude_internal_topics: bool


_DEFAULTS = ConsumerConfig()


@asynccontextmanager
async def open_kafka_consumer(
    *topics: str | Iterable[str],
    bootstrap_servers: str | list[str] = _DEFAULTS.bootstrap_servers,
    group_id: str | None = None,
    pattern: str | None = None,
    listener: ConsumerRebalanceListener | None = None,
    client_id: str = _DEFAULTS.client_id,
    key_deserializer: Deserializer | None = None,
    value_deserializer: Deserializer | None = None,
    auto_offset_reset: str = _DEFAULTS.auto_offset_reset,
    enable_auto_commit: bool = _DEFAULTS.enable_auto_commit,
    auto_commit_interval_ms: int = _DEFAULTS.auto_commit_interval_ms,
    fetch_min_bytes: int = _DEFAULTS.fetch_min_bytes,
    fetch_max_wait_ms: int = _DEFAULTS.fetch_max_wait_ms,
    fetch_max_bytes: int = _DEFAULTS.fetch_max_bytes,
    max_partition_fetch_bytes: int = _DEFAULTS.max_partition_fetch_bytes,
    max_poll_records: int = _DEFAULTS.max_poll_records,
    max_poll_interval_ms: int = _DEFAULTS.max_poll_interval_ms,
    session_timeout_ms: int = _DEFAULTS.session_timeout_ms,
    heartbeat_interval_ms: int = _DEFAULTS.heartbeat_interval_ms,
    partition_assignment_strategy: Any = _DEFAULTS.partition_assignment_strategy,
    group_instance_id: str | None = None,
    isolation_level: str = _DEFAULTS.isolation_level,
    consumer_timeout_ms: float = _DEFAULTS.consumer_timeout_ms,
    request_timeout_ms: int = _DEFAULTS.request_timeout_ms,
    retry_backoff_ms: int = _DEFAULTS.retry_backoff_ms,
    metadata_max_age_ms: int = _DEFAULTS.metadata_max_age_ms,
    exclude_internal_topics: bool = _DEFAULTS.exclude_internal_topics,
    **security: Unpack[SecurityOptions],
) -> AsyncIterator[Consumer]:
    """``open_consumer`` with topics, a pattern, or neither (see there)."""
    config = ConsumerConfig(
        bootstrap_servers=bootstrap_servers, group_id=group_id, client_id=client_id,
        key_deserializer=key_deserializer, value_deserializer=value_deserializer,
        auto_offset_reset=auto_offset_reset, enable_auto_commit=enable_auto_commit,
        auto_commit_interval_ms=auto_commit_interval_ms, fetch_min_bytes=fetch_min_bytes,
        fetch_max_wait_ms=fetch_max_wait_ms, fetch_max_bytes=fetch_max_bytes,
        max_partition_fetch_bytes=max_partition_fetch_bytes, max_poll_records=max_poll_records,
        max_poll_interval_ms=max_poll_interval_ms, session_timeout_ms=session_timeout_ms,
        heartbeat_interval_ms=heartbeat_interval_ms,
        partition_assignment_strategy=assignor_names(partition_assignment_strategy),
        group_instance_id=group_instance_id, isolation_level=isolation_level,
        consumer_timeout_ms=consumer_timeout_ms, request_timeout_ms=request_timeout_ms,
        retry_backoff_ms=retry_backoff_ms, metadata_max_age_ms=metadata_max_age_ms,
        exclude_internal_topics=exclude_internal_topics)
    # kafka-python's KafkaConsumer("a", "b") and aiokafka's; a list is taken too.
    flat = [t for item in topics for t in ([item] if isinstance(item, str) else item)]
    with unwrap_exception_group():
        async with open_client(config.bootstrap_servers, client_id=config.client_id,
                               request_timeout_ms=config.request_timeout_ms,
                               metadata_max_age_ms=config.metadata_max_age_ms,
                               allow_auto_create_topics=False,
                               security=client_security(security)) as client:
            # The coordinator's connection lives in a nursery of its own, which outlives
            # the consumer's tasks: closing still commits and leaves through it.
            async with trio.open_nursery() as holder:
                async with trio.open_nursery() as nursery:
                    consumer = Consumer(client, nursery, holder, config)
                    nursery.start_soon(consumer._fetch_supervisor)
                    if config.group_id is not None and config.enable_auto_commit:
                        nursery.start_soon(consumer._auto_commit)
                    try:
                        if flat or pattern is not None:
                            consumer.subscribe(flat, pattern=pattern, listener=listener)
                            await _first_assignment(consumer)
                        elif listener is not None:
                            consumer._listener = listener
                        yield consumer
                    finally:
                        with trio.CancelScope(shield=True), trio.move_on_after(10):
                            await consumer._close()
                        nursery.cancel_scope.cancel()
                holder.cancel_scope.cancel()
            if consumer._failure is not None and not consumer._failure_seen:
                raise consumer._failure


def _names(tps: Iterable[TopicPartition]) -> str:
    return "[" + ", ".join(f"{t}-{p}" for t, p in sorted(tps)) + "]"


async def _first_assignment(consumer: Consumer) -> None:
    """Wait until the consumer owns its first assignment (or failed)."""
    await consumer._assigned_once.wait()
    consumer._raise_failure()

