"""Topic administration, through a broker (Kafka's admin APIs) or straight in ZooKeeper.

``async with open_admin(bootstrap_servers="h:9092")`` talks to the first broker of the list
that answers (and, for what only a partition's leader or each broker can do, DeleteRecords
and DescribeLogDirs, to those brokers too); ``open_admin(zookeeper="h:2181/chroot")`` reads
and writes the seeds' layout (``/brokers/topics/<topic>`` assignments over
``/brokers/ids``) directly, as Kafka's ``kafka-topics.sh --zookeeper`` did.  Both give the
same ``Admin`` interface; the ZooKeeper one cannot touch records, log dirs or configs (the
brokers validate configs: ``describe_configs`` and ``alter_configs`` go through them).

Client quotas (KIP-546): ``describe_client_quotas`` and ``alter_client_quotas`` (any broker:
the quotas are the cluster's, ``_quotas.py``); brokers only.

Transactions (KIP-664): ``list_transactions`` asks every broker for the transactional ids it
coordinates (ListTransactions), ``describe_transactions`` asks each id's coordinator
(FindCoordinator key type 1, DescribeTransactions); brokers only.

Leader elections are the controller's (ElectLeaders goes to the broker Metadata names as
controller: brokers only); partition reassignments are plans written to ZooKeeper's
``/admin/reassign_partitions`` for the controller to carry out (ZooKeeper only, as
``kafka-reassign-partitions.sh --zookeeper``).
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Unpack

import trio

from trilog._topic import PartitionKey
from trilog._topic import validate_topic_name
from trilog.client._brokers import (
    BrokerAddress,
    parse_bootstrap,
    reach_cluster,
    registered_brokers,
)
from trilog.client._coordinator import TRANSACTION, find_coordinator
from trilog.client._quotas import (
    QuotaEntity,
    QuotaFilter,
    alter_client_quotas,
    describe_client_quotas,
)
from trilog.client._retry import REQUEST_RETRY
from trilog.client._settings import config_from_options
from trilog.net import BrokerConnection, ClientSecurity, SecurityOptions, open_connection
from trilog.errors import (
    ApiError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    LeaderNotAvailableError,
    NetworkError,
    NotControllerError,
    ReassignmentInProgressError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    TrilogError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from trilog.protocol import (
    AccessControlEntry,
    ApiKey,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    CreateAclsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeAclsRequest,
    DescribeConfigsRequest,
    DescribeLogDirsRequest,
    DescribeTransactionsRequest,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
    ListTransactionsRequest,
    MetadataRequest,
    PatternType,
    ResourcePattern,
    ResourceType,
)

if TYPE_CHECKING:  # trilog.zk imports kazoo: only a client that uses ZooKeeper pays for it
    from trilog.zk import ZooKeeper


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int  # -1: no leader now
    replicas: tuple[int, ...]
    error: str | None = None
    isr: tuple[int, ...] = ()  # the in-sync replicas


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: tuple[PartitionInfo, ...] = field(default_factory=tuple)
    internal: bool = False
    error: str | None = None


@dataclass(frozen=True)
class BrokerDescription:
    """A live broker as Metadata describes it: its address and rack (None: none set)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class ClusterDescription:
    """The cluster as Kafka's ``describeCluster`` shows it: its id, the controller's broker
    id (-1: unknown, or a broker too old to say) and the live brokers by id."""

    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerDescription, ...] = ()


@dataclass(frozen=True)
class DeletedRecords:
    """One partition's DeleteRecords: its log start offset now (Kafka's low watermark), or
    Kafka's error name (``low_watermark`` is then -1)."""

    topic: str
    partition: int
    low_watermark: int
    error: str | None = None


@dataclass(frozen=True)
class LogDirPartition:
    topic: str
    partition: int
    size: int  # bytes of its segments
    offset_lag: int  # 0 until replication
    is_future: bool = False


@dataclass(frozen=True)
class LogDirInfo:
    """One log dir of one broker and the partitions it holds (those asked about)."""

    broker: int
    path: str
    partitions: tuple[LogDirPartition, ...] = ()
    error: str | None = None


#: Kafka's ConfigSource codes (DescribeConfigs v1+) by their names in Kafka's admin client.
CONFIG_SOURCES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
}
#: Kafka's ConfigResource.Type codes, by the names ``ConfigResource.kind`` uses.
_RESOURCE_TYPES = {"topic": 2, "broker": 4}
_SET, _DELETE = 0, 1  # IncrementalAlterConfigs' operations
#: ElectLeaders' election_type codes
ELECTION_TYPES = {"preferred": 0, "unclean": 1}


@dataclass(frozen=True)
class ConfigEntry:
    """One setting of a topic or broker, as DescribeConfigs describes it.

    ``source`` is Kafka's ConfigSource name: ``"DYNAMIC_TOPIC_CONFIG"`` (the topic's own
    override), ``"STATIC_BROKER_CONFIG"`` (the broker's properties file or ``--override``),
    ``"DEFAULT_CONFIG"`` (nobody set it); ``"UNKNOWN"`` from a broker too old to say.
    """

    name: str
    value: str | None  # None: unset, or hidden because ``sensitive``
    source: str
    is_default: bool
    read_only: bool
    sensitive: bool


@dataclass(frozen=True)
class ConfigResource:
    """A topic's or a broker's settings (``kind`` ``"topic"`` or ``"broker"``), or Kafka's
    error name for it (``"UNKNOWN_TOPIC_OR_PARTITION"``; then ``entries`` is empty)."""

    kind: str
    name: str
    entries: tuple[ConfigEntry, ...] = ()
    error: str | None = None
    error_message: str | None = None

    def get(self, name: str) -> ConfigEntry | None:
        return next((e for e in self.entries if e.name == name), None)

    @property
    def overrides(self) -> dict[str, str | None]:
        """The settings that are not defaults, ``{name: value}`` (what Kafka's
        ``kafka-topics --describe`` prints as ``Configs:``)."""
        return {e.name: e.value for e in self.entries if not e.is_default}


