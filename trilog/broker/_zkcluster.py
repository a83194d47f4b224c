"""Cluster mode: brokers and topics in ZooKeeper, the seeds' layout (see ``trilog.zk``).

Each broker:
- registers ``/brokers/ids/<id>`` (ephemeral; a second broker with the same id fails to start)
  and reuses or creates ``/cluster/id``;
- watches ``/brokers/ids`` and ``/brokers/topics``, caching every broker's address and every
  topic's assignment, so Metadata is answered from memory for the whole cluster;
- serves the partitions assigned to it: creates their logs and writes their
  ``.../partitions/<n>/state`` (ephemeral, leader = this broker);
- removes the logs of topics that disappear from ``/brokers/topics`` (DeleteTopics);
- re-creates its ephemeral nodes after a session expiry;
- stands in the controller election (``_controller.py``); Metadata names the winner.

A partition's leader is its assigned broker while that broker is registered, else -1
(no replication yet).  A ZooKeeper outage stops none of this broker's serving: the cache
stays, and the watch loops retry when ZooKeeper is back.
"""

from __future__ import annotations

import functools
import logging
import random
from contextlib import aclosing, asynccontextmanager
from typing import TYPE_CHECKING, AsyncIterator, Callable

import trio

from trilog.broker._cluster import (
    BrokerInfo,
    Cluster,
    check_new_topic,
    load_or_create_meta,
    new_cluster_id,
    plan_new_partitions,
)
from trilog.broker._config_store import TopicConfigs, ZooKeeperConfigStore
from trilog.broker._controller import ControllerElection
from trilog.broker._topic_configs import validate_overrides
from trilog.errors import (
    InvalidReplicaAssignmentError,
    RemoteProtocolError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    TrilogError,
    UnknownTopicOrPartitionError,
)
from trilog.zk import (
    BROKER_IDS,
    BROKER_TOPICS,
    CLUSTER_ID,
    BrokerRegistration,
    NodeExistsError,
    NoNodeError,
    ZooKeeper,
    ZooKeeperError,
    assign_replicas,
    broker_path,
    decode_cluster_id,
    decode_topic_assignment,
    encode_cluster_id,
    encode_partition_state,
    encode_topic_assignment,
    open_zookeeper,
    partition_state_path,
    topic_path,
)

if TYPE_CHECKING:
    from trilog.broker._config import BrokerConfig
    from trilog.storage import LogManager

log = logging.getLogger("trilog.broker.zk")

#: How long CreateTopics waits for the new topic to show in this broker's cache.
CREATE_WAIT_S = 5.0
RETRY_S = 1.0


class BrokerIdInUseError(TrilogError):
    """Another live broker is registered with this broker.id."""


