"""The broker-coordinated consumer connector: the seeds' streams, Kafka's group protocol, no
ZooKeeper.

    async with open_consumer_connector("g", bootstrap_servers="h:9092",
                                       topics={"events": 2}) as c:
        async for record in c.streams["events"][0]: ...

This is what kafka-python's ``KafkaConsumer(group_id=...)`` and Kafka's Java consumer do,
on the wire and in the group: protocol type ``consumer``, assignor ``range``, the standard
ConsumerProtocol bytes (``trilog.protocol``), so trilog and other Kafka consumers can
share a group.  The member is Kafka's consumer's own: a ``ConsumerCoordinator``
(``trilog.client.consumer``) runs its life in the group (join, heartbeats, the metadata and
poll watches, the rebalance listener, leave), and its partitions are fetched by Kafka's
consumer's ``Fetcher`` (``_base.GroupConsumerConnector``).  What this connector adds:

1. the partitions the group assigns are dealt round robin over the member's streams
   (``spread_over_streams``; Kafka assigns to members, not to threads), the committed
   offsets are read (OffsetFetch; ``auto_offset_reset`` where there are none) before the
   rebalance counts as completed, and each fetched answer goes on its stream's queue;
2. before its partitions are given up (a rejoin, leaving, closing) it commits the
   processed offsets while the generation is still its own (commits carry the generation
   and member id, and the coordinator fences them after a rebalance), and the queues are
   emptied (``generation`` moves on, so a stream drops what it still held);
3. ``max_poll_interval_ms`` counts per stream: a stream whose application has held a
   record that long takes the member out of the group until it is asked for the next.

As Kafka's consumer, the member heartbeats through a rebalance: REBALANCE_IN_PROGRESS asks
for a rejoin while the heartbeats go on until the JoinGroup goes out, so a slow revoke (a
listener, a commit) does not cost the member its session.

Clean shutdown: the coordinator commits the processed offsets and sends LeaveGroup (so the
others rebalance now, not a session timeout later) as the member's task ends.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import trio

from trilog._concurrency import unwrap_exception_group
from trilog.client._assignment import spread_over_streams
from trilog.client._client import Client, open_client
from trilog.client._coordinator import Coordinator
from trilog.client._offsets import BrokerOffsetStore
from trilog.client.connector._base import GroupConsumerConnector, Streams, running
from trilog.client.connector._config import ConnectorSubscription, GroupConfig
from trilog.client.connector._streams import MessageStream
from trilog.client.consumer import ConsumerCoordinator, GroupMembership, TopicPartition
from trilog.client.consumer._membership import REJOIN_ERRORS
from trilog.protocol import RANGE_ASSIGNOR

log = logging.getLogger("trilog.consumer.group")


class BrokerConsumerConnector(GroupConsumerConnector[Streams]):
    """See the module docstring.  Open with ``open_consumer_connector(...,
    coordination="broker")`` (the default without ``zookeeper``).

    ``member_id``, ``generation_id`` and ``leader_id`` are the group's current view of us;
    ``consumer_id`` is the member id once joined.
    """

    def __init__(self, wanted: ConnectorSubscription, config: GroupConfig, client: Client,
                 coordinator: Coordinator) -> None:
        super().__init__(wanted, config, client)
        self._store = BrokerOffsetStore(client, self.group_id, coordinator=coordinator)
        self._stores.append(self._store)
        self._subscription.subscribe(
            wanted.topics or (),
            wanted.topic_filter.select if wanted.topic_filter is not None else None)
        self._coordinator = ConsumerCoordinator(
            client, GroupMembership(
                client, coordinator, self.group_id, assignors=(RANGE_ASSIGNOR,),
                session_timeout_ms=config.session_timeout_ms,
                rebalance_timeout_ms=config.join_timeout_ms,
                heartbeat_interval_ms=config.heartbeat_interval_ms,
                retry_backoff_ms=config.retry_backoff_ms),
            self._subscription, _AsMember(self), session_timeout_ms=config.session_timeout_ms,
            max_poll_interval_ms=config.max_poll_interval_ms,
            metadata_max_age_ms=config.metadata_max_age_ms,
            retry_backoff_ms=config.retry_backoff_ms)

    @property
    def member_id(self) -> str:
        return self._coordinator.membership.member_id

    @property
    def generation_id(self) -> int:
        return self._coordinator.membership.generation_id

    @property
    def leader_id(self) -> str:
        return self._coordinator.membership.leader_id

    @property
    def consumer_id(self) -> str:
        return self.member_id or self._client.client_id

    @property
    def is_leader(self) -> bool:
        return self._coordinator.membership.is_leader

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._fetcher.run)
            nursery.start_soon(self._coordinator.run)
            await self._coordinator.assigned_once.wait()
            if self.config.enable_auto_commit:
                nursery.start_soon(self._auto_committer)
            task_status.started()

    async def _take(self, assigned: set[TopicPartition]) -> None:
        """Step 1 of the module docstring: the group gave us ``assigned``."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(assigned):
            by_topic.setdefault(topic, []).append(partition)
        topics = self._wanted.topics
        mine = spread_over_streams(
            by_topic, topics if topics is not None else self.config.num_streams)
        membership = self._coordinator.membership
        self._store.generation_id = membership.generation_id
        self._store.member_id = membership.member_id
        await self._assign(mine)
        self._rebalance_completed()

    def _expired(self, stream: MessageStream) -> None:
        log.warning("consumer %s (group %s): stream %s has held a record for over "
                    "max_poll_interval_ms (%.0f s): leaving the group; its partitions go to "
                    "the other members, and it rejoins at the next record asked for",
                    self.consumer_id, self.group_id, stream.name,
                    self.config.max_poll_interval_ms / 1000)
        self.poll_expired = stream

    def resume_polling(self) -> None:
        super().resume_polling()
        self._coordinator.resume_polls()

    async def commit_offsets(self) -> None:
        """Commit the offsets the application finished processing (only changed ones).

        Raises ``IllegalGenerationError``, ``UnknownMemberIdError`` or
        ``RebalanceInProgressError`` when the group has moved on (the member then rejoins;
        the partitions may already be someone else's)."""
        try:
            await super().commit_offsets()
        except REJOIN_ERRORS as exc:
            self._coordinator.commit_refused(exc)
            raise

    async def close(self) -> None:
        """Let go of what is left locally (the coordinator committed and left the group as
        the member's task ended) and forget the coordinator."""
        self._revoke()
        self._coordinator.membership.coordinator.reset()
        await trio.lowlevel.checkpoint()


