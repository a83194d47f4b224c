"""Transactions against a real broker process with independent clients (KIP-98, KIP-447,
KIP-664): confluent-kafka's transactional producer, read_committed consumers of
confluent-kafka and kafka-python, fencing, the coordinator's own aborts, offsets sent to a
transaction, and the admin APIs (DescribeTransactions, ListTransactions)."""

from __future__ import annotations

import time
import uuid
import warnings

import pytest
from broker_helpers import connect, produce_request, roundtrip, wait_for

from trilog import protocol as p

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import kafka  # kafka-python warns at import

#: A development broker's transaction log: one replica, few partitions (fast to create).
OVERRIDES = {"transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 3,
             "group.initial.rebalance.delay.ms": 0,
             "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500}


@pytest.fixture(scope="module")
def broker(module_broker_process):
    return module_broker_process(overrides=OVERRIDES)


def _topic(broker, partitions: int = 1) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(20)
    return name


def _producer(broker, tid: str, **extra):
    return confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                     "transactional.id": tid, "linger.ms": 5, **extra})


def _confluent_values(broker, topic: str, isolation: str, expect: int,
                      timeout: float = 20.0) -> list[bytes]:
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
        "auto.offset.reset": "earliest", "isolation.level": isolation,
        "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and len(values) < expect:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
        # Anything more than expected would show up now.
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
    finally:
        consumer.close()
    return values


def _kafka_python_values(broker, topic: str, isolation: str) -> list[bytes]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap,
                                   isolation_level=isolation, auto_offset_reset="earliest",
                                   enable_auto_commit=False, consumer_timeout_ms=3000)
    tp = kafka.TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    try:
        return [m.value for m in consumer]
    finally:
        consumer.close()


def test_committed_and_aborted_transactions_as_each_isolation_level_sees_them(broker):
    topic = _topic(broker)
    producer = _producer(broker, f"tx-{uuid.uuid4().hex[:6]}")
    producer.init_transactions(20)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, f"committed-{i}".encode(), partition=0)
    producer.commit_transaction(20)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, f"aborted-{i}".encode(), partition=0)
    producer.flush(10)
    producer.abort_transaction(20)
    producer.begin_transaction()
    producer.produce(topic, b"committed-last", partition=0)
    producer.commit_transaction(20)

    committed = [f"committed-{i}".encode() for i in range(5)] + [b"committed-last"]
    aborted = [f"aborted-{i}".encode() for i in range(3)]
    assert _confluent_values(broker, topic, "read_committed", 6) == committed
    assert _kafka_python_values(broker, topic, "read_committed") == committed
    seen = _confluent_values(broker, topic, "read_uncommitted", 9)
    assert seen == committed[:5] + aborted + committed[5:]
    assert _kafka_python_values(broker, topic, "read_uncommitted") == seen


def test_an_open_transaction_holds_back_read_committed_readers_until_it_commits(broker):
    topic = _topic(broker)
    plain = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    producer = _producer(broker, f"tx-{uuid.uuid4().hex[:6]}")
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce(topic, b"in-txn", partition=0)
    producer.flush(10)
    plain.produce(topic, b"after", partition=0)  # a non-transactional record after it
    plain.flush(10)
    # The last stable offset stops at the open transaction: nothing is readable yet.
    assert _confluent_values(broker, topic, "read_committed", 1, timeout=2) == []
    assert _confluent_values(broker, topic, "read_uncommitted", 2) == [b"in-txn", b"after"]
    producer.commit_transaction(20)
    assert _confluent_values(broker, topic, "read_committed", 2) == [b"in-txn", b"after"]


def test_a_second_producer_with_the_same_id_fences_the_first(broker):
    topic = _topic(broker)
    tid = f"tx-{uuid.uuid4().hex[:6]}"
    first = _producer(broker, tid)
    first.init_transactions(20)
    first.begin_transaction()
    first.produce(topic, b"zombie", partition=0)
    first.flush(10)
    second = _producer(broker, tid)
    second.init_transactions(30)  # aborts the first's transaction, then fences it
    second.begin_transaction()
    second.produce(topic, b"fresh", partition=0)
    second.commit_transaction(20)
    with pytest.raises(confluent_kafka.KafkaException) as info:
        first.produce(topic, b"more", partition=0)
        first.commit_transaction(20)
    assert info.value.args[0].fatal()  # fenced: this producer can do nothing more
    assert _confluent_values(broker, topic, "read_committed", 1) == [b"fresh"]


def test_the_coordinator_aborts_a_transaction_open_past_its_timeout(broker):
    topic = _topic(broker)
    producer = _producer(broker, f"tx-{uuid.uuid4().hex[:6]}", **{
        "transaction.timeout.ms": 2000})
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce(topic, b"forgotten", partition=0)
    producer.flush(10)
    plain = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, b"later", partition=0)
    plain.flush(10)
    # Aborted by the coordinator after ~2 s: the reader gets past it.
    assert _confluent_values(broker, topic, "read_committed", 1, timeout=20) == [b"later"]


