"""What the broker knows of its cluster: brokers, topics, partitions and their leaders.

Two implementations answer the same questions:

- ``StandaloneCluster``: one broker, no ZooKeeper; the partition directories under
  ``log.dirs`` are the list of topics.
- ``ZooKeeperCluster`` (``_zkcluster.py``): brokers and topics from ZooKeeper (the seeds'
  layout), kept current by watches.

The request handlers read the cached view synchronously (a Metadata request costs no I/O)
and call the async ``create_topic`` / ``delete_topic``.
"""

from __future__ import annotations

import base64
import logging
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, NamedTuple

import trio

from trilog._topic import validate_topic_name
from trilog.broker._limits import PartitionBudget
from trilog.broker.network._listeners import Listener
from trilog.broker.configs._topic_properties import validate_overrides
from trilog.errors import (
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    KafkaStorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from trilog.storage import LogManager, write_atomically
from trilog.zk import assign_new_partitions

if TYPE_CHECKING:
    from trilog.broker.configs._topic_configs import TopicConfigs

log = logging.getLogger("trilog.broker")

#: Internal topics: readable, not writable by clients, listed with ``is_internal``.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


@dataclass(frozen=True)
class BrokerInfo:
    """A broker of the cluster: ``host``/``port`` is its inter-broker listener's address,
    ``endpoints`` every listener it advertises (empty: that one only)."""

    node_id: int
    host: str
    port: int
    endpoints: tuple[Listener, ...] = ()

    def address(self, listener: str | None) -> tuple[str, int] | None:
        """Where a client of listener ``listener`` reaches this broker (None: it has no
        such listener, and Kafka leaves it out of that client's Metadata)."""
        if listener is None or not self.endpoints:
            return self.host, self.port
        for endpoint in self.endpoints:
            if endpoint.name == listener:
                return endpoint.host, endpoint.port
        return None



def broker_info(node_id: int, endpoints: Iterable[Listener], inter_broker: str | None
                ) -> BrokerInfo | None:
    """A broker's ``BrokerInfo`` from its advertised endpoints (None if it has none):
    ``host``/``port`` are those of listener ``inter_broker`` (or the first)."""
    endpoints = tuple(endpoints)
    if not endpoints:
        return None
    inter = next((e for e in endpoints if e.name == inter_broker), endpoints[0])
    return BrokerInfo(node_id, inter.host, inter.port, endpoints)


class PartitionDescription(NamedTuple):
    """What Metadata answers of a partition besides its leader."""

    #: the leader's epoch (KIP-320: a client ignores an answer older than one it has); -1
    #: where there are none (a standalone broker)
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    #: replicas on brokers not live (or found gone, though still registered)
    offline: list[int]


def new_cluster_id() -> str:
    """Kafka's form: a random UUID in URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def check_new_topic(name: str, num_partitions: int, replication_factor: int,
                    live_brokers: int, assignment: dict[int, list[int]] | None) -> None:
    """Validate a CreateTopics entry; raise the ``ApiError`` Kafka would answer with."""
    validate_topic_name(name)
    if assignment:
        if num_partitions not in (-1, len(assignment)) or replication_factor != -1:
            raise InvalidRequestError(
                "give either num_partitions/replication_factor or a replica assignment"
            )
        if sorted(assignment) != list(range(len(assignment))):
            raise InvalidReplicaAssignmentError("partitions must be numbered 0..n-1")
        factors = {len(replicas) for replicas in assignment.values()}
        if len(factors) != 1 or 0 in factors:
            raise InvalidReplicaAssignmentError(
                "every partition of a topic must have the same number of replicas")
        for replicas in assignment.values():
            if len(set(replicas)) != len(replicas):
                raise InvalidReplicaAssignmentError(
                    f"Duplicate brokers not allowed in replica assignment: {replicas}")
        return
    if num_partitions == 0 or num_partitions < -1:
        raise InvalidPartitionsError(f"number of partitions must be at least 1, not {num_partitions}")
    if replication_factor == 0 or replication_factor < -1:
        raise InvalidReplicationFactorError(
            f"replication factor must be at least 1, not {replication_factor}")
    if live_brokers < 1:
        raise InvalidReplicationFactorError("no live brokers")
    if replication_factor > live_brokers:
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{live_brokers}.")


def plan_new_partitions(name: str, current: dict[int, list[int]], count: int,
                        assignment: list[list[int]] | None,
                        live: list[int]) -> dict[int, list[int]]:
    """Validate a CreatePartitions entry growing ``name`` from its ``current`` assignment to
    ``count`` partitions; return the new partitions' replicas (``trilog.zk.
    assign_new_partitions``).  Raise the ``ApiError`` Kafka answers with."""
    if name in INTERNAL_TOPICS:
        # The coordinator places groups by the partition count: growing it orphans offsets.
        raise InvalidRequestError(f"cannot add partitions to the internal topic {name}")
    return assign_new_partitions(current, count, assignment, live)


class Cluster:
    """The interface the handlers use; see the module docstring."""

    broker: BrokerInfo
    cluster_id: str
    #: What new partitions may be created here (None: no limit; tests of the views).
    partition_budget: PartitionBudget | None = None
    #: The topics' configurations (overrides over the broker's defaults), kept where this
    #: kind of cluster keeps them.
    topic_configs: TopicConfigs
    #: ``partitions(topic)`` is never changed in place, only replaced, and says everything
    #: Metadata answers of the topic: an answer built for that dict object stays right as
    #: long as it is the topic's (Metadata's cache of answers).
    immutable_partitions = False

    def brokers(self) -> list[BrokerInfo]:
        raise NotImplementedError

    @property
    def controller_id(self) -> int:
        return min((b.node_id for b in self.brokers()), default=-1)

    def topics(self) -> dict[str, dict[int, int]]:
        """``{topic: {partition: leader id (-1: no leader now)}}``."""
        raise NotImplementedError

    async def wait_settled(self) -> None:
        """Return when the view is worth answering Metadata from (a ZooKeeper cluster
        waits, briefly, while a leader's death is known here but not yet handled by the
        controller)."""
        await trio.lowlevel.checkpoint()

    def partitions(self, topic: str) -> dict[int, int] | None:
        return self.topics().get(topic)

    def replica_info(self, topic: str, partition: int) -> tuple[list[int], list[int]]:
        """``(replicas, in-sync replicas)`` of a partition."""
        leader = self.leader(topic, partition)
        return ([leader], [leader]) if leader is not None and leader >= 0 else ([], [])

    def describe_partition(self, topic: str, partition: int,
                           live: frozenset[int]) -> PartitionDescription:
        """What Metadata answers of a partition besides its leader (``live``: the brokers
        it lists)."""
        replicas, isr = self.replica_info(topic, partition)
        offline = [] if live.issuperset(replicas) else [r for r in replicas if r not in live]
        return PartitionDescription(-1, replicas, isr, offline)

    def min_insync_replicas(self, topic: str) -> int:
        """The in-sync replicas an ``acks=all`` append to ``topic`` needs."""
        return self.topic_configs.config_for(topic).min_insync_replicas

    def leader(self, topic: str, partition: int) -> int | None:
        """The leader's id, -1 if the partition has none now, None if it does not exist."""
        parts = self.topics().get(topic)
        if parts is None:
            return None
        return parts.get(partition)

    async def create_topic(self, name: str, num_partitions: int, replication_factor: int = -1,
                           assignment: dict[int, list[int]] | None = None,
                           validate_only: bool = False,
                           configs: Mapping[str, str | None] | None = None) -> None:
        """Create a topic with its config overrides (``INVALID_CONFIG`` for a bad one)."""
        raise NotImplementedError

    async def create_partitions(self, name: str, count: int,
                                assignment: list[list[int]] | None = None,
                                validate_only: bool = False) -> None:
        """Grow topic ``name`` to ``count`` partitions (``assignment``: the new partitions'
        replicas, in order); raise the ``ApiError`` Kafka answers with
        (``plan_new_partitions``, ``UNKNOWN_TOPIC_OR_PARTITION``, the partition budget)."""
        raise NotImplementedError

    async def delete_topic(self, name: str) -> None:
        raise NotImplementedError