class ZooKeeperCluster(Cluster):
    def __init__(self, zk: ZooKeeper, broker: BrokerInfo, cluster_id: str, logs,
                 default_partitions: int, limiter: trio.CapacityLimiter,
                 topic_configs: TopicConfigs) -> None:
        self.zk = zk
        self.broker = broker
        self.cluster_id = cluster_id
        self.topic_configs = topic_configs
        self._logs = logs
        self._default_partitions = default_partitions
        self._limiter = limiter
        self._brokers: dict[int, BrokerInfo] = {}
        self._assignments: dict[str, dict[int, list[int]]] = {}
        self._topics_view: dict[str, dict[int, int]] = {}
        self._served: set[tuple[str, int]] = set()  # partitions whose state node we wrote
        self.changed = trio.Event()  # replaced on every cache change; tests and waits use it
        # Kafka's partition-modification watch: each topic's assignment is followed, so
        # partitions added by CreatePartitions are served (``_apply_assignment_changes``).
        self._topics_lock = trio.Lock()  # one cache update at a time
        self._followed: dict[str, Callable[[], None]] = {}
        self._changed_assignments: dict[str, dict[int, list[int]]] = {}
        self._assignment_changed = trio.Event()
        #: who the controller is (``/controller``): this broker stands in the election
        self.controller = ControllerElection(zk, broker.node_id)

    # -- the cached view -------------------------------------------------------------------

    def brokers(self) -> list[BrokerInfo]:
        return sorted(self._brokers.values(), key=lambda b: b.node_id)

    @property
    def controller_id(self) -> int:
        """The broker holding ``/controller`` (-1 while there is none: Metadata says so)."""
        return self.controller.controller_id

    def topics(self) -> dict[str, dict[int, int]]:
        return self._topics_view

    def _rebuild_view(self) -> None:
        live = self._brokers
        self._topics_view = {
            topic: {p: (r[0] if r and r[0] in live else -1) for p, r in parts.items()}
            for topic, parts in self._assignments.items()
        }
        self.changed.set()
        self.changed = trio.Event()

    # -- start -----------------------------------------------------------------------------

    async def register(self) -> None:
        reg = BrokerRegistration(self.broker.node_id, self.broker.host, self.broker.port)
        await self.zk.ensure_path(BROKER_IDS)
        try:
            await self.zk.create(broker_path(self.broker.node_id), reg.encode(), ephemeral=True)
        except NodeExistsError:
            raise BrokerIdInUseError(
                f"broker.id {self.broker.node_id} is already registered in ZooKeeper by a live "
                "broker; give each broker its own broker.id"
            ) from None
        log.info("registered broker %d at %s:%d", self.broker.node_id, self.broker.host,
                 self.broker.port)

    async def load(self) -> None:
        """Read brokers and topics once, so the first Metadata answer is complete."""
        await self.zk.ensure_path(BROKER_TOPICS)
        await self._refresh_brokers(await self.zk.get_children(BROKER_IDS))
        await self._refresh_topics(await self.zk.get_children(BROKER_TOPICS))
        await self.controller.settle()

    async def run(self) -> None:
        """The watch loops and the session keeper; runs in the broker's nursery."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch, BROKER_IDS, self._refresh_brokers)
            nursery.start_soon(self._watch, BROKER_TOPICS, self._refresh_topics)
            nursery.start_soon(self._apply_assignment_changes)
            nursery.start_soon(self._session_keeper)
            nursery.start_soon(self.controller.run)

    async def _watch(self, path: str, refresh) -> None:
        while True:
            try:
                value = await self.zk.watch_children(path)
                async with aclosing(value.eventual_values(lambda v: v is not None)) as values:
                    async for children in values:
                        await refresh(children)
            except ZooKeeperError as exc:
                log.warning("watching %s failed (%s); retrying", path, exc)
                await trio.sleep(RETRY_S)

    async def _session_keeper(self) -> None:
        async with aclosing(self.zk.session_generation.transitions()) as sessions:
            async for _generation in sessions:
                log.warning("ZooKeeper session expired; registering broker %d again",
                            self.broker.node_id)
                await self._reregister()

    async def _reregister(self) -> None:
        while True:
            try:
                await self.register()
                served, self._served = self._served, set()
                for topic, partition in sorted(served):
                    await self._write_state(topic, partition)
                return
            except BrokerIdInUseError:
                # Our old ephemeral node may linger until the old session is gone.
                await trio.sleep(RETRY_S)
            except ZooKeeperError as exc:
                log.warning("re-registration failed (%s); retrying", exc)
                await trio.sleep(RETRY_S)

    # -- refreshing the cache ------------------------------------------------------------------

    async def _refresh_brokers(self, children: list[str]) -> None:
        ids = {int(c) for c in children if c.isdigit()}
        brokers = {}
        for node_id in ids:
            known = self._brokers.get(node_id)
            if known is not None:
                brokers[node_id] = known
                continue
            try:
                reg = BrokerRegistration.decode(node_id, await self.zk.get(broker_path(node_id)))
            except NoNodeError:
                continue
            except RemoteProtocolError as exc:
                log.warning("ignoring broker %d: %s", node_id, exc)
                continue
            brokers[node_id] = BrokerInfo(node_id, reg.host, reg.port)
        self._brokers = brokers
        self._rebuild_view()

    async def _refresh_topics(self, children: list[str]) -> None:
        async with self._topics_lock:
            await self._refresh_topics_locked(children)
            await self._follow_assignments()

    async def _follow_assignments(self) -> None:
        """Follow the assignment of every known topic, and no longer the ones gone."""
        for topic in set(self._followed) - set(self._assignments):
            self._followed.pop(topic)()
        for topic in sorted(set(self._assignments) - set(self._followed)):
            try:
                self._followed[topic] = await self.zk.follow_data(
                    topic_path(topic), functools.partial(self._assignment_data, topic))
            except ZooKeeperError as exc:  # the next change of the topic list tries again
                log.warning("cannot watch the assignment of %s: %s", topic, exc)

    def _assignment_data(self, topic: str, data: bytes | None) -> None:
        if data is None:
            return  # the topic is being deleted: the children watch drops it
        try:
            self._changed_assignments[topic] = decode_topic_assignment(topic, data)
        except RemoteProtocolError as exc:
            log.warning("ignoring the new assignment of %s: %s", topic, exc)
            return
        self._assignment_changed.set()

    async def _apply_assignment_changes(self) -> None:
        """Serve the partitions a changed assignment gives this broker, then show them."""
        while True:
            await self._assignment_changed.wait()
            self._assignment_changed = trio.Event()
            async with self._topics_lock:
                changes, self._changed_assignments = self._changed_assignments, {}
                changed = {t: a for t, a in changes.items()
                           if t in self._assignments and a != self._assignments[t]}
                if not changed:
                    continue
                await self._serve_assigned(changed)
                self._assignments = {**self._assignments, **changed}
                self._rebuild_view()
                for topic, assignment in changed.items():
                    log.info("topic %s now has %d partitions", topic, len(assignment))

    async def _refresh_topics_locked(self, children: list[str]) -> None:
        assignments = {}
        for topic in children:
            known = self._assignments.get(topic)
            if known is not None:
                assignments[topic] = known
                continue
            try:
                data = await self.zk.get(topic_path(topic))
                assignments[topic] = decode_topic_assignment(topic, data)
            except NoNodeError:
                continue
            except RemoteProtocolError as exc:
                log.warning("ignoring topic %s: %s", topic, exc)
                continue
        gone = set(self._assignments) - set(assignments)
        # Our partitions get their logs before the view says we lead them: a Produce that
        # follows a CreateTopics answer must find the log.
        await self._serve_assigned(assignments)
        self._assignments = assignments
        self._rebuild_view()
        for topic in gone:
            await self._drop_topic(topic)

    async def _serve_assigned(self, assignments: dict[str, dict[int, list[int]]]) -> None:
        mine = [(t, p) for t, parts in assignments.items() for p, r in parts.items()
                if r and r[0] == self.broker.node_id and (t, p) not in self._served]
        if not mine:
            return
        by_topic: dict[str, list[int]] = {}
        for topic, partition in mine:
            by_topic.setdefault(topic, []).append(partition)
        for topic, partitions in sorted(by_topic.items()):
            try:
                # As Kafka's broker, read the topic's config before creating its logs.
                await self.topic_configs.refresh(topic)
                await trio.to_thread.run_sync(self._logs.create_logs, topic, partitions,
                                              limiter=self._limiter)
            except (OSError, TrilogError) as exc:
                # A full disk or no descriptor left: the partitions stay offline here (no
                # state node), and the next change of the topic list tries again.
                log.error("cannot create the logs of %s %s: %s", topic, partitions, exc)
                continue
            for partition in partitions:
                await self._write_state(topic, partition)

    async def _write_state(self, topic: str, partition: int) -> None:
        path = partition_state_path(topic, partition)
        state = encode_partition_state(self.broker.node_id)
        try:
            await self.zk.create(path, state, ephemeral=True, makepath=True)
        except NodeExistsError:
            await self.zk.set(path, state)
        self._served.add((topic, partition))

    async def _drop_topic(self, topic: str) -> None:
        local = [lg.partition for lg in self._logs.logs() if lg.topic == topic]
        self._served = {(t, p) for t, p in self._served if t != topic}
        if local:
            await trio.to_thread.run_sync(self._delete_logs, topic, local, limiter=self._limiter)
            log.info("topic %s was deleted; removed its %d local partitions", topic, len(local))
        await self.topic_configs.forget(topic, stored=False)

    def _delete_logs(self, topic: str, partitions: list[int]) -> None:
        for p in partitions:
            self._logs.delete_log(topic, p)

    # -- admin -----------------------------------------------------------------------------

    async def create_topic(self, name, num_partitions, replication_factor=-1, assignment=None,
                           validate_only=False, configs=None) -> None:
        live = sorted(self._brokers)
        check_new_topic(name, num_partitions, replication_factor, len(live), assignment)
        if assignment:
            unknown = {r[0] for r in assignment.values()} - set(live)
            if unknown:
                raise InvalidReplicaAssignmentError(f"brokers {sorted(unknown)} are not live")
        else:
            n = self._default_partitions if num_partitions == -1 else num_partitions
            assignment = assign_replicas(n, live, start=random.randrange(len(live)))
        if name in self._assignments:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        if self.partition_budget is not None:
            here = sum(1 for r in assignment.values() if r and r[0] == self.broker.node_id)
            self.partition_budget.check(name, len(assignment), here)
        overrides = validate_overrides(configs or {})
        if validate_only:
            return
        # The config first (Kafka's order), so every broker creating a log finds it.
        await self.topic_configs.set(name, overrides)
        try:
            await self.zk.create(topic_path(name), encode_topic_assignment(assignment),
                                 makepath=True)
        except NodeExistsError:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists") from None
        except ZooKeeperError as exc:
            raise RequestTimedOutError(f"cannot create {name!r}: {exc}") from None
        log.info("created topic %s: %s", name, assignment)
        # Answer once every partition is served: each leader writes its partition's state
        # node after creating the log, and this broker's cache knows the topic.
        with trio.move_on_after(CREATE_WAIT_S):
            for partition in sorted(assignment):
                while not await self.zk.exists(partition_state_path(name, partition)):
                    await trio.sleep(0.02)
            while name not in self._assignments:
                await self.changed.wait()

    async def create_partitions(self, name: str, count: int,
                                assignment: list[list[int]] | None = None,
                                validate_only: bool = False) -> None:
        try:
            current = decode_topic_assignment(name, await self.zk.get(topic_path(name)))
        except NoNodeError:
            raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.") from None
        except ZooKeeperError as exc:
            raise RequestTimedOutError(f"cannot read {name!r}: {exc}") from None
        new = plan_new_partitions(name, current, count, assignment, sorted(self._brokers))
        if self.partition_budget is not None:
            here = sum(1 for r in new.values() if r and r[0] == self.broker.node_id)
            self.partition_budget.check(name, count, here)
        if validate_only:
            return
        try:
            await self.zk.set(topic_path(name), encode_topic_assignment({**current, **new}))
        except NoNodeError:
            raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.") from None
        except ZooKeeperError as exc:
            raise RequestTimedOutError(f"cannot add partitions to {name!r}: {exc}") from None
        log.info("topic %s grows from %d to %d partitions: %s", name, len(current), count, new)
        # Answer once the new partitions are served and this broker's cache shows them.
        with trio.move_on_after(CREATE_WAIT_S):
            try:
                for partition in sorted(new):
                    while not await self.zk.exists(partition_state_path(name, partition)):
                        await trio.sleep(0.02)
            except ZooKeeperError as exc:  # made already: only the wait is cut short
                log.warning("cannot see the new partitions of %s served: %s", name, exc)
            while len(self._assignments.get(name, ())) < count:
                await self.changed.wait()

    async def delete_topic(self, name: str) -> None:
        try:
            await self.zk.delete(topic_path(name), recursive=True)
            await self.topic_configs.forget(name)
        except NoNodeError:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist") from None
        except ZooKeeperError as exc:
            raise RequestTimedOutError(f"cannot delete {name!r}: {exc}") from None
        with trio.move_on_after(CREATE_WAIT_S):
            while name in self._assignments:
                await self.changed.wait()


async def _cluster_id(zk: ZooKeeper) -> str:
    try:
        return decode_cluster_id(await zk.get(CLUSTER_ID))
    except NoNodeError:
        pass
    try:
        await zk.create(CLUSTER_ID, encode_cluster_id(new_cluster_id()), makepath=True)
    except NodeExistsError:
        pass  # another broker won the race: use its id
    return decode_cluster_id(await zk.get(CLUSTER_ID))


@asynccontextmanager
async def open_zookeeper_cluster(config: BrokerConfig, broker: BrokerInfo, logs: LogManager,
                                 limiter: trio.CapacityLimiter
                                 ) -> AsyncIterator[ZooKeeperCluster]:
    """A ZooKeeper session with this broker registered, its cache loaded and its watches
    running, for the body of the ``async with``; closing the session on exit removes the
    registration.  Registration errors (a broker id in use) reach the caller as themselves."""
    assert config.zookeeper_connect is not None
    async with open_zookeeper(
        config.zookeeper_connect,
        session_timeout_ms=config["zookeeper.session.timeout.ms"],
        connection_timeout_ms=config["zookeeper.connection.timeout.ms"],
    ) as zk:
        cluster_id = await _cluster_id(zk)
        await trio.to_thread.run_sync(load_or_create_meta, config.log_dirs, config.broker_id,
                                      cluster_id)
        topic_configs = TopicConfigs(config, logs, ZooKeeperConfigStore(zk), limiter)
        await topic_configs.load_all()
        cluster = ZooKeeperCluster(zk, broker, cluster_id, logs, config["num.partitions"],
                                   limiter, topic_configs)
        await cluster.register()
        await cluster.load()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cluster.run)
            nursery.start_soon(topic_configs.follow_changes)
            yield cluster
            nursery.cancel_scope.cancel()
