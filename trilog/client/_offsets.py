"""Where a group's consumed offsets are kept: ZooKeeper or the broker's offset manager.

Both stores take and give ``{(topic, partition): next offset to consume}``.

- ``ZooKeeperOffsetStore``: ``/consumers/<group>/offsets/<topic>/<partition>`` holds the
  offset as decimal text (seed 001, "Consumer Offsets").
- ``BrokerOffsetStore``: OffsetCommit / OffsetFetch to the group's ``Coordinator`` (seed
  001, "Offset management"), retried while it moves or loads.  A member of a
  broker-coordinated group commits with its generation and member id.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeVar

import trio

from trilog._topic import PartitionKey
from trilog.client._client import Client
from trilog.client._coordinator import Coordinator
from trilog.protocol import OffsetCommitRequest, OffsetFetchRequest

if TYPE_CHECKING:  # trilog.zk imports kazoo: only a client that uses ZooKeeper pays for it
    from trilog.zk import ZooKeeper

log = logging.getLogger("trilog.consumer.offsets")

_V = TypeVar("_V")


class ZooKeeperOffsetStore:
    def __init__(self, zk: ZooKeeper, group_id: str) -> None:
        self._zk = zk
        self._group = group_id

    async def commit(self, offsets: dict[PartitionKey, int]) -> None:
        from trilog.zk import consumer_offset_path

        for (topic, partition), offset in sorted(offsets.items()):
            await self._zk.put(consumer_offset_path(self._group, topic, partition),
                               str(offset).encode())

    async def fetch(self, partitions: list[PartitionKey]) -> dict[PartitionKey, int]:
        from trilog.zk import NoNodeError, consumer_offset_path

        out = {}
        for topic, partition in partitions:
            try:
                raw = await self._zk.get(consumer_offset_path(self._group, topic, partition))
            except NoNodeError:
                continue
            offset = parse_zookeeper_offset(raw)
            if offset is None:
                log.warning("ignoring malformed offset %r of %s-%d", raw, topic, partition)
            else:
                out[(topic, partition)] = offset
        return out


def parse_zookeeper_offset(data: bytes) -> int | None:
    """The offset an offsets node holds as decimal text; None if it holds something else."""
    try:
        return int(data.decode().strip())
    except ValueError:  # UnicodeDecodeError included
        return None


class BrokerOffsetStore:
    """Offsets in the broker's offset manager, through the group's ``Coordinator``.

    A member of a broker-coordinated group sets ``generation_id`` and ``member_id``: its
    commits are then fenced by the coordinator (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
    REBALANCE_IN_PROGRESS are raised at once, never retried).  The defaults (-1, "") are a
    commit outside group management, as the ZooKeeper connector's.

    ``require_stable`` (a read_committed consumer's store) asks OffsetFetch v7+ not to
    answer with offsets a transaction is about to replace (KIP-447): the coordinator says
    UNSTABLE_OFFSET_COMMIT until the transaction ends, and the fetch is retried.
    """

    def __init__(self, client: Client, group_id: str, *,
                 coordinator: Coordinator | None = None, require_stable: bool = False) -> None:
        self._client = client
        self._group = group_id
        self.require_stable = require_stable
        self.coordinator = coordinator or Coordinator(client, group_id)
        self.generation_id = -1
        self.member_id = ""
        self.group_instance_id: str | None = None

    async def commit(self, offsets: dict[PartitionKey, int],
                     metadata: Mapping[PartitionKey, str] | None = None) -> None:
        """Commit ``offsets``, each with its ``metadata`` string (default empty)."""
        R = OffsetCommitRequest
        P = R.OffsetCommitRequestTopic.OffsetCommitRequestPartition
        notes = metadata or {}
        await self.coordinator.request(R(
            group_id=self._group, generation_id_or_member_epoch=self.generation_id,
            member_id=self.member_id, group_instance_id=self.group_instance_id,
            retention_time_ms=-1,
            topics=[R.OffsetCommitRequestTopic(name=topic, partitions=[
                P(partition_index=p, committed_offset=offset,
                  committed_metadata=notes.get((topic, p), ""))
                for p, offset in sorted(by_partition.items())])
                for topic, by_partition in _by_topic(offsets).items()]))

    async def fetch(self, partitions: list[PartitionKey] | None
                    ) -> dict[PartitionKey, int]:
        """The committed offsets of ``partitions`` (None: of every partition the group has
        committed); a partition without one is left out."""
        R = OffsetFetchRequest
        topics = None
        if partitions is not None:
            if not partitions:
                await trio.lowlevel.checkpoint()
                return {}
            topics = [R.OffsetFetchRequestTopic(name=t, partition_indexes=sorted(ps))
                      for t, ps in _by_topic(dict.fromkeys(partitions)).items()]
        response = await self.coordinator.request(R(group_id=self._group, topics=topics,
                                                    require_stable=self.require_stable))
        return {(t.name, p.partition_index): p.committed_offset
                for t in response.topics for p in t.partitions if p.committed_offset >= 0}


def _by_topic(values: Mapping[PartitionKey, _V]) -> dict[str, dict[int, _V]]:
    """``{(topic, partition): v}`` -> ``{topic: {partition: v}}``, as requests nest them."""
    out: dict[str, dict[int, _V]] = {}
    for (topic, partition), value in sorted(values.items()):
        out.setdefault(topic, {})[partition] = value
    return out