class StandaloneCluster(Cluster):
    """One broker and its log dirs.  Runs in the trio thread; logs are created in threads.
    A topic's partition map is replaced, never changed in place (``immutable_partitions``)."""

    immutable_partitions = True

    def __init__(self, broker: BrokerInfo, log_manager: LogManager, cluster_id: str,
                 default_partitions: int, limiter: trio.CapacityLimiter,
                 topic_configs: TopicConfigs,
                 partition_budget: PartitionBudget | None = None) -> None:
        self.broker = broker
        self.cluster_id = cluster_id
        self.partition_budget = partition_budget
        self.topic_configs = topic_configs
        self._logs = log_manager
        self._default_partitions = default_partitions
        self._limiter = limiter
        self._topics: dict[str, dict[int, int]] = {}
        for lg in log_manager.logs():
            self._topics.setdefault(lg.topic, {})[lg.partition] = broker.node_id
        self._lock = trio.Lock()

    def brokers(self) -> list[BrokerInfo]:
        return [self.broker]

    def topics(self) -> dict[str, dict[int, int]]:
        return self._topics

    async def create_topic(self, name, num_partitions, replication_factor=-1, assignment=None,
                           validate_only=False, configs=None) -> None:
        check_new_topic(name, num_partitions, replication_factor, 1, assignment)
        if assignment:
            for replicas in assignment.values():
                if replicas != [self.broker.node_id]:
                    raise InvalidReplicaAssignmentError(
                        f"broker {replicas[0]} does not exist; this broker is {self.broker.node_id}"
                    )
            num_partitions = len(assignment)
        if num_partitions == -1:
            num_partitions = self._default_partitions
        async with self._lock:
            if name in self._topics:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            if self.partition_budget is not None:
                self.partition_budget.check(name, num_partitions, num_partitions)
            overrides = validate_overrides(configs or {})
            if validate_only:
                return
            await self.topic_configs.set(name, overrides)  # before the logs: they use it
            try:
                await trio.to_thread.run_sync(self._logs.create_logs, name,
                                              range(num_partitions), limiter=self._limiter)
            except OSError as exc:  # nothing of the topic is left (create_logs)
                log.error("cannot create topic %s: %s", name, exc)
                await self.topic_configs.forget(name)
                raise KafkaStorageError(f"cannot create topic {name!r}: {exc}") from None
            self._topics[name] = {p: self.broker.node_id for p in range(num_partitions)}
        log.info("created topic %s with %d partitions", name, num_partitions)

    async def create_partitions(self, name: str, count: int,
                                assignment: list[list[int]] | None = None,
                                validate_only: bool = False) -> None:
        me = self.broker.node_id
        async with self._lock:
            parts = self._topics.get(name)
            if parts is None:
                raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
            new = plan_new_partitions(name, {p: [me] for p in parts}, count, assignment, [me])
            if self.partition_budget is not None:
                self.partition_budget.check(name, count, len(new))
            if validate_only:
                return
            try:
                await trio.to_thread.run_sync(self._logs.create_logs, name, sorted(new),
                                              limiter=self._limiter)
            except OSError as exc:  # none of the new partitions is left (create_logs)
                log.error("cannot add partitions to %s: %s", name, exc)
                raise KafkaStorageError(f"cannot add partitions to {name!r}: {exc}") from None
            self._topics[name] = {**parts, **{p: me for p in new}}
        log.info("topic %s grew from %d to %d partitions", name, len(parts), count)

    async def delete_topic(self, name: str) -> None:
        async with self._lock:
            parts = self._topics.pop(name, None)
            if parts is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            await trio.to_thread.run_sync(self._delete_logs, name, list(parts),
                                          limiter=self._limiter)
            await self.topic_configs.forget(name)
        log.info("deleted topic %s", name)

    def _delete_logs(self, name: str, partitions: list[int]) -> None:
        for p in partitions:
            self._logs.delete_log(name, p)


