"""The ZooKeeper consumer connector: the seeds' high-level group consumer.

    async with open_consumer_connector("g", zookeeper="zk:2181", topics={"events": 2}) as c:
        async for record in c.streams["events"][0]: ...

Registration (seed 001, "Consumer registration algorithm"): the consumer registers
``/consumers/<group>/ids/<consumer id>`` (ephemeral JSON with its subscription), watches the
group's ids, ``/brokers/ids`` and, with a topic filter, ``/brokers/topics``; every watch
fires into one **rebalance loop** task that coalesces bursts and rebalances:

1. commit processed offsets; tell the rebalance listener (``listener``) the partitions are
   revoked; release them;
2. read the group's members and subscriptions and the topics' partitions, and compute the
   range assignment (``_assignment.assign_group``: every member computes the same answer);
3. claim its partitions with ephemeral ``/consumers/<group>/owners/<topic>/<partition>``
   nodes, backing off ``rebalance_backoff_ms`` and trying again while a previous owner has
   not let go; after ``rebalance_max_retries`` more attempts, all failed, without the group
   changing meanwhile (a change starts the count over), the rebalance fails with
   ``ConsumerRebalanceFailedError``, as Kafka 0.8's connector did;
4. read the committed offsets (``auto_offset_reset`` where there are none), let the fetcher
   (Kafka's consumer's, ``_base``: one fetch task per leader broker) fill the bounded queues
   of the streams, and tell the listener the partitions are assigned.

Offsets go to ``/consumers/<group>/offsets/<topic>/<partition>``
(``offsets_storage="zookeeper"``, the default), to the broker's offset manager
(``"kafka"``), or both (``dual_commit_enabled``, the seed's migration path: reads take the
larger of the two).

``trilog.zk`` (and with it kazoo) is imported only when a connector runs.
"""

from __future__ import annotations

import json
import logging
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, aclosing, asynccontextmanager
from typing import TYPE_CHECKING, Any

import trio

from trilog._concurrency import unwrap_exception_group
from trilog._time import now_ms
from trilog.client._assignment import Blacklist, Whitelist, assign_group, thread_ids
from trilog.client._client import Client, open_client
from trilog.client._offsets import BrokerOffsetStore, ZooKeeperOffsetStore
from trilog.client._retry import Backoff
from trilog.client.connector._base import GroupConsumerConnector, Streams, running
from trilog.client.connector._config import ConnectorSubscription, GroupConfig
from trilog.client.consumer import TopicPartition
from trilog.errors import ProtocolError, TrilogError

if TYPE_CHECKING:
    from trio_util import AsyncValue

    from trilog.zk import ZooKeeper

log = logging.getLogger("trilog.consumer.group")


class ConsumerRebalanceFailedError(TrilogError):
    """A rebalance could not claim its partitions within ``rebalance_max_retries``."""