@dataclass(frozen=True)
class TransactionListing:
    """A transactional id as the broker that coordinates it lists it (ListTransactions):
    its producer id and its state, by Kafka's name (``"Ongoing"``, ``"CompleteCommit"``,
    ``"Empty"``, ...)."""

    transactional_id: str
    coordinator: int  # the broker's id
    producer_id: int
    state: str


@dataclass(frozen=True)
class TransactionDescription:
    """A transactional id's state at its coordinator (DescribeTransactions), or Kafka's
    error name for it (``"TRANSACTIONAL_ID_NOT_FOUND"``; the rest is then empty).
    ``start_time_ms``: when the transaction open now began (None: none is)."""

    transactional_id: str
    coordinator: int
    state: str = ""
    producer_id: int = -1
    producer_epoch: int = -1
    timeout_ms: int = 0
    start_time_ms: int | None = None
    partitions: tuple[PartitionKey, ...] = ()
    error: str | None = None


class Admin:
    async def brokers(self) -> list[BrokerAddress]:
        raise NotImplementedError

    async def describe_topics(self, names: list[str] | None = None) -> list[TopicInfo]:
        raise NotImplementedError

    async def describe_cluster(self) -> ClusterDescription:
        """The cluster id, the controller and the live brokers with their racks (one
        Metadata request for no topic).  Needs brokers."""
        raise _needs_brokers("describe_cluster")

    async def list_topics(self) -> list[str]:
        return sorted(t.name for t in await self.describe_topics() if t.error is None)

    async def create_topic(self, name: str, num_partitions: int = -1,
                           replication_factor: int = -1, *,
                           configs: Mapping[str, str] | None = None) -> None:
        """Create topic ``name``; ``configs``: its overrides with Kafka's topic-level names
        (``{"retention.ms": "3600000"}``), validated by the broker (needs brokers)."""
        raise NotImplementedError

    async def delete_topic(self, name: str) -> None:
        raise NotImplementedError

    async def create_partitions(self, name: str, count: int,
                                assignment: list[list[int]] | None = None, *,
                                validate_only: bool = False) -> None:
        """Grow topic ``name`` to ``count`` partitions (never fewer); ``assignment``: one
        replica list per new partition, in order (default: spread over the brokers)."""
        raise NotImplementedError

    async def delete_records(self, offsets: Mapping[PartitionKey, int]
                             ) -> list[DeletedRecords]:
        """Delete the records below each partition's offset (-1: all of them, up to the high
        watermark), through each partition's leader; one ``DeletedRecords`` per partition,
        sorted.  Needs brokers (``open_admin(bootstrap_servers=...)``)."""
        raise _needs_brokers("delete_records")

    async def describe_log_dirs(self, topics: Iterable[str] | None = None
                                ) -> list[LogDirInfo]:
        """Every broker's log dirs with the partitions of ``topics`` (all when None) and their
        sizes.  Needs brokers (``open_admin(bootstrap_servers=...)``)."""
        raise _needs_brokers("describe_log_dirs")

    async def describe_configs(self, topics: Iterable[str] = (),
                               brokers: Iterable[int | str] = ()) -> list[ConfigResource]:
        """The settings of each topic and each broker (by id) named, topics first, each in
        the order given.  An unknown topic or broker gets a ``ConfigResource`` with its
        ``error``, not an exception.  Needs brokers (``open_admin(bootstrap_servers=...)``)."""
        raise _needs_brokers("describe_configs")

    async def alter_configs(self, changes: Mapping[str, str | None], *,
                            topic: str | None = None, broker: int | str | None = None,
                            validate_only: bool = False) -> None:
        """Change some settings of ``topic`` (or of ``broker``), leaving the others as they
        are (Kafka's IncrementalAlterConfigs): ``{name: value}`` sets, ``{name: None}``
        deletes the override (back to the broker's default).  Raises the broker's error
        (``InvalidConfigError`` naming the bad setting, ``UnknownTopicOrPartitionError``,
        ``InvalidRequestError`` for a broker: its properties are static); ``validate_only``
        checks and changes nothing.  Needs brokers."""
        raise _needs_brokers("alter_configs")

    async def elect_leaders(self, partitions: Iterable[PartitionKey] | None = None,
                            election: str = "preferred") -> dict[PartitionKey, str | None]:
        """Ask the controller for leader elections (Kafka's ElectLeaders): ``"preferred"``
        moves each partition's leadership to its first replica if that one is in sync;
        ``"unclean"`` gives a partition without a live leader to any live replica (records
        it lacks are lost).  ``partitions`` None: every partition, and the answer lists only
        those that needed an election.  Returns ``{(topic, partition): None}`` for an
        election done, or Kafka's error name (``"ELECTION_NOT_NEEDED"``: it leads already;
        ``"PREFERRED_LEADER_NOT_AVAILABLE"``, ``"ELIGIBLE_LEADERS_NOT_AVAILABLE"``,
        ``"UNKNOWN_TOPIC_OR_PARTITION"``).  Needs brokers."""
        raise _needs_brokers("elect_leaders")

    async def alter_partition_reassignments(
            self, plan: Mapping[PartitionKey, Iterable[int]]) -> dict[PartitionKey, list[int]]:
        """Start moving each partition of ``plan`` to its new replica list (the first one
        preferred as leader); the controller adds the new replicas, waits until they are in
        sync, moves leadership and removes the old ones.  Returns the partitions' current
        replicas (a plan to roll back with).  Raises ``ReassignmentInProgressError`` while
        one is under way, ``UnknownTopicOrPartitionError``, ``InvalidReplicaAssignmentError``
        (an unregistered broker, an empty list, a broker twice).  Needs ZooKeeper
        (``open_admin(zookeeper=...)``)."""
        raise _needs_zookeeper("alter_partition_reassignments")

    async def list_partition_reassignments(self) -> dict[PartitionKey, list[int]]:
        """The reassignments under way: each partition's target replicas.  Needs ZooKeeper."""
        raise _needs_zookeeper("list_partition_reassignments")

    async def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Add ACL bindings (CreateAcls); raises the first error (e.g.
        ``ClusterAuthorizationFailedError`` without Alter on the cluster,
        ``SecurityDisabledError`` when the brokers have no authorizer).  Needs brokers."""
        raise _needs_brokers("create_acls")

    async def describe_acls(self, selected: AclBindingFilter | None = None
                            ) -> list[AclBinding]:
        """The ACL bindings ``selected`` matches (all by default; DescribeAcls)."""
        raise _needs_brokers("describe_acls")

    async def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[AclBinding]:
        """Remove the bindings the filters match; returns them (DeleteAcls)."""
        raise _needs_brokers("delete_acls")

    async def list_transactions(self, *, states: Iterable[str] = (),
                                producer_ids: Iterable[int] = (),
                                duration_ms: int | None = None) -> list[TransactionListing]:
        """Every transactional id the brokers coordinate (ListTransactions to each broker),
        by coordinator then id; only those in ``states`` (Kafka's names) or of
        ``producer_ids`` when given, and with ``duration_ms`` only transactions open for
        longer than that (ListTransactions v1).  Needs brokers."""
        raise _needs_brokers("list_transactions")

    async def describe_transactions(self, transactional_ids: Iterable[str]
                                    ) -> list[TransactionDescription]:
        """Each id's state at its coordinator, in the order given; an id the coordinator
        does not know gets its ``error``.  Needs brokers."""
        raise _needs_brokers("describe_transactions")

    async def describe_client_quotas(self, filters: Iterable[QuotaFilter] = (), *,
                                     strict: bool = False
                                     ) -> dict[QuotaEntity, dict[str, float]]:
        """The client quotas set, ``{entity: {quota: value}}``, of the entities every filter
        matches (all when none; ``strict``: only entities of no other entity types than the
        filters name).  Needs DescribeConfigs on the cluster.  Needs brokers."""
        raise _needs_brokers("describe_client_quotas")

    async def alter_client_quotas(self, entity: QuotaEntity,
                                  changes: Mapping[str, float | None], *,
                                  validate_only: bool = False) -> None:
        """Set (``{quota: value}``) or remove (``{quota: None}``) quotas of ``entity``
        (``quota_entity(...)``), keeping the others; every broker applies them.  Raises the
        broker's error (``InvalidRequestError`` naming a bad quota,
        ``ClusterAuthorizationFailedError``).  Needs brokers."""
        raise _needs_brokers("alter_client_quotas")


def _needs_brokers(what: str) -> TrilogError:
    return TrilogError(f"{what} is done by the brokers: open the admin with bootstrap_servers")


def _needs_zookeeper(what: str) -> TrilogError:
    return TrilogError(f"{what} writes ZooKeeper's /admin/reassign_partitions: open the "
                       "admin with zookeeper")


class _BrokerAdmin(Admin):
    def __init__(self, conn: BrokerConnection, stack: AsyncExitStack | None = None,
                 reopen: Callable[[], Awaitable[BrokerConnection]] | None = None) -> None:
        self.conn = conn
        self._stack = stack  # where connections to the other brokers live (closed on exit)
        self._conns: dict[tuple[str, int], BrokerConnection] = {(conn.host, conn.port): conn}
        self._reopen = reopen  # reaches the cluster again (the bootstrap servers)

    async def _bootstrap(self) -> BrokerConnection:
        """The connection most requests go to: reopened through the bootstrap servers once
        it has closed (its broker restarted or went away), so a long-lived admin outlives
        a broker's restart (the request that found it closed has failed)."""
        if self.conn.closed and self._reopen is not None:
            self.conn = await self._reopen()
        return self.conn

    async def _connection(self, node: BrokerAddress) -> BrokerConnection:
        """A connection to ``node``, opened on first use and kept until the admin closes."""
        key = (node.host, node.port)
        conn = self._conns.get(key)
        if conn is None or conn.closed:
            if self._stack is None:
                raise NetworkError(f"no connection to broker {node.node_id}")
            conn = self._conns[key] = await self._stack.enter_async_context(open_connection(
                node.host, node.port, client_id=self.conn.client_id,
                request_timeout_s=self.conn.request_timeout_s, security=self.conn.security))
        return conn

    async def _metadata(self, names: list[str] | None) -> Any:
        topics = None if names is None else [MetadataRequest.MetadataRequestTopic(name=n)
                                             for n in names]
        return await (await self._bootstrap()).request(MetadataRequest(topics=topics,
                                                       allow_auto_topic_creation=False))

    async def brokers(self) -> list[BrokerAddress]:
        meta = await self._metadata([])
        return [BrokerAddress(b.node_id, b.host, b.port) for b in meta.brokers]

    async def describe_cluster(self) -> ClusterDescription:
        meta = await self._metadata([])
        brokers = tuple(BrokerDescription(b.node_id, b.host, b.port, b.rack)
                        for b in sorted(meta.brokers, key=lambda b: b.node_id))
        return ClusterDescription(meta.cluster_id, meta.controller_id, brokers)

    async def describe_topics(self, names: list[str] | None = None) -> list[TopicInfo]:
        meta = await self._metadata(names)
        out = []
        for t in meta.topics:
            err = error_for_code(t.error_code).name if t.error_code else None
            parts = tuple(
                PartitionInfo(p.partition_index, p.leader_id, tuple(p.replica_nodes),
                              error_for_code(p.error_code).name if p.error_code else None,
                              tuple(p.isr_nodes))
                for p in sorted(t.partitions, key=lambda p: p.partition_index)
            )
            out.append(TopicInfo(t.name, parts, t.is_internal, err))
        return sorted(out, key=lambda t: t.name)

    async def create_topic(self, name: str, num_partitions: int = -1,
                           replication_factor: int = -1, *,
                           configs: Mapping[str, str] | None = None) -> None:
        R = CreateTopicsRequest
        T = R.CreatableTopic
        response = await (await self._bootstrap()).request(R(topics=[T(
            name=name, num_partitions=num_partitions, replication_factor=replication_factor,
            assignments=[], configs=[T.CreatableTopicConfig(name=k, value=v)
                                     for k, v in (configs or {}).items()])],
            timeout_ms=30_000))
        for result in response.topics:
            _raise_for(result.error_code, f"cannot create topic {name!r}",
                       getattr(result, "error_message", None))

    async def delete_topic(self, name: str) -> None:
        response = await (await self._bootstrap()).request(DeleteTopicsRequest(topic_names=[name],
                                                               timeout_ms=30_000))
        for result in response.responses:
            if result.error_code == UnknownTopicOrPartitionError.code:
                raise UnknownTopicOrPartitionError(
                    f"cannot delete topic {name!r}: it does not exist (describe_topics or "
                    "trilog topics --list shows the topics there are)")
            _raise_for(result.error_code, f"cannot delete topic {name!r}")

    async def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        R = CreateAclsRequest
        bindings = list(bindings)
        response = await (await self._bootstrap()).request(R(creations=[R.AclCreation(
            resource_type=b.pattern.resource_type, resource_name=b.pattern.name,
            resource_pattern_type=b.pattern.pattern_type, principal=b.entry.principal,
            host=b.entry.host, operation=b.entry.operation,
            permission_type=b.entry.permission_type) for b in bindings]))
        for binding, result in zip(bindings, response.results):
            _raise_for(result.error_code, f"cannot create the ACL {binding.pattern}: "
                       f"{binding.entry}", result.error_message)

    async def describe_acls(self, selected: AclBindingFilter | None = None
                            ) -> list[AclBinding]:
        f = selected or AclBindingFilter()
        response = await (await self._bootstrap()).request(DescribeAclsRequest(
            resource_type_filter=f.resource_type, resource_name_filter=f.name,
            pattern_type_filter=f.pattern_type, principal_filter=f.principal,
            host_filter=f.host, operation=f.operation, permission_type=f.permission_type))
        _raise_for(response.error_code, "cannot describe the ACLs", response.error_message)
        return sorted(
            AclBinding(ResourcePattern(ResourceType.parse(r.resource_type), r.resource_name,
                                       PatternType.parse(r.pattern_type)),
                       AccessControlEntry(a.principal, a.host, AclOperation.parse(a.operation),
                                          AclPermissionType.parse(a.permission_type)))
            for r in response.resources for a in r.acls)

    async def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[AclBinding]:
        R = DeleteAclsRequest
        response = await (await self._bootstrap()).request(R(filters=[R.DeleteAclsFilter(
            resource_type_filter=f.resource_type, resource_name_filter=f.name,
            pattern_type_filter=f.pattern_type, principal_filter=f.principal,
            host_filter=f.host, operation=f.operation, permission_type=f.permission_type)
            for f in filters]))
        deleted = []
        for result in response.filter_results:
            _raise_for(result.error_code, "cannot delete ACLs", result.error_message)
            for a in result.matching_acls:
                deleted.append(AclBinding(
                    ResourcePattern(ResourceType.parse(a.resource_type), a.resource_name,
                                    PatternType.parse(a.pattern_type)),
                    AccessControlEntry(a.principal, a.host, AclOperation.parse(a.operation),
                                       AclPermissionType.parse(a.permission_type))))
        return sorted(deleted)

    async def create_partitions(self, name: str, count: int,
                                assignment: list[list[int]] | None = None, *,
                                validate_only: bool = False) -> None:
        R = CreatePartitionsRequest
        T = R.CreatePartitionsTopic
        assignments = None if assignment is None else [
            T.CreatePartitionsAssignment(broker_ids=list(replicas)) for replicas in assignment]
        response = await (await self._bootstrap()).request(R(
            topics=[T(name=name, count=count, assignments=assignments)], timeout_ms=30_000,
            validate_only=validate_only))
        for result in response.results:
            _raise_for(result.error_code, f"cannot add partitions to topic {name!r}",
                       result.error_message)

    async def delete_records(self, offsets: Mapping[PartitionKey, int]
                             ) -> list[DeletedRecords]:
        wanted = dict(offsets)
        out: dict[PartitionKey, DeletedRecords] = {}
        tries = REQUEST_RETRY.attempts()
        async for _ in tries:
            retry = await self._delete_records_once(wanted, out, last=tries.last)
            if not retry:
                break
            wanted = {tp: wanted[tp] for tp in retry}
        return [out[tp] for tp in sorted(out)]

    async def _delete_records_once(self, wanted: dict[PartitionKey, int],
                                   out: dict[PartitionKey, DeletedRecords], *,
                                   last: bool) -> list[PartitionKey]:
        """One DeleteRecords per leader; returns the partitions worth another try (a leader
        moving or unreachable), or, on the ``last`` try, reports them as failed."""
        meta = await self._metadata(sorted({t for t, _ in wanted}))
        nodes = {b.node_id: BrokerAddress(b.node_id, b.host, b.port) for b in meta.brokers}
        leaders = {(t.name, p.partition_index): p.leader_id
                   for t in meta.topics for p in t.partitions}
        retry: list[PartitionKey] = []

        def failed(tp: PartitionKey, error: str) -> None:
            if last:
                out[tp] = DeletedRecords(tp[0], tp[1], -1, error)
            else:
                retry.append(tp)

        by_leader: dict[int, list[PartitionKey]] = {}
        for tp in wanted:
            leader = leaders.get(tp)
            if leader is None:
                out[tp] = DeletedRecords(tp[0], tp[1], -1, UnknownTopicOrPartitionError.name)
            elif leader not in nodes:
                failed(tp, LeaderNotAvailableError.name)
            else:
                by_leader.setdefault(leader, []).append(tp)
        R = DeleteRecordsRequest
        for leader, tps in by_leader.items():
            topics: dict[str, list[Any]] = {}
            for t, p in tps:
                topics.setdefault(t, []).append(R.DeleteRecordsTopic.DeleteRecordsPartition(
                    partition_index=p, offset=wanted[(t, p)]))
            try:
                conn = await self._connection(nodes[leader])
                response = await conn.request(R(topics=[
                    R.DeleteRecordsTopic(name=t, partitions=ps) for t, ps in topics.items()],
                    timeout_ms=30_000))
            except (NetworkError, RequestTimedOutError) as exc:
                for tp in tps:
                    failed(tp, exc.name)
                continue
            for t in response.topics:
                for x in t.partitions:
                    tp, code = (t.name, x.partition_index), x.error_code
                    if code and error_for_code(code).retriable:
                        failed(tp, error_for_code(code).name)
                    else:
                        out[tp] = DeletedRecords(t.name, x.partition_index, x.low_watermark,
                                                 error_for_code(code).name if code else None)
        return retry

    async def describe_log_dirs(self, topics: Iterable[str] | None = None
                                ) -> list[LogDirInfo]:
        R = DescribeLogDirsRequest
        meta = await self._metadata(None if topics is None else sorted(set(topics)))
        wanted = None if topics is None else [
            R.DescribableLogDirTopic(topic=t.name,
                                     partitions=[p.partition_index for p in t.partitions])
            for t in meta.topics if not t.error_code]
        out = []
        for b in sorted(meta.brokers, key=lambda b: b.node_id):
            conn = await self._connection(BrokerAddress(b.node_id, b.host, b.port))
            response = await conn.request(R(topics=wanted))
            for d in response.results:
                parts = tuple(sorted(
                    (LogDirPartition(t.name, x.partition_index, x.partition_size, x.offset_lag,
                                     x.is_future_key) for t in d.topics for x in t.partitions),
                    key=lambda x: (x.topic, x.partition)))
                out.append(LogDirInfo(b.node_id, d.log_dir, parts,
                                      error_for_code(d.error_code).name if d.error_code
                                      else None))
        return out


    async def describe_configs(self, topics: Iterable[str] = (),
                               brokers: Iterable[int | str] = ()) -> list[ConfigResource]:
        R = DescribeConfigsRequest
        wanted = ([("topic", t) for t in topics]
                  + [("broker", str(b)) for b in brokers])
        found: dict[tuple[str, str], ConfigResource] = {}
        # Topics from any broker; a broker's own settings only from that broker.
        for conn, asked in await self._config_routes(wanted, found):
            response = await conn.request(R(resources=[
                R.DescribeConfigsResource(resource_type=_RESOURCE_TYPES[kind],
                                          resource_name=name, configuration_keys=None)
                for kind, name in asked], include_synonyms=False, include_documentation=False))
            for (kind, name), result in zip(asked, response.results):
                found[(kind, name)] = _config_resource(kind, name, result)
        return [found[k] for k in wanted]

    async def _config_routes(self, wanted: list[tuple[str, str]],
                             found: dict[tuple[str, str], ConfigResource]
                             ) -> list[tuple[BrokerConnection, list[tuple[str, str]]]]:
        """Which connection to ask about which resources; an unknown broker is answered in
        ``found`` at once."""
        routes: list[tuple[BrokerConnection, list[tuple[str, str]]]] = []
        topics = [k for k in wanted if k[0] == "topic"]
        if topics:
            routes.append((await self._bootstrap(), topics))
        names = [k for k in wanted if k[0] == "broker"]
        if names:
            nodes = {str(b.node_id): b for b in await self.brokers()}
            for key in names:
                node = nodes.get(key[1])
                if node is None:
                    found[key] = ConfigResource(
                        "broker", key[1], error=InvalidRequestError.name,
                        error_message=f"no live broker has id {key[1]!r} (the brokers are "
                                      f"{', '.join(sorted(nodes, key=_as_id)) or 'none'})")
                else:
                    routes.append((await self._connection(node), [key]))
        return routes

    async def alter_configs(self, changes: Mapping[str, str | None], *,
                            topic: str | None = None, broker: int | str | None = None,
                            validate_only: bool = False) -> None:
        if (topic is None) == (broker is None):
            raise ValueError("give exactly one of topic and broker")
        R = IncrementalAlterConfigsRequest
        A = R.AlterConfigsResource
        kind, name = ("topic", topic) if topic is not None else ("broker", str(broker))
        conn = await self._bootstrap()
        if kind == "broker":
            nodes = {str(b.node_id): b for b in await self.brokers()}
            if name not in nodes:
                raise InvalidRequestError(f"no live broker has id {name!r}")
            conn = await self._connection(nodes[name])
        response = await conn.request(R(resources=[A(
            resource_type=_RESOURCE_TYPES[kind], resource_name=name, configs=[
                A.AlterableConfig(name=k, config_operation=_DELETE if v is None else _SET,
                                  value=v) for k, v in changes.items()])],
            validate_only=validate_only))
        for result in response.responses:
            _raise_for(result.error_code, f"cannot alter the configs of {kind} {name!r}",
                       result.error_message)


    async def list_transactions(self, *, states: Iterable[str] = (),
                                producer_ids: Iterable[int] = (),
                                duration_ms: int | None = None) -> list[TransactionListing]:
        R = ListTransactionsRequest
        request = R(state_filters=list(states), producer_id_filters=list(producer_ids),
                    duration_filter=-1 if duration_ms is None else duration_ms)
        out: list[TransactionListing] = []
        for broker in await self.brokers():
            conn = await self._connection(broker)
            version = None
            if duration_ms is not None:  # v1 carries it: no silent downgrade to "all"
                version = conn.version_for(ApiKey.LIST_TRANSACTIONS, (1, R.MAX_VERSION))
            tries = REQUEST_RETRY.attempts()
            async for _ in tries:
                response = await conn.request(request, version=version)
                code = response.error_code
                if not code or tries.last or not error_for_code(code).retriable:
                    break
            _raise_for(response.error_code,
                       f"cannot list the transactions of broker {broker.node_id}")
            out += [TransactionListing(t.transactional_id, broker.node_id, t.producer_id,
                                       t.transaction_state)
                    for t in response.transaction_states]
        return sorted(out, key=lambda t: (t.coordinator, t.transactional_id))

    async def describe_transactions(self, transactional_ids: Iterable[str]
                                    ) -> list[TransactionDescription]:
        ids = list(dict.fromkeys(transactional_ids))
        found: dict[str, TransactionDescription] = {}
        pending = ids
        tries = REQUEST_RETRY.attempts()
        async for _ in tries:
            # Again for the ids answered retriably (a coordinator loading, moved).
            retry: list[str] = []
            by_coordinator: dict[BrokerAddress, list[str]] = {}
            for tid in pending:
                try:
                    node = await self._transaction_coordinator(tid)
                except ApiError as exc:
                    found[tid] = TransactionDescription(tid, -1, error=exc.name)
                    continue
                by_coordinator.setdefault(node, []).append(tid)
            for node, tids in by_coordinator.items():
                try:
                    conn = await self._connection(node)
                    response = await conn.request(
                        DescribeTransactionsRequest(transactional_ids=tids))
                except (NetworkError, RequestTimedOutError):
                    if tries.last:
                        raise
                    retry += tids
                    continue
                for t in response.transaction_states:
                    described = _transaction_description(t, node.node_id)
                    if described.error and error_for_code(t.error_code).retriable and \
                            not tries.last:
                        retry.append(t.transactional_id)
                    found[t.transactional_id] = described
            if not retry:
                break
            pending = retry
        return [found.get(tid) or TransactionDescription(tid, -1, error="UNKNOWN_SERVER_ERROR")
                for tid in ids]

    async def _transaction_coordinator(self, transactional_id: str) -> BrokerAddress:
        """FindCoordinator (key type 1), retried while the coordinator is not ready."""
        tries = REQUEST_RETRY.attempts()
        async for _ in tries:
            try:
                node = await find_coordinator(await self._bootstrap(), transactional_id,
                                              TRANSACTION)
                return BrokerAddress(node.node_id, node.host, node.port)
            except ApiError as exc:
                if tries.last or not exc.retriable:
                    raise
        raise AssertionError("unreachable: the last try returns or raises")

    async def describe_client_quotas(self, filters: Iterable[QuotaFilter] = (), *,
                                     strict: bool = False
                                     ) -> dict[QuotaEntity, dict[str, float]]:
        return await describe_client_quotas(await self._bootstrap(), filters, strict)

    async def alter_client_quotas(self, entity: QuotaEntity,
                                  changes: Mapping[str, float | None], *,
                                  validate_only: bool = False) -> None:
        await alter_client_quotas(await self._bootstrap(), entity, changes, validate_only)

    async def elect_leaders(self, partitions: Iterable[PartitionKey] | None = None,
                            election: str = "preferred") -> dict[PartitionKey, str | None]:
        if election not in ELECTION_TYPES:
            raise ValueError(f"election must be one of {sorted(ELECTION_TYPES)}, "
                             f"not {election!r}")
        R = ElectLeadersRequest
        topics = None
        if partitions is not None:
            by_topic: dict[str, set[int]] = {}
            for topic, partition in partitions:
                by_topic.setdefault(topic, set()).add(partition)
            topics = [R.TopicPartitions(topic=t, partitions=sorted(ps))
                      for t, ps in sorted(by_topic.items())]
        request = R(election_type=ELECTION_TYPES[election], topic_partitions=topics,
                    timeout_ms=int(self.conn.request_timeout_s * 1000))
        tries = REQUEST_RETRY.attempts()
        async for _ in tries:
            # The controller as the brokers know it now: after NOT_CONTROLLER or a lost
            # connection, metadata is asked again.
            meta = await self._metadata([])
            controller = getattr(meta, "controller_id", -1)
            node = next((BrokerAddress(b.node_id, b.host, b.port) for b in meta.brokers
                         if b.node_id == controller), None)
            try:
                if node is None:
                    raise NotControllerError("the brokers know no controller now")
                conn = await self._connection(node)
                response = await conn.request(request, version=1)
                if response.error_code == NotControllerError.code:
                    raise NotControllerError(f"broker {controller} is no longer the "
                                             "controller")
            except (NotControllerError, NetworkError, RequestTimedOutError):
                if tries.last:
                    raise
                continue
            _raise_for(response.error_code, "cannot elect leaders")
            return {(r.topic, x.partition_id):
                    error_for_code(x.error_code).name if x.error_code else None
                    for r in response.replica_election_results for x in r.partition_result}
        raise AssertionError("unreachable: the last try raises")


