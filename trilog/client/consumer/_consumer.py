"""Kafka's consumer, as Python's Kafka clients shape it: subscribe, poll, seek, pause, commit.

    async with trilog.open_consumer("orders", group_id="billing",
                                    bootstrap_servers="127.0.0.1:9092",
                                    auto_offset_reset="earliest") as consumer:
        async for record in consumer:
            ...

A ``Consumer`` is the API over its parts, each in a module of its own: what it reads and
where it stands (``_subscription_state.SubscriptionState``), the fetcher
(``_fetcher.Fetcher``: one fetch task per leader broker) and, when it ``subscribe``\\ s with
a ``group_id``, the coordinator (``_coordinator.ConsumerCoordinator``: the group membership,
heartbeats, rebalance listener).  It reads what it is told to with ``assign``; with neither a
group nor an assignment it reads every partition of the topics it subscribes to.  Its tasks
(the fetcher, the subscription's task, the auto-committer every ``auto_commit_interval_ms``)
live in the consumer's nursery.

This module hands records out and commits.  The fetcher buffers each answer in its
partition's state (at most one fetch ahead of what the application reads) and marks the
partition *ready*; ``__anext__``/``getone``/``getmany`` take records from the ready
partitions in turn.  A record is *returned* when one of them hands it out (the partition's
``position`` moves past it) and *processed* when the application asks for more afterwards.
Auto-commit, revocation and closing commit processed offsets only: a consumer stopped in the
middle of a record reads it again (at least once, never committed before processed).
``commit()`` with no argument commits positions: everything returned so far.
"""

from __future__ import annotations

import logging
import re
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from itertools import islice
from typing import Any

import trio

from trilog._concurrency import YieldPacer
from trilog.client._client import Client
from trilog.client._simple_consumer import (
    EARLIEST,
    LATEST,
    ConsumerRecord,
    FetchedRecords,
    FetchStatistics,
    offset_at,
    offset_for_time,
)
from trilog.client._coordinator import Coordinator
from trilog.client._isolation import READ_COMMITTED
from trilog.client._offsets import BrokerOffsetStore
from trilog.client.consumer._config import ConsumerConfig
from trilog.client.consumer._coordinator import ConsumerCoordinator, tell_listener
from trilog.client.consumer._fetcher import Fetcher, FetchSettings
from trilog.client.consumer._membership import REJOIN_ERRORS, GroupMembership
from trilog.client.consumer._structs import (
    ConsumerGroupMetadata,
    ConsumerRebalanceListener,
    IllegalStateError,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)
from trilog.client.consumer._subscription_state import (
    PartitionState,
    SubscriptionState,
    TopicSelector,
)
from trilog.errors import TrilogError

log = logging.getLogger("trilog.consumer")


