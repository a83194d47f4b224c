"""CreatePartitions, DeleteRecords, DeleteGroups, OffsetDelete and DescribeLogDirs against
real broker processes: kafka-python's ``KafkaAdminClient`` and confluent-kafka's
``AdminClient`` (librdkafka), each asserting the effect, and raw requests at every version
for the answers Kafka gives to what those clients do not send.

CreatePartitions runs standalone and on a two-broker ZooKeeper cluster, where every broker
learns the grown assignment from its watch.
"""

from __future__ import annotations

import time

import pytest
from broker_helpers import (
    EARLIEST,
    batch,
    connect,
    create_topic,
    fetch_request,
    list_offsets_request,
    metadata_request,
    only_partition,
    produce_request,
    roundtrip,
    wait_for,
)
from kafka import TopicPartition
from kafka import errors as kerrors
from kafka.admin import KafkaAdminClient
from kafka_helpers import consume_partitions, kafka_consumer, kafka_producer

from trilog import protocol as p
from trilog.broker.cluster._cluster import plan_new_partitions
from trilog.errors import (
    GroupIdNotFoundError,
    InvalidGroupIdError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    InvalidTopicError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewPartitions  # noqa: E402

TIMEOUT_S = 20.0


@pytest.fixture
def broker(broker_process):
    return broker_process()


@pytest.fixture
def admin(broker):
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    try:
        yield client
    finally:
        client.close()


def _confluent_admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 15000})


def _wait_for(predicate, timeout: float = TIMEOUT_S, what: str = "condition"):
    return wait_for(predicate, timeout, what)


def _dirs(log_dir, topic: str) -> list[int]:
    return sorted(int(d.name.rpartition("-")[2]) for d in log_dir.glob(f"{topic}-*")
                  if d.is_dir())


def _partition_leaders(bootstrap: str, topic: str) -> dict[int, int]:
    with connect(bootstrap) as sock:
        (t,) = roundtrip(sock, metadata_request([topic], False), 1).topics
    return {x.partition_index: x.leader_id for x in t.partitions}


def _produce_one_per_partition(bootstrap: str, topic: str, partitions: int) -> None:
    producer = kafka_producer(bootstrap)
    try:
        for i in range(partitions):
            producer.send(topic, value=f"v{i}".encode(), partition=i).get(timeout=TIMEOUT_S)
    finally:
        producer.close()


def _consume_one_per_partition(bootstrap: str, topic: str, partitions: int) -> None:
    consumer = kafka_consumer(bootstrap)
    try:
        got = consume_partitions(consumer, topic, range(partitions), partitions)
    finally:
        consumer.close()
    assert {p_: [r.value for r in recs] for p_, recs in got.items()} == {
        i: [f"v{i}".encode()] for i in range(partitions)}


def _produce_values(bootstrap: str, topic: str, n: int) -> None:
    with connect(bootstrap) as sock:
        resp = roundtrip(sock, produce_request(topic, 0, batch([b"%d" % i for i in range(n)])), 3)
        assert only_partition(resp).error_code == 0


def _earliest(bootstrap: str, topic: str, partition: int = 0) -> int:
    with connect(bootstrap) as sock:
        resp = roundtrip(sock, list_offsets_request(topic, partition, EARLIEST), 1)
    part = only_partition(resp)
    assert part.error_code == 0, part
    return part.offset


# -- CreatePartitions: the plan (a pure function) ---------------------------------------------


def test_plan_new_partitions_continues_the_round_robin():
    current = {0: [2], 1: [3], 2: [1]}  # assign_replicas(3, [1, 2, 3], start=1)
    assert plan_new_partitions("t", current, 6, None, [1, 2, 3]) == {3: [2], 4: [3], 5: [1]}
    assert plan_new_partitions("t", current, 4, [[3]], [1, 2, 3]) == {3: [3]}
    # The leader of partition 0 is gone: start from the first live broker.
    assert plan_new_partitions("t", {0: [9]}, 3, None, [1, 2]) == {1: [2], 2: [1]}
    # Replicated topics keep their replication factor.
    assert plan_new_partitions("t", {0: [1, 2]}, 2, None, [1, 2, 3]) == {1: [2, 3]}