def _as_id(name: str) -> tuple[int, str]:
    return (int(name), "") if name.lstrip("-").isdigit() else (0, name)


def _config_resource(kind: str, name: str, result: Any) -> ConfigResource:
    if result.error_code:
        return ConfigResource(kind, name, error=error_for_code(result.error_code).name,
                              error_message=result.error_message)
    entries = []
    for c in result.configs:
        source = getattr(c, "config_source", -1)
        if source is None or source < 0:  # DescribeConfigs v0: only is_default
            is_default = bool(getattr(c, "is_default", False))
            source_name = "DEFAULT_CONFIG" if is_default else "UNKNOWN"
        else:
            source_name = CONFIG_SOURCES.get(source, "UNKNOWN")
            is_default = source_name == "DEFAULT_CONFIG"
        entries.append(ConfigEntry(c.name, c.value, source_name, is_default,
                                   bool(c.read_only), bool(c.is_sensitive)))
    return ConfigResource(kind, name, tuple(entries))


def _transaction_description(t: Any, coordinator: int) -> TransactionDescription:
    """One id of a DescribeTransactions answer."""
    if t.error_code:
        return TransactionDescription(t.transactional_id, coordinator,
                                      error=error_for_code(t.error_code).name)
    start = t.transaction_start_time_ms
    return TransactionDescription(
        t.transactional_id, coordinator, t.transaction_state, t.producer_id, t.producer_epoch,
        t.transaction_timeout_ms, start if start >= 0 else None,
        tuple(sorted((d.topic, p) for d in t.topics for p in d.partitions)))


