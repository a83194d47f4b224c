"""Metadata (3): the brokers, and each topic's partitions with their leaders, replicas and
in-sync replicas, from the cluster's cached view (no I/O; while this broker knows of a
leader's death that the controller has not handled yet, the answer waits for it, briefly:
``ZooKeeperCluster.wait_settled``).

A topic that does not exist is created when ``auto.create.topics.enable`` and the request
allow it (Metadata v4+ says whether) and the principal may create it; the answer for it is
LEADER_NOT_AVAILABLE until its partitions have leaders (Kafka's: ask again shortly).
Topics the principal may not describe are left out of an all-topics answer and refused by
name (TOPIC_AUTHORIZATION_FAILED).  A standalone broker's answers are cached: each topic's
while its partition map is the same, and the all-topics answer (without ACLs) encoded, while
no topic, broker or controller changed: 50,000 partitions are not built again each time.  Each client sees the brokers' addresses on the listener
it came in on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trilog._topic import validate_topic_name
from trilog.broker.cluster import INTERNAL_TOPICS, Cluster
from trilog.broker.network import ApiHandler, current_session
from trilog.broker.security import Access, AclOperation, ResourceType
from trilog.errors import (
    ApiError,
    LeaderNotAvailableError,
    TopicAlreadyExistsError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from trilog.protocol import ApiKey, MetadataResponse, RequestHeader, Writer

R = MetadataResponse
RTopic = R.MetadataResponseTopic


class _Encoded(MetadataResponse):  # type: ignore[misc,valid-type]
    """An answer encoded once (``body``, for ``version``), sent again as long as nothing in
    it changed; its fields stay for the request metrics' error counts."""

    __slots__ = ("body", "version")

    def write_to(self, w: Writer, version: int) -> None:
        if version != self.version:
            raise ValueError(f"encoded for version {self.version}, not {version}")
        w.buf += self.body


class MetadataApi:
    """Serves Metadata.  Runs in the trio thread."""

    def __init__(self, cluster: Cluster, access: Access, *, auto_create: bool) -> None:
        self.cluster = cluster
        self.access = access
        self.auto_create = auto_create
        #: topic -> (its partition map, the live brokers, the answer built for them), for a
        #: cluster whose maps are replaced, never changed (``Cluster.immutable_partitions``):
        #: an all-topics answer of 50,000 partitions rebuilds only topics that changed.
        self._answers: dict[str, tuple[dict[int, int], frozenset[int], Any]] = {}
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
        everything = request.topics is None or (header.api_version == 0 and not request.topics)
        if everything and not access.enabled and cluster.immutable_partitions:
            return self._all_topics(header.api_version, current_session.get().listener)
        if everything:
            # All topics: those this principal may not describe are left out (Kafka).
            wanted = sorted(t for t in topics_all
                            if access(AclOperation.DESCRIBE, ResourceType.TOPIC, t))
        else:
            wanted = [t.name for t in request.topics]
        auto_create = self.auto_create and (header.api_version < 4
                                            or request.allow_auto_topic_creation)
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
        return R(brokers=self._brokers(current_session.get().listener),
                 cluster_id=cluster.cluster_id, controller_id=cluster.controller_id,
                 topics=topics)

    def _brokers(self, listener: str | None) -> list[Any]:
        return [R.MetadataResponseBroker(node_id=b.node_id, host=address[0], port=address[1])
                for b in self.cluster.brokers()
                for address in [b.address(listener)] if address is not None]

    def _all_topics(self, version: int, listener: str | None) -> Any:
        """Every topic, for a cluster whose partition maps are replaced, never changed, and
        without ACLs: encoded once, and again only when a topic, a broker or the controller
        changed (an answer of 50,000 partitions takes ~0.2 s to build and encode)."""
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
        topics = [self._cached_topic(name, live) for name in names]
        self._answers = {name: self._answers[name] for name in names if name in self._answers}
        fields = dict(brokers=brokers, cluster_id=cluster.cluster_id,
                      controller_id=cluster.controller_id, topics=topics)
        answer = _Encoded(**fields)
        answer.body, answer.version = R(**fields).encode(version), version
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
        partitions = self.cluster.partitions(name)
        cached = self._answers.get(name)
        if cached is not None and cached[0] is partitions and cached[1] == live:
            return cached[2]
        answer = self._topic(name, 0, live)
        if partitions is not None:
            self._answers[name] = (partitions, live, answer)
        return answer

    def _topic(self, name: str, error: int, live: frozenset[int]) -> Any:
        cluster = self.cluster
        partitions = cluster.partitions(name) or {}
        if partitions and error:
            error = 0 if all(leader >= 0 for leader in partitions.values()) else error
        return RTopic(
            error_code=error,
            name=name,
            is_internal=name in INTERNAL_TOPICS,
            partitions=[
                RTopic.MetadataResponsePartition(
                    error_code=0 if leader >= 0 else LeaderNotAvailableError.code,
                    partition_index=p,
                    leader_id=leader,
                    replica_nodes=replicas,
                    isr_nodes=isr,
                    offline_replicas=[r for r in replicas if r not in live],
                )
                for p, leader in sorted(partitions.items())
                for replicas, isr in [cluster.replica_info(name, p)]
            ],
        )