@pytest.mark.parametrize(("count", "assignment", "error", "message"), [
    (2, None, InvalidPartitionsError, "Topic already has 2 partitions."),
    (1, None, InvalidPartitionsError, "which is higher than the requested 1"),
    (3, [[1], [1]], InvalidReplicaAssignmentError, "by 1 but 2 assignments"),
    (3, [[7]], InvalidReplicaAssignmentError, "Unknown broker(s) in replica assignment: 7."),
    (3, [[1, 1]], InvalidReplicaAssignmentError, "Duplicate brokers"),
    (3, [[1, 2]], InvalidReplicaAssignmentError, "Inconsistent replication factor"),
])
def test_plan_new_partitions_refuses_as_kafka(count, assignment, error, message):
    with pytest.raises(error) as info:
        plan_new_partitions("t", {0: [1], 1: [2]}, count, assignment, [1, 2])
    assert message in str(info.value)


def test_plan_new_partitions_refuses_the_offsets_topic():
    with pytest.raises(InvalidRequestError):
        plan_new_partitions("__consumer_offsets", {0: [1]}, 2, None, [1])


# -- CreatePartitions ----------------------------------------------------------------------


def test_kafka_python_create_partitions(broker, admin):
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "grow", 2)
    admin.create_partitions({"grow": 4})
    assert _dirs(broker.log_dir, "grow") == [0, 1, 2, 3]
    assert _partition_leaders(broker.bootstrap, "grow") == {i: broker.broker_id for i in range(4)}
    _produce_one_per_partition(broker.bootstrap, "grow", 4)
    _consume_one_per_partition(broker.bootstrap, "grow", 4)

    with pytest.raises(kerrors.InvalidPartitionsError):
        admin.create_partitions({"grow": 3})  # never shrink
    with pytest.raises(kerrors.InvalidPartitionsError):
        admin.create_partitions({"grow": 4})  # the same count
    with pytest.raises(kerrors.UnknownTopicOrPartitionError):
        admin.create_partitions({"nope": 2})
    admin.create_partitions({"grow": 8}, validate_only=True)
    assert _dirs(broker.log_dir, "grow") == [0, 1, 2, 3]
    # An explicit assignment: one replica list per new partition, on this broker.
    admin.create_partitions({"grow": {"count": 6, "assignments": [[broker.broker_id]] * 2}})
    assert _dirs(broker.log_dir, "grow") == list(range(6))
    with pytest.raises(kerrors.InvalidReplicationAssignmentError):
        admin.create_partitions({"grow": {"count": 8, "assignments": [[broker.broker_id + 1]] * 2}})


def test_confluent_create_partitions(broker):
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "cgrow", 1)
    admin = _confluent_admin(broker.bootstrap)
    futures = admin.create_partitions([NewPartitions("cgrow", 3)], request_timeout=15)
    futures["cgrow"].result(timeout=TIMEOUT_S)
    assert _dirs(broker.log_dir, "cgrow") == [0, 1, 2]
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(3):
        producer.produce("cgrow", value=f"v{i}".encode(), partition=i)
    assert producer.flush(TIMEOUT_S) == 0
    _consume_one_per_partition(broker.bootstrap, "cgrow", 3)

    futures = admin.create_partitions([NewPartitions("cgrow", 2)], request_timeout=15)
    with pytest.raises(confluent_kafka.KafkaException) as info:
        futures["cgrow"].result(timeout=TIMEOUT_S)
    assert info.value.args[0].code() == confluent_kafka.KafkaError.INVALID_PARTITIONS