def load_or_create_meta(log_dirs: list[str], broker_id: int, cluster_id: str | None) -> str:
    """Kafka's ``meta.properties`` in every log dir: the cluster id this data belongs to.

    Returns the cluster id (the one on disk, or ``cluster_id``, or a new one).  A log dir
    that belongs to another broker id or cluster is refused, as Kafka does.
    """
    from trilog.broker.configs._broker_config import ConfigError, parse_properties

    found: str | None = None
    for d in log_dirs:
        path = os.path.join(d, "meta.properties")
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            props = parse_properties(f.read(), path)
        if props.get("broker.id") not in (None, str(broker_id)):
            raise ConfigError(
                f"{path} says this data belongs to broker {props.get('broker.id')}, "
                f"but broker.id is {broker_id}"
            )
        disk_id = props.get("cluster.id")
        if disk_id and found and disk_id != found:
            raise ConfigError(f"log dirs belong to different clusters ({found}, {disk_id})")
        found = disk_id or found
    if cluster_id and found and cluster_id != found:
        raise ConfigError(
            f"the log dirs belong to cluster {found}, but ZooKeeper's /cluster/id is {cluster_id}"
        )
    result = found or cluster_id or new_cluster_id()
    for d in log_dirs:
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "meta.properties")
        if not os.path.exists(path):
            write_atomically(
                path, f"version=0\nbroker.id={broker_id}\ncluster.id={result}\n".encode()
            )
    return result