class _AsMember:
    """A ``BrokerConsumerConnector`` as its coordinator sees it (``CoordinatedConsumer``)."""

    __slots__ = ("_connector",)

    def __init__(self, connector: BrokerConsumerConnector[Any]) -> None:
        self._connector = connector

    @property
    def failed(self) -> bool:
        return self._connector._failure is not None

    def fail(self, exc: BaseException) -> None:
        self._connector._fail(exc)

    async def commit_before_revoke(self, partitions: set[TopicPartition]) -> None:
        # Always (not only with auto-commit), as the seeds' connector at each rebalance.
        await self._connector.commit_offsets()

    async def partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self._connector._take(assigned)

    def partitions_dropped(self, dropped: set[TopicPartition]) -> None:
        connector = self._connector
        for tp in dropped:
            connector.owned.pop(tp, None)
        connector._dropped()

    def poll_marks(self) -> Mapping[Any, int]:
        connector = self._connector
        if not connector.owned:
            return {}
        return {stream: stream.records_handed for stream in connector._outlets
                if stream.holding}

    def poll_interval_expired(self, mark: Any) -> None:
        self._connector._expired(mark)

    def connections_in_this_task(self) -> AbstractAsyncContextManager[Any]:
        # One Coordinator for the group's requests and the commits: one connection.
        return self._connector._coordinator.membership.coordinator.connection_in_this_task()


@asynccontextmanager
async def open_broker_consumer(wanted: ConnectorSubscription, config: GroupConfig
                               ) -> AsyncIterator[BrokerConsumerConnector[Any]]:
    """``open_consumer_connector(..., coordination="broker")`` (see there and the module
    docstring)."""
    with unwrap_exception_group():
        async with open_client(config.bootstrap_servers,
                               zookeeper=config.zookeeper if config.bootstrap_servers is None
                               else None,
                               client_id=config.client_name(wanted.group_id),
                               request_timeout_ms=config.request_timeout_ms,
                               bootstrap_timeout_ms=config.bootstrap_timeout_ms,
                               metadata_max_age_ms=config.metadata_max_age_ms,
                               allow_auto_create_topics=False,
                               security=config.security) as client:
            # The coordinator's connection lives in its own nursery, which outlives the
            # member's tasks: leaving still commits and goes through it.
            async with trio.open_nursery() as holder:
                coordinator = Coordinator(client, wanted.group_id, nursery=holder)
                try:
                    connector: BrokerConsumerConnector[Any] = BrokerConsumerConnector(
                        wanted, config, client, coordinator)
                    async with running(connector):
                        yield connector
                finally:
                    holder.cancel_scope.cancel()