def test_confluent_list_topics_and_describe_cluster(broker):
    # librdkafka's all-topics Metadata v9 request carries 3 stray bytes (see
    # test_framing.py): the broker reads it as meant instead of closing the connection.
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "clisted", 2)
    admin = _confluent_admin(broker.bootstrap)
    listed = admin.list_topics(timeout=TIMEOUT_S)
    assert len(listed.topics["clisted"].partitions) == 2
    assert list(listed.brokers) == [broker.broker_id]
    cluster = admin.describe_cluster(request_timeout=15).result(timeout=TIMEOUT_S)
    assert [n.id for n in cluster.nodes] == [broker.broker_id]


def _create_partitions_request(topics, *, timeout_ms=5000, validate_only=False):
    R = p.CreatePartitionsRequest
    T = R.CreatePartitionsTopic
    return R(topics=[T(name=name, count=count, assignments=None if a is None else [
        T.CreatePartitionsAssignment(broker_ids=ids) for ids in a]) for name, count, a in topics],
        timeout_ms=timeout_ms, validate_only=validate_only)


@pytest.mark.parametrize("version", [0, 1])
def test_create_partitions_answers(broker, version):
    me = broker.broker_id
    with connect(broker.bootstrap) as sock:
        for name in ("answers", "dupe", "short", "twice"):
            create_topic(sock, name, 1)
        roundtrip(sock, p.FindCoordinatorRequest(key="g", key_type=0), 1)  # the offsets topic
        resp = roundtrip(sock, _create_partitions_request([
            ("dupe", 2, None), ("dupe", 3, None),            # named twice
            ("short", 3, [[me]]),                             # one assignment for two
            ("twice", 2, [[me, me]]),                         # a broker twice
            ("__consumer_offsets", 99, None),                 # internal
            ("missing", 2, None),
        ]), version)
        codes = [(r.name, r.error_code) for r in resp.results]
        assert codes == [
            ("dupe", InvalidRequestError.code),
            ("short", InvalidReplicaAssignmentError.code),
            ("twice", InvalidReplicaAssignmentError.code),
            ("__consumer_offsets", InvalidRequestError.code),
            ("missing", UnknownTopicOrPartitionError.code),
        ]
        assert all(r.error_message for r in resp.results)
        resp = roundtrip(sock, _create_partitions_request([("answers", 0, None)]), version)
        assert resp.results[0].error_code == InvalidPartitionsError.code
        # timeout_ms <= 0: made, but answered REQUEST_TIMED_OUT (Kafka's answer).
        resp = roundtrip(sock, _create_partitions_request([("answers", 2, None)], timeout_ms=0),
                         version)
        assert resp.results[0].error_code == RequestTimedOutError.code
    assert _dirs(broker.log_dir, "answers") == [0, 1]
    for name in ("dupe", "short", "twice"):
        assert _dirs(broker.log_dir, name) == [0]


def test_create_partitions_respects_the_partition_budget(broker_process):
    broker = broker_process(overrides={"max.partitions.per.topic": 3})
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "capped", 2)
        resp = roundtrip(sock, _create_partitions_request([("capped", 4, None)]), 1)
    assert resp.results[0].error_code == InvalidPartitionsError.code
    assert "max.partitions.per.topic" in resp.results[0].error_message
    assert _dirs(broker.log_dir, "capped") == [0, 1]


# -- CreatePartitions in a ZooKeeper cluster ----------------------------------------------


@pytest.fixture
def two_brokers(broker_process, zookeeper):
    brokers = [broker_process(broker_id=i, zookeeper=zookeeper) for i in (1, 2)]
    for b in brokers:
        with connect(b.bootstrap) as sock:
            _wait_for(lambda sock=sock: {x.node_id for x in roundtrip(
                sock, metadata_request([]), 1).brokers} == {1, 2}, what="both brokers")
    return brokers


