"""ListOffsets (2): offsets by time (the earliest, the latest, the first at or after a
timestamp), or v0's list of segment base offsets before a time.

The principal needs Describe on each topic, and the partition must be led here.  A
consumer's latest offset is the high watermark (READ_UNCOMMITTED, the log end on a
standalone broker), or with ``isolation_level`` 1 (READ_COMMITTED, v2+) the last stable
offset: the first offset of a transaction still open.  The lookups read only indexes and batch headers (and the
records of the one batch a timestamp falls in), in one hop to a worker thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import trio

from trilog.broker.network import ApiHandler
from trilog.broker.replication import ReplicaManager, partition_error
from trilog.broker.security import Access, AclOperation, ResourceType
from trilog.errors import ApiError, TopicAuthorizationFailedError, UnknownTopicOrPartitionError
from trilog.protocol import ApiKey, ListOffsetsResponse, RequestHeader
from trilog.storage import LATEST_TIMESTAMP

#: ``isolation_level`` of ListOffsets and Fetch: 0 READ_UNCOMMITTED, 1 READ_COMMITTED.
READ_COMMITTED = 1


class _Wanted(NamedTuple):
    topic: str
    partition: int
    timestamp: int
    max_offsets: int  # v0's max_num_offsets


class _Found(NamedTuple):
    error: int
    old_style_offsets: list[int]  # v0
    timestamp: int = -1
    offset: int = -1


class ListOffsetsApi:
    """Serves ListOffsets.  Runs in the trio thread; lookups go to a worker thread."""

    def __init__(self, replicas: ReplicaManager, access: Access,
                 limiter: trio.CapacityLimiter) -> None:
        self.replicas = replicas
        self.logs = replicas.logs
        self.access = access
        self.limiter = limiter

    def apis(self) -> Mapping[int, ApiHandler]:
        return {ApiKey.LIST_OFFSETS: self.list_offsets}

    async def list_offsets(self, request: Any, header: RequestHeader) -> Any:
        version = header.api_version
        wanted = [_Wanted(t.name, p.partition_index, p.timestamp, p.max_num_offsets)
                  for t in request.topics for p in t.partitions]
        checked = [self._check(w) for w in wanted]
        committed = version >= 2 and request.isolation_level == READ_COMMITTED
        answers = await trio.to_thread.run_sync(self._lookups, version, wanted, checked,
                                                committed, limiter=self.limiter)
        R = ListOffsetsResponse
        PR = R.ListOffsetsTopicResponse.ListOffsetsPartitionResponse
        by_topic: dict[str, list] = {}
        for w, found in zip(wanted, answers):
            by_topic.setdefault(w.topic, []).append(
                PR(partition_index=w.partition, error_code=found.error,
                   old_style_offsets=found.old_style_offsets, timestamp=found.timestamp,
                   offset=found.offset))
        return R(throttle_time_ms=0,
                 topics=[R.ListOffsetsTopicResponse(name=t, partitions=p)
                         for t, p in by_topic.items()])

    def _check(self, w: _Wanted) -> int:
        try:
            if not self.access(AclOperation.DESCRIBE, ResourceType.TOPIC, w.topic):
                raise TopicAuthorizationFailedError(f"not authorized to describe {w.topic}")
            self.replicas.leader_partition((w.topic, w.partition))
        except ApiError as exc:
            return exc.code
        return 0

    def _lookups(self, version: int, wanted: list[_Wanted], checked: list[int],
                 committed: bool) -> list[_Found]:
        """Blocking (a worker thread): each partition's answer."""
        out = []
        for w, error in zip(wanted, checked):
            if error:
                out.append(_Found(error, []))
                continue
            lg = self.logs.get_log(w.topic, w.partition)
            if lg is None:
                out.append(_Found(UnknownTopicOrPartitionError.code, []))
                continue
            try:
                if version == 0:
                    out.append(_Found(0, list(lg.offsets_before(w.timestamp, w.max_offsets))))
                    continue
                if w.timestamp == LATEST_TIMESTAMP:
                    out.append(_Found(0, [], -1, lg.last_stable_offset if committed
                                      else lg.high_watermark))
                    continue
                found = lg.offset_for_timestamp(w.timestamp)
            except Exception as exc:
                out.append(_Found(partition_error(exc, "offset lookup", w.topic, w.partition),
                                  []))
                continue
            out.append(_Found(0, []) if found is None
                       else _Found(0, [], found.timestamp, found.offset))
        return out