def test_offsets_sent_to_a_transaction_move_with_it(broker):
    source, sink = _topic(broker), _topic(broker)
    feeder = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        feeder.produce(source, f"in-{i}".encode(), partition=0)
    feeder.flush(10)
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": group,
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "isolation.level": "read_committed"})
    consumer.subscribe([source])
    producer = _producer(broker, f"tx-{uuid.uuid4().hex[:6]}")
    producer.init_transactions(20)
    got: list = []
    deadline = time.monotonic() + 30
    while len(got) < 10 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg)
    assert len(got) == 10

    def transform(msgs, commit: bool) -> None:
        producer.begin_transaction()
        for m in msgs:
            producer.produce(sink, m.value().replace(b"in", b"out"), partition=0)
        offsets = [confluent_kafka.TopicPartition(source, 0, msgs[-1].offset() + 1)]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 20)
        if commit:
            producer.commit_transaction(20)
        else:
            producer.abort_transaction(20)

    transform(got[:4], commit=True)
    transform(got[4:], commit=False)  # neither the records nor the offset move
    committed = consumer.committed([confluent_kafka.TopicPartition(source, 0)], 10)
    assert committed[0].offset == 4
    consumer.close()
    assert _confluent_values(broker, sink, "read_committed", 4) == [
        f"out-{i}".encode() for i in range(4)]


def _offset_fetch(broker, group: str, topic: str, require_stable: bool):
    with connect(broker.bootstrap) as sock:
        request = p.OffsetFetchRequest(group_id=group, require_stable=require_stable, topics=[
            p.OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])])
        part = roundtrip(sock, request, 7).topics[0].partitions[0]
        return part.error_code, part.committed_offset


def test_offsets_of_an_open_transaction_are_unstable_to_a_read_committed_fetch(broker):
    # KIP-447: a consumer that asks for stable offsets (OffsetFetch v7 require_stable, as
    # a read_committed consumer does) is told UNSTABLE_OFFSET_COMMIT while a transaction's
    # offsets are pending, instead of the older offsets it would replay records from.
    source = _topic(broker)
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                         "group.id": group, "enable.auto.commit": False})
    producer = _producer(broker, f"tx-{uuid.uuid4().hex[:6]}")
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.send_offsets_to_transaction([confluent_kafka.TopicPartition(source, 0, 7)],
                                         consumer.consumer_group_metadata(), 20)
    assert _offset_fetch(broker, group, source, require_stable=True) == (88, -1)
    assert _offset_fetch(broker, group, source, require_stable=False) == (0, -1)
    producer.commit_transaction(20)
    assert wait_for(lambda: _offset_fetch(broker, group, source, True) == (0, 7),
                    what="the committed transaction's offset")
    consumer.close()


def _find_txn_coordinator(broker, tid: str) -> int:
    with connect(broker.bootstrap) as sock:
        def found():
            r = roundtrip(sock, p.FindCoordinatorRequest(key=tid, key_type=1), 1)
            return r if r.error_code == 0 else None
        return wait_for(found, what="a transaction coordinator").node_id


def test_describe_and_list_transactions(broker):
    topic = _topic(broker)
    tid = f"tx-{uuid.uuid4().hex[:6]}"
    producer = _producer(broker, tid)
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce(topic, b"x", partition=0)
    producer.flush(10)
    _find_txn_coordinator(broker, tid)
    with connect(broker.bootstrap) as sock:
        described = roundtrip(sock, p.DescribeTransactionsRequest(transactional_ids=[tid,
                                                                                      "nope"]), 0)
        state, missing = described.transaction_states
        assert state.error_code == 0 and state.transaction_state == "Ongoing"
        assert [(t.topic, list(t.partitions)) for t in state.topics] == [(topic, [0])]
        assert missing.error_code == 105  # TRANSACTIONAL_ID_NOT_FOUND
        listed = roundtrip(sock, p.ListTransactionsRequest(state_filters=["Ongoing"],
                                                           producer_id_filters=[]), 0)
        assert listed.error_code == 0
        assert tid in {s.transactional_id for s in listed.transaction_states}
        unknown = roundtrip(sock, p.ListTransactionsRequest(state_filters=["Bogus"],
                                                            producer_id_filters=[]), 0)
        assert list(unknown.unknown_state_filters) == ["Bogus"]
    producer.commit_transaction(20)


def test_a_client_may_not_write_control_batches_or_the_transaction_log(broker):
    from trilog.records import build_end_txn_marker

    topic = _topic(broker)
    marker = build_end_txn_marker(producer_id=1, producer_epoch=0, coordinator_epoch=0,
                                  commit=True, timestamp_ms=0)
    with connect(broker.bootstrap) as sock:
        response = roundtrip(sock, produce_request(topic, 0, marker), 3)
        code = response.responses[0].partition_responses[0].error_code
        assert code == 87  # INVALID_RECORD


def test_an_unused_transactional_id_expires(broker_process):
    short = broker_process(overrides={**OVERRIDES, "transactional.id.expiration.ms": 1000,
                                      "transaction.remove.expired.transaction.cleanup"
                                      ".interval.ms": 200})
    topic = _topic(short)
    tid = f"tx-{uuid.uuid4().hex[:6]}"
    producer = _producer(short, tid)
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce(topic, b"x", partition=0)
    producer.commit_transaction(20)
    _find_txn_coordinator(short, tid)

    def state() -> int:
        with connect(short.bootstrap) as sock:
            r = roundtrip(sock, p.DescribeTransactionsRequest(transactional_ids=[tid]), 0)
        return r.transaction_states[0].error_code

    assert state() == 0  # CompleteCommit, just used
    wait_for(lambda: state() == 105, timeout=20, what="the id's expiry")  # NOT_FOUND