def test_create_partitions_in_a_cluster(two_brokers):
    b1, b2 = two_brokers
    with connect(b1.bootstrap) as sock:
        create_topic(sock, "spread", 2)
    admin = KafkaAdminClient(bootstrap_servers=b1.bootstrap, request_timeout_ms=15000)
    try:
        admin.create_partitions({"spread": 6})
    finally:
        admin.close()
    # Every broker serves its share of the new partitions (from its watch) and tells them.
    for b in two_brokers:
        _wait_for(lambda b=b: len(_partition_leaders(b.bootstrap, "spread")) == 6,
                  what=f"broker {b.broker_id} to see 6 partitions")
        _wait_for(lambda b=b: set(_partition_leaders(b.bootstrap, "spread").values()) == {1, 2},
                  what="leaders")
    leaders = _partition_leaders(b2.bootstrap, "spread")
    local = {1: _dirs(b1.log_dir, "spread"), 2: _dirs(b2.log_dir, "spread")}
    assert sorted(local[1] + local[2]) == list(range(6))
    for partition, leader in leaders.items():
        assert partition in local[leader]
    _produce_one_per_partition(b2.bootstrap, "spread", 6)
    _consume_one_per_partition(b1.bootstrap, "spread", 6)

    # librdkafka too, with an explicit assignment on broker 2.
    cadmin = _confluent_admin(b2.bootstrap)  # kept: the futures need their handle alive
    futures = cadmin.create_partitions(
        [NewPartitions("spread", 8, replica_assignment=[[2], [2]])], request_timeout=15)
    futures["spread"].result(timeout=TIMEOUT_S)
    _wait_for(lambda: _dirs(b2.log_dir, "spread")[-2:] == [6, 7], what="partitions 6, 7")
    for b in two_brokers:
        _wait_for(lambda b=b: len(_partition_leaders(b.bootstrap, "spread")) == 8,
                  what=f"broker {b.broker_id} to see 8 partitions")


# -- DeleteRecords -------------------------------------------------------------------------


def test_kafka_python_delete_records(broker, admin):
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "trim", 1)
    _produce_values(broker.bootstrap, "trim", 10)
    tp = TopicPartition("trim", 0)
    result = admin.delete_records({tp: 4})
    assert result[tp]["low_watermark"] == 4
    assert _earliest(broker.bootstrap, "trim") == 4
    with connect(broker.bootstrap) as sock:
        below = only_partition(roundtrip(sock, fetch_request("trim", 0, 0), 4))
        assert below.error_code == OffsetOutOfRangeError.code
        first = only_partition(roundtrip(sock, fetch_request("trim", 0, 4), 4))
        assert first.error_code == 0 and first.log_start_offset == -1  # v4 has none
    consumer = kafka_consumer(broker.bootstrap)
    try:
        got = consume_partitions(consumer, "trim", [0], 6)
    finally:
        consumer.close()
    assert [r.offset for r in got[0]] == list(range(4, 10))

    assert admin.delete_records({tp: 2})[tp]["low_watermark"] == 4  # never backwards
    assert admin.delete_records({tp: -1})[tp]["low_watermark"] == 10  # the high watermark
    with pytest.raises(kerrors.OffsetOutOfRangeError):
        admin.delete_records({tp: 11})
    assert _earliest(broker.bootstrap, "trim") == 10


def test_confluent_delete_records(broker):
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "ctrim", 1)
    _produce_values(broker.bootstrap, "ctrim", 8)
    admin = _confluent_admin(broker.bootstrap)
    futures = admin.delete_records([confluent_kafka.TopicPartition("ctrim", 0, 5)],
                                   request_timeout=15)
    (future,) = futures.values()
    assert future.result(timeout=TIMEOUT_S).low_watermark == 5
    assert _earliest(broker.bootstrap, "ctrim") == 5


