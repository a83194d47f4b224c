"""The all-topics Metadata answer of a cluster whose partition maps are replaced, never
changed (a standalone broker's): joined from each topic's cached encoding, it must be,
byte for byte and at every version, the answer built from scratch (the path taken with ACLs
or without ``immutable_partitions``), after topics are created, deleted, given partitions,
lose a leader or a replica's broker; and only what changed is built again.  No server: the
API on a cluster of plain dicts.
"""

from __future__ import annotations

import pytest

from trilog import protocol as p
from trilog.broker._metrics import error_counts
from trilog.broker.apis import MetadataApi
from trilog.broker.cluster._cluster import BrokerInfo, Cluster
from trilog.broker.network import Session, current_session
from trilog.broker.security import ALLOW_ALL

R = p.MetadataResponse
VERSIONS = range(p.MetadataRequest.MIN_VERSION, p.MetadataRequest.MAX_VERSION + 1)
LEADER_NOT_AVAILABLE = 5


class Maps(Cluster):
    """Brokers 1-3; ``_topics`` maps replaced, never changed, as a standalone broker's are;
    every partition's replicas are its leader and the brokers after it, its ISR the leader."""

    immutable_partitions = True
    cluster_id = "cid"

    def __init__(self) -> None:
        self.live = [BrokerInfo(i, f"host{i}", 9090 + i) for i in (1, 2, 3)]
        self._topics: dict[str, dict[int, int]] = {}

    def brokers(self) -> list[BrokerInfo]:
        return self.live

    def topics(self) -> dict[str, dict[int, int]]:
        return self._topics

    def replica_info(self, topic: str, partition: int) -> tuple[list[int], list[int]]:
        leader = self._topics[topic][partition]
        if leader < 0:
            return [1, 2], []
        return [leader, *range(leader + 1, 4)], [leader]


def request(version: int):
    R = p.MetadataRequest
    return R(topics=[] if version == 0 else None, allow_auto_topic_creation=False)


async def answers(api: MetadataApi, version: int):
    """(the cached all-topics answer, the one built from scratch) at ``version``."""
    header = p.RequestHeader(p.ApiKey.METADATA, version, 1, "test")
    fast = await api.metadata(request(version), header)
    api.cluster.immutable_partitions = False  # the path that builds everything
    try:
        slow = await api.metadata(request(version), header)
    finally:
        del api.cluster.immutable_partitions
    return fast, slow


async def check(api: MetadataApi, expected: dict[str, int]) -> None:
    """At every version: the cached answer's bytes are the built one's, name the topics
    with ``expected`` partitions each, and count the same errors for the metrics."""
    for version in VERSIONS:
        fast, slow = await answers(api, version)
        assert fast.encode(version) == slow.encode(version), version
        decoded = R.decode(fast.encode(version), version)
        assert {t.name: len(t.partitions) for t in decoded.topics} == expected
        assert error_counts(fast) == error_counts(slow)
        again, _ = await answers(api, version)
        assert again is fast  # from the cache while nothing changed


@pytest.fixture
def api():
    token = current_session.set(Session("127.0.0.1:5000"))
    try:
        yield MetadataApi(Maps(), ALLOW_ALL, auto_create=False)
    finally:
        current_session.reset(token)


async def test_topics_created_deleted_and_grown_are_answered_exactly(api):
    topics = api.cluster._topics
    await check(api, {})
    topics["a"] = {p: 1 + p % 3 for p in range(5)}
    topics["b"] = {0: 2}
    await check(api, {"a": 5, "b": 1})
    entry_b = api._answers["b"]

    topics["c"] = {p: 3 for p in range(130)}  # created (a two-byte compact count)
    await check(api, {"a": 5, "b": 1, "c": 130})
    assert api._answers["b"] is entry_b  # not built again
    assert entry_b.answer is None  # nor kept as objects: only encoded

    topics["a"] = {**topics["a"], 5: 2, 6: 3}  # grown: a new map
    await check(api, {"a": 7, "b": 1, "c": 130})
    assert api._answers["b"] is entry_b

    del topics["c"]  # deleted
    await check(api, {"a": 7, "b": 1})
    assert set(api._answers) == {"a", "b"}


