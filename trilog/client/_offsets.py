"""Where a group's consumed offsets are kept: ZooKeeper or the broker's offset manager.

Both stores take and give ``{(topic, partition): next offset to consume}``.

- ``ZooKeeperOffsetStore``: ``/consumers/<group>/offsets/<topic>/<partition>`` holds the
  offset as decimal text (seed 001, "Consumer Offsets").
- ``BrokerOffsetStore``: OffsetCommit / OffsetFetch to the group's coordinator, found with
  FindCoordinator (seed 001, "Offset management"); retried while the coordinator moves or
  loads.
"""

from __future__ import annotations

import logging

import trio

from trilog.client._client import Client
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


class BrokerOffsetStore:
    def __init__(self, client: Client, group_id: str) -> None:
        self._client = client
        self._group = group_id
        self._coordinator: Node | None = None

    async def _find_coordinator(self) -> Node:
        if self._coordinator is not None:
            return self._coordinator
        conn = await self._client.any_connection()
        response = await conn.request(FindCoordinatorRequest(key=self._group, key_type=0))
        if response.error_code:
            raise error_for_code(response.error_code)
        self._coordinator = Node(response.node_id, response.host, response.port)
        return self._coordinator

    async def _request(self, request):
        """Send to the coordinator, rediscovering and retrying on retriable errors."""
        delay = 0.05
        last: BaseException | None = None
        for _ in range(_ATTEMPTS):
            try:
                node = await self._find_coordinator()
                conn = await self._client.connection(node)
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
                    self._coordinator = None
                await trio.sleep(delay)
                delay = min(delay * 2, 1.0)
        raise last if last is not None else TrilogError("offset request failed")

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        R = OffsetCommitRequest
        by_topic: dict[str, list] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(R.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_metadata=""))
        await self._request(R(group_id=self._group, generation_id_or_member_epoch=-1,
                              member_id="", retention_time_ms=-1,
                              topics=[R.OffsetCommitRequestTopic(name=t, partitions=p)
                                      for t, p in by_topic.items()]))

    async def fetch(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        R = OffsetFetchRequest
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
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