def _delete_records_request(entries):
    R = p.DeleteRecordsRequest
    T = R.DeleteRecordsTopic
    by_topic: dict[str, list] = {}
    for topic, partition, offset in entries:
        by_topic.setdefault(topic, []).append(
            T.DeleteRecordsPartition(partition_index=partition, offset=offset))
    return R(topics=[T(name=t, partitions=ps) for t, ps in by_topic.items()], timeout_ms=5000)


@pytest.mark.parametrize("version", [0, 1])
def test_delete_records_answers(broker, version):
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "dr", 2)
        roundtrip(sock, p.FindCoordinatorRequest(key="g", key_type=0), 1)  # makes the offsets topic
        _produce_values(broker.bootstrap, "dr", 3)
        resp = roundtrip(sock, _delete_records_request([
            ("dr", 0, -2), ("dr", 1, 0), ("dr", 7, 0), ("nope", 0, 1),
            ("__consumer_offsets", 0, 0),
        ]), version)
    got = {(t.name, x.partition_index): (x.low_watermark, x.error_code)
           for t in resp.topics for x in t.partitions}
    assert got == {
        ("dr", 0): (-1, OffsetOutOfRangeError.code),  # only -1 means the high watermark
        ("dr", 1): (0, 0),
        ("dr", 7): (-1, UnknownTopicOrPartitionError.code),
        ("nope", 0): (-1, UnknownTopicOrPartitionError.code),
        ("__consumer_offsets", 0): (-1, InvalidTopicError.code),
    }


# -- DeleteGroups / OffsetDelete -------------------------------------------------------------


def _commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    from kafka.structs import OffsetAndMetadata

    consumer = kafka_consumer(bootstrap, group_id=group)
    try:
        consumer.commit({TopicPartition(t, n): OffsetAndMetadata(o, "", -1)
                         for (t, n), o in offsets.items()})
    finally:
        consumer.close()


def _committed(admin, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets; a coordinator still loading its offsets partition
    (right after a start) is asked again, as Kafka's clients do with this retriable error."""
    deadline = time.monotonic() + 15
    while True:
        try:
            return {(tp.topic, tp.partition): om.offset
                    for tp, om in admin.list_group_offsets(group)[group].items()}
        except kerrors.CoordinatorLoadInProgressError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_kafka_python_delete_groups(broker, admin):
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "gt", 2)
    _commit(broker.bootstrap, "old-group", {("gt", 0): 5, ("gt", 1): 7})
    assert _committed(admin, "old-group") == {("gt", 0): 5, ("gt", 1): 7}
    live = kafka_consumer(broker.bootstrap, group_id="live-group")
    try:
        live.subscribe(["gt"])
        _wait_for(lambda: live.poll(timeout_ms=200) is not None and live.assignment(),
                  what="the live group's assignment")
        result = dict(admin.delete_groups(["old-group", "live-group", "no-such-group"]))
    finally:
        live.close()
    assert result == {"old-group": "OK", "live-group": "NonEmptyGroupError",
                      "no-such-group": "GroupIdNotFoundError"}
    assert "old-group" not in {g["group_id"] for g in admin.list_groups()}
    assert _committed(admin, "old-group") == {}
    assert admin.describe_groups(["old-group"])["old-group"]["group_state"] == "Dead"


def test_deleted_group_stays_deleted_after_restart(broker_process, tmp_path):
    broker = broker_process(tmp_path / "data")
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "gt", 1)
    _commit(broker.bootstrap, "gone", {("gt", 0): 3})
    _commit(broker.bootstrap, "kept", {("gt", 0): 4})
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    try:
        assert admin.delete_groups(["gone"]) == {"gone": "OK"}
    finally:
        admin.close()
    assert broker.stop() == 0
    broker = broker_process(tmp_path / "data")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    try:
        assert _committed(admin, "gone") == {}
        assert _committed(admin, "kept") == {("gt", 0): 4}
    finally:
        admin.close()