def _raise_for(code: int, what: str, detail: str | None = None) -> None:
    if code:
        err = error_for_code(code)
        raise type(err)(f"{what}: {detail or err.description}")


class _ZooKeeperAdmin(Admin):
    def __init__(self, zk: ZooKeeper) -> None:
        self.zk = zk

    async def brokers(self) -> list[BrokerAddress]:
        return await registered_brokers(self.zk)

    async def describe_topics(self, names: list[str] | None = None) -> list[TopicInfo]:
        from trilog.zk import (
            BROKER_TOPICS,
            NoNodeError,
            decode_partition_state,
            decode_topic_assignment,
            partition_state_path,
            topic_path,
        )

        if names is None:
            try:
                names = await self.zk.get_children(BROKER_TOPICS)
            except NoNodeError:
                names = []
        out = []
        for name in sorted(names):
            try:
                assignment = decode_topic_assignment(name, await self.zk.get(topic_path(name)))
            except NoNodeError:
                out.append(TopicInfo(name, (), False, UnknownTopicOrPartitionError.name))
                continue
            parts = []
            for p, replicas in sorted(assignment.items()):
                try:
                    state = decode_partition_state(
                        await self.zk.get(partition_state_path(name, p)))
                    leader, isr = state["leader"], tuple(state.get("isr") or ())
                except (NoNodeError, TrilogError):
                    leader, isr = -1, ()
                parts.append(PartitionInfo(p, leader, tuple(replicas), None, isr))
            out.append(TopicInfo(name, tuple(parts), name.startswith("__")))
        return out

    async def create_topic(self, name: str, num_partitions: int = -1,
                           replication_factor: int = -1, *,
                           configs: Mapping[str, str] | None = None) -> None:
        from trilog.zk import (
            NodeExistsError,
            assign_replicas,
            encode_topic_assignment,
            topic_path,
        )

        if configs:
            # The brokers own the validation of Kafka's names and values; writing
            # /config/topics unchecked could leave a topic no broker can apply.
            raise TrilogError("a topic with configs is created by the brokers: open the "
                              "admin with bootstrap_servers (or create it, then alter its "
                              "configs through a broker)")
        validate_topic_name(name)
        if num_partitions == -1:
            num_partitions = 1
        if num_partitions < 1:
            raise InvalidPartitionsError(
                f"number of partitions must be at least 1, not {num_partitions}")
        brokers = [b.node_id for b in await self.brokers()]
        if not brokers:
            raise NetworkError("no brokers are registered in ZooKeeper")
        assignment = assign_replicas(num_partitions, brokers, start=random.randrange(len(brokers)))
        try:
            await self.zk.create(topic_path(name), encode_topic_assignment(assignment),
                                 makepath=True)
        except NodeExistsError:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists") from None

    async def delete_topic(self, name: str) -> None:
        from trilog.zk import NoNodeError, topic_path

        try:
            await self.zk.delete(topic_path(name), recursive=True)
        except NoNodeError:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist") from None

    async def create_partitions(self, name: str, count: int,
                                assignment: list[list[int]] | None = None, *,
                                validate_only: bool = False) -> None:
        from trilog.zk import (
            NoNodeError,
            assign_new_partitions,
            decode_topic_assignment,
            encode_topic_assignment,
            topic_path,
        )

        if name.startswith("__"):
            raise InvalidRequestError(f"cannot add partitions to the internal topic {name}")
        try:
            current = decode_topic_assignment(name, await self.zk.get(topic_path(name)))
        except NoNodeError:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist") from None
        live = [b.node_id for b in await self.brokers()]
        new = assign_new_partitions(current, count, assignment, live)
        if not validate_only:
            # The brokers follow the assignment znode and create what they are given.
            await self.zk.set(topic_path(name), encode_topic_assignment({**current, **new}))

    async def alter_partition_reassignments(
            self, plan: Mapping[PartitionKey, Iterable[int]]) -> dict[PartitionKey, list[int]]:
        from trilog.zk import (
            REASSIGN_PARTITIONS,
            NodeExistsError,
            NoNodeError,
            decode_topic_assignment,
            encode_reassignment,
            topic_path,
        )

        wanted = {tp: list(replicas) for tp, replicas in plan.items()}
        if not wanted:
            raise InvalidReplicaAssignmentError("the reassignment lists no partition")
        if await self.zk.exists(REASSIGN_PARTITIONS):
            raise ReassignmentInProgressError(
                "a partition reassignment is in progress (/admin/reassign_partitions): "
                "wait for it to complete (--verify)")
        registered = {b.node_id for b in await self.brokers()}
        current: dict[PartitionKey, list[int]] = {}
        assignments: dict[str, dict[int, list[int]]] = {}
        for (topic, partition), replicas in sorted(wanted.items()):
            if topic not in assignments:
                try:
                    assignments[topic] = decode_topic_assignment(
                        topic, await self.zk.get(topic_path(topic)))
                except NoNodeError:
                    raise UnknownTopicOrPartitionError(
                        f"topic {topic!r} does not exist") from None
            if partition not in assignments[topic]:
                raise UnknownTopicOrPartitionError(
                    f"topic {topic!r} has no partition {partition}")
            if not replicas or len(set(replicas)) != len(replicas):
                raise InvalidReplicaAssignmentError(
                    f"{topic}-{partition}: the replica list {replicas} is empty or names a "
                    "broker twice")
            unknown = sorted(set(replicas) - registered)
            if unknown:
                raise InvalidReplicaAssignmentError(
                    f"{topic}-{partition}: brokers {unknown} are not registered (the "
                    f"brokers are {sorted(registered)})")
            current[(topic, partition)] = list(assignments[topic][partition])
        try:
            await self.zk.create(REASSIGN_PARTITIONS, encode_reassignment(wanted),
                                 makepath=True)
        except NodeExistsError:
            raise ReassignmentInProgressError(
                "a partition reassignment is in progress (/admin/reassign_partitions)"
            ) from None
        return current

    async def list_partition_reassignments(self) -> dict[PartitionKey, list[int]]:
        from trilog.zk import REASSIGN_PARTITIONS, NoNodeError, decode_reassignment

        try:
            return decode_reassignment(await self.zk.get(REASSIGN_PARTITIONS))
        except NoNodeError:
            return {}


