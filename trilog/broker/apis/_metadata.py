"""Metadata (3): the brokers, and each topic's partitions with their leaders, replicas and
in-sync replicas, from the cluster's cached view (no I/O; while this broker knows of a
leader's death that the controller has not handled yet, the answer waits for it, briefly:
``ZooKeeperCluster.wait_settled``).

A topic that does not exist is created when ``auto.create.topics.enable`` and the request
allow it (Metadata v4+ says whether) and the principal may create it; the answer for it is
LEADER_NOT_AVAILABLE until its partitions have leaders (Kafka's: ask again shortly).
Topics the principal may not describe are left out of an all-topics answer and refused by
name (TOPIC_AUTHORIZATION_FAILED).  A standalone broker's answers are cached: each topic's
while its partition map is the same, with its encoding for each version asked for, and the
all-topics answer (without ACLs) encoded, while no topic, broker or controller changed; a
new all-topics answer is the brokers' part and the topics' encodings joined, so 50,000
partitions are not built and encoded again each time, only the topics that changed.  Each
client sees the brokers' addresses on the listener it came in on.

Versions 0-9: v7 carries each partition's leader epoch (the controller's; -1 on a standalone
broker), v8 the principal's authorized operations on a topic and the cluster when asked
(Kafka's bit fields), v9 is flexible.  librdkafka trusts leader epochs only from a broker
serving v9+, and with them ignores an answer older than one it has (KIP-320): after a
leader's death an answer asked before the brokers knew can no longer undo a newer one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from trilog._topic import validate_topic_name
from trilog.broker.cluster import INTERNAL_TOPICS, Cluster
from trilog.broker.network import ApiHandler, current_session
from trilog.broker.security import CLUSTER_NAME, Access, AclOperation, ResourceType
from trilog.errors import (
    ApiError,
    LeaderNotAvailableError,
    TopicAlreadyExistsError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from trilog.protocol import (
    AUTHORIZED_OPERATIONS_OMITTED,
    INT32,
    ApiKey,
    MetadataResponse,
    RequestHeader,
    Writer,
)
from trilog.protocol._primitives import uvarint

R = MetadataResponse
RTopic = R.MetadataResponseTopic

#: The operations Kafka reports of a resource when Metadata v8+ asks (its
#: ``AclEntry.supportedOperations``), by resource type.
_OPERATIONS = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE,
                           AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE),
}


class _Encoded(MetadataResponse):  # type: ignore[misc,valid-type]
    """An answer encoded once (``body``, for ``version``), sent again as long as nothing in
    it changed; its fields stay for the request metrics' error counts (its topics with only
    their partitions in error: all the metrics read of them)."""

    __slots__ = ("body", "version")

    def write_to(self, w: Writer, version: int) -> None:
        if version != self.version:
            raise ValueError(f"encoded for version {self.version}, not {version}")
        w.buf += self.body


class _TopicAnswer:
    """A topic's answer for one partition map (replaced, never changed:
    ``Cluster.immutable_partitions``) and one set of live brokers: built and kept
    (``answer``) once a request names the topic; encoded for each version an all-topics
    answer asks for (``encoded``), with the topic's partitions in error (``errors``).

    An all-topics answer keeps the encodings, not what it built to encode them
    (``_encoded_topic``): 50,000 partitions' objects made and kept set off a full
    collection of the garbage collector over a broker of 50,000 logs, most of the cost of
    a first answer, and would be walked by every later one.
    """

    __slots__ = ("answer", "encoded", "errors", "live", "partitions")

    def __init__(self, partitions: dict[int, int], live: frozenset[int]) -> None:
        self.partitions = partitions
        self.live = live
        self.answer: Any = None
        self.errors: Any = None
        self.encoded: dict[int, bytes] = {}


def _splice(empty: bytes, flexible: bool, count: int, items: list[bytes], *,
            tail: int) -> bytes:
    """``empty``, a struct encoded with an empty array followed by ``tail`` bytes of fixed
    fields (and, when ``flexible``, its one-byte empty tag buffer), with ``count`` encoded
    items in that array: its count (int32, or uvarint N + 1) replaced, the items inserted."""
    tail += 1 if flexible else 0
    end = len(empty) - tail
    if flexible:
        return b"".join([empty[:end - 1], uvarint(count + 1), *items, empty[end:]])
    return b"".join([empty[:end - 4], INT32.encode(count), *items, empty[end:]])


class MetadataApi:
    """Serves Metadata.  Runs in the trio thread."""

    def __init__(self, cluster: Cluster, access: Access, *, auto_create: bool) -> None:
        self.cluster = cluster
        self.access = access
        self.auto_create = auto_create
        #: topic -> its answer, for a cluster whose maps are replaced, never changed
        #: (``Cluster.immutable_partitions``): an all-topics answer of 50,000 partitions
        #: builds and encodes only the topics that changed.
        self._answers: dict[str, _TopicAnswer] = {}
        #: The last all-topics answer without ACLs: (what it was built from, the partition
        #: maps it was built for, the encoded answer).
        self._all: tuple[tuple[Any, ...], list[tuple[str, dict[int, int]]], Any] | None = None

    def apis(self) -> Mapping[int, ApiHandler]:
        return {ApiKey.METADATA: self.metadata}

    async def metadata(self, request: Any, header: RequestHeader) -> Any:
        cluster = self.cluster
        await cluster.wait_settled()
        topics_all = cluster.topics()
        access = self.access
        version = header.api_version
        everything = request.topics is None or (version == 0 and not request.topics)
        topic_operations = version >= 8 and request.include_topic_authorized_operations
        cluster_operations = 8 <= version <= 10 and request.include_cluster_authorized_operations
        if (everything and not access.enabled and cluster.immutable_partitions
                and not topic_operations and not cluster_operations):
            return self._all_topics(version, current_session.get().listener)
        if everything:
            # All topics: those this principal may not describe are left out (Kafka).
            wanted = sorted(t for t in topics_all
                            if access(AclOperation.DESCRIBE, ResourceType.TOPIC, t))
        else:
            wanted = [t.name for t in request.topics]
        auto_create = self.auto_create and (version < 4 or request.allow_auto_topic_creation)
        live = frozenset(b.node_id for b in cluster.brokers())
        if len(self._answers) > 2 * len(topics_all) + 100:  # (deleted topics' answers)
            self._answers = {t: a for t, a in self._answers.items() if t in topics_all}
        topics = []
        for name in wanted:
            if access.enabled and not access(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                topics.append(RTopic(error_code=TopicAuthorizationFailedError.code, name=name,
                                     partitions=[]))
                continue
            error = 0
            if name not in topics_all:
                error = await self._create(name, auto_create)
                if error not in (0, LeaderNotAvailableError.code):
                    topics.append(RTopic(error_code=error, name=name, partitions=[]))
                    continue
            topics.append(self._cached_topic(name, live) if not error
                          else self._topic(name, error, live))
        if topic_operations:  # (the cached answers are every principal's: copies)
            topics = [t if t.error_code == TopicAuthorizationFailedError.code else RTopic(
                error_code=t.error_code, name=t.name, is_internal=t.is_internal,
                partitions=t.partitions,
                topic_authorized_operations=self._operations(ResourceType.TOPIC, t.name))
                for t in topics]
        return R(brokers=self._brokers(current_session.get().listener),
                 cluster_id=cluster.cluster_id, controller_id=cluster.controller_id,
                 topics=topics, cluster_authorized_operations=(
                     self._operations(ResourceType.CLUSTER) if cluster_operations
                     else AUTHORIZED_OPERATIONS_OMITTED))

    def _operations(self, resource: ResourceType, name: str = CLUSTER_NAME) -> int:
        """What the principal may do to a topic or the cluster, as Kafka's bit field."""
        return self.access.operations(_OPERATIONS[resource], resource, name)

    def _brokers(self, listener: str | None) -> list[Any]:
        return [R.MetadataResponseBroker(node_id=b.node_id, host=address[0], port=address[1])
                for b in self.cluster.brokers()
                for address in [b.address(listener)] if address is not None]

    def _all_topics(self, version: int, listener: str | None) -> Any:
        """Every topic, for a cluster whose partition maps are replaced, never changed, and
        without ACLs: encoded once, and again only when a topic, a broker or the controller
        changed, then from the topics' cached encodings (``_encoded_topic``), so only new or
        changed topics are built and encoded (all of 50,000 partitions: ~0.1 s)."""
        cluster = self.cluster
        topics_all = cluster.topics()
        brokers = self._brokers(listener)
        live = frozenset(b.node_id for b in cluster.brokers())
        key = (version, listener, cluster.cluster_id, cluster.controller_id, live,
               tuple((b.node_id, b.host, b.port) for b in brokers))
        cached = self._all
        if (cached is not None and cached[0] == key and len(cached[1]) == len(topics_all)
                and all(topics_all.get(name) is parts for name, parts in cached[1])):
            return cached[2]
        names = sorted(topics_all)
        answers = [self._topic_answer(name, live) for name in names]
        self._answers = {name: a for name, a in zip(names, answers, strict=True)}
        fields = dict(brokers=brokers, cluster_id=cluster.cluster_id,
                      controller_id=cluster.controller_id)
        # The topics, spliced into the answer encoded without them (``_splice``).
        encoded = [self._encoded_topic(n, a, version)
                   for n, a in zip(names, answers, strict=True)]
        answer = _Encoded(**fields, topics=[a.errors for a in answers])
        answer.body = _splice(R(**fields, topics=[]).encode(version), R.is_flexible(version),
                              len(names), encoded, tail=4 if 8 <= version <= 10 else 0)
        answer.version = version
        self._all = (key, [(name, topics_all[name]) for name in names], answer)
        return answer

    async def _create(self, name: str, auto_create: bool) -> int:
        """Create a topic asked for that does not exist, if allowed: LEADER_NOT_AVAILABLE
        (created, no leaders yet), 0 (someone else created it meanwhile), or the error."""
        access = self.access
        try:
            validate_topic_name(name)
            may_create = (access(AclOperation.CREATE, ResourceType.CLUSTER)
                          or access(AclOperation.CREATE, ResourceType.TOPIC, name))
            if not auto_create or not may_create or name in INTERNAL_TOPICS:
                raise UnknownTopicOrPartitionError()
            await self.cluster.create_topic(name, -1)
        except ApiError as exc:
            return 0 if exc.code == TopicAlreadyExistsError.code else exc.code
        return LeaderNotAvailableError.code

    def _cached_topic(self, name: str, live: frozenset[int]) -> Any:
        """The answer for an existing topic, from the cache while its partition map and
        the live brokers are the ones it was built for."""
        if not self.cluster.immutable_partitions:
            return self._topic(name, 0, live)
        cached = self._topic_answer(name, live)
        if cached.answer is None:
            cached.answer = self._topic(name, 0, live)
        return cached.answer

    def _topic_answer(self, name: str, live: frozenset[int]) -> _TopicAnswer:
        """A topic's cache entry (``immutable_partitions`` only), a new one if its partition
        map or the live brokers are not the ones its answer was for."""
        partitions = self.cluster.partitions(name)
        cached = self._answers.get(name)
        if cached is None or cached.partitions is not partitions or cached.live != live:
            cached = _TopicAnswer(partitions or {}, live)
            if partitions is not None:
                self._answers[name] = cached
        return cached

    def _encoded_topic(self, name: str, cached: _TopicAnswer, version: int) -> bytes:
        """A topic's answer encoded for ``version``, from its cache entry;
        unless a request named the topic (``cached.answer``), its partitions are made one
        at a time as they are written, and none kept: the garbage collector has nothing to
        count, so a first all-topics answer does not set off its full collection."""
        encoded = cached.encoded.get(version)
        if encoded is not None:
            return encoded
        built = cached.answer
        partitions = (built.partitions if built is not None
                      else self._partitions(name, cached.partitions, cached.live))
        flexible = R.is_flexible(version)
        write = RTopic.MetadataResponsePartition._struct.codec_for(version, flexible).write
        w = Writer()
        errors, count = [], 0
        for partition in partitions:
            write(w, partition)
            count += 1
            if partition.error_code:
                errors.append(partition)
        empty = Writer()
        RTopic._struct.codec_for(version, flexible).write(empty, RTopic(
            error_code=0, name=name, is_internal=name in INTERNAL_TOPICS, partitions=[]))
        encoded = cached.encoded[version] = _splice(
            empty.getvalue(), flexible, count, [w.getvalue()],
            tail=4 if version >= 8 else 0)
        if cached.errors is None:
            cached.errors = RTopic(error_code=0, name=name, partitions=errors)
        return encoded

    def _topic(self, name: str, error: int, live: frozenset[int]) -> Any:
        partitions = self.cluster.partitions(name) or {}
        if partitions and error:
            error = 0 if all(leader >= 0 for leader in partitions.values()) else error
        return RTopic(error_code=error, name=name, is_internal=name in INTERNAL_TOPICS,
                      partitions=list(self._partitions(name, partitions, live)))

    def _partitions(self, name: str, partitions: dict[int, int],
                    live: frozenset[int]) -> Iterator[Any]:
        """The answer for each of a topic's partitions, in order, made when asked for."""
        describe = self.cluster.describe_partition
        no_leader = LeaderNotAvailableError.code
        Partition = RTopic.MetadataResponsePartition
        for p in sorted(partitions):  # (not items(): a tuple each for the collector)
            leader = partitions[p]
            epoch, replicas, isr, offline = describe(name, p, live)
            yield Partition(
                error_code=0 if leader >= 0 else no_leader,
                partition_index=p,
                leader_id=leader,
                leader_epoch=epoch,
                replica_nodes=replicas,
                isr_nodes=isr,
                offline_replicas=offline,
            )