def test_confluent_delete_consumer_groups(broker, admin):
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "cg", 1)
    _commit(broker.bootstrap, "cgroup", {("cg", 0): 2})
    cadmin = _confluent_admin(broker.bootstrap)  # kept: the futures need their handle alive
    futures = cadmin.delete_consumer_groups(["cgroup"], request_timeout=15)
    futures["cgroup"].result(timeout=TIMEOUT_S)
    assert _committed(admin, "cgroup") == {}
    futures = cadmin.delete_consumer_groups(["cgroup"], request_timeout=15)
    with pytest.raises(confluent_kafka.KafkaException) as info:
        futures["cgroup"].result(timeout=TIMEOUT_S)
    assert info.value.args[0].code() == confluent_kafka.KafkaError.GROUP_ID_NOT_FOUND


def test_kafka_python_delete_group_offsets(broker, admin):
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "sub", 1)
        create_topic(sock, "unsub", 1)
    _commit(broker.bootstrap, "og", {("sub", 0): 1, ("unsub", 0): 2})
    member = kafka_consumer(broker.bootstrap, group_id="og")
    try:
        member.subscribe(["sub"])
        _wait_for(lambda: member.poll(timeout_ms=200) is not None and member.assignment(),
                  what="the member's assignment")
        result = admin.delete_group_offsets(
            "og", [TopicPartition("sub", 0), TopicPartition("unsub", 0)])
        assert result == {TopicPartition("sub", 0): kerrors.GroupSubscribedToTopicError,
                          TopicPartition("unsub", 0): kerrors.NoError}
        assert _committed(admin, "og") == {("sub", 0): 1}
    finally:
        member.close()
    # Empty now: any of its offsets may go.
    result = admin.delete_group_offsets("og", [TopicPartition("sub", 0)])
    assert result == {TopicPartition("sub", 0): kerrors.NoError}
    assert _committed(admin, "og") == {}
    with pytest.raises(kerrors.GroupIdNotFoundError):
        admin.delete_group_offsets("never", [TopicPartition("sub", 0)])


@pytest.mark.parametrize("version", [0, 1])
def test_delete_groups_answers(broker, version):
    with connect(broker.bootstrap) as sock:
        roundtrip(sock, p.FindCoordinatorRequest(key="g", key_type=0), 1)
        resp = _wait_for(lambda: (r := roundtrip(sock, p.DeleteGroupsRequest(
            groups_names=["", "ghost"]), version)).results[1].error_code != 14 and r,
            what="the offsets partitions to load")
    assert [(r.group_id, r.error_code) for r in resp.results] == [
        ("", InvalidGroupIdError.code), ("ghost", GroupIdNotFoundError.code)]


def test_offset_delete_answers(broker):
    R = p.OffsetDeleteRequest
    T = R.OffsetDeleteRequestTopic
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "od", 1)
        roundtrip(sock, p.FindCoordinatorRequest(key="odg", key_type=0), 1)
    _commit(broker.bootstrap, "odg", {("od", 0): 9})
    with connect(broker.bootstrap) as sock:
        resp = roundtrip(sock, R(group_id="odg", topics=[
            T(name="od", partitions=[T.OffsetDeleteRequestPartition(partition_index=0),
                                     T.OffsetDeleteRequestPartition(partition_index=5)])]), 0)
        assert resp.error_code == 0
        assert {(t.name, x.partition_index): x.error_code
                for t in resp.topics for x in t.partitions} == {
            ("od", 0): 0, ("od", 5): UnknownTopicOrPartitionError.code}
        resp = roundtrip(sock, R(group_id="ghost", topics=[]), 0)
        assert (resp.error_code, resp.topics) == (GroupIdNotFoundError.code, [])


# -- DescribeLogDirs -----------------------------------------------------------------------