@dataclass(frozen=True)
class AdminConfig:
    """``open_admin``'s settings (where the cluster is comes apart: ``bootstrap_servers``);
    ``ValueError`` for a bad one."""

    #: ``"host:port[/chroot]"``: work straight in ZooKeeper instead of through the brokers
    zookeeper: str | None = None
    client_id: str = "trilog-admin"
    #: how long a request to a broker may take
    request_timeout_s: float = 30.0
    #: how long opening tries to reach a bootstrap server (kafka-python's; then
    #: ``NoBrokersAvailableError``)
    bootstrap_timeout_ms: int = 30_000
    #: TLS and SASL of the connections to the brokers (None: PLAINTEXT)
    security: ClientSecurity | None = None

    def __post_init__(self) -> None:
        if not self.request_timeout_s > 0:
            raise ValueError(f"request_timeout_s must be positive, not {self.request_timeout_s!r}")
        if not self.bootstrap_timeout_ms > 0:
            raise ValueError(f"bootstrap_timeout_ms must be positive, not "
                             f"{self.bootstrap_timeout_ms!r}")


class AdminOptions(SecurityOptions, total=False):
    """``open_admin``'s keyword arguments (``AdminConfig``'s fields, the security ones as
    ``SecurityOptions``), for ``Unpack``; tests/client/test_producer_settings.py keeps the
    two the same."""

    zookeeper: str | None
    client_id: str
    request_timeout_s: float
    bootstrap_timeout_ms: int


