"""Three ``trilog broker`` processes registered in a real ZooKeeper, used by kafka-python.

A topic of 6 partitions is spread over all three brokers (seen in ZooKeeper and in
Metadata); 30,000 records go in through one bootstrap broker and come back in order; a
DeleteTopics removes the partition directories on every broker.
"""

from __future__ import annotations

import json
import time

import pytest
from broker_helpers import (
    connect,
    kafka_consumer,
    kafka_producer,
    metadata_request,
    roundtrip,
    wait_for,
)
from kafka_helpers import consume_partitions
from kazoo.client import KazooClient

N = 30_000
PARTITIONS = 6


@pytest.fixture
def kazoo(zookeeper):
    client = KazooClient(zookeeper)
    client.start(timeout=10)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@pytest.fixture
def cluster(broker_process, zookeeper):
    brokers = [broker_process(broker_id=i, zookeeper=zookeeper) for i in (1, 2, 3)]
    # Every broker sees every other one before the test starts.
    deadline = time.monotonic() + 15
    for b in brokers:
        with connect(b.bootstrap) as sock:
            while True:
                ids = {x.node_id for x in roundtrip(sock, metadata_request([]), 1).brokers}
                if ids == {1, 2, 3}:
                    break
                assert time.monotonic() < deadline, f"broker {b.broker_id} sees only {ids}"
                time.sleep(0.1)
    return brokers


def _wait_for(predicate, timeout: float = 15.0, what: str = "condition"):
    return wait_for(predicate, timeout, what)


def test_registration_in_zookeeper(cluster, kazoo):
    ids = sorted(int(c) for c in kazoo.get_children("/brokers/ids"))
    assert ids == [1, 2, 3]
    for b in cluster:
        data, stat = kazoo.get(f"/brokers/ids/{b.broker_id}")
        reg = json.loads(data)
        assert reg["port"] == b.port
        assert reg["host"] == "127.0.0.1"
        assert stat.ephemeralOwner != 0
    (cluster_id,) = {json.loads(kazoo.get("/cluster/id")[0])["id"]}
    with connect(cluster[2].bootstrap) as sock:
        meta = roundtrip(sock, metadata_request([]), 2)
    assert meta.cluster_id == cluster_id
    assert meta.controller_id in (1, 2, 3)
    assert {(x.node_id, x.port) for x in meta.brokers} == {(b.broker_id, b.port) for b in cluster}


def test_duplicate_broker_id_fails_to_start(cluster, broker_process, zookeeper):
    with pytest.raises(RuntimeError, match=r"(?s)exited with 1.*already registered"):
        broker_process(broker_id=2, zookeeper=zookeeper)


def test_six_partitions_over_three_brokers_30k_records(cluster, kazoo):
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = "spread"
    admin = KafkaAdminClient(bootstrap_servers=cluster[0].bootstrap, request_timeout_ms=15000)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])
    finally:
        admin.close()

    assignment = json.loads(kazoo.get(f"/brokers/topics/{topic}")[0])
    partitions = {int(p): r for p, r in assignment["partitions"].items()}
    assert sorted(partitions) == list(range(PARTITIONS))
    assert all(len(r) == 1 for r in partitions.values())
    leaders = {p: r[0] for p, r in partitions.items()}
    assert sorted(leaders.values()) == [1, 1, 2, 2, 3, 3]  # round robin over all three

    # Each partition's state node names its leader, once that broker serves it.
    def states():
        out = {}
        for p_ in range(PARTITIONS):
            path = f"/brokers/topics/{topic}/partitions/{p_}/state"
            if not kazoo.exists(path):
                return None
            out[p_] = json.loads(kazoo.get(path)[0])["leader"]
        return out

    assert _wait_for(states, what="partition state nodes") == leaders

    # Every broker answers Metadata with the same leaders.
    for b in cluster:
        with connect(b.bootstrap) as sock:
            meta = roundtrip(sock, metadata_request([topic]), 1)
        (t,) = meta.topics
        assert t.error_code == 0
        assert {x.partition_index: x.leader_id for x in t.partitions} == leaders

    t0 = int(time.time() * 1000)
    producer = kafka_producer(cluster[1].bootstrap, linger_ms=10)
    try:
        futures = [producer.send(topic, key=b"k%d" % (i % 101), value=b"v%d" % i)
                   for i in range(N)]
        producer.flush(timeout=60)
        acked = [f.get(timeout=0) for f in futures]
    finally:
        producer.close(timeout=10)
    t1 = int(time.time() * 1000)
    assert {m.partition for m in acked} == set(range(PARTITIONS))
    acked_at = {(m.partition, m.offset): i for i, m in enumerate(acked)}
    assert len(acked_at) == N

    # Each broker holds exactly the partitions it leads.
    for b in cluster:
        mine = {p_ for p_, leader in leaders.items() if leader == b.broker_id}
        dirs = {int(d.name.rsplit("-", 1)[1]) for d in b.log_dir.glob(f"{topic}-*")}
        assert dirs == mine, (b.broker_id, dirs, mine)

    consumer = kafka_consumer(cluster[2].bootstrap)
    try:
        got = consume_partitions(consumer, topic, range(PARTITIONS), N)
    finally:
        consumer.close()
    total = 0
    for partition, records in got.items():
        assert [r.offset for r in records] == list(range(len(records)))
        for r in records:
            i = acked_at[(partition, r.offset)]
            assert r.value == b"v%d" % i and r.key == b"k%d" % (i % 101)
            assert t0 - 5 <= r.timestamp <= t1 + 5
        total += len(records)
    assert total == N


def test_delete_topic_removes_partitions_on_every_broker(cluster, kazoo):
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = "doomed"
    admin = KafkaAdminClient(bootstrap_servers=cluster[0].bootstrap, request_timeout_ms=15000)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])
        producer = kafka_producer(cluster[0].bootstrap)
        try:
            for i in range(600):
                producer.send(topic, value=b"x%d" % i, partition=i % PARTITIONS)
            producer.flush(timeout=30)
        finally:
            producer.close(timeout=10)
        for b in cluster:
            assert len(list(b.log_dir.glob(f"{topic}-*"))) == 2
        admin.delete_topics([topic])
    finally:
        admin.close()
    assert not kazoo.exists(f"/brokers/topics/{topic}")
    _wait_for(lambda: all(not list(b.log_dir.glob(f"{topic}-*")) for b in cluster),
              what="partition directories to go")
    for b in cluster:
        with connect(b.bootstrap) as sock:
            meta = roundtrip(sock, metadata_request([topic], allow_auto_topic_creation=False), 4)
        (t,) = meta.topics
        assert t.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