def test_kafka_python_describe_log_dirs(broker, admin):
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "sized", 2)
        create_topic(sock, "other", 1)
    _produce_values(broker.bootstrap, "sized", 20)
    (answer,) = admin.describe_log_dirs({"sized": [0, 1]})
    assert answer["broker"] == broker.broker_id
    (log_dir,) = answer["log_dirs"]
    assert log_dir["error_code"] == 0
    assert log_dir["log_dir"] == str(broker.log_dir.resolve())
    (topic,) = log_dir["topics"]
    sizes = {x["partition_index"]: x for x in topic["partitions"]}
    assert topic["name"] == "sized" and sorted(sizes) == [0, 1]
    assert sizes[0]["partition_size"] > 0 and sizes[1]["partition_size"] == 0
    assert {x["offset_lag"] for x in sizes.values()} == {0}
    assert not any(x["is_future_key"] for x in sizes.values())


@pytest.mark.parametrize("version", [0, 1])
def test_describe_log_dirs_all_and_none(broker, version):
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "everything", 2)
        every = roundtrip(sock, p.DescribeLogDirsRequest(topics=None), version)
        none = roundtrip(sock, p.DescribeLogDirsRequest(topics=[]), version)
    (d,) = every.results
    assert {(t.name, x.partition_index) for t in d.topics for x in t.partitions} >= {
        ("everything", 0), ("everything", 1)}
    (d,) = none.results
    assert d.error_code == 0 and d.topics == []


# -- DescribeCluster: not served (flexible only); the clients fall back to Metadata ----------


def test_describe_cluster_falls_back_to_metadata(broker, admin):
    with connect(broker.bootstrap) as sock:
        versions = roundtrip(sock, p.ApiVersionsRequest(), 0)
    assert p.ApiKey.DESCRIBE_CLUSTER not in {k.api_key for k in versions.api_keys}
    described = admin.describe_cluster()
    assert [b["broker_id"] for b in described["brokers"]] == [broker.broker_id]
    cadmin = _confluent_admin(broker.bootstrap)
    result = cadmin.describe_cluster(request_timeout=15).result(timeout=TIMEOUT_S)
    assert [node.id for node in result.nodes] == [broker.broker_id]


# -- Odd requests are answered, never a closed connection ------------------------------------


def _odd_requests():
    CP, DR, OD = p.CreatePartitionsRequest, p.DeleteRecordsRequest, p.OffsetDeleteRequest
    return [
        (CP, _create_partitions_request([("", -5, None), ("odd", -1, [[]]),
                                         ("odd", 2**31 - 1, None), ("bad name!", 3, [[-1]])])),
        (CP, CP(topics=[], timeout_ms=-1, validate_only=True)),
        (DR, _delete_records_request([("odd", -1, 5), ("odd", 2**31 - 1, 2**63 - 1),
                                      ("", 0, -1), ("odd", 0, -(2**63))])),
        (DR, DR(topics=[], timeout_ms=0)),
        (p.DeleteGroupsRequest, p.DeleteGroupsRequest(groups_names=["", "x" * 300, "odd"])),
        (p.DeleteGroupsRequest, p.DeleteGroupsRequest(groups_names=[])),
        (OD, OD(group_id="", topics=[])),
        (OD, OD(group_id="odd", topics=[OD.OffsetDeleteRequestTopic(name="", partitions=[
            OD.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(partition_index=-1)])])),
        (p.DescribeLogDirsRequest, p.DescribeLogDirsRequest(topics=[
            p.DescribeLogDirsRequest.DescribableLogDirTopic(topic="", partitions=[-1, 2**31 - 1]),
            p.DescribeLogDirsRequest.DescribableLogDirTopic(topic="odd", partitions=[])])),
    ]


def test_odd_requests_are_answered(broker):
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "odd", 1)
        for cls, request in _odd_requests():
            for version in range(cls.MIN_VERSION, cls.MAX_VERSION + 1):
                response = roundtrip(sock, request, version)  # asserts an answer
                assert response is not None
        # The connection still serves.
        assert roundtrip(sock, metadata_request(["odd"], False), 1).topics[0].error_code == 0