def open_admin(bootstrap_servers: str | list[str] | None = None,
               **options: Unpack[AdminOptions]) -> AbstractAsyncContextManager[Admin]:
    """An ``Admin`` over the brokers (``bootstrap_servers``; ``security_protocol``,
    ``ssl_*``, ``sasl_*`` as ``open_producer``) or straight over ZooKeeper (``zookeeper``).
    An unknown keyword is a ``TypeError``, a bad value a ``ValueError``, here."""
    config = config_from_options(AdminConfig, options, "open_admin")
    if (bootstrap_servers is None) == (config.zookeeper is None):
        raise ValueError("give exactly one of bootstrap_servers and zookeeper")
    return _running_admin(bootstrap_servers, config)


@asynccontextmanager
async def _running_admin(bootstrap_servers: str | list[str] | None,
                         config: AdminConfig) -> AsyncIterator[Admin]:
    if config.zookeeper is not None:
        from trilog.zk import open_zookeeper

        async with open_zookeeper(config.zookeeper) as zk:
            yield _ZooKeeperAdmin(zk)
        return
    assert bootstrap_servers is not None  # exactly one of the two, checked by open_admin
    async with AsyncExitStack() as stack:

        async def connect(server: tuple[str, int], deadline: float) -> BrokerConnection:
            # Entered into the stack, so not under a cancel scope: connecting stops at the
            # deadline by itself (the versions' exchange after it has the request timeout).
            left = max(deadline - trio.current_time(), 0.001)
            return await stack.enter_async_context(open_connection(
                *server, client_id=config.client_id, connect_timeout_s=min(left, 10.0),
                request_timeout_s=config.request_timeout_s, security=config.security))

        servers = parse_bootstrap(bootstrap_servers)

        async def reach() -> BrokerConnection:
            return await reach_cluster(servers, connect, timeout_ms=config.bootstrap_timeout_ms,
                                       security=config.security)

        yield _BrokerAdmin(await reach(), stack, reopen=reach)
