"""The broker-coordinated group consumer: Kafka's group protocol, no ZooKeeper.

    async with open_consumer("g", bootstrap_servers="h:9092", topics={"events": 2}) as c:
        async for record in c.streams["events"][0]: ...

This is what kafka-python's ``KafkaConsumer(group_id=...)`` and Kafka's Java consumer do,
on the wire and in the group: protocol type ``consumer``, assignor ``range``, the standard
ConsumerProtocol bytes (``trilog.protocol``), so trilog and other Kafka consumers can
share a group.  One **rebalance loop** task runs a member's life:

1. find the coordinator (FindCoordinator) and open a connection of our own to it (a
   JoinGroup parks there for the whole rebalance; see ``_coordinator.Coordinator``);
2. JoinGroup with our subscription (the topics, or what the topic filter matches now); the
   coordinator answers once every member has (re)joined, the leader with everyone's
   subscriptions;
3. the leader reads the topics' partitions (Metadata) and range-assigns them over the
   members (``assign_members``; Kafka assigns to members, not to threads); SyncGroup
   carries the leader's plan and brings each member its share;
4. the member deals its partitions round robin over its streams, starts heartbeating every
   ``heartbeat_interval_ms``, reads the committed offsets (OffsetFetch; ``auto_offset_reset``
   where there are none) and starts the fetchers (``GroupConsumerConnector``, shared with
   the ZooKeeper connector).

Then it waits for a reason to rejoin: a heartbeat answered REBALANCE_IN_PROGRESS (a member
came or went), ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID (we were dropped, say after missing
our session timeout), a coordinator error or a lost connection (find it again), a commit
the coordinator fenced, a topic filter that now matches other topics, or, for the leader,
a subscribed topic whose partitions changed (checked every ``metadata_max_age_ms``).  A
rejoin stops the heartbeats and fetchers, commits the processed offsets if we are still a
member of the generation (commits carry our generation and member id), gives every
partition up and goes back to 2.

Clean shutdown: stop, commit the processed offsets, LeaveGroup (so the others rebalance now,
not a session timeout later).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from trilog._concurrency import unwrap_exception_group
from trilog.client._assignment import spread_over_streams
from trilog.client._client import Client, open_client
from trilog.client._coordinator import Coordinator
from trilog.client._group_base import GroupConsumerConnector, Streams, running
from trilog.client._group_config import GroupConfig
from trilog.client._membership import (
    COORDINATOR_ERRORS,
    GENERATION_ERRORS,
    REJOIN_ERRORS,
    GroupMembership,
)
from trilog.client._metadata import ClusterMetadata
from trilog.client._offsets import BrokerOffsetStore
from trilog.client._streams import MessageStream
from trilog.errors import (
    ApiError,
    CoordinatorLoadInProgressError,
    RebalanceInProgressError,
    TrilogError,
)
from trilog.protocol import RANGE_ASSIGNOR

log = logging.getLogger("trilog.consumer.group")


class BrokerConsumerConnector(GroupConsumerConnector[Streams]):
    """See the module docstring.  Create with ``open_consumer(..., coordination="broker")``.

    ``member_id``, ``generation_id`` and ``leader_id`` are the group's current view of us;
    ``consumer_id`` is the member id once joined.
    """

    def __init__(self, config: GroupConfig, client: Client, coordinator: Coordinator) -> None:
        super().__init__(config, client)
        self._max_poll_s = config.max_poll_interval_ms / 1000
        self._polls_resumed = trio.Event()
        self._coordinator = coordinator
        self._store = BrokerOffsetStore(client, self.group_id, coordinator=coordinator)
        self._stores.append(self._store)
        self._backoff_s = config.retry_backoff_ms / 1000
        self._membership = GroupMembership(
            client, coordinator, self.group_id, assignors=(RANGE_ASSIGNOR,),
            session_timeout_ms=config.session_timeout_ms,
            rebalance_timeout_ms=config.join_timeout_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            retry_backoff_ms=config.retry_backoff_ms)
        self._subscription: tuple[str, ...] = ()
        self._rejoin_needed = trio.Event()
        self._heartbeat_scope: trio.CancelScope | None = None

    @property
    def member_id(self) -> str:
        return self._membership.member_id

    @property
    def generation_id(self) -> int:
        return self._membership.generation_id

    @property
    def leader_id(self) -> str:
        return self._membership.leader_id

    @property
    def consumer_id(self) -> str:
        return self.member_id or self._client.client_id

    @property
    def is_leader(self) -> bool:
        return self._membership.is_leader

    # -- the rebalance loop ------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        async with trio.open_nursery() as nursery:
            await self._rebalance(nursery)
            if self.config.enable_auto_commit:
                nursery.start_soon(self._auto_committer)
            nursery.start_soon(self._watch_metadata)
            nursery.start_soon(self._watch_polls)
            task_status.started()
            while True:
                await self._rejoin_needed.wait()
                if self.poll_expired is not None:
                    await self._leave_until_polled()
                await self._rebalance(nursery)

    def _request_rejoin(self, reason: str) -> None:
        if not self._rejoin_needed.is_set():
            log.info("consumer %s (group %s): rejoining: %s", self.consumer_id, self.group_id,
                     reason)
        self._rejoin_needed.set()

    async def _rebalance(self, nursery: trio.Nursery) -> None:
        """Leave the current generation and join the next, until that works.  Raises only
        the errors rejoining cannot fix (an inconsistent protocol, a bad session timeout)."""
        while True:
            self._rejoin_needed = trio.Event()
            await self._revoke_partitions()
            try:
                assigned = await self._join_and_sync()
                topics = self.config.topics
                mine = spread_over_streams(
                    assigned, topics if topics is not None else self.config.num_streams)
                self._start_heartbeat(nursery)
                await self._assign(mine, nursery)
            except ApiError as exc:
                await self._membership.recover(exc)
                continue
            except TrilogError as exc:  # a malformed assignment, say: try again
                log.warning("consumer %s (group %s): rebalance failed: %s", self.consumer_id,
                            self.group_id, exc)
                await trio.sleep(self._backoff_s)
                continue
            self._rebalance_completed()
            log.info("consumer %s (group %s, generation %d%s) owns %s", self.consumer_id,
                     self.group_id, self.generation_id, ", leader" if self.is_leader else "",
                     sorted(mine))
            return

    async def _join_and_sync(self) -> dict[str, tuple[int, ...]]:
        """Steps 1-3: our share of the partitions, ``{topic: partitions}``."""
        meta = await self._client.refresh_metadata()
        self._subscription = self._subscribed_topics(meta)
        assigned = await self._membership.join(self._subscription)
        self._store.generation_id = self.generation_id
        self._store.member_id = self.member_id
        return assigned

    def _subscribed_topics(self, meta: ClusterMetadata) -> tuple[str, ...]:
        if self.config.topic_filter is None:
            return tuple(sorted(self.config.topics or ()))
        return tuple(self.config.topic_filter.select(meta.partitions))

    async def _revoke_partitions(self, commit_timeout_s: float | None = None) -> None:
        """Stop heartbeating and fetching, commit what was processed (if the generation is
        still ours), and give every partition up."""
        await self._stop_heartbeat()
        await self._stop_fetchers()
        if self._membership.in_generation and self.owned:
            timeout = (self.config.session_timeout_ms / 2000 if commit_timeout_s is None
                       else commit_timeout_s)
            with trio.move_on_after(timeout):
                try:
                    await self.commit_offsets()
                except TrilogError as exc:
                    log.warning("consumer %s: could not commit before rejoining: %s",
                                self.consumer_id, exc)
        self._revoke()
        # Nothing to commit until the next assignment (and no commit may queue behind a
        # parked JoinGroup on the coordinator's connection).
        self._forget_positions()

    # -- heartbeats --------------------------------------------------------------------------

    def _start_heartbeat(self, nursery: trio.Nursery) -> None:
        scope = trio.CancelScope()
        self._heartbeat_scope = scope
        nursery.start_soon(self._heartbeat, scope)

    async def _stop_heartbeat(self) -> None:
        if self._heartbeat_scope is not None:
            self._heartbeat_scope.cancel()
            self._heartbeat_scope = None
        await trio.lowlevel.checkpoint()

    async def _heartbeat(self, scope: trio.CancelScope) -> None:
        """Keep our session alive; on any answer but NONE, ask for a rejoin and stop."""
        with scope:
            exc = await self._membership.heartbeats()
            if not scope.cancel_called:  # else: answered just as the loop stopped us: stale
                self._heartbeat_failed(exc)

    def _heartbeat_failed(self, exc: ApiError) -> None:
        if isinstance(exc, GENERATION_ERRORS):
            self._membership.in_generation = False  # our commits would be refused
        if isinstance(exc, REJOIN_ERRORS):
            self._request_rejoin(exc.name)
            return
        if isinstance(exc, COORDINATOR_ERRORS + (CoordinatorLoadInProgressError,)):
            self._coordinator.reset()
        self._request_rejoin(f"heartbeat failed: {exc}")

    # -- max_poll_interval_ms ----------------------------------------------------------------

    async def _watch_polls(self) -> None:
        """Kafka's ``max.poll.interval.ms``: when the application has held a record for that
        long without asking for the next, the member leaves the group so that the others
        take its partitions (from the last commit: at-least-once); it rejoins when the
        application asks for a record again."""
        since: dict[MessageStream, tuple[int, float]] = {}  # stream -> (handed, first seen)
        while True:
            await trio.sleep(min(self._max_poll_s / 4, 1.0))
            now = trio.current_time()
            for stream in self._outlets:
                if not stream.holding:
                    since.pop(stream, None)
                    continue
                handed, first = since.setdefault(stream, (stream.records_handed, now))
                if handed != stream.records_handed:
                    since[stream] = (stream.records_handed, now)
                elif now - first >= self._max_poll_s and self.owned and self.poll_expired is None:
                    log.warning(
                        "consumer %s (group %s): stream %s has held a record for over "
                        "max_poll_interval_ms (%.0f s): leaving the group; its partitions go "
                        "to the other members, and it rejoins at the next record asked for",
                        self.consumer_id, self.group_id, stream.name, self._max_poll_s)
                    self.poll_expired = stream
                    self._polls_resumed = trio.Event()
                    self._request_rejoin("max_poll_interval_ms passed")

    async def _leave_until_polled(self) -> None:
        """Commit what was processed, leave the group, wait for the application."""
        await self._revoke_partitions()
        await self._membership.leave()
        await self._polls_resumed.wait()

    def resume_polling(self) -> None:
        super().resume_polling()
        self._polls_resumed.set()
        self._request_rejoin("the application asks for records again")

    # -- topic and partition changes -------------------------------------------------------------

    async def _watch_metadata(self) -> None:
        """Every ``metadata_max_age_ms``: does our subscription still match the cluster's
        topics, and (leader) do the group's topics still have the partitions it assigned?"""
        while True:
            await trio.sleep(self.config.metadata_max_age_ms / 1000)
            if self._rejoin_needed.is_set():
                continue
            try:
                meta = await self._client.refresh_metadata()
            except TrilogError as exc:
                log.debug("metadata refresh failed: %s", exc)
                continue
            topics = self._subscribed_topics(meta)
            if topics != self._subscription:
                self._request_rejoin(f"subscribed topics changed: {list(self._subscription)} "
                                     f"-> {list(topics)}")
            elif self.is_leader and any(
                    tuple(meta.partitions_for(t) or ()) != parts
                    for t, parts in self._membership.group_partitions.items()):
                self._request_rejoin("the partitions of a subscribed topic changed")

    # -- offsets ---------------------------------------------------------------------------------

    async def commit_offsets(self) -> None:
        """Commit the offsets the application finished processing (only changed ones).

        Raises ``IllegalGenerationError``, ``UnknownMemberIdError`` or
        ``RebalanceInProgressError`` when the group has moved on (the member then rejoins;
        the partitions may already be someone else's)."""
        try:
            await super().commit_offsets()
        except REJOIN_ERRORS as exc:
            if not isinstance(exc, RebalanceInProgressError):
                self._membership.in_generation = False
            self._request_rejoin(f"commit refused: {exc.name}")
            raise

    # -- closing ----------------------------------------------------------------------------------

    async def close(self) -> None:
        """Commit processed offsets and leave the group (clean shutdown)."""
        await self._stop_heartbeat()
        await self._stop_fetchers()
        try:
            if self.member_id:
                # Our own connection: the tasks holding the usual ones may be cancelled.
                async with self._coordinator.connection_in_this_task():
                    try:
                        await self._revoke_partitions(commit_timeout_s=5)
                    finally:
                        await self._membership.leave()
        finally:
            self._membership.in_generation = False
            await self._revoke_partitions()  # only local now: nothing left to commit
            self._coordinator.reset()


@asynccontextmanager
async def open_broker_consumer(config: GroupConfig
                               ) -> AsyncIterator[BrokerConsumerConnector[Any]]:
    """``open_consumer(..., coordination="broker")`` (see there and the module docstring)."""
    with unwrap_exception_group():
        async with open_client(config.bootstrap_servers,
                               zookeeper=config.zookeeper if config.bootstrap_servers is None
                               else None,
                               client_id=config.client_name,
                               request_timeout_ms=config.request_timeout_ms,
                               metadata_max_age_ms=config.metadata_max_age_ms,
                               allow_auto_create_topics=False,
                               security=config.security) as client:
            # The coordinator's connection lives in its own nursery, which outlives the
            # member's tasks: close() still commits and leaves through it.
            async with trio.open_nursery() as holder:
                coordinator = Coordinator(client, config.group_id, nursery=holder)
                try:
                    connector: BrokerConsumerConnector[Any] = BrokerConsumerConnector(
                        config, client, coordinator)
                    async with running(connector):
                        yield connector
                finally:
                    holder.cancel_scope.cancel()