class ZooKeeperConsumerConnector(GroupConsumerConnector[Streams]):
    """See the module docstring.  Open with ``open_consumer_connector(...,
    zookeeper=...)``."""

    def __init__(self, wanted: ConnectorSubscription, config: GroupConfig, client: Client,
                 zk: ZooKeeper) -> None:
        super().__init__(wanted, config, client)
        self._consumer_id = config.consumer_id or \
            f"{socket.gethostname()}-{uuid.uuid4().hex[:12]}"
        self._zk = zk
        backoff_s = config.rebalance_backoff_ms / 1000
        self._retry = Backoff(backoff_s, backoff_s, max_attempts=config.rebalance_max_retries + 1)
        if config.offsets_in_zookeeper:
            self._stores.append(ZooKeeperOffsetStore(zk, self.group_id))
        if config.offsets_in_broker:
            self._stores.append(BrokerOffsetStore(client, self.group_id))
        self._rebalance_needed = trio.Event()

    @property
    def consumer_id(self) -> str:
        return self._consumer_id

    # -- registration ------------------------------------------------------------------------

    def _registration(self) -> bytes:
        topics, topic_filter = self._wanted.topics, self._wanted.topic_filter
        if topic_filter is None:
            subscription, pattern = dict(topics or {}), "static"
        else:
            subscription = {topic_filter.pattern: self.config.num_streams}
            pattern = topic_filter.kind
        return json.dumps({"version": 1, "subscription": subscription, "pattern": pattern,
                           "timestamp": str(now_ms())},
                          separators=(",", ":")).encode()

    async def _register(self) -> None:
        from trilog.zk import NodeExistsError, consumer_ids_path

        path = f"{consumer_ids_path(self.group_id)}/{self.consumer_id}"
        try:
            await self._zk.create(path, self._registration(), ephemeral=True, makepath=True)
        except NodeExistsError:
            await self._zk.set(path, self._registration())

    # -- the rebalance loop ------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        from trilog.zk import BROKER_IDS, BROKER_TOPICS, consumer_ids_path

        await self._register()
        watched = [consumer_ids_path(self.group_id), BROKER_IDS]
        if self._wanted.topic_filter is not None:
            watched.append(BROKER_TOPICS)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._fetcher.run)
            for path in watched:
                value = await self._zk.watch_children(path)
                nursery.start_soon(self._trigger_on_change, value)
            nursery.start_soon(self._session_keeper)
            if self.config.enable_auto_commit:
                nursery.start_soon(self._auto_committer)
            await self._rebalance_with_retries()
            task_status.started()
            while True:
                await self._rebalance_needed.wait()
                await trio.sleep(0.05)  # let a burst of watch events settle into one
                await self._rebalance_with_retries()

    async def _trigger_on_change(self, value: AsyncValue[Any]) -> None:
        async with aclosing(value.transitions()) as changes:
            async for _ in changes:
                self._rebalance_needed.set()

    async def _session_keeper(self) -> None:
        async with aclosing(self._zk.session_generation.transitions()) as sessions:
            async for _ in sessions:
                log.warning("consumer %s: ZooKeeper session expired; registering again",
                            self.consumer_id)
                await self._register()
                self._rebalance_needed.set()

    async def _rebalance_with_retries(self) -> None:
        """Step 3's retries (see the module docstring)."""
        while True:
            self._rebalance_needed = trio.Event()
            failure: BaseException | None = None
            tries = self._retry.attempts()
            async for attempt in tries:
                if attempt and self._rebalance_needed.is_set():
                    break  # the group changed again: start over with fresh data
                try:
                    if await self._rebalance():
                        self._rebalance_completed()
                        return
                except (TrilogError, OSError) as exc:
                    log.warning("consumer %s: rebalance attempt %d failed: %s",
                                self.consumer_id, attempt + 1, exc)
                    failure = exc
            else:
                if not self._rebalance_needed.is_set():
                    raise ConsumerRebalanceFailedError(
                        f"consumer {self.consumer_id} of group {self.group_id!r} could not "
                        f"claim its partitions in 1 + rebalance_max_retries = "
                        f"{1 + self.config.rebalance_max_retries} attempts") from failure

    async def _rebalance(self) -> bool:
        """One attempt; False if a partition was still owned by someone else."""
        await self._give_up()
        assignment = await self._compute_assignment()
        mine = {(topic, p): int(tid.rsplit("-", 1)[1])
                for tid in thread_ids(self.consumer_id, self._thread_count())
                for topic, parts in assignment.get(tid, {}).items() for p in parts}
        claimed = []
        for tp, index in sorted(mine.items()):
            if await self._claim(tp, f"{self.consumer_id}-{index}"):
                claimed.append(tp)
            else:
                log.info("consumer %s: %s-%d is still owned; backing off", self.consumer_id, *tp)
                for done in claimed:
                    await self._release(done)
                return False
        await self._assign(mine)
        log.info("consumer %s (group %s) owns %s", self.consumer_id, self.group_id,
                 sorted(mine))
        await self._tell_listener("on_partitions_assigned", {TopicPartition(*tp) for tp in mine})
        return True

    async def _give_up(self) -> None:
        """Step 1: commit what was processed, tell the listener, release the partitions."""
        owned = {TopicPartition(*tp) for tp in self.owned}
        self._subscription.mark_revoking(owned)  # nothing more goes on the queues
        await self.commit_offsets()
        if owned:
            await self._tell_listener("on_partitions_revoked", owned)
        await self._release_all()

    def _thread_count(self) -> int:
        topics = self._wanted.topics
        return max(topics.values()) if topics else self.config.num_streams

    async def _compute_assignment(self) -> dict[str, dict[str, list[int]]]:
        from trilog.zk import BROKER_TOPICS

        all_topics = await self._zk.get_children(BROKER_TOPICS)
        subscriptions = await self._subscriptions(all_topics)
        if self.consumer_id not in subscriptions:  # our own registration must count
            subscriptions[self.consumer_id] = self._my_subscription(all_topics)
        wanted = {t for sub in subscriptions.values() for t in sub}
        return assign_group(subscriptions, {t: await self._partitions_of(t) for t in wanted})

    async def _subscriptions(self, all_topics: list[str]) -> dict[str, dict[str, int]]:
        """``{consumer id: {topic: streams}}`` of every registered member (a filter's
        topics as it matches ``all_topics``)."""
        from trilog.zk import NoNodeError, consumer_ids_path

        subscriptions: dict[str, dict[str, int]] = {}
        for member in await self._zk.get_children(consumer_ids_path(self.group_id)):
            try:
                raw = await self._zk.get(f"{consumer_ids_path(self.group_id)}/{member}")
                reg = json.loads(raw.decode())
                sub = {str(k): int(v) for k, v in reg["subscription"].items()}
                kind = reg.get("pattern", "static")
            except NoNodeError:
                continue  # gone meanwhile; its ids watch will trigger another rebalance
            except (ValueError, KeyError, TypeError, AttributeError):
                log.warning("ignoring member %s with a malformed registration", member)
                continue
            if kind == "static":
                subscriptions[member] = sub
            else:
                cls = Whitelist if kind == "white_list" else Blacklist
                subscriptions[member] = {t: streams for regex, streams in sub.items()
                                         for t in cls(regex).select(all_topics)}
        return subscriptions

    async def _partitions_of(self, topic: str) -> list[int]:
        from trilog.zk import NoNodeError, decode_topic_assignment, topic_path

        try:
            return sorted(decode_topic_assignment(topic, await self._zk.get(topic_path(topic))))
        except (NoNodeError, ProtocolError):
            return []

    def _my_subscription(self, all_topics: list[str]) -> dict[str, int]:
        topics, topic_filter = self._wanted.topics, self._wanted.topic_filter
        if topic_filter is None:
            return dict(topics or {})
        return {t: self.config.num_streams for t in topic_filter.select(all_topics)}

    async def _claim(self, tp: tuple[str, int], thread: str) -> bool:
        from trilog.zk import NodeExistsError, consumer_owner_path

        path = consumer_owner_path(self.group_id, *tp)
        try:
            await self._zk.create(path, thread.encode(), ephemeral=True, makepath=True)
            return True
        except NodeExistsError:
            try:
                return (await self._zk.get(path)).decode() == thread
            except TrilogError:
                return False

    async def _release(self, tp: tuple[str, int]) -> None:
        from trilog.zk import NoNodeError, consumer_owner_path

        try:
            await self._zk.delete(consumer_owner_path(self.group_id, *tp))
        except NoNodeError:
            pass

    async def _release_all(self) -> None:
        owned = self._revoke()
        for tp in sorted(owned):
            await self._release(tp)

    # -- closing -----------------------------------------------------------------------------

    async def close(self) -> None:
        """Commit processed offsets, release partitions and deregister (clean shutdown)."""
        from trilog.zk import NoNodeError, consumer_ids_path

        try:
            async with AsyncExitStack() as stack:
                # Broker-stored offsets go on connections this task owns: when the scope
                # around the consumer was cancelled, the tasks holding the client's
                # connections are gone (see Coordinator.connection_in_this_task).
                for store in self._stores:
                    if isinstance(store, BrokerOffsetStore):
                        await stack.enter_async_context(
                            store.coordinator.connection_in_this_task())
                await self.commit_offsets()
            if self.owned:
                await self._tell_listener("on_partitions_revoked",
                                          {TopicPartition(*tp) for tp in self.owned})
        finally:
            await self._release_all()
            try:
                await self._zk.delete(f"{consumer_ids_path(self.group_id)}/{self.consumer_id}")
            except NoNodeError:
                pass


@asynccontextmanager
async def open_zookeeper_consumer(wanted: ConnectorSubscription, config: GroupConfig
                                  ) -> AsyncIterator[ZooKeeperConsumerConnector[Any]]:
    """``open_consumer_connector(..., coordination="zookeeper")`` (see there and the module
    docstring)."""
    from trilog.zk import open_zookeeper

    assert config.zookeeper is not None  # GroupConfig checked it
    with unwrap_exception_group():
        async with open_zookeeper(config.zookeeper,
                                  session_timeout_ms=config.zookeeper_session_timeout_ms) as zk, \
                open_client(zookeeper=config.zookeeper,
                            client_id=config.client_name(wanted.group_id),
                            allow_auto_create_topics=False, security=config.security) as client:
            connector: ZooKeeperConsumerConnector[Any] = ZooKeeperConsumerConnector(
                wanted, config, client, zk)
            async with running(connector):
                yield connector