async def test_a_lost_leader_and_a_dead_replica_are_answered_and_counted(api):
    topics = api.cluster._topics
    topics["t"] = {0: 1, 1: 2, 2: 3}
    await check(api, {"t": 3})
    topics["t"] = {0: 1, 1: -1, 2: 3}
    await check(api, {"t": 3})
    fast, _ = await answers(api, 7)
    assert error_counts(fast) == {LEADER_NOT_AVAILABLE: 1}
    # Broker 3 leaves: a new set of live brokers builds every topic again; partition 0's
    # replicas [1, 2, 3] then have 3 offline.
    api.cluster.live = api.cluster.live[:2]
    await check(api, {"t": 3})
    fast, _ = await answers(api, 5)
    (t,) = R.decode(fast.encode(5), 5).topics
    assert [q.offline_replicas for q in t.partitions] == [[3], [], [3]]


async def test_a_topic_named_by_a_request_is_encoded_from_the_answer_built_for_it(api):
    topics = api.cluster._topics
    topics["named"] = {0: 1, 1: 2}
    topics["other"] = {0: 3}
    header = p.RequestHeader(p.ApiKey.METADATA, 4, 1, "test")
    named = await api.metadata(p.MetadataRequest(
        topics=[p.MetadataRequest.MetadataRequestTopic(name="named")],
        allow_auto_topic_creation=False), header)
    assert api._answers["named"].answer is named.topics[0]
    await check(api, {"named": 2, "other": 1})


class _Allow:
    """An authorizer that allows exactly ``allowed``: (operation, resource type, name)."""

    def __init__(self, allowed) -> None:
        self.allowed = allowed

    def authorize(self, _principal, _host, operation, resource_type, name) -> bool:
        return (operation, resource_type, name) in self.allowed


async def test_authorized_operations_are_answered_when_asked(api):
    from trilog.broker.security import CLUSTER_NAME, Access, AclOperation, ResourceType

    api.cluster._topics["t"] = {0: 1}
    header = p.RequestHeader(p.ApiKey.METADATA, 8, 1, "test")

    def ask(**include):
        return p.MetadataRequest(topics=None, allow_auto_topic_creation=False, **include)

    # Not asked: Kafka's "omitted" (INT32_MIN), from the cached all-topics answer.
    plain = R.decode((await api.metadata(ask(), header)).encode(8), 8)
    assert plain.cluster_authorized_operations == p.AUTHORIZED_OPERATIONS_OMITTED
    assert plain.topics[0].topic_authorized_operations == p.AUTHORIZED_OPERATIONS_OMITTED

    # Without an authorizer, everything Kafka reports of a topic (8) and the cluster (7).
    both = dict(include_cluster_authorized_operations=True,
                include_topic_authorized_operations=True)
    answer = R.decode((await api.metadata(ask(**both), header)).encode(8), 8)
    assert bin(answer.topics[0].topic_authorized_operations).count("1") == 8
    assert bin(answer.cluster_authorized_operations).count("1") == 7
    # The cached answer was not changed for everyone.
    plain = R.decode((await api.metadata(ask(), header)).encode(8), 8)
    assert plain.topics[0].topic_authorized_operations == p.AUTHORIZED_OPERATIONS_OMITTED

    # With one: what this principal may do, bit by bit (Kafka's AclOperation codes).
    api.access = Access(_Allow({
        (AclOperation.DESCRIBE, ResourceType.TOPIC, "t"),
        (AclOperation.READ, ResourceType.TOPIC, "t"),
        (AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)}))
    answer = R.decode((await api.metadata(ask(**both), header)).encode(8), 8)
    assert answer.topics[0].topic_authorized_operations == (1 << 3) | (1 << 8)
    assert answer.cluster_authorized_operations == 1 << 8
