"""Topic administration, through a broker (Kafka's admin APIs) or straight in ZooKeeper.

``async with open_admin(bootstrap_servers="h:9092")`` talks to the first broker of the list
that answers; ``open_admin(zookeeper="h:2181/chroot")`` reads and writes the seeds' layout
(``/brokers/topics/<topic>`` assignments over ``/brokers/ids``) directly, as Kafka's
``kafka-topics.sh --zookeeper`` did.  Both give the same ``Admin`` interface.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trilog._topic import validate_topic_name
from trilog.client._brokers import BrokerAddress, parse_bootstrap, registered_brokers
from trilog.client._connection import BrokerConnection, open_connection
from trilog.errors import (
    InvalidPartitionsError,
    NetworkError,
    TopicAlreadyExistsError,
    TrilogError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from trilog.protocol import (
    CreateTopicsRequest,
    DeleteTopicsRequest,
    MetadataRequest,
)

if TYPE_CHECKING:  # trilog.zk imports kazoo: only a client that uses ZooKeeper pays for it
    from trilog.zk import ZooKeeper


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int  # -1: no leader now
    replicas: tuple[int, ...]
    error: str | None = None


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: tuple[PartitionInfo, ...] = field(default_factory=tuple)
    internal: bool = False
    error: str | None = None


class Admin:
    async def brokers(self) -> list[BrokerAddress]:
        raise NotImplementedError

    async def describe_topics(self, names: list[str] | None = None) -> list[TopicInfo]:
        raise NotImplementedError

    async def list_topics(self) -> list[str]:
        return sorted(t.name for t in await self.describe_topics() if t.error is None)

    async def create_topic(self, name: str, num_partitions: int = -1,
                           replication_factor: int = -1) -> None:
        raise NotImplementedError

    async def delete_topic(self, name: str) -> None:
        raise NotImplementedError


class _BrokerAdmin(Admin):
    def __init__(self, conn: BrokerConnection) -> None:
        self.conn = conn

    async def _metadata(self, names: list[str] | None) -> Any:
        topics = None if names is None else [MetadataRequest.MetadataRequestTopic(name=n)
                                             for n in names]
        return await self.conn.request(MetadataRequest(topics=topics,
                                                       allow_auto_topic_creation=False))

    async def brokers(self) -> list[BrokerAddress]:
        meta = await self._metadata([])
        return [BrokerAddress(b.node_id, b.host, b.port) for b in meta.brokers]

    async def describe_topics(self, names: list[str] | None = None) -> list[TopicInfo]:
        meta = await self._metadata(names)
        out = []
        for t in meta.topics:
            err = error_for_code(t.error_code).name if t.error_code else None
            parts = tuple(
                PartitionInfo(p.partition_index, p.leader_id, tuple(p.replica_nodes),
                              error_for_code(p.error_code).name if p.error_code else None)
                for p in sorted(t.partitions, key=lambda p: p.partition_index)
            )
            out.append(TopicInfo(t.name, parts, t.is_internal, err))
        return sorted(out, key=lambda t: t.name)

    async def create_topic(self, name: str, num_partitions: int = -1,
                           replication_factor: int = -1) -> None:
        R = CreateTopicsRequest
        response = await self.conn.request(R(topics=[R.CreatableTopic(
            name=name, num_partitions=num_partitions, replication_factor=replication_factor,
            assignments=[], configs=[])], timeout_ms=30_000))
        for result in response.topics:
            _raise_for(result.error_code, f"cannot create topic {name!r}",
                       getattr(result, "error_message", None))

    async def delete_topic(self, name: str) -> None:
        response = await self.conn.request(DeleteTopicsRequest(topic_names=[name],
                                                               timeout_ms=30_000))
        for result in response.responses:
            _raise_for(result.error_code, f"cannot delete topic {name!r}")


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
                    leader = decode_partition_state(
                        await self.zk.get(partition_state_path(name, p)))["leader"]
                except (NoNodeError, TrilogError):
                    leader = -1
                parts.append(PartitionInfo(p, leader, tuple(replicas)))
            out.append(TopicInfo(name, tuple(parts), name.startswith("__")))
        return out

    async def create_topic(self, name: str, num_partitions: int = -1,
                           replication_factor: int = -1) -> None:
        from trilog.zk import (
            NodeExistsError,
            assign_replicas,
            encode_topic_assignment,
            topic_path,
        )

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


@asynccontextmanager
async def open_admin(bootstrap_servers: str | list[str] | None = None, *,
                     zookeeper: str | None = None, client_id: str = "trilog-admin",
                     request_timeout_s: float = 30.0) -> AsyncIterator[Admin]:
    if (bootstrap_servers is None) == (zookeeper is None):
        raise ValueError("give exactly one of bootstrap_servers and zookeeper")
    if zookeeper is not None:
        from trilog.zk import open_zookeeper

        async with open_zookeeper(zookeeper) as zk:
            yield _ZooKeeperAdmin(zk)
        return
    assert bootstrap_servers is not None  # exactly one of the two, checked above
    errors = []
    async with AsyncExitStack() as stack:
        conn = None
        for host, port in parse_bootstrap(bootstrap_servers):
            try:
                conn = await stack.enter_async_context(open_connection(
                    host, port, client_id=client_id, request_timeout_s=request_timeout_s))
                break
            except NetworkError as exc:
                errors.append(str(exc))
        if conn is None:
            raise NetworkError("no bootstrap server answered: " + "; ".join(errors))
        yield _BrokerAdmin(conn)
