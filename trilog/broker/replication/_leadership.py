"""The controller's word on this broker's replicas (Kafka's ``becomeLeaderOrFollower``,
``stopReplicas``, ``maybeUpdateMetadataCache``), and what a follower asks its leader
before it fetches (OffsetForLeaderEpoch).

In a ZooKeeper cluster a broker learns its part in each partition only from the controller:
**LeaderAndIsr** makes it the leader or a follower of the partitions it holds a replica of
(creating their logs), **UpdateMetadata** tells it every partition's leader, replicas and
ISR (what Metadata answers), **StopReplica** takes partitions away.  Each request carries the
controller's epoch and each partition state its leader epoch: an older one than this broker
has seen is refused (``STALE_CONTROLLER_EPOCH``), so a controller that lost its place cannot
undo a newer one's decisions.

As **leader** the broker stamps its leader epoch on the log (from its end on) and starts
every follower unknown; as **follower** it fetches from the leader (``_fetcher.py``), which
first asks where their logs diverge (KIP-101) and truncates there.  The high watermarks of
the replicated logs are checkpointed every ``replica.high.watermark.checkpoint.interval.ms``.

Runs in the trio thread; log I/O goes to worker threads.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import trio

from trilog._topic import PartitionKey
from trilog.broker.network import ApiHandler
from trilog.broker.replication._partition import Partition
from trilog.broker.security import Access, AclOperation, ResourceType
from trilog.errors import (
    NO_ERROR,
    ClusterAuthorizationFailedError,
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    StaleControllerEpochError,
    TopicAuthorizationFailedError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from trilog.protocol import (
    ApiKey,
    LeaderAndIsrResponse,
    OffsetForLeaderEpochResponse,
    StopReplicaResponse,
    UpdateMetadataResponse,
)

if TYPE_CHECKING:
    from trilog.broker.cluster import ZooKeeperCluster
    from trilog.broker.replication._fetcher import ReplicaFetchers
    from trilog.broker.replication._replica_manager import ReplicaManager
    from trilog.storage import LogManager

log = logging.getLogger("trilog.broker.replicas")


def _partition_states(request: Any) -> Iterator[tuple[str, Any]]:
    """``(topic, state)`` of a LeaderAndIsr or UpdateMetadata request of any version (v0-1
    and v0-4 list states flat with their topic; later versions group them by topic)."""
    flat = getattr(request, "ungrouped_partition_states", None)
    if flat:
        for state in flat:
            yield state.topic_name, state
    for topic in getattr(request, "topic_states", None) or ():
        for state in topic.partition_states:
            yield topic.topic_name, state


def _isr_only(part: Partition, st: Any) -> bool:
    """Is LeaderAndIsr state ``st`` only a newer ISR for ``part``: the same leader and
    leader epoch, a newer version of the partition's state?  The controller writes such a
    state when dead or stopping followers leave an ISR whose leader lives (it keeps the
    leader epoch, as Kafka's KRaft controller does, KAFKA-15021: a new epoch would send
    every consumer of the partition through an OffsetForLeaderEpoch check, and librdkafka
    2.16's check loses prefetched records when another Metadata answer arrives during it)."""
    return (st.leader_epoch == part.leader_epoch and st.leader == part.leader
            and st.partition_epoch > part.zk_version
            and tuple(st.replicas) == part.replicas)


class Leadership:
    """Applies the controller's requests to the replica manager and the fetchers."""

    def __init__(self, replicas: ReplicaManager, fetchers: ReplicaFetchers,
                 cluster: ZooKeeperCluster, access: Access, *,
                 high_watermark_checkpoint_ms: int) -> None:
        self.replicas = replicas
        self.fetchers = fetchers
        self.cluster = cluster
        self.access = access
        self.logs: LogManager = replicas.logs
        self.broker_id = replicas.broker_id
        self.controller_epoch = 0
        self._checkpoint_s = high_watermark_checkpoint_ms / 1000

    def apis(self) -> Mapping[int, ApiHandler]:
        return {ApiKey.LEADER_AND_ISR: self.leader_and_isr,
                ApiKey.UPDATE_METADATA: self.update_metadata,
                ApiKey.STOP_REPLICA: self.stop_replica,
                ApiKey.OFFSET_FOR_LEADER_EPOCH: self.offset_for_leader_epoch}

    async def run(self) -> None:
        """The fetchers, and the high watermarks' checkpoints."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.fetchers.run)
            nursery.start_soon(self._checkpoint_high_watermarks)

    def _stale(self, controller_epoch: int) -> bool:
        if controller_epoch < self.controller_epoch:
            log.warning("refusing a request of controller epoch %d (this broker has seen %d)",
                        controller_epoch, self.controller_epoch)
            return True
        self.controller_epoch = controller_epoch
        return False

    # -- LeaderAndIsr ---------------------------------------------------------------------------

    async def leader_and_isr(self, request: Any, header: Any) -> Any:
        R = LeaderAndIsrResponse
        states = list(_partition_states(request))
        if self._stale(request.controller_epoch):
            return R(error_code=StaleControllerEpochError.code, partition_errors=[
                R.LeaderAndIsrPartitionError(topic_name=t, partition_index=s.partition_index,
                                             error_code=StaleControllerEpochError.code)
                for t, s in states])
        errors: list[tuple[str, int, int]] = []
        accepted: list[tuple[Partition, Any]] = []
        isr_only: list[tuple[Partition, Any]] = []
        partitions = self.replicas.partitions
        for topic, st in states:
            tp = (topic, st.partition_index)
            if self.broker_id not in st.replicas:
                errors.append((topic, st.partition_index, UnknownTopicOrPartitionError.code))
                continue
            part = partitions.get(tp)
            if part is not None and _isr_only(part, st):
                isr_only.append((part, st))
                errors.append((topic, st.partition_index, NO_ERROR))
                continue
            if part is not None and st.leader_epoch <= part.leader_epoch:
                # Kafka's rule: only a newer leader epoch changes a partition's leadership.
                errors.append((topic, st.partition_index, StaleControllerEpochError.code))
                continue
            accepted.append((part or Partition(topic, st.partition_index), st))
            errors.append((topic, st.partition_index, NO_ERROR))
        for part, st in isr_only:
            self._adopt_isr(part, st)
        await self._create_missing_logs([p.tp for p, _ in accepted])
        for part, st in accepted:
            if self.logs.get_log(*part.tp) is None:
                continue  # could not be created (logged): stays unknown here
            await self._adopt(part, st)
        self.cluster.leadership_changed()
        return R(error_code=NO_ERROR, partition_errors=[
            R.LeaderAndIsrPartitionError(topic_name=t, partition_index=p, error_code=e)
            for t, p, e in errors])

    async def _adopt(self, part: Partition, st: Any) -> None:
        part.replicas = tuple(st.replicas)
        part.leader = st.leader
        part.leader_epoch = st.leader_epoch
        part.isr = tuple(st.isr)
        part.zk_version = st.partition_epoch
        part.controller_epoch = st.controller_epoch
        self.replicas.partitions[part.tp] = part
        if st.leader == self.broker_id:
            await self._become_leader(part)
        else:
            self._become_follower(part)
        part.signal()

    def _adopt_isr(self, part: Partition, st: Any) -> None:
        """The controller took followers out of ``part``'s ISR and kept its leader and
        leader epoch: the new ISR and state version, nothing else (a leader keeps its
        followers' progress and may move its high watermark at once)."""
        log.info("%s-%d: ISR %s -> %s (the controller's, epoch %d)", part.topic,
                 part.partition, list(part.isr), list(st.isr), part.leader_epoch)
        part.isr = tuple(st.isr)
        part.zk_version = st.partition_epoch
        part.controller_epoch = st.controller_epoch
        if part.leader == self.broker_id:
            self.replicas.maybe_advance_high_watermark(part)
        part.signal()

    async def _create_missing_logs(self, tps: Iterable[PartitionKey]) -> None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in tps:
            if self.logs.get_log(topic, partition) is None:
                by_topic.setdefault(topic, []).append(partition)
        for topic, partitions in sorted(by_topic.items()):
            try:
                await self.cluster.topic_configs.refresh(topic)
                await trio.to_thread.run_sync(self.logs.create_logs, topic, partitions,
                                              limiter=self.replicas.limiter)
            except Exception as exc:  # a full disk, no descriptors, ZooKeeper away
                log.error("cannot create the logs of %s %s: %s", topic, partitions, exc)

    async def _become_leader(self, part: Partition) -> None:
        self.fetchers.remove(part.tp)
        lg = self.logs.get_log(*part.tp)
        assert lg is not None
        self.replicas.reset_followers(part)
        await trio.to_thread.run_sync(lg.assign_epoch_start_offset, part.leader_epoch,
                                      limiter=self.replicas.limiter)
        self.replicas.maybe_advance_high_watermark(part)
        log.info("%s-%d: leader (epoch %d, ISR %s)", part.topic, part.partition,
                 part.leader_epoch, list(part.isr))

    def _become_follower(self, part: Partition) -> None:
        part.followers = {}
        if part.leader >= 0:
            self.fetchers.add(part.tp, part.leader, part.leader_epoch)
        else:
            self.fetchers.remove(part.tp)
        log.info("%s-%d: follower of %d (epoch %d)", part.topic, part.partition, part.leader,
                 part.leader_epoch)

    # -- UpdateMetadata, StopReplica --------------------------------------------------------

    async def update_metadata(self, request: Any, header: Any) -> Any:
        if self._stale(request.controller_epoch):
            return UpdateMetadataResponse(error_code=StaleControllerEpochError.code)
        self.cluster.update_metadata(request)
        await trio.lowlevel.checkpoint()
        return UpdateMetadataResponse(error_code=NO_ERROR)

    async def stop_replica(self, request: Any, header: Any) -> Any:
        R = StopReplicaResponse
        if header.api_version == 0:
            tps = [(p.topic_name, p.partition_index) for p in request.ungrouped_partitions]
        else:
            tps = [(t.name, p) for t in request.topics for p in t.partition_indexes]
        if self._stale(request.controller_epoch):
            code = StaleControllerEpochError.code
            return R(error_code=code, partition_errors=[
                R.StopReplicaPartitionError(topic_name=t, partition_index=p, error_code=code)
                for t, p in tps])
        for tp in tps:
            self.fetchers.remove(tp)
            part = self.replicas.partitions.pop(tp, None)
            if part is not None:
                part.signal()
        if request.delete_partitions:
            await trio.to_thread.run_sync(self._delete_logs, tps,
                                          limiter=self.replicas.limiter)
        self.cluster.leadership_changed()
        return R(error_code=NO_ERROR, partition_errors=[
            R.StopReplicaPartitionError(topic_name=t, partition_index=p, error_code=NO_ERROR)
            for t, p in tps])

    def _delete_logs(self, tps: list[PartitionKey]) -> None:
        for topic, partition in tps:
            self.logs.delete_log(topic, partition)

    # -- OffsetForLeaderEpoch -----------------------------------------------------------------

    async def offset_for_leader_epoch(self, request: Any, header: Any) -> Any:
        R = OffsetForLeaderEpochResponse
        EO = R.OffsetForLeaderTopicResult.EpochEndOffset
        topics = []
        # A follower's request (replica_id, v3+) is the cluster's business; a consumer's
        # needs Describe on each topic (Kafka).
        follower = header.api_version >= 3 and request.replica_id >= 0
        cluster_ok = not follower or self.access(AclOperation.CLUSTER_ACTION,
                                                 ResourceType.CLUSTER)
        for topic in request.topics:
            topic_ok = cluster_ok and (follower or self.access(
                AclOperation.DESCRIBE, ResourceType.TOPIC, topic.topic))
            partitions = []
            for p in topic.partitions:
                if not topic_ok:
                    partitions.append(EO(
                        error_code=(TopicAuthorizationFailedError.code if cluster_ok
                                    else ClusterAuthorizationFailedError.code),
                        partition=p.partition, leader_epoch=-1, end_offset=-1))
                    continue
                error, epoch, end = self._epoch_end((topic.topic, p.partition), p)
                partitions.append(EO(error_code=error, partition=p.partition,
                                     leader_epoch=epoch, end_offset=end))
            topics.append(R.OffsetForLeaderTopicResult(topic=topic.topic,
                                                       partitions=partitions))
        await trio.lowlevel.checkpoint()
        return R(throttle_time_ms=0, topics=topics)

    def _epoch_end(self, tp: PartitionKey, p: Any) -> tuple[int, int, int]:
        """``(error, epoch, end offset)`` of one partition of an OffsetForLeaderEpoch."""
        try:
            if not self.replicas.is_leader(tp):
                raise NotLeaderOrFollowerError(f"not the leader of {tp}")
            self.replicas.check_leader_epoch(tp, getattr(p, "current_leader_epoch", -1))
            lg = self.logs.get_log(*tp)
            if lg is None:
                raise NotLeaderOrFollowerError(f"{tp} has no log here")
            epoch, end = lg.end_offset_for_epoch(p.leader_epoch)
        except (NotLeaderOrFollowerError, FencedLeaderEpochError,
                UnknownLeaderEpochError) as exc:
            return exc.code, -1, -1
        return NO_ERROR, epoch, end

    async def _checkpoint_high_watermarks(self) -> None:
        while True:
            await trio.sleep(self._checkpoint_s)
            try:
                await trio.to_thread.run_sync(self.logs.checkpoint_high_watermarks,
                                              limiter=self.replicas.limiter)
            except OSError as exc:
                log.warning("writing replication-offset-checkpoint failed: %s", exc)
