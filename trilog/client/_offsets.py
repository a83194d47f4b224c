"""Where a group's consumed offsets are kept: ZooKeeper or the broker's offset manager.

Both stores take and give ``{(topic, partition): next offset to consume}``.

- ``ZooKeeperOffsetStore``: ``/consumers/<group>/offsets/<topic>/<partition>`` holds the
  offset as decimal text (seed 001, "Consumer Offsets").
- ``BrokerOffsetStore``: OffsetCommit / OffsetFetch to the group's coordinator, found with
  FindCoordinator (seed 001, "Offset management"); retried while the coordinator moves or
  loads.  A member of a broker-coordinated group commits with its generation and member id.
- ``Coordinator``: finds the group's coordinator and holds the connection group requests
  go on (shared with the client's, or dedicated).
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import AsyncIterator

import trio

from trilog.client._client import Client
from trilog.client._connection import BrokerConnection, open_connection
from trilog.client._metadata import Node
from trilog.errors import (
    ApiError,
    CoordinatorLoadInProgressError,
    NetworkError,
    RequestTimedOutError,
    TrilogError,
    error_for_code,
)
from trilog.protocol import FindCoordinatorRequest, OffsetCommitRequest, OffsetFetchRequest

log = logging.getLogger("trilog.consumer.offsets")

TopicPartition = tuple[str, int]
_ATTEMPTS = 10


class ZooKeeperOffsetStore:
    def __init__(self, zk, group_id: str) -> None:
        self._zk = zk
        self._group = group_id

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        from trilog.zk import consumer_offset_path

        for (topic, partition), offset in sorted(offsets.items()):
            await self._zk.put(consumer_offset_path(self._group, topic, partition),
                               str(offset).encode())

    async def fetch(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        from trilog.zk import NoNodeError, consumer_offset_path

        out = {}
        for topic, partition in partitions:
            try:
                raw = await self._zk.get(consumer_offset_path(self._group, topic, partition))
            except NoNodeError:
                continue
            try:
                out[(topic, partition)] = int(raw.decode().strip())
            except ValueError:
                log.warning("ignoring malformed offset %r of %s-%d", raw, topic, partition)
        return out


class Coordinator:
    """A group's coordinator: found with FindCoordinator, forgotten (``reset``) when it fails.

    Without a ``nursery`` requests share the client's connection to that broker.  With one,
    they go on a connection of their own, held by a task in ``nursery``, as Kafka's clients
    do: a JoinGroup parks for the whole rebalance and responses come back in order per
    connection, so group requests must not queue behind fetches or metadata (or make them
    time out).
    """

    def __init__(self, client: Client, group_id: str, *,
                 nursery: trio.Nursery | None = None) -> None:
        self._client = client
        self.group_id = group_id
        self._nursery = nursery
        self._node: Node | None = None
        self._conn: BrokerConnection | None = None
        self._conn_scope: trio.CancelScope | None = None
        self._pinned: BrokerConnection | None = None
        self._lock = trio.Lock()

    @property
    def known(self) -> Node | None:
        return self._node

    async def node(self) -> Node:
        """The coordinator, asking a broker (FindCoordinator) if it is not known."""
        if self._node is not None:
            await trio.lowlevel.checkpoint()
            return self._node
        conn = await self._client.any_connection()
        response = await conn.request(FindCoordinatorRequest(key=self.group_id, key_type=0))
        if response.error_code:
            raise error_for_code(response.error_code)
        self._node = Node(response.node_id, response.host, response.port)
        return self._node

    async def connection(self) -> BrokerConnection:
        """The connection to the coordinator (found and connected on first use)."""
        if self._pinned is not None and not self._pinned.closed:
            await trio.lowlevel.checkpoint()
            return self._pinned
        async with self._lock:
            if self._nursery is None:
                return await self._client.connection(await self.node())
            if self._conn is not None and not self._conn.closed:
                return self._conn
            node = await self.node()
            self._conn, self._conn_scope = await self._nursery.start(self._hold, node)
            return self._conn

    async def _hold(self, node: Node, *, task_status) -> None:
        with trio.CancelScope() as scope:
            async with open_connection(node.host, node.port, client_id=self._client.client_id,
                                       request_timeout_s=self._client.request_timeout_s) as conn:
                task_status.started((conn, scope))
                await conn.wait_closed()

    @asynccontextmanager
    async def connection_in_this_task(self) -> AsyncIterator[BrokerConnection]:
        """Inside, requests to the coordinator go on a connection the calling task opens
        and owns.

        For shutdown: when the scope around a consumer is cancelled, so are the tasks that
        hold connections (the client's and ours); a shielded ``close()`` still reaches the
        coordinator through this one.
        """
        node = self._node
        if node is None:
            node = await self._find_directly()
        async with open_connection(node.host, node.port, client_id=self._client.client_id,
                                   request_timeout_s=self._client.request_timeout_s) as conn:
            self._pinned = conn
            try:
                yield conn
            finally:
                self._pinned = None

    async def _find_directly(self) -> Node:
        errors = []
        for broker in self._client.metadata.value.brokers.values():
            try:
                async with open_connection(broker.host, broker.port,
                                           client_id=self._client.client_id,
                                           request_timeout_s=self._client.request_timeout_s
                                           ) as conn:
                    response = await conn.request(
                        FindCoordinatorRequest(key=self.group_id, key_type=0))
            except (NetworkError, RequestTimedOutError) as exc:
                errors.append(str(exc))
                continue
            if response.error_code:
                raise error_for_code(response.error_code)
            self._node = Node(response.node_id, response.host, response.port)
            return self._node
        raise NetworkError("cannot find the coordinator: " + "; ".join(errors or ["no brokers known"]))

    def reset(self) -> None:
        """Forget the coordinator (it moved or failed): the next request finds it again."""
        self._node = None
        self._conn = None
        if self._conn_scope is not None:
            self._conn_scope.cancel()
            self._conn_scope = None


class BrokerOffsetStore:
    """Offsets in the broker's offset manager, through the group's ``Coordinator``.

    A member of a broker-coordinated group sets ``generation_id`` and ``member_id``: its
    commits are then fenced by the coordinator (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
    REBALANCE_IN_PROGRESS are raised at once, never retried).  The defaults (-1, "") are a
    commit outside group management, as the ZooKeeper connector's.
    """

    def __init__(self, client: Client, group_id: str, *,
                 coordinator: Coordinator | None = None) -> None:
        self._client = client
        self._group = group_id
        self.coordinator = coordinator or Coordinator(client, group_id)
        self.generation_id = -1
        self.member_id = ""

    async def _request(self, request, attempts: int = _ATTEMPTS):
        """Send to the coordinator, rediscovering and retrying on retriable errors."""
        delay = 0.05
        last: BaseException | None = None
        for _ in range(attempts):
            try:
                conn = await self.coordinator.connection()
                response = await conn.request(request)
                code = _first_error(response)
                if code == 0:
                    return response
                raise error_for_code(code)
            except (NetworkError, RequestTimedOutError, ApiError) as exc:
                if isinstance(exc, ApiError) and not exc.retriable:
                    raise
                last = exc
                if not isinstance(exc, CoordinatorLoadInProgressError):
                    self.coordinator.reset()
                await trio.sleep(delay)
                delay = min(delay * 2, 1.0)
        raise last if last is not None else TrilogError("offset request failed")

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        R = OffsetCommitRequest
        by_topic: dict[str, list] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(R.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_metadata=""))
        await self._request(R(group_id=self._group,
                              generation_id_or_member_epoch=self.generation_id,
                              member_id=self.member_id, retention_time_ms=-1,
                              topics=[R.OffsetCommitRequestTopic(name=t, partitions=p)
                                      for t, p in by_topic.items()]))

    async def fetch(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        R = OffsetFetchRequest
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        if not by_topic:
            await trio.lowlevel.checkpoint()
            return {}
        response = await self._request(R(group_id=self._group, topics=[
            R.OffsetFetchRequestTopic(name=t, partition_indexes=p) for t, p in by_topic.items()]))
        return {(t.name, p.partition_index): p.committed_offset
                for t in response.topics for p in t.partitions if p.committed_offset >= 0}


def _first_error(response) -> int:
    code = getattr(response, "error_code", 0) or 0
    if code:
        return code
    for t in getattr(response, "topics", ()) or ():
        for p in getattr(t, "partitions", ()) or ():
            if getattr(p, "error_code", 0):
                return p.error_code
    return 0