class Consumer:
    """See the module docstring.  Open with ``open_consumer``.  ``rebalances`` counts the
    completed ones."""

    def __init__(self, client: Client, nursery: trio.Nursery, holder: trio.Nursery,
                 config: ConsumerConfig) -> None:
        self.config = config
        self._client = client
        self._nursery = nursery
        sub = self._subscription = SubscriptionState()
        group = config.group_id
        # Commits and offset fetches on the client's connection to the coordinator (they
        # never wait behind a JoinGroup parked for a whole rebalance: answers come back in
        # order per connection); group requests on a connection of their own, held in
        # ``holder``, which outlives the consumer's tasks: closing still leaves through it.
        self._store = (BrokerOffsetStore(client, group, coordinator=Coordinator(client, group),
                                         require_stable=config.isolation == READ_COMMITTED)
                       if group else None)
        self._fetcher = Fetcher(
            client, sub, fetch_settings(config), deliver=self._buffer, fail=self._fail,
            committed=self._store.fetch if self._store else None, statistics=FetchStatistics())
        self._coordinator = ConsumerCoordinator(
            client, GroupMembership(
                client, Coordinator(client, group, nursery=holder), group,
                assignors=config.partition_assignment_strategy,
                session_timeout_ms=config.session_timeout_ms,
                rebalance_timeout_ms=config.max_poll_interval_ms,
                heartbeat_interval_ms=config.heartbeat_interval_ms,
                retry_backoff_ms=config.retry_backoff_ms,
                group_instance_id=config.group_instance_id),
            sub, _AsMember(self), session_timeout_ms=config.session_timeout_ms,
            max_poll_interval_ms=config.max_poll_interval_ms,
            metadata_max_age_ms=config.metadata_max_age_ms,
            retry_backoff_ms=config.retry_backoff_ms) if group else None
        # The subscription's task (the coordinator's life in the group, or following the
        # topics without one); a later one starts once this one has let go.
        self._subscription_task: trio.CancelScope | None = None
        self._subscription_done = trio.Event()
        self._subscription_done.set()  # no earlier subscription to wait for
        self._resubscribed = trio.Event()
        self._assigned_once = trio.Event()
        # The same dicts as the subscription's, for the per-record path.
        self._parts = sub.assignment
        self._processed = sub.processed
        self._committed = sub.committed
        # Handing out.
        self._ready: deque[PartitionState] = deque()  # partitions with records at hand
        self._head: PartitionState | None = None  # the partition __anext__ reads from now
        self._data = trio.Event()  # set (and replaced) when records arrive or we fail
        # What the last poll returned (processed once the application asks again): one
        # record's partition and next offset, or a getmany batch.
        self._last_part: PartitionState | None = None
        self._last_end = 0
        self._last_many: list[tuple[PartitionState, int]] = []
        self._commit_lock = trio.Lock()
        # Polls.
        self._polling = 0  # polls under way
        self._polls = 0  # polls started, ever
        self._poll_expired = False
        self._failure: BaseException | None = None
        self._failure_seen = False
        self._pacer = YieldPacer()
        self.rebalances = 0

    # -- what to read --------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str] = (), *, pattern: str | None = None,
                  listener: ConsumerRebalanceListener | None = None) -> None:
        """Read ``topics`` (or every topic whose whole name matches ``pattern``, internal
        ones excluded), as the group assigns them; replaces an earlier subscription."""
        if self._subscription.manual:
            raise IllegalStateError("subscribe and assign are mutually exclusive: "
                                    "unsubscribe first")
        topics = (topics,) if isinstance(topics, str) else tuple(topics)
        if bool(topics) == (pattern is not None):
            raise ValueError("subscribe takes topics or a pattern, not both or neither")
        self._subscription.subscribe(
            topics, self._selector(pattern) if pattern is not None else None)
        if listener is not None:
            self._subscription.listener = listener
        if self._subscription_task is None:
            scope, previous = trio.CancelScope(), self._subscription_done
            self._subscription_task, self._subscription_done = scope, trio.Event()
            self._nursery.start_soon(self._run_subscription, scope, previous,
                                     self._subscription_done)
        elif self._coordinator is not None:
            self._coordinator.request_rejoin("the subscription changed")
        else:
            self._resubscribed.set()

    def _selector(self, pattern: str) -> TopicSelector:
        regex, internal = re.compile(pattern), not self.config.exclude_internal_topics
        return lambda names: [t for t in names if regex.fullmatch(t) and (
            internal or not t.startswith("__"))]

    def subscription(self) -> set[str]:
        """The topics subscribed to (for a pattern: those it matched at the last join)."""
        return self._subscription.subscription()

    def unsubscribe(self) -> None:
        """Stop reading: leave the group (revoking the partitions, committing what was
        processed when auto-commit is on) or drop the manual assignment."""
        sub = self._subscription
        sub.unsubscribe()
        if self._subscription_task is not None:
            self._subscription_task.cancel()
            self._subscription_task = None
        if sub.manual:
            sub.manual = False
            sub.assign(())

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Read exactly ``partitions`` (no group management; commits still go to
        ``group_id``'s offsets when there is one)."""
        if self._subscription_task is not None:
            raise IllegalStateError("subscribe and assign are mutually exclusive: "
                                    "unsubscribe first")
        self._subscription.manual = True
        self._subscription.assign(TopicPartition(*tp) for tp in partitions)

    def assignment(self) -> set[TopicPartition]:
        return set(self._parts)

    def pause(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        """Stop fetching and returning ``partitions`` until ``resume`` (what was fetched
        already waits)."""
        for tp in partitions:
            self._subscription.state(tp).paused = True

    def resume(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        for tp in partitions:
            st = self._subscription.state(tp)
            if st.paused:
                st.paused = False
                if st.current is not None or st.buffered:
                    self._mark_ready(st)
        self._subscription.wake_fetcher()

    def paused(self) -> set[TopicPartition]:
        return self._subscription.paused()

    # -- positions -----------------------------------------------------------------------------

    def seek(self, partition: TopicPartition | tuple[str, int], offset: int) -> None:
        """Return records of ``partition`` from ``offset`` on (records fetched from before
        are dropped)."""
        if offset < 0:
            raise ValueError("offset must not be negative")
        self._subscription.state(partition).seek(offset)
        self._subscription.wake_fetcher()

    async def seek_to_beginning(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        """Seek ``partitions`` (default: all assigned) to their first offset."""
        await self._seek_to_time(partitions, EARLIEST)

    async def seek_to_end(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        """Seek ``partitions`` (default: all assigned) to their end."""
        await self._seek_to_time(partitions, LATEST)

    async def _seek_to_time(self, partitions: Sequence[TopicPartition | tuple[str, int]],
                            time: int) -> None:
        tps = [TopicPartition(*tp) for tp in partitions] or list(self._parts)
        for tp in tps:
            self._subscription.state(tp)
        for tp, offset in (await self._offsets_at(tps, time)).items():
            if tp in self._parts:
                self.seek(tp, offset)

    async def position(self, partition: TopicPartition | tuple[str, int]) -> int:
        """The offset of the next record ``partition`` will return (resolved from the
        committed offset, or ``auto_offset_reset``, when not known yet)."""
        st = self._subscription.state(partition)
        if st.position is None:
            await self._fetcher.resolve_positions([st])
        position = st.settled_position()
        assert position is not None
        return position

    def highwater(self, partition: TopicPartition | tuple[str, int]) -> int | None:
        """The partition's high watermark as of its last fetch (None before one)."""
        return self._subscription.state(partition).highwater

    async def committed(self, partition: TopicPartition | tuple[str, int]) -> int | None:
        """The group's committed offset of ``partition`` (None when there is none)."""
        store = self._need_store("committed")
        tp = TopicPartition(*partition)
        return (await store.fetch([tp])).get(tp)

    async def beginning_offsets(self, partitions: Iterable[TopicPartition | tuple[str, int]]
                                ) -> dict[TopicPartition, int]:
        return await self._offsets_at([TopicPartition(*tp) for tp in partitions], EARLIEST)

    async def end_offsets(self, partitions: Iterable[TopicPartition | tuple[str, int]]
                          ) -> dict[TopicPartition, int]:
        """Each partition's end: the offset the next record written will get (with
        ``isolation_level="read_committed"``, the last stable offset: where the first
        transaction still open starts)."""
        return await self._offsets_at([TopicPartition(*tp) for tp in partitions], LATEST)

    async def offsets_for_times(self, timestamps: Mapping[TopicPartition | tuple[str, int], int]
                                ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the first record with a timestamp (ms) at or after the one
        given: its offset and timestamp, or None when there is none that recent."""
        out: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for tp, ms in timestamps.items():
            if ms < 0:
                raise ValueError("timestamps must not be negative")
            found = await offset_for_time(self._client, tp[0], tp[1], ms,
                                          isolation_level=self.config.isolation)
            out[TopicPartition(*tp)] = OffsetAndTimestamp(*found) if found else None
        return out

    async def _offsets_at(self, tps: Sequence[TopicPartition], time: int
                          ) -> dict[TopicPartition, int]:
        isolation = self.config.isolation
        return {tp: await offset_at(self._client, tp.topic, tp.partition, time,
                                    isolation_level=isolation) for tp in tps}

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

    def _advance(self, st: PartitionState) -> bool:
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
        st.current_records_end = fetched.records_end
        self._subscription.wake_fetcher()  # the next fetch for it may go out now
        return True

    def _has_data(self, st: PartitionState) -> bool:
        return self._parts.get(st.tp) is st and st.deliverable and (
            st.current is not None or bool(st.buffered))

    def _buffer(self, st: PartitionState, fetched: FetchedRecords) -> None:
        """The fetcher's delivery: ``fetched`` waits in its partition's state."""
        st.buffered.append(fetched)
        if st.deliverable:
            self._mark_ready(st)

    def _mark_ready(self, st: PartitionState) -> None:
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
            assert self._coordinator is not None
            self._coordinator.resume_polls()

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
                values = {tp: position for tp, st in self._parts.items()
                          if (position := st.settled_position()) is not None}
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
        coordinator = self._coordinator if not self._subscription.manual else None
        # A member commits as one of its generation; a manual assignment as no member.
        membership = coordinator.membership if coordinator else None
        store.generation_id = membership.generation_id if membership else -1
        store.member_id = membership.member_id if membership else ""
        store.group_instance_id = membership.group_instance_id if membership else None
        try:
            await store.commit({(tp.topic, tp.partition): o for tp, o in offsets.items()},
                               {(tp.topic, tp.partition): m for tp, m in notes.items()})
        except REJOIN_ERRORS as exc:
            if coordinator is not None:
                coordinator.commit_refused(exc)
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
            coordinator = self._coordinator
            if coordinator is not None and not self._subscription.manual and \
                    not coordinator.membership.in_generation:
                continue
            try:
                await self._commit_processed()
            except (TrilogError, OSError) as exc:
                log.warning("auto-commit failed: %s", exc)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The member as its group knows it now (group id, generation, member id, group
        instance id), for ``producer.send_offsets_to_transaction``: the group's coordinator
        refuses those offsets once the group has moved on from this generation (KIP-447).
        With ``assign`` (no group management): generation -1, no member id."""
        group = self.config.group_id
        if group is None:
            raise IllegalStateError("group_metadata() needs a group_id: offsets are a "
                                    "group's")
        coordinator = self._coordinator
        if coordinator is None or self._subscription.manual:
            return ConsumerGroupMetadata(group, -1, "", self.config.group_instance_id)
        member = coordinator.membership
        return ConsumerGroupMetadata(group, member.generation_id, member.member_id,
                                     member.group_instance_id)

    def _need_store(self, what: str) -> BrokerOffsetStore:
        if self._store is None:
            raise IllegalStateError(f"{what} needs a group_id: offsets are the group's")
        return self._store

    # -- the subscription's task -----------------------------------------------------------------

    async def _run_subscription(self, scope: trio.CancelScope, previous: trio.Event,
                                done: trio.Event) -> None:
        """The group member's life (the coordinator), or without a group every partition of
        the subscribed topics; ends when unsubscribed or closed.  The partitions it holds
        stay its own until it has given them up (a later subscription waits for ``done``),
        unless ``assign`` took over meanwhile."""
        try:
            with scope:
                await previous.wait()
                if self._coordinator is not None:
                    await self._coordinator.run()
                else:
                    await self._follow_topics()
        finally:
            if self._coordinator is None and not self._subscription.manual:
                self._subscription.assign(())
            done.set()

    async def _follow_topics(self) -> None:
        """No group: every partition of the subscribed topics, looked at every
        ``metadata_max_age_ms``."""
        sub = self._subscription
        while True:
            try:
                meta = await self._client.refresh_metadata()
            except TrilogError as exc:
                log.debug("metadata refresh failed: %s", exc)
            else:
                wanted = {TopicPartition(t, p) for t in sub.topics_in(meta.partitions)
                          for p in meta.partitions_for(t) or ()}
                if wanted != set(self._parts):
                    # Partitions kept keep their positions (no group, no commits: a fresh
                    # state would start over from auto_offset_reset).
                    added, removed = wanted - set(self._parts), set(self._parts) - wanted
                    if removed:
                        sub.mark_revoking(removed)
                        await tell_listener(sub.listener, "on_partitions_revoked", removed,
                                            self._fail, self._member_name)
                    sub.assign(wanted)
                    await tell_listener(sub.listener, "on_partitions_assigned", added,
                                        self._fail, self._member_name)
                self._assigned_once.set()
            with trio.move_on_after(self.config.metadata_max_age_ms / 1000):
                await self._resubscribed.wait()
            self._resubscribed = trio.Event()

    # -- what the coordinator asks of us (through _AsMember) --------------------------------------

    async def _commit_before_revoke(self, partitions: set[TopicPartition]) -> None:
        """Auto-commit commits what was processed of ``partitions`` before they are given
        up."""
        if self.config.enable_auto_commit and self._store is not None:
            await self._commit_processed(partitions)
        else:
            await trio.lowlevel.checkpoint()

    def _poll_marks(self) -> Mapping[Any, int]:
        """For ``max_poll_interval_ms``: the polls started, while the application holds
        what the last one returned (none is under way) and owns partitions."""
        return {} if self._polling or not self._parts else {"polls": self._polls}

    def _poll_interval_expired(self) -> None:
        log.warning("consumer %s (group %s): no poll for over max_poll_interval_ms "
                    "(%.0f s): leaving the group; it joins again at the next poll",
                    self._member_name, self.config.group_id,
                    self.config.max_poll_interval_ms / 1000)
        self._poll_expired = True

    @asynccontextmanager
    async def _connections_in_this_task(self) -> AsyncIterator[None]:
        """Group requests and commits on connections of this task's own."""
        async with AsyncExitStack() as stack:
            if self._coordinator is not None:
                await stack.enter_async_context(
                    self._coordinator.membership.coordinator.connection_in_this_task())
            if self._store is not None:
                await stack.enter_async_context(
                    self._store.coordinator.connection_in_this_task())
            yield

    @property
    def _member_name(self) -> str:
        if self._coordinator is not None:
            return self._coordinator.member_name
        return self._client.client_id

    # -- failure and closing -------------------------------------------------------------------

    def _fail(self, exc: BaseException) -> None:
        """The consumer stops with ``exc``: the application's next poll raises it, and the
        subscription's task ends (it leaves the group)."""
        if self._failure is None:
            self._failure = exc
        if self._subscription_task is not None:
            self._subscription_task.cancel()
        self._assigned_once.set()  # nobody waits for an assignment any more
        if self._coordinator is not None:
            self._coordinator.assigned_once.set()
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
        return {**self._fetcher.statistics.as_dict(self._parts),
                "rebalances": self.rebalances, "assigned_partitions": len(self._parts)}

    async def _wait_first_assignment(self) -> None:
        """Wait until the consumer owns its first assignment (or failed)."""
        if self._coordinator is not None:
            await self._coordinator.assigned_once.wait()
        else:
            await self._assigned_once.wait()
        self._raise_failure()

    async def _close(self) -> None:
        """Leave the group (revoking, committing processed offsets), or, with a manual
        assignment, commit processed offsets (auto-commit)."""
        if self._subscription_task is not None:
            self._subscription_task.cancel()
        await self._subscription_done.wait()
        if self._subscription.manual and self._store is not None and \
                self.config.enable_auto_commit:
            try:
                async with self._store.coordinator.connection_in_this_task():
                    await self._commit_processed()
            except (TrilogError, OSError) as exc:
                log.warning("consumer %s: could not commit on closing: %s",
                            self._member_name, exc)


class _AsMember:
    """A ``Consumer`` as its coordinator sees it (``CoordinatedConsumer``), apart from its
    API."""

    __slots__ = ("_consumer",)

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer

    @property
    def failed(self) -> bool:
        return self._consumer._failure is not None

    def fail(self, exc: BaseException) -> None:
        self._consumer._fail(exc)

    async def commit_before_revoke(self, partitions: set[TopicPartition]) -> None:
        await self._consumer._commit_before_revoke(partitions)

    async def partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._consumer.rebalances += 1
        await trio.lowlevel.checkpoint_if_cancelled()

    def partitions_dropped(self, dropped: set[TopicPartition]) -> None:
        consumer = self._consumer
        consumer._ready = deque(st for st in consumer._ready if consumer._parts.get(st.tp) is st)

    def poll_marks(self) -> Mapping[Any, int]:
        return self._consumer._poll_marks()

    def poll_interval_expired(self, mark: Any) -> None:
        self._consumer._poll_interval_expired()

    def connections_in_this_task(self) -> AbstractAsyncContextManager[None]:
        return self._consumer._connections_in_this_task()


def fetch_settings(config: ConsumerConfig) -> FetchSettings:
    """How Kafka's consumer fetches, from its settings."""
    return FetchSettings(
        max_wait_ms=config.fetch_max_wait_ms, min_bytes=config.fetch_min_bytes,
        partition_max_bytes=config.max_partition_fetch_bytes, max_bytes=config.fetch_max_bytes,
        retry_backoff_ms=config.retry_backoff_ms, reset_time=config.reset_time,
        reset_setting=f"auto_offset_reset={config.auto_offset_reset!r}",
        key_deserializer=config.key_deserializer, value_deserializer=config.value_deserializer,
        isolation_level=config.isolation)
