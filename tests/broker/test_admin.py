"""CreateTopics and DeleteTopics through kafka-python's ``KafkaAdminClient`` (standalone).

(Cluster mode's delete on every broker is in ``test_cluster_e2e.py``.)
"""

from __future__ import annotations

import pytest
from broker_helpers import (
    connect,
    create_topics_request,
    fetch_all,
    kafka_producer,
    metadata_request,
    produce,
    roundtrip,
)
from kafka import errors as kerrors
from kafka.admin import KafkaAdminClient, NewTopic

from trilog import protocol as p


@pytest.fixture
def admin_broker(broker_process):
    broker = broker_process()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        yield broker, admin
    finally:
        admin.close()


def _dirs(broker, topic):
    return sorted(d.name for d in broker.log_dir.glob(f"{topic}-*") if d.is_dir())


def test_create_duplicate_delete_unknown(admin_broker):
    broker, admin = admin_broker
    admin.create_topics([NewTopic("orders", num_partitions=4, replication_factor=1)])
    assert _dirs(broker, "orders") == [f"orders-{i}" for i in range(4)]
    assert "orders" in admin.list_topics()
    (described,) = admin.describe_topics(["orders"])
    assert sorted(x["partition_index"] for x in described["partitions"]) == [0, 1, 2, 3]
    assert {x["leader_id"] for x in described["partitions"]} == {broker.broker_id}

    with pytest.raises(kerrors.TopicAlreadyExistsError):
        admin.create_topics([NewTopic("orders", num_partitions=1, replication_factor=1)])
    assert _dirs(broker, "orders") == [f"orders-{i}" for i in range(4)]

    admin.delete_topics(["orders"])
    assert _dirs(broker, "orders") == []
    assert "orders" not in admin.list_topics()
    with pytest.raises(kerrors.UnknownTopicOrPartitionError):
        admin.delete_topics(["orders"])
    with pytest.raises(kerrors.UnknownTopicOrPartitionError):
        admin.delete_topics(["never-existed"])


def test_invalid_create_requests(admin_broker):
    broker, admin = admin_broker
    with pytest.raises(kerrors.InvalidPartitionsError):
        admin.create_topics([NewTopic("zero", num_partitions=0, replication_factor=1)])
    with pytest.raises(kerrors.InvalidReplicationFactorError):
        admin.create_topics([NewTopic("three", num_partitions=1, replication_factor=3)])
    with pytest.raises(kerrors.InvalidTopicError):
        admin.create_topics([NewTopic("no/slash", num_partitions=1, replication_factor=1)])
    admin.create_topics([NewTopic("dry", num_partitions=2, replication_factor=1)],
                        validate_only=True)
    assert admin.list_topics() == []
    assert list(broker.log_dir.glob("*-[0-9]*")) == []


def _assigned(name, assignment: dict[int, list[int]], num_partitions=-1, replication_factor=-1):
    R = p.CreateTopicsRequest
    return R(topics=[R.CreatableTopic(
        name=name, num_partitions=num_partitions, replication_factor=replication_factor,
        assignments=[R.CreatableTopic.CreatableReplicaAssignment(partition_index=i, broker_ids=b)
                     for i, b in assignment.items()],
        configs=[],
    )], timeout_ms=10000, validate_only=False)


def test_explicit_assignment_and_default_partitions(broker_process):
    """Raw protocol: kafka-python refuses num_partitions=-1 below CreateTopics v4."""
    broker = broker_process(overrides={"num.partitions": 3})
    with connect(broker.bootstrap) as sock:
        def code(request):
            (result,) = roundtrip(sock, request, 2).topics
            return result.error_code

        assert code(_assigned("assigned", {0: [0], 1: [0]})) == 0
        assert code(create_topics_request({"defaulted": -1})) == 0
        assert code(_assigned("elsewhere", {0: [42]})) == 39  # INVALID_REPLICA_ASSIGNMENT
        assert code(_assigned("gappy", {0: [0], 2: [0]})) == 39
        assert code(_assigned("twice", {0: [0, 0]})) == 39  # a broker twice: as Kafka
        assert code(_assigned("both", {0: [0]}, num_partitions=1, replication_factor=1)) == 42
    assert _dirs(broker, "assigned") == ["assigned-0", "assigned-1"]
    assert _dirs(broker, "defaulted") == ["defaulted-0", "defaulted-1", "defaulted-2"]
    for name in ("elsewhere", "gappy", "twice", "both"):
        assert _dirs(broker, name) == []


def test_recreated_topic_starts_empty_and_delete_survives_restart(admin_broker, broker_process):
    broker, admin = admin_broker
    admin.create_topics([NewTopic("phoenix", num_partitions=1, replication_factor=1)])
    producer = kafka_producer(broker.bootstrap)
    try:
        for i in range(100):
            producer.send("phoenix", value=b"first life %d" % i)
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)
    admin.delete_topics(["phoenix"])
    admin.create_topics([NewTopic("phoenix", num_partitions=1, replication_factor=1)])
    with connect(broker.bootstrap) as sock:
        assert fetch_all(sock, "phoenix", 0) == []
        assert produce(sock, "phoenix", 0, [b"second life"]) == 0
        assert [r.value for r in fetch_all(sock, "phoenix", 0)] == [b"second life"]
    admin.create_topics([NewTopic("gone", num_partitions=2, replication_factor=1)])
    admin.delete_topics(["gone"])
    admin.close()
    assert broker.stop() == 0

    again = broker_process(broker.log_dir)
    with connect(again.bootstrap) as sock:
        names = [t.name for t in roundtrip(sock, metadata_request(None), 1).topics]
        assert names == ["phoenix"]
        assert [r.value for r in fetch_all(sock, "phoenix", 0)] == [b"second life"]


def test_delete_disabled(broker_process):
    broker = broker_process(overrides={"delete.topic.enable": "false"})
    with connect(broker.bootstrap) as sock:
        assert roundtrip(sock, create_topics_request({"kept": 1}), 2).topics[0].error_code == 0
        response = roundtrip(sock, p.DeleteTopicsRequest(topic_names=["kept"], timeout_ms=5000), 1)
        assert [(r.name, r.error_code) for r in response.responses] == [("kept", 73)]
    assert _dirs(broker, "kept") == ["kept-0"]


def test_many_topics_in_one_request_each_get_their_answer(broker_process):
    broker = broker_process()
    with connect(broker.bootstrap) as sock:
        first = roundtrip(sock, create_topics_request({"a": 1, "b": 2}), 1)
        assert {t.name: t.error_code for t in first.topics} == {"a": 0, "b": 0}
        mixed = roundtrip(sock, create_topics_request({"a": 1, "c": 1, "d..": 1, "e": 0}), 2)
        assert {t.name: t.error_code for t in mixed.topics} == {"a": 36, "c": 0, "d..": 0,
                                                                "e": 37}
        deleted = roundtrip(sock, p.DeleteTopicsRequest(topic_names=["a", "zz", "b"],
                                                        timeout_ms=5000), 3)
        assert {r.name: r.error_code for r in deleted.responses} == {"a": 0, "zz": 3, "b": 0}
        names = sorted(t.name for t in roundtrip(sock, metadata_request(None), 1).topics)
        assert names == ["c", "d.."]
