"""Replicated partitions on one broker (Kafka's ``ReplicaManager`` and ``Partition``).

In a ZooKeeper cluster a broker learns its part in each partition only from the controller
(``_control.py``): **LeaderAndIsr** makes it the leader or a follower of the partitions it
holds a replica of (creating their logs), **UpdateMetadata** tells it every partition's
leader, replicas and ISR (what Metadata answers), **StopReplica** takes partitions away.
Each request carries the controller's epoch and each partition state its leader epoch: an
older one than this broker has seen is refused (``STALE_CONTROLLER_EPOCH``), so a controller
that lost its place cannot undo a newer one's decisions.

As **leader** of a partition the broker appends with its leader epoch stamped on every batch,
tracks each follower's log end offset from the offsets of its fetches, and moves the **high
watermark** to the smallest log end offset of the in-sync replicas: consumers read only
below it, and an ``acks=all`` produce is answered once it passes the produced records (or
``timeout_ms`` passes).  A follower that reached the high watermark joins the ISR; one that
has not caught up for ``replica.lag.time.max.ms`` leaves it.  The leader writes each ISR
change to the partition's state node with ZooKeeper's conditional version (a newer state,
written by the controller, wins) and posts an ``/isr_change_notification`` so the controller
tells every broker.

As **follower** the broker fetches from the leader (``_fetcher.py``) and appends the
leader's batches as they are.  After becoming a follower, it first asks the leader where
their logs diverge (OffsetForLeaderEpoch, KIP-101) and truncates there.

Runs in the trio thread; log I/O goes to worker threads.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import trio

from trilog import _time
from trilog.broker.replication._fetcher import ReplicaFetchers
from trilog.broker.security._acls import ALLOW_ALL, Access
from trilog.broker.security._authorizer import AclOperation, ResourceType
from trilog.errors import (
    ClusterAuthorizationFailedError,
    TopicAuthorizationFailedError,
    NO_ERROR,
    FencedLeaderEpochError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    StaleControllerEpochError,
    TrilogError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from trilog.broker.network._listeners import inter_broker_security
from trilog.net import open_connection
from trilog.protocol import (
    ApiKey,
    ControlledShutdownRequest,
    LeaderAndIsrResponse,
    OffsetForLeaderEpochResponse,
    StopReplicaResponse,
    UpdateMetadataResponse,
)
from trilog.zk import (
    ISR_CHANGE_NOTIFICATION,
    ISR_CHANGE_PREFIX,
    BadVersionError,
    PartitionState,
    ZooKeeperError,
    encode_isr_change,
    partition_state_path,
)

if TYPE_CHECKING:
    from trilog.broker.configs._broker_config import BrokerConfig
    from trilog.broker.replication._purgatory import FetchPurgatory
    from trilog.broker.cluster._zookeeper import ZooKeeperCluster
    from trilog.storage import Log, LogManager

log = logging.getLogger("trilog.broker.replicas")

TopicPartition = tuple[str, int]


@dataclasses.dataclass
class FollowerState:
    """What the leader knows of one follower (Kafka's ``Replica``)."""

    log_end_offset: int = -1  # unknown until its first fetch
    last_fetch_ms: int = 0
    last_fetch_leader_leo: int = 0
    last_caught_up_ms: int = 0


@dataclasses.dataclass(eq=False)
class Partition:
    """This broker's replica of one partition, as the controller last described it."""

    topic: str
    partition: int
    replicas: tuple[int, ...] = ()
    leader: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    zk_version: int = -1
    controller_epoch: int = 0
    followers: dict[int, FollowerState] = dataclasses.field(default_factory=dict)
    #: set (and replaced) whenever the high watermark or the ISR changes
    changed: trio.Event = dataclasses.field(default_factory=trio.Event)
    isr_update_pending: bool = False

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

    def signal(self) -> None:
        self.changed.set()
        self.changed = trio.Event()


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


class ReplicaManager:
    """The replicas this broker holds in a ZooKeeper cluster (see the module docstring)."""

    def __init__(self, config: BrokerConfig, cluster: ZooKeeperCluster, logs: LogManager,
                 purgatory: FetchPurgatory, limiter: trio.CapacityLimiter) -> None:
        self.config = config
        self.cluster = cluster
        self.logs = logs
        self.purgatory = purgatory
        self.limiter = limiter
        #: may the current request's principal do something (ACLs; set by the broker)
        self.access: Access = ALLOW_ALL
        #: how this broker connects to the others
        self.security = inter_broker_security(config)
        self.broker_id = config.broker_id
        self.partitions: dict[TopicPartition, Partition] = {}
        self.controller_epoch = 0
        self.lag_max_ms = config["replica.lag.time.max.ms"]
        self.fetchers = ReplicaFetchers(self)
        #: a produce's or a new partition's hook: called when leadership changes here
        self.on_leadership_change: list[Any] = []

    # -- registration -------------------------------------------------------------------------

    def register(self, handler: Any) -> None:
        handler.register(ApiKey.LEADER_AND_ISR, self.leader_and_isr)
        handler.register(ApiKey.UPDATE_METADATA, self.update_metadata)
        handler.register(ApiKey.STOP_REPLICA, self.stop_replica)
        handler.register(ApiKey.OFFSET_FOR_LEADER_EPOCH, self.offset_for_leader_epoch)

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.fetchers.run)
            nursery.start_soon(self._shrink_isr_periodically)
            nursery.start_soon(self._checkpoint_high_watermarks)

    # -- questions the request handlers ask ---------------------------------------------------

    def is_leader(self, tp: TopicPartition) -> bool:
        part = self.partitions.get(tp)
        return part is not None and part.leader == self.broker_id

    def leader_epoch(self, tp: TopicPartition) -> int | None:
        part = self.partitions.get(tp)
        return part.leader_epoch if part is not None and part.leader == self.broker_id else None

    def check_leader_epoch(self, tp: TopicPartition, current_leader_epoch: int) -> None:
        """A request carrying the leader epoch its sender knows (Fetch v9+,
        OffsetForLeaderEpoch v2+): an older one is fenced, a newer one unknown here yet."""
        if current_leader_epoch < 0:
            return
        part = self.partitions.get(tp)
        ours = part.leader_epoch if part is not None else -1
        if current_leader_epoch < ours:
            raise FencedLeaderEpochError(
                f"{tp[0]}-{tp[1]}: leader epoch {current_leader_epoch} is older than {ours}")
        if current_leader_epoch > ours:
            raise UnknownLeaderEpochError(
                f"{tp[0]}-{tp[1]}: leader epoch {current_leader_epoch} is newer than {ours}")

    def check_produce(self, tp: TopicPartition, acks: int) -> None:
        """Before appending an ``acks=all`` produce: enough in-sync replicas?"""
        if acks != -1:
            return
        part = self.partitions[tp]
        needed = self.cluster.topic_configs.config_for(tp[0]).min_insync_replicas
        if len(part.isr) < needed:
            raise NotEnoughReplicasError(
                f"{tp[0]}-{tp[1]} has {len(part.isr)} in-sync replicas, "
                f"min.insync.replicas is {needed}")

    # -- the leader's side ---------------------------------------------------------------------

    def appended(self, tp: TopicPartition) -> None:
        """A leader appended to ``tp``: with no follower in the ISR the high watermark moves
        at once."""
        part = self.partitions.get(tp)
        if part is not None and part.leader == self.broker_id:
            self._maybe_advance_high_watermark(part)

    async def wait_replicated(self, tp: TopicPartition, end_offset: int,
                              deadline: float) -> int:
        """An ``acks=all`` produce: wait until the high watermark reaches ``end_offset``
        (every in-sync replica has the records); the error code of the answer."""
        while True:
            part = self.partitions.get(tp)
            lg = self.logs.get_log(*tp)
            if part is None or lg is None or part.leader != self.broker_id:
                return NotLeaderOrFollowerError.code
            if lg.high_watermark >= end_offset:
                needed = self.cluster.topic_configs.config_for(tp[0]).min_insync_replicas
                if len(part.isr) < needed:
                    return NotEnoughReplicasAfterAppendError.code
                return NO_ERROR
            if trio.current_time() >= deadline:
                return RequestTimedOutError.code
            with trio.move_on_at(deadline):
                await part.changed.wait()

    def follower_fetched(self, tp: TopicPartition, replica_id: int, fetch_offset: int,
                         current_leader_epoch: int) -> None:
        """A follower's fetch of ``tp`` at ``fetch_offset`` (its log end offset): Kafka's
        ``updateFollowerFetchState``.  Raises the ApiError the fetch gets."""
        part = self.partitions.get(tp)
        if part is None or part.leader != self.broker_id:
            raise NotLeaderOrFollowerError(
                f"broker {self.broker_id} does not lead {tp[0]}-{tp[1]}")
        self.check_leader_epoch(tp, current_leader_epoch)
        state = part.followers.get(replica_id)
        if state is None:
            raise NotLeaderOrFollowerError(
                f"broker {replica_id} is not a replica of {tp[0]}-{tp[1]}")
        lg = self.logs.get_log(*tp)
        if lg is None:
            raise NotLeaderOrFollowerError(f"{tp[0]}-{tp[1]} has no log here")
        now = _time.now_ms()
        leo = lg.log_end_offset
        if fetch_offset >= leo:
            state.last_caught_up_ms = now
        elif fetch_offset >= state.last_fetch_leader_leo:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_end_offset = fetch_offset
        state.last_fetch_ms = now
        state.last_fetch_leader_leo = leo
        if replica_id not in part.isr:
            self._maybe_expand_isr(part, replica_id, lg)
        self._maybe_advance_high_watermark(part)

    def _maybe_advance_high_watermark(self, part: Partition) -> None:
        lg = self.logs.get_log(*part.tp)
        if lg is None or not lg.replicated:
            return
        ends = [lg.log_end_offset]
        for replica in part.isr:
            if replica != self.broker_id:
                state = part.followers.get(replica)
                ends.append(state.log_end_offset if state is not None else -1)
        if lg.maybe_increment_high_watermark(min(ends)):
            self.purgatory.high_watermark_moved(part.tp)
            part.signal()

    def _maybe_expand_isr(self, part: Partition, replica: int, lg: Log) -> None:
        state = part.followers[replica]
        epoch_start = lg.leader_epoch_cache.latest_entry
        start = epoch_start.start_offset if epoch_start is not None else 0
        if state.log_end_offset >= max(lg.high_watermark, start) and not part.isr_update_pending:
            isr = [r for r in part.replicas if r in part.isr or r == replica]
            self._start_isr_update(part, isr)

    async def _shrink_isr_periodically(self) -> None:
        while True:
            await trio.sleep(self.lag_max_ms / 2000)
            now = _time.now_ms()
            for part in list(self.partitions.values()):
                if part.leader != self.broker_id or part.isr_update_pending:
                    continue
                lagging = {r for r in part.isr if r != self.broker_id
                           and now - part.followers.get(r, FollowerState()).last_caught_up_ms
                           > self.lag_max_ms}
                if lagging:
                    log.info("%s-%d: followers %s fell behind for %d ms; shrinking the ISR",
                             part.topic, part.partition, sorted(lagging), self.lag_max_ms)
                    self._start_isr_update(part, [r for r in part.isr if r not in lagging])

    def _start_isr_update(self, part: Partition, isr: list[int]) -> None:
        part.isr_update_pending = True
        self.fetchers.nursery.start_soon(self._write_isr, part, tuple(isr))

    async def _write_isr(self, part: Partition, isr: tuple[int, ...]) -> None:
        """Write a new ISR to the partition's state node (conditionally), then adopt it and
        post the change for the controller."""
        try:
            state = PartitionState(self.broker_id, part.leader_epoch, isr, part.controller_epoch)
            try:
                version = await self.cluster.zk.set(
                    partition_state_path(part.topic, part.partition), state.encode(),
                    version=part.zk_version)
            except BadVersionError:
                log.info("%s-%d: the state changed in ZooKeeper; not writing ISR %s (the "
                         "controller's newer state will arrive)", part.topic, part.partition,
                         list(isr))
                return
            except ZooKeeperError as exc:
                log.warning("%s-%d: cannot write ISR %s: %s", part.topic, part.partition,
                            list(isr), exc)
                return
            if self.partitions.get(part.tp) is not part or part.leader != self.broker_id:
                return
            log.info("%s-%d: ISR %s -> %s", part.topic, part.partition, list(part.isr),
                     list(isr))
            part.isr, part.zk_version = isr, version
            self.cluster.update_isr(part.tp, isr)
            self._maybe_advance_high_watermark(part)
            part.signal()
            try:
                await self.cluster.zk.create(
                    f"{ISR_CHANGE_NOTIFICATION}/{ISR_CHANGE_PREFIX}",
                    encode_isr_change([part.tp]), sequence=True, makepath=True)
            except ZooKeeperError as exc:
                log.warning("cannot post the ISR change of %s-%d: %s", part.topic,
                            part.partition, exc)
        finally:
            part.isr_update_pending = False

    async def _checkpoint_high_watermarks(self) -> None:
        interval = self.config["replica.high.watermark.checkpoint.interval.ms"] / 1000
        while True:
            await trio.sleep(interval)
            try:
                await trio.to_thread.run_sync(self.logs.checkpoint_high_watermarks,
                                              limiter=self.limiter)
            except OSError as exc:
                log.warning("writing replication-offset-checkpoint failed: %s", exc)

    # -- a controlled shutdown ----------------------------------------------------------------

    async def controlled_shutdown(self) -> bool:
        """Ask the controller to move this broker's leaderships away before it stops (Kafka's
        ``controlledShutdown``): ControlledShutdown until it answers with no partition left
        here, at most ``controlled.shutdown.max.retries`` times.  True when it did."""
        retries = self.config["controlled.shutdown.max.retries"]
        backoff_s = self.config["controlled.shutdown.retry.backoff.ms"] / 1000
        timeout_s = self.config["controller.socket.timeout.ms"] / 1000
        for attempt in range(retries + 1):
            if attempt:
                await trio.sleep(backoff_s)
            controller = self.cluster.controller_id
            address = next(((b.host, b.port) for b in self.cluster.brokers()
                            if b.node_id == controller), None)
            if address is None:
                log.info("controlled shutdown: no controller known yet")
                continue
            try:
                with trio.fail_after(timeout_s):
                    async with open_connection(*address, client_id=f"broker-{self.broker_id}",
                                               request_timeout_s=timeout_s,
                                               security=self.security) as conn:
                        response = await conn.request(ControlledShutdownRequest(
                            broker_id=self.broker_id, broker_epoch=-1))
            except (TrilogError, OSError, trio.TooSlowError) as exc:
                log.info("controlled shutdown: controller %d did not answer (%s)", controller,
                         exc)
                continue
            remaining = [(p.topic_name, p.partition_index)
                         for p in response.remaining_partitions]
            if response.error_code == NO_ERROR and not remaining:
                log.info("controlled shutdown done: this broker leads no partition")
                self._step_down()
                return True
            log.info("controlled shutdown: error %d, %d partitions still led here",
                     response.error_code, len(remaining))
            if response.error_code != NO_ERROR:
                continue
            # The others have new leaders, whose LeaderAndIsr may reach this broker only
            # after it stopped reading: acks=all produces waiting here must not wait for
            # followers that went over to them.
            self._step_down(keep=set(remaining))
            live = {b.node_id for b in self.cluster.brokers()} - {self.broker_id}
            if not any(set(self.cluster.replica_info(*tp)[0]) & live for tp in remaining):
                log.info("controlled shutdown: no other live replica can lead them")
                return False
        log.warning("controlled shutdown did not complete; stopping anyway")
        return False

    def _step_down(self, keep: set[TopicPartition] | None = None) -> None:
        """After a controlled shutdown: lead nothing here any more but ``keep`` (partitions
        no other live replica can take).  The new leaders have the controller's word; a
        produce that still reaches this broker is sent elsewhere at once, and one waiting
        for its in-sync replicas answers NOT_LEADER_OR_FOLLOWER now, instead of waiting
        for followers that went over to the new leader."""
        keep = keep or set()
        for part in self.partitions.values():
            if part.leader == self.broker_id and part.tp not in keep:
                part.leader = -1
                part.signal()
        self.cluster.step_down(keep)

    # -- the controller's requests --------------------------------------------------------------

    def _stale(self, controller_epoch: int) -> bool:
        if controller_epoch < self.controller_epoch:
            log.warning("refusing a request of controller epoch %d (this broker has seen %d)",
                        controller_epoch, self.controller_epoch)
            return True
        self.controller_epoch = controller_epoch
        return False

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
        for topic, st in states:
            tp = (topic, st.partition_index)
            if self.broker_id not in st.replicas:
                errors.append((topic, st.partition_index, UnknownTopicOrPartitionError.code))
                continue
            part = self.partitions.get(tp)
            if part is not None and st.leader_epoch <= part.leader_epoch:
                # Kafka's rule: only a newer leader epoch changes a partition.
                errors.append((topic, st.partition_index, StaleControllerEpochError.code))
                continue
            accepted.append((part or Partition(topic, st.partition_index), st))
            errors.append((topic, st.partition_index, NO_ERROR))
        await self._create_missing_logs([p.tp for p, _ in accepted])
        for part, st in accepted:
            if self.logs.get_log(*part.tp) is None:
                continue  # could not be created (logged): stays unknown here
            part.replicas = tuple(st.replicas)
            part.leader = st.leader
            part.leader_epoch = st.leader_epoch
            part.isr = tuple(st.isr)
            part.zk_version = st.partition_epoch
            part.controller_epoch = st.controller_epoch
            self.partitions[part.tp] = part
            if st.leader == self.broker_id:
                await self._become_leader(part)
            else:
                self._become_follower(part)
            part.signal()
        self.cluster.leadership_changed()
        return R(error_code=NO_ERROR, partition_errors=[
            R.LeaderAndIsrPartitionError(topic_name=t, partition_index=p, error_code=e)
            for t, p, e in errors])

    async def _create_missing_logs(self, tps: Iterable[TopicPartition]) -> None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in tps:
            if self.logs.get_log(topic, partition) is None:
                by_topic.setdefault(topic, []).append(partition)
        for topic, partitions in sorted(by_topic.items()):
            try:
                await self.cluster.topic_configs.refresh(topic)
                await trio.to_thread.run_sync(self.logs.create_logs, topic, partitions,
                                              limiter=self.limiter)
            except Exception as exc:  # a full disk, no descriptors, ZooKeeper away
                log.error("cannot create the logs of %s %s: %s", topic, partitions, exc)

    async def _become_leader(self, part: Partition) -> None:
        self.fetchers.remove(part.tp)
        lg = self.logs.get_log(*part.tp)
        assert lg is not None
        now = _time.now_ms()
        part.followers = {
            r: FollowerState(last_caught_up_ms=now if r in part.isr else 0)
            for r in part.replicas if r != self.broker_id}
        await trio.to_thread.run_sync(lg.assign_epoch_start_offset, part.leader_epoch,
                                      limiter=self.limiter)
        for hook in self.on_leadership_change:
            hook(part.tp)
        self._maybe_advance_high_watermark(part)
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
            part = self.partitions.pop(tp, None)
            if part is not None:
                part.signal()
        if request.delete_partitions:
            await trio.to_thread.run_sync(self._delete_logs, tps, limiter=self.limiter)
        self.cluster.leadership_changed()
        return R(error_code=NO_ERROR, partition_errors=[
            R.StopReplicaPartitionError(topic_name=t, partition_index=p, error_code=NO_ERROR)
            for t, p in tps])

    def _delete_logs(self, tps: list[TopicPartition]) -> None:
        for topic, partition in tps:
            self.logs.delete_log(topic, partition)

    async def offset_for_leader_epoch(self, request: Any, header: Any) -> Any:
        R = OffsetForLeaderEpochResponse
        topics = []
        # A follower's request (replica_id, v3+) is the cluster's business; a consumer's
        # needs Describe on each topic (Kafka).
        follower = header.api_version >= 3 and request.replica_id >= 0
        cluster_ok = not follower or self.access(AclOperation.CLUSTER_ACTION,
                                                 ResourceType.CLUSTER)
        for topic in request.topics:
            partitions = []
            topic_ok = cluster_ok and (follower or self.access(
                AclOperation.DESCRIBE, ResourceType.TOPIC, topic.topic))
            for p in topic.partitions:
                tp = (topic.topic, p.partition)
                error, epoch, end = NO_ERROR, -1, -1
                if not topic_ok:
                    partitions.append(R.OffsetForLeaderTopicResult.EpochEndOffset(
                        error_code=(TopicAuthorizationFailedError.code if cluster_ok
                                    else ClusterAuthorizationFailedError.code),
                        partition=p.partition, leader_epoch=-1, end_offset=-1))
                    continue
                try:
                    if not self.is_leader(tp):
                        raise NotLeaderOrFollowerError(f"not the leader of {tp}")
                    self.check_leader_epoch(tp, getattr(p, "current_leader_epoch", -1))
                    lg = self.logs.get_log(*tp)
                    if lg is None:
                        raise NotLeaderOrFollowerError(f"{tp} has no log here")
                    epoch, end = lg.end_offset_for_epoch(p.leader_epoch)
                except (NotLeaderOrFollowerError, FencedLeaderEpochError,
                        UnknownLeaderEpochError) as exc:
                    error = exc.code
                partitions.append(R.OffsetForLeaderTopicResult.EpochEndOffset(
                    error_code=error, partition=p.partition, leader_epoch=epoch,
                    end_offset=end))
            topics.append(R.OffsetForLeaderTopicResult(topic=topic.topic,
                                                       partitions=partitions))
        await trio.lowlevel.checkpoint()
        return R(throttle_time_ms=0, topics=topics)
