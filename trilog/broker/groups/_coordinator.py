"""The group coordinator: the group APIs, the offset APIs (TxnOffsetCommit too) and where
groups live (FindCoordinator's key type 0).

A group's coordinator is the leader of partition ``abs(hashCode(group)) % n`` of
``__consumer_offsets`` (``offsets.topic.num.partitions``, or the topic's real count once it
exists).  The topic is created on the first FindCoordinator (standalone: here; ZooKeeper
mode: through the cluster, spread over the live brokers like any topic).

Answers before a group can be served, as Kafka's (FindCoordinator itself is
``apis/_find_coordinator.py``, which asks ``coordinator_for``):

- COORDINATOR_NOT_AVAILABLE: the offsets topic does not exist yet, its partition has no
  leader, or this broker is shutting down;
- NOT_COORDINATOR: another broker leads the group's partition;
- COORDINATOR_LOAD_IN_PROGRESS: this broker leads it but is still reading it (see
  ``_offsets.py``).

Membership is ``_groups.py``; committed offsets are ``_offsets.py``.  ``run()`` holds the
background work in one nursery: a watcher that takes on (loads) and lets go of offsets
partitions as leadership shows up in the cluster view, one timer task for every group
deadline (join phases, sessions), and the periodic offset expiry.  On broker shutdown every
parked JoinGroup/SyncGroup is answered (NOT_COORDINATOR) so connections can drain.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import trio

from trilog import _time
from trilog.broker.cluster._cluster import Cluster
from trilog.broker.configs._broker_config import BrokerConfig
from trilog.broker.groups._group import (
    Group,
    GroupState,
    JoinResult,
    Reply,
    SyncResult,
)
from trilog.broker.network import ApiHandler
from trilog.broker.security._acls import Access
from trilog.broker.security._authorizer import AclOperation, ResourceType
from trilog.broker.network._network import current_session
from trilog.broker.groups._offsets import OFFSETS_TOPIC, OffsetManager, partition_for
from trilog.errors import (
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    UnstableOffsetCommitError,
    NO_ERROR,
    ApiError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InvalidGroupIdError,
    InvalidRequestError,
    InvalidSessionTimeoutError,
    NonEmptyGroupError,
    NotCoordinatorError,
    OffsetMetadataTooLargeError,
    TopicAlreadyExistsError,
    TransactionalIdAuthorizationFailedError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
)
from trilog.protocol import (
    AUTHORIZED_OPERATIONS_OMITTED,
    CONSUMER_PROTOCOL_TYPE,
    ApiKey,
    DescribeGroupsResponse,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListGroupsResponse,
    Message,
    OffsetAndMetadata,
    OffsetCommitResponse,
    OffsetFetchResponse,
    RequestHeader,
    StructValue,
    SyncGroupResponse,
    TxnOffsetCommitResponse,
)
from trilog.storage import LogManager

if TYPE_CHECKING:
    from trilog.broker.replication import ReplicaManager

log = logging.getLogger("trilog.broker.groups")

#: Kafka's ``offset.metadata.max.bytes``.
OFFSET_METADATA_MAX_BYTES = 4096
#: How often the partition watcher looks at the cluster view when nothing woke it.
WATCH_INTERVAL_S = 0.5


class GroupCoordinator:
    """Serves the group and offset APIs of the groups whose offsets partition this broker
    leads.  Runs in the trio thread; its ``apis()`` go to the request dispatcher, and
    ``run()`` in the broker's nursery."""

    def __init__(self, config: BrokerConfig, cluster: Cluster, replicas: ReplicaManager,
                 access: Access, limiter: trio.CapacityLimiter) -> None:
        self.config = config
        self.cluster = cluster
        self.logs: LogManager = replicas.logs
        self.access = access
        segment_bytes = config["offsets.topic.segment.bytes"]
        self.logs.update_topic_config(
            OFFSETS_TOPIC, OffsetManager.topic_config(self.logs.default_config, segment_bytes))
        self.offsets = OffsetManager(
            replicas, limiter, segment_bytes=segment_bytes,
            retention_ms=config["offsets.retention.minutes"] * 60_000,
            commit_timeout_ms=config["offsets.commit.timeout.ms"])
        self.groups: dict[str, Group] = {}
        self._min_session_ms = config["group.min.session.timeout.ms"]
        self._max_session_ms = config["group.max.session.timeout.ms"]
        self._initial_delay_s = config["group.initial.rebalance.delay.ms"] / 1000
        self._active = True
        self._create_lock = trio.Lock()
        self._timer_wakeup = trio.Event()
        self._watch_wakeup = trio.Event()

    def apis(self) -> Mapping[int, ApiHandler]:
        return {ApiKey.OFFSET_COMMIT: self.offset_commit,
                ApiKey.OFFSET_FETCH: self.offset_fetch,
                ApiKey.TXN_OFFSET_COMMIT: self.txn_offset_commit,
                ApiKey.JOIN_GROUP: self.join_group,
                ApiKey.HEARTBEAT: self.heartbeat,
                ApiKey.LEAVE_GROUP: self.leave_group,
                ApiKey.SYNC_GROUP: self.sync_group,
                ApiKey.DESCRIBE_GROUPS: self.describe_groups,
                ApiKey.LIST_GROUPS: self.list_groups}

    # -- background work -------------------------------------------------------------------------

    async def run(self, shutdown_requested: trio.Event | None = None) -> None:
        """The coordinator's tasks; with ``shutdown_requested``, returns after it is set and
        every parked request is answered."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_partitions, nursery)
            nursery.start_soon(self._timers)
            nursery.start_soon(self._expire_offsets_periodically)
            if shutdown_requested is not None:
                await shutdown_requested.wait()
                self.shutdown()
                nursery.cancel_scope.cancel()

    def shutdown(self) -> None:
        """Stop serving: answer parked requests, refuse new ones (COORDINATOR_NOT_AVAILABLE)."""
        self._active = False
        for group in self.groups.values():
            group.shutdown(NotCoordinatorError.code)
        self.groups.clear()
        self._timer_wakeup.set()

    async def _watch_partitions(self, nursery: trio.Nursery) -> None:
        me = self.cluster.broker.node_id
        while True:
            self._watch_wakeup = trio.Event()
            parts = self.cluster.partitions(OFFSETS_TOPIC) or {}
            mine = {p for p, leader in parts.items()
                    if leader == me and (OFFSETS_TOPIC, p) in self.logs}
            owned = self.offsets.owned()
            for p in sorted(mine - owned):
                self.offsets.begin_load(p)
                nursery.start_soon(self.offsets.load, p)
            for p in owned - mine:
                self._unload(p, len(parts))
            with trio.move_on_after(WATCH_INTERVAL_S):
                await self._watch_wakeup.wait()

    def _unload(self, partition: int, num_partitions: int) -> None:
        self.offsets.unload(partition)
        for gid in [g for g in self.groups
                    if num_partitions and partition_for(g, num_partitions) == partition]:
            self.groups.pop(gid).shutdown(NotCoordinatorError.code)
        log.info("no longer coordinating the groups of %s-%d", OFFSETS_TOPIC, partition)

    async def _timers(self) -> None:
        """One task for every deadline of every group."""
        while True:
            self._timer_wakeup = trio.Event()
            now = trio.current_time()
            deadline = math.inf
            for group in list(self.groups.values()):
                for member_id in group.poll(now):
                    log.info("member %s of group %s expired (no heartbeat)", member_id,
                             group.group_id)
                deadline = min(deadline, group.next_deadline())
            with trio.move_on_at(deadline):
                await self._timer_wakeup.wait()

    def _wake_timers(self) -> None:
        self._timer_wakeup.set()

    async def _expire_offsets_periodically(self) -> None:
        interval = self.config["offsets.retention.check.interval.ms"] / 1000
        while True:
            await trio.sleep(interval)
            await self.expire_offsets()

    async def expire_offsets(self, now_ms: int | None = None) -> int:
        """Delete expired offsets of member-less groups; forget empty groups without offsets."""
        now_ms = _time.now_ms() if now_ms is None else now_ms

        def has_members(gid: str) -> bool:
            group = self.groups.get(gid)
            return group is not None and not group.is_empty

        total = 0
        for p in sorted(self.offsets.owned()):
            total += await self.offsets.expire(p, now_ms, has_members)
        n = self._num_partitions()
        for gid, group in list(self.groups.items()):
            if (group.state is GroupState.EMPTY and group.is_empty
                    and not self.offsets.has_offsets(partition_for(gid, n), gid)):
                del self.groups[gid]
        return total

    # -- where groups live -----------------------------------------------------------------------

    def _num_partitions(self) -> int:
        parts = self.cluster.partitions(OFFSETS_TOPIC)
        return len(parts) if parts else self.config["offsets.topic.num.partitions"]

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self._num_partitions())

    def _error_for(self, group_id: str) -> int:
        """``NO_ERROR`` if this broker serves ``group_id`` now, else the code to answer."""
        if not self._active:
            return CoordinatorNotAvailableError.code
        parts = self.cluster.partitions(OFFSETS_TOPIC)
        if not parts:
            return CoordinatorNotAvailableError.code
        p = partition_for(group_id, len(parts))
        leader = parts.get(p, -1)
        if leader < 0:
            return CoordinatorNotAvailableError.code
        if leader != self.cluster.broker.node_id:
            return NotCoordinatorError.code
        if not self.offsets.is_loaded(p):
            return CoordinatorLoadInProgressError.code
        return NO_ERROR

    async def _create_offsets_topic(self) -> None:
        async with self._create_lock:
            if self.cluster.partitions(OFFSETS_TOPIC):
                return
            n = self.config["offsets.topic.num.partitions"]
            # Kafka's rule: offsets.topic.replication.factor, or all the live brokers when
            # there are fewer when the topic is first needed.
            factor = min(self.config["offsets.topic.replication.factor"],
                         max(1, len(self.cluster.brokers())))
            try:
                await self.cluster.create_topic(OFFSETS_TOPIC, n, factor)
            except TopicAlreadyExistsError:
                pass
            except ApiError as exc:
                log.warning("cannot create %s yet: %s", OFFSETS_TOPIC, exc)
        self._watch_wakeup.set()

    # -- FindCoordinator (apis/_find_coordinator.py asks) -------------------------------------------------------------------------

    async def coordinator_for(self, group_id: str) -> int:
        """FindCoordinator (key type 0): the node id of ``group_id``'s coordinator (the
        offsets topic is created first if need be); ``ApiError`` if there is none now."""
        if not self._active:
            raise CoordinatorNotAvailableError("the broker is shutting down")
        if not self.cluster.partitions(OFFSETS_TOPIC):
            await self._create_offsets_topic()
        else:
            await trio.lowlevel.checkpoint()
        parts = self.cluster.partitions(OFFSETS_TOPIC)
        if not parts:
            raise CoordinatorNotAvailableError(f"{OFFSETS_TOPIC} does not exist yet")
        leader = parts.get(partition_for(group_id, len(parts)), -1)
        if leader < 0:
            raise CoordinatorNotAvailableError("the group's offsets partition has no leader now")
        return leader

    # -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup --------------------------------------------

    def _group_error(self, group_id: str) -> int:
        if not group_id:
            return InvalidGroupIdError.code
        return self._error_for(group_id)

    def _member_group(self, group_id: str) -> tuple[int, Group | None]:
        """For a request of a member: ``(NO_ERROR, group)``, or the code to answer and None
        (UNKNOWN_MEMBER_ID when this broker serves the group but has no such group)."""
        code = self._group_error(group_id)
        group = self.groups.get(group_id)
        if code == NO_ERROR and group is None:
            code = UnknownMemberIdError.code
        return code, group if code == NO_ERROR else None

    async def join_group(self, request: Message, header: RequestHeader) -> Message:
        await trio.lowlevel.checkpoint()
        R = JoinGroupResponse
        gid, member_id = request.group_id, request.member_id
        version = header.api_version
        instance = request.group_instance_id if version >= 5 else None

        def answer(result: JoinResult) -> Message:
            return R(throttle_time_ms=0, error_code=result.error,
                     generation_id=result.generation, protocol_name=result.protocol,
                     leader=result.leader, member_id=result.member_id,
                     members=[R.JoinGroupResponseMember(member_id=m, group_instance_id=i,
                                                        metadata=data)
                              for m, i, data in result.members])

        code = self._group_error(gid)
        if not code and not (self._min_session_ms <= request.session_timeout_ms
                             <= self._max_session_ms):
            code = InvalidSessionTimeoutError.code
        group = self.groups.get(gid)
        if not code and group is None:
            if member_id:
                code = UnknownMemberIdError.code
            else:
                group = self.groups[gid] = Group(gid, self._initial_delay_s)
        if code:
            return answer(JoinResult(code, member_id=member_id))
        assert group is not None
        rebalance_ms = (request.rebalance_timeout_ms if header.api_version >= 1
                        else request.session_timeout_ms)
        result = group.join(
            member_id,
            client_id=header.client_id or "",
            client_host=_client_host(),
            session_timeout_s=request.session_timeout_ms / 1000,
            rebalance_timeout_s=rebalance_ms / 1000,
            protocol_type=request.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
            now=trio.current_time(),
            group_instance_id=instance,
            require_known_member_id=version >= 4,
        )
        self._wake_timers()
        if isinstance(result, Reply):
            result = await result.wait()
        return answer(result)

    async def sync_group(self, request: Message, header: RequestHeader) -> Message:
        await trio.lowlevel.checkpoint()
        R = SyncGroupResponse
        code, group = self._member_group(request.group_id)
        if group is None:
            return R(throttle_time_ms=0, error_code=code, assignment=b"")
        result = group.sync(request.member_id, request.generation_id,
                            {a.member_id: bytes(a.assignment) for a in request.assignments},
                            trio.current_time(),
                            request.group_instance_id if header.api_version >= 3 else None)
        self._wake_timers()
        if isinstance(result, Reply):
            result = await result.wait()
        assert isinstance(result, SyncResult)
        return R(throttle_time_ms=0, error_code=result.error, assignment=result.assignment)

    async def heartbeat(self, request: Message, header: RequestHeader) -> Message:
        await trio.lowlevel.checkpoint()
        code, group = self._member_group(request.group_id)
        if group is not None:
            code = group.heartbeat(
                request.member_id, request.generation_id, trio.current_time(),
                request.group_instance_id if header.api_version >= 3 else None)
        return HeartbeatResponse(throttle_time_ms=0, error_code=code)

    async def leave_group(self, request: Message, header: RequestHeader) -> Message:
        """LeaveGroup: one member (v0-2), or (v3+) a batch of members, each by member id
        or by group instance id, each answered with its own error code."""
        await trio.lowlevel.checkpoint()
        R = LeaveGroupResponse
        code, group = self._member_group(request.group_id)
        leaving = ([(m.member_id, m.group_instance_id) for m in request.members]
                   if header.api_version >= 3 else [(request.member_id, None)])
        answers = []
        for member_id, instance in leaving:
            error = code
            if group is not None:
                error = group.leave(member_id, trio.current_time(), instance)
                if error == NO_ERROR:
                    log.info("member %s left group %s", member_id or instance,
                             request.group_id)
            answers.append(R.MemberResponse(member_id=member_id, group_instance_id=instance,
                                            error_code=error))
        self._wake_timers()
        if header.api_version < 3:
            return R(throttle_time_ms=0, error_code=answers[0].error_code)
        return R(throttle_time_ms=0, error_code=code, members=answers)

    # -- OffsetCommit / OffsetFetch ----------------------------------------------------------------

    async def offset_commit(self, request: Message, header: RequestHeader) -> Message:
        version = header.api_version
        gid = request.group_id
        generation = request.generation_id_or_member_epoch if version >= 1 else -1
        member_id = request.member_id if version >= 1 else ""
        now_ms = _time.now_ms()
        code = self._error_for(gid)
        if not code:
            group = self.groups.get(gid)
            if group is None:
                # No group: a simple consumer may commit; a member of a forgotten generation
                # may not.
                code = NO_ERROR if generation < 0 else IllegalGenerationError.code
            else:
                code = group.validate_commit(
                    member_id, generation, trio.current_time(),
                    request.group_instance_id if version >= 7 else None)
        retention_ms = request.retention_time_ms if 2 <= version <= 4 else -1
        results: dict[tuple[str, int], int] = {}
        to_store: dict[tuple[str, int], OffsetAndMetadata] = {}
        for topic in request.topics:
            for part in topic.partitions:
                tp = (topic.name, part.partition_index)
                if code:
                    results[tp] = code
                    continue
                if not self.access(AclOperation.READ, ResourceType.TOPIC, topic.name):
                    results[tp] = TopicAuthorizationFailedError.code
                    continue
                if self.cluster.leader(*tp) is None:
                    results[tp] = UnknownTopicOrPartitionError.code
                    continue
                metadata = part.committed_metadata or ""
                if len(metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                    results[tp] = OffsetMetadataTooLargeError.code
                    continue
                commit_ts = now_ms
                if version == 1 and part.commit_timestamp >= 0:
                    commit_ts = part.commit_timestamp
                to_store[tp] = OffsetAndMetadata(
                    offset=part.committed_offset,
                    leader_epoch=part.committed_leader_epoch if version >= 6 else -1,
                    metadata=metadata,
                    commit_timestamp=commit_ts,
                    expire_timestamp=now_ms + retention_ms if retention_ms >= 0 else -1,
                )
        if to_store:
            stored = await self.offsets.commit(self.partition_of(gid), gid, to_store)
            for tp in to_store:
                results[tp] = stored
        else:
            await trio.lowlevel.checkpoint()
        R = OffsetCommitResponse
        by_topic: dict[str, list[StructValue]] = {}
        for (name, index), error in results.items():
            by_topic.setdefault(name, []).append(
                R.OffsetCommitResponseTopic.OffsetCommitResponsePartition(
                    partition_index=index, error_code=error))
        return R(throttle_time_ms=0,
                 topics=[R.OffsetCommitResponseTopic(name=n, partitions=ps)
                         for n, ps in by_topic.items()])

    async def txn_offset_commit(self, request: Message, header: RequestHeader) -> Message:
        """TxnOffsetCommit (KIP-98; KIP-447's member and generation from v3): a transactional
        producer's offsets, pending until its transaction ends (``OffsetManager.
        commit_transactional``).  Write on the transactional id, Read on the group and on
        each topic."""
        version = header.api_version
        gid = request.group_id
        R = TxnOffsetCommitResponse
        code = NO_ERROR
        if not self.access(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                           request.transactional_id):
            code = TransactionalIdAuthorizationFailedError.code
        elif not self.access(AclOperation.READ, ResourceType.GROUP, gid):
            code = GroupAuthorizationFailedError.code
        else:
            code = self._error_for(gid)
        if not code and version >= 3:
            group = self.groups.get(gid)
            generation, member_id = request.generation_id, request.member_id
            if group is None:
                code = NO_ERROR if generation < 0 and not member_id else (
                    IllegalGenerationError.code if generation >= 0 else UnknownMemberIdError.code)
            elif generation >= 0 or member_id:
                code = group.validate_commit(member_id, generation, trio.current_time(),
                                             request.group_instance_id)
        results: dict[tuple[str, int], int] = {}
        to_store: dict[tuple[str, int], OffsetAndMetadata] = {}
        now_ms = _time.now_ms()
        for topic in request.topics:
            for part in topic.partitions:
                tp = (topic.name, part.partition_index)
                if code:
                    results[tp] = code
                elif not self.access(AclOperation.READ, ResourceType.TOPIC, topic.name):
                    results[tp] = TopicAuthorizationFailedError.code
                elif self.cluster.leader(*tp) is None:
                    results[tp] = UnknownTopicOrPartitionError.code
                elif len((part.committed_metadata or "").encode()) > OFFSET_METADATA_MAX_BYTES:
                    results[tp] = OffsetMetadataTooLargeError.code
                else:
                    to_store[tp] = OffsetAndMetadata(
                        offset=part.committed_offset,
                        leader_epoch=part.committed_leader_epoch if version >= 2 else -1,
                        metadata=part.committed_metadata or "", commit_timestamp=now_ms)
        if to_store:
            stored = await self.offsets.commit_transactional(
                self.partition_of(gid), gid, request.producer_id, request.producer_epoch,
                to_store)
            results.update(dict.fromkeys(to_store, stored))
        else:
            await trio.lowlevel.checkpoint()
        by_topic: dict[str, list[StructValue]] = {}
        for (name, index), error in results.items():
            by_topic.setdefault(name, []).append(
                R.TxnOffsetCommitResponseTopic.TxnOffsetCommitResponsePartition(
                    partition_index=index, error_code=error))
        return R(throttle_time_ms=0, topics=[R.TxnOffsetCommitResponseTopic(name=n, partitions=ps)
                                             for n, ps in by_topic.items()])

    async def offset_fetch(self, request: Message, header: RequestHeader) -> Message:
        await trio.lowlevel.checkpoint()
        version = header.api_version
        gid = request.group_id
        R = OffsetFetchResponse
        T = R.OffsetFetchResponseTopic
        P = T.OffsetFetchResponsePartition
        code = self._error_for(gid)
        if code and version >= 2:
            return R(throttle_time_ms=0, topics=[], error_code=code)
        stored = {} if code else self.offsets.fetch(self.partition_of(gid), gid)
        # KIP-447: a read_committed consumer (v7+ require_stable) must not start from
        # offsets a transaction is about to replace: it retries until the marker lands.
        unstable = (self.offsets.pending_partitions(self.partition_of(gid), gid)
                    if version >= 7 and request.require_stable and not code else set())
        access = self.access
        if request.topics is None:
            # All the group's offsets: those of topics one may not describe are left out.
            wanted: dict[str, list[int]] = {}
            for topic, partition in sorted(stored):
                if access(AclOperation.DESCRIBE, ResourceType.TOPIC, topic):
                    wanted.setdefault(topic, []).append(partition)
        else:
            wanted = {}
            for t in request.topics:
                wanted.setdefault(t.name, []).extend(t.partition_indexes)
        topics: list[StructValue] = []
        for name, partitions in wanted.items():
            parts: list[StructValue] = []
            topic_ok = access(AclOperation.DESCRIBE, ResourceType.TOPIC, name)
            for index in partitions:
                om = stored.get((name, index))
                if not topic_ok:
                    parts.append(P(partition_index=index, committed_offset=-1,
                                   committed_leader_epoch=-1, metadata="",
                                   error_code=TopicAuthorizationFailedError.code))
                elif (name, index) in unstable:
                    parts.append(P(partition_index=index, committed_offset=-1,
                                   committed_leader_epoch=-1, metadata="",
                                   error_code=UnstableOffsetCommitError.code))
                elif om is None:
                    parts.append(P(partition_index=index, committed_offset=-1,
                                   committed_leader_epoch=-1, metadata="", error_code=code))
                else:
                    parts.append(P(partition_index=index, committed_offset=om.offset,
                                   committed_leader_epoch=om.leader_epoch,
                                   metadata=om.metadata, error_code=NO_ERROR))
            topics.append(T(name=name, partitions=parts))
        return R(throttle_time_ms=0, topics=topics, error_code=NO_ERROR)

    # -- DescribeGroups / ListGroups ---------------------------------------------------------------

    async def describe_groups(self, request: Message, header: RequestHeader) -> Message:
        await trio.lowlevel.checkpoint()
        R = DescribeGroupsResponse
        G = R.DescribedGroup
        out: list[StructValue] = []
        asked = header.api_version >= 3 and request.include_authorized_operations

        def operations(gid: str) -> int:
            """What the principal may do to the group, as Kafka's bit field."""
            if not asked:
                return AUTHORIZED_OPERATIONS_OMITTED
            return self.access.operations((AclOperation.READ, AclOperation.DELETE,
                                           AclOperation.DESCRIBE), ResourceType.GROUP, gid)

        for gid in request.groups:
            code = self._error_for(gid)
            if not self.access(AclOperation.DESCRIBE, ResourceType.GROUP, gid):
                code = GroupAuthorizationFailedError.code
            group = self.groups.get(gid)
            if code:
                out.append(G(error_code=code, group_id=gid, group_state="", protocol_type="",
                             protocol_data="", members=[],
                             authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
            elif group is None:
                has_offsets = self.offsets.has_offsets(self.partition_of(gid), gid)
                out.append(G(error_code=NO_ERROR, group_id=gid,
                             group_state="Empty" if has_offsets else "Dead",
                             protocol_type="", protocol_data="", members=[],
                             authorized_operations=operations(gid)))
            else:
                summary = group.describe()
                members = [G.DescribedGroupMember(**m) for m in summary.pop("members")]
                out.append(G(error_code=NO_ERROR, group_id=gid, members=members,
                             authorized_operations=operations(gid), **summary))
        return R(throttle_time_ms=0, groups=out)

    async def list_groups(self, request: Message, header: RequestHeader) -> Message:
        await trio.lowlevel.checkpoint()
        R = ListGroupsResponse
        if not self._active:
            return R(throttle_time_ms=0, error_code=CoordinatorNotAvailableError.code, groups=[])
        listed = {gid: g.protocol_type or "" for gid, g in self.groups.items()}
        for gid in self.offsets.groups():
            listed.setdefault(gid, "")
        if not self.access(AclOperation.DESCRIBE, ResourceType.CLUSTER):
            # Kafka: without Describe on the cluster, the groups one may describe.
            listed = {g: t for g, t in listed.items()
                      if self.access(AclOperation.DESCRIBE, ResourceType.GROUP, g)}
        code = CoordinatorLoadInProgressError.code if self.offsets.is_loading() else NO_ERROR
        return R(throttle_time_ms=0, error_code=code,
                 groups=[R.ListedGroup(group_id=g, protocol_type=t)
                         for g, t in sorted(listed.items())])

    # -- DeleteGroups / OffsetDelete (served by ``_admin_apis.py``) ------------------------------

    async def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        """Kafka's ``handleDeleteGroups``: each group's error code.  An empty group (no
        members) is removed with its committed offsets (tombstones in the offsets topic);
        a group with members is NON_EMPTY_GROUP; one unknown here GROUP_ID_NOT_FOUND."""
        await trio.lowlevel.checkpoint()
        codes: dict[str, int] = {}
        for gid in group_ids:
            code = self._group_error(gid)
            if not self.access(AclOperation.DELETE, ResourceType.GROUP, gid):
                code = GroupAuthorizationFailedError.code
            group = self.groups.get(gid)
            p = self.partition_of(gid)
            if code:
                pass
            elif group is not None and group.state is not GroupState.EMPTY:
                code = NonEmptyGroupError.code
            elif group is None and not self.offsets.has_offsets(p, gid):
                code = GroupIdNotFoundError.code
            else:
                # Out of the table before the await: a JoinGroup meanwhile makes a new group.
                if self.groups.pop(gid, None) is not None:
                    log.info("deleted group %s", gid)
                code = await self.offsets.delete(p, gid)
            codes[gid] = code
        return codes

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                             ) -> tuple[int, dict[tuple[str, int], int]]:
        """Kafka's ``handleDeleteOffsets``: ``(group error, {partition: error})``.  An empty
        group loses the offsets of ``partitions``; a consumer group with members only those
        of topics it does not subscribe to (GROUP_SUBSCRIBED_TO_TOPIC for the others); any
        other group with members is NON_EMPTY_GROUP."""
        await trio.lowlevel.checkpoint()
        code = self._group_error(group_id)
        if code:
            return code, {}
        group = self.groups.get(group_id)
        p = self.partition_of(group_id)
        codes: dict[tuple[str, int], int] = {}
        eligible = partitions
        if group is None or group.state is GroupState.EMPTY:
            if group is None and not self.offsets.has_offsets(p, group_id):
                return GroupIdNotFoundError.code, {}
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            subscribed = group.subscribed_topics()
            eligible = [tp for tp in partitions
                        if subscribed is not None and tp[0] not in subscribed]
            codes = {tp: GroupSubscribedToTopicError.code for tp in partitions
                     if tp not in eligible}
        else:
            return NonEmptyGroupError.code, {}
        if eligible:
            stored = await self.offsets.delete(p, group_id, eligible)
            codes.update((tp, stored) for tp in eligible)
        return NO_ERROR, codes

    # -- for tests and statistics() ----------------------------------------------------------------

    def statistics(self) -> dict[str, int]:
        return {
            "groups": len(self.groups),
            "members": sum(len(g.members) for g in self.groups.values()),
            "offsets_partitions": len(self.offsets.owned()),
        }

    def group_sizes(self) -> dict[str, tuple[str, int]]:
        """``{group: (state, members)}`` of the groups with members or a state here (for the
        metrics; groups known only by committed offsets are in ``committed_offsets``)."""
        return {gid: (g.state.value, len(g.members)) for gid, g in self.groups.items()}

    def committed_offsets(self) -> list[tuple[str, str, int, int]]:
        """``(group, topic, partition, offset)`` of every committed offset this broker serves
        (read at scrape time by the metrics)."""
        out = []
        for gid in self.offsets.groups():
            for (topic, partition), committed in self.offsets.fetch(self.partition_of(gid),
                                                                    gid).items():
                out.append((gid, topic, partition, committed.offset))
        return out


def _client_host() -> str:
    """Kafka reports a member's host as ``/<ip>``."""
    address = current_session.get().peer
    host = address.rpartition(":")[0] if ":" in address else address
    return f"/{host}" if host else ""
