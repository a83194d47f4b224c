"""The client's picture of the cluster: brokers, topics, partitions and leaders.

Pure data (style rule 8): built from a Metadata response or from ZooKeeper's layout, replaced
whole on every refresh (never mutated), tested without a server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from trilog._topic import PartitionKey

_T = TypeVar("_T")


@dataclass(frozen=True)
class Node:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True)
class ClusterMetadata:
    """An immutable snapshot.  ``leaders[(topic, partition)]`` is -1 while leaderless."""

    brokers: dict[int, Node] = field(default_factory=dict)
    partitions: dict[str, tuple[int, ...]] = field(default_factory=dict)
    leaders: dict[tuple[str, int], int] = field(default_factory=dict)
    #: topic -> Kafka error code, for topics the cluster answered with an error
    topic_errors: dict[str, int] = field(default_factory=dict)
    cluster_id: str | None = None
    controller_id: int = -1

    @classmethod
    def from_response(cls, response: Any) -> ClusterMetadata:
        brokers = {b.node_id: Node(b.node_id, b.host, b.port) for b in response.brokers}
        partitions: dict[str, tuple[int, ...]] = {}
        leaders: dict[tuple[str, int], int] = {}
        errors: dict[str, int] = {}
        for t in response.topics:
            if t.error_code and not t.partitions:
                errors[t.name] = t.error_code
                continue
            parts = sorted(p.partition_index for p in t.partitions)
            partitions[t.name] = tuple(parts)
            for p in t.partitions:
                leader = p.leader_id if p.error_code == 0 or p.leader_id >= 0 else -1
                leaders[(t.name, p.partition_index)] = leader if leader in brokers else -1
        return cls(brokers, partitions, leaders, errors,
                   getattr(response, "cluster_id", None),
                   getattr(response, "controller_id", -1))

    def merge(self, other: ClusterMetadata, topics: list[str] | None) -> ClusterMetadata:
        """``other`` answered for ``topics`` only (None: for all): keep what it did not cover."""
        if topics is None:
            return other
        partitions = {t: p for t, p in self.partitions.items() if t not in topics}
        partitions.update(other.partitions)
        leaders = {tp: l for tp, l in self.leaders.items() if tp[0] not in topics}
        leaders.update(other.leaders)
        errors = {t: e for t, e in self.topic_errors.items() if t not in topics}
        errors.update(other.topic_errors)
        return ClusterMetadata(other.brokers or self.brokers, partitions, leaders, errors,
                               other.cluster_id or self.cluster_id,
                               other.controller_id)

    def partitions_for(self, topic: str) -> tuple[int, ...] | None:
        return self.partitions.get(topic)

    def leader_for(self, topic: str, partition: int) -> Node | None:
        node_id = self.leaders.get((topic, partition), -1)
        return self.brokers.get(node_id) if node_id >= 0 else None

    def available_partitions(self, topic: str) -> tuple[int, ...]:
        return tuple(p for p in self.partitions.get(topic, ())
                     if self.leaders.get((topic, p), -1) >= 0)

    @overload
    def group_by_leader(self, items: Iterable[PartitionKey]
                        ) -> tuple[dict[Node, list[PartitionKey]], list[PartitionKey]]: ...

    @overload
    def group_by_leader(self, items: Iterable[_T], topic_partition: Callable[[_T], PartitionKey]
                        ) -> tuple[dict[Node, list[_T]], list[_T]]: ...

    def group_by_leader(self, items: Iterable[Any],
                        topic_partition: Callable[[Any], PartitionKey] | None = None
                        ) -> tuple[dict[Node, list[Any]], list[Any]]:
        """``items`` (in order) by the broker that leads their partition
        (``topic_partition(item)``, or the item itself), and apart, those whose partition has
        no leader (or is unknown)."""
        by_leader: dict[Node, list[Any]] = {}
        leaderless: list[Any] = []
        for item in items:
            tp = item if topic_partition is None else topic_partition(item)
            node = self.leader_for(*tp)
            if node is None:
                leaderless.append(item)
            else:
                by_leader.setdefault(node, []).append(item)
        return by_leader, leaderless
