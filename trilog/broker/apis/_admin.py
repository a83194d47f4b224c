"""The admin APIs Kafka's tools call beside the topic ones: CreatePartitions (37),
DeleteRecords (21), DescribeLogDirs (35), DeleteGroups (42) and OffsetDelete (47).

``AdminApis.apis()`` says which handler serves which, as every part of the broker does.
The decisions live where the state does: growing a topic is
the cluster's (``Cluster.create_partitions``: standalone, or the assignment znode in
ZooKeeper mode), moving a log start offset is storage's (``LogManager.
delete_records_before``), deleting groups and offsets is the group coordinator's.  This
module turns requests into those calls and their outcomes into Kafka's answers.

Error policy, as Kafka's broker: every request that decodes is answered; a problem with one
topic, partition or group is that entry's error code, never a closed connection:

- CreatePartitions: INVALID_REQUEST for a topic named twice, UNKNOWN_TOPIC_OR_PARTITION,
  INVALID_PARTITIONS (never shrink, not the same count), INVALID_REPLICA_ASSIGNMENT,
  the partition budget's errors; REQUEST_TIMED_OUT for a change made with ``timeout_ms``
  <= 0 (Kafka's answer: made, but not waited for).
- DeleteRecords: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
  INVALID_TOPIC_EXCEPTION for an internal topic, OFFSET_OUT_OF_RANGE above the high
  watermark, POLICY_VIOLATION for a compact-only topic, KAFKA_STORAGE_ERROR; the low
  watermark (the new log start offset) otherwise.
- DescribeLogDirs: every log dir with the partitions asked for (null: all), their sizes,
  and an offset lag (how far its log end is behind its high watermark; 0 on a leader).
- DeleteGroups / OffsetDelete: see ``GroupCoordinator.delete_groups`` and
  ``GroupCoordinator.delete_offsets``; OffsetDelete answers UNKNOWN_TOPIC_OR_PARTITION for a
  partition that does not exist and a group-level error in the top-level code.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Mapping

import trio

from trilog._topic import PartitionKey
from trilog.broker.cluster import INTERNAL_TOPICS, Cluster
from trilog.broker.groups import GroupCoordinator
from trilog.broker.network import ApiHandler
from trilog.broker.security import Access, AclOperation, ResourceType
from trilog.errors import (
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    NO_ERROR,
    ApiError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    TrilogError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from trilog.protocol import (
    ApiKey,
    CreatePartitionsResponse,
    DeleteGroupsResponse,
    DeleteRecordsResponse,
    DescribeLogDirsResponse,
    Message,
    OffsetDeleteResponse,
    RequestHeader,
    StructValue,
)
from trilog.storage import LogManager

log = logging.getLogger("trilog.broker.admin")


class AdminApis:
    """Serves CreatePartitions, DeleteRecords, DescribeLogDirs, DeleteGroups and
    OffsetDelete.  Runs in the trio thread; storage work goes to worker threads."""

    def __init__(self, cluster: Cluster, logs: LogManager, coordinator: GroupCoordinator,
                 access: Access, limiter: trio.CapacityLimiter) -> None:
        self.cluster = cluster
        self.logs = logs
        self.coordinator = coordinator
        self.access = access
        self.limiter = limiter

    def apis(self) -> Mapping[int, ApiHandler]:
        return {ApiKey.CREATE_PARTITIONS: self.create_partitions,
                ApiKey.DELETE_RECORDS: self.delete_records,
                ApiKey.DESCRIBE_LOG_DIRS: self.describe_log_dirs,
                ApiKey.DELETE_GROUPS: self.delete_groups,
                ApiKey.OFFSET_DELETE: self.offset_delete}

    # -- CreatePartitions ------------------------------------------------------------------

    async def create_partitions(self, request: Message, header: RequestHeader) -> Message:
        R = CreatePartitionsResponse
        named = Counter(t.name for t in request.topics)
        results: list[StructValue] = []
        answered: set[str] = set()
        for t in request.topics:
            if t.name in answered:
                continue
            answered.add(t.name)
            code, message = NO_ERROR, None
            try:
                if not self.access(AclOperation.ALTER, ResourceType.TOPIC, t.name):
                    raise TopicAuthorizationFailedError(f"not authorized to alter {t.name}")
                if named[t.name] > 1:
                    raise InvalidRequestError("Duplicate topic in request.")
                assignment = (None if t.assignments is None
                              else [list(a.broker_ids) for a in t.assignments])
                await self.cluster.create_partitions(t.name, t.count, assignment,
                                                     validate_only=request.validate_only)
                if request.timeout_ms <= 0 and not request.validate_only:
                    raise RequestTimedOutError("the partitions are being created; "
                                               "timeout_ms <= 0 does not wait for them")
            except ApiError as exc:
                code, message = exc.code, str(exc) or None
            except Exception as exc:  # answered all the same, as Kafka's broker does
                log.exception("CreatePartitions of %s failed", t.name)
                code, message = UnknownServerError.code, f"{type(exc).__name__}: {exc}"
            results.append(R.CreatePartitionsTopicResult(name=t.name, error_code=code,
                                                         error_message=message))
        await trio.lowlevel.checkpoint()
        return R(throttle_time_ms=0, results=results)

    # -- DeleteRecords -----------------------------------------------------------------------

    def _check_leader(self, topic: str, partition: int) -> None:
        """Raise the ApiError a DeleteRecords of this partition gets, if any."""
        leader = self.cluster.leader(topic, partition)
        if leader is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist")
        if topic in INTERNAL_TOPICS:
            raise InvalidTopicError(f"Cannot delete records of internal topic {topic}")
        if leader != self.cluster.broker.node_id:
            raise NotLeaderOrFollowerError(
                f"broker {self.cluster.broker.node_id} does not lead {topic}-{partition}")

    async def delete_records(self, request: Message, header: RequestHeader) -> Message:
        R = DeleteRecordsResponse
        T = R.DeleteRecordsTopicResult
        P = T.DeleteRecordsPartitionResult
        outcomes: dict[PartitionKey, tuple[int, int]] = {}  # (low watermark, error)
        work: list[tuple[PartitionKey, int]] = []
        for topic in request.topics:
            for part in topic.partitions:
                tp = (topic.name, part.partition_index)
                try:
                    if not self.access(AclOperation.DELETE, ResourceType.TOPIC, topic.name):
                        raise TopicAuthorizationFailedError(
                            f"not authorized to delete records of {topic.name}")
                    self._check_leader(*tp)
                except ApiError as exc:
                    outcomes[tp] = (-1, exc.code)
                    continue
                work.append((tp, part.offset))
        if work:
            outcomes.update(await trio.to_thread.run_sync(self._delete_all, work,
                                                          limiter=self.limiter))
        else:
            await trio.lowlevel.checkpoint()
        by_topic: dict[str, list[StructValue]] = {}
        for (name, index), (low, code) in outcomes.items():
            by_topic.setdefault(name, []).append(
                P(partition_index=index, low_watermark=low, error_code=code))
        return R(throttle_time_ms=0,
                 topics=[T(name=n, partitions=ps) for n, ps in by_topic.items()])

    def _delete_all(self, work: list[tuple[PartitionKey, int]]
                    ) -> dict[PartitionKey, tuple[int, int]]:
        """In a worker thread: each partition's (low watermark, error code)."""
        out: dict[PartitionKey, tuple[int, int]] = {}
        for (topic, partition), offset in work:
            try:
                low = self.logs.delete_records_before(topic, partition, offset)
                out[(topic, partition)] = (low, NO_ERROR)
            except UnknownTopicOrPartitionError:
                # The view says we lead it, but its log is gone (deleted meanwhile).
                out[(topic, partition)] = (-1, NotLeaderOrFollowerError.code)
            except ApiError as exc:  # OFFSET_OUT_OF_RANGE, POLICY_VIOLATION
                out[(topic, partition)] = (-1, exc.code)
            except OSError as exc:
                log.error("DeleteRecords of %s-%d failed: %s", topic, partition, exc)
                out[(topic, partition)] = (-1, KafkaStorageError.code)
            except TrilogError as exc:  # a closed log: the broker is stopping
                log.warning("DeleteRecords of %s-%d failed: %s", topic, partition, exc)
                out[(topic, partition)] = (-1, NotLeaderOrFollowerError.code)
            except Exception:
                log.exception("DeleteRecords of %s-%d failed", topic, partition)
                out[(topic, partition)] = (-1, UnknownServerError.code)
        return out

    # -- DescribeLogDirs ---------------------------------------------------------------------

    async def describe_log_dirs(self, request: Message, header: RequestHeader) -> Message:
        await trio.lowlevel.checkpoint()
        R = DescribeLogDirsResponse
        D = R.DescribeLogDirsResult
        T = D.DescribeLogDirsTopic
        P = T.DescribeLogDirsPartition
        if not self.access(AclOperation.DESCRIBE, ResourceType.CLUSTER):
            # (Kafka answers an empty list; v2+ would carry CLUSTER_AUTHORIZATION_FAILED)
            return R(throttle_time_ms=0, results=[])
        wanted: set[PartitionKey] | None = None
        if request.topics is not None:
            wanted = {(t.topic, p) for t in request.topics for p in t.partitions}
        by_dir: dict[str, dict[str, list[StructValue]]] = {
            os.path.abspath(d): {} for d in self.logs.log_dirs}
        for lg in sorted(self.logs.logs(), key=lambda lg: (lg.topic, lg.partition)):
            if wanted is not None and (lg.topic, lg.partition) not in wanted:
                continue
            topics = by_dir.setdefault(os.path.abspath(os.path.dirname(lg.directory)), {})
            topics.setdefault(lg.topic, []).append(P(
                partition_index=lg.partition, partition_size=lg.size_in_bytes,
                offset_lag=max(lg.high_watermark - lg.log_end_offset, 0), is_future_key=False))
        return R(throttle_time_ms=0, results=[
            D(error_code=NO_ERROR, log_dir=d,
              topics=[T(name=name, partitions=parts) for name, parts in topics.items()])
            for d, topics in by_dir.items()])

    # -- DeleteGroups / OffsetDelete ---------------------------------------------------------

    async def delete_groups(self, request: Message, header: RequestHeader) -> Message:
        R = DeleteGroupsResponse
        codes = await self.coordinator.delete_groups(list(request.groups_names))
        return R(throttle_time_ms=0, results=[
            R.DeletableGroupResult(group_id=gid, error_code=code) for gid, code in codes.items()])

    async def offset_delete(self, request: Message, header: RequestHeader) -> Message:
        R = OffsetDeleteResponse
        T = R.OffsetDeleteResponseTopic
        P = T.OffsetDeleteResponsePartition
        codes: dict[PartitionKey, int] = {}
        known: list[PartitionKey] = []
        if not self.access(AclOperation.DELETE, ResourceType.GROUP, request.group_id):
            await trio.lowlevel.checkpoint()
            return R(error_code=GroupAuthorizationFailedError.code, throttle_time_ms=0,
                     topics=[])
        for topic in request.topics:
            for part in topic.partitions:
                tp = (topic.name, part.partition_index)
                if not self.access(AclOperation.READ, ResourceType.TOPIC, topic.name):
                    codes[tp] = TopicAuthorizationFailedError.code
                elif self.cluster.leader(*tp) is None:
                    codes[tp] = UnknownTopicOrPartitionError.code
                else:
                    known.append(tp)
        group_code, deleted = await self.coordinator.delete_offsets(request.group_id, known)
        if group_code != NO_ERROR:
            return R(error_code=group_code, throttle_time_ms=0, topics=[])
        codes.update(deleted)
        by_topic: dict[str, list[StructValue]] = {}
        for (name, index), code in codes.items():
            by_topic.setdefault(name, []).append(P(partition_index=index, error_code=code))
        return R(error_code=NO_ERROR, throttle_time_ms=0,
                 topics=[T(name=n, partitions=ps) for n, ps in by_topic.items()])
