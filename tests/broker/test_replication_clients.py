"""Replication as Kafka's own clients see it, on three broker processes and a real ZooKeeper:
``kcat -L`` and kafka-python's metadata show each partition's replicas and ISR, and a
kafka-python and a confluent-kafka consumer group keep consuming, with their committed
offsets intact, while the broker coordinating the group is SIGKILLed."""

from __future__ import annotations

import gc
import re
import shutil
import socket
import subprocess
import time
import warnings

import pytest
from broker_helpers import connect, roundtrip
from replication_helpers import SETTINGS, create, fully_replicated, live_brokers, wait_for

import trilog.sync
from trilog import protocol as p

pytestmark = pytest.mark.slow

TOPIC = "orders"
PARTITIONS = 3
HALF = 300  # records produced before the coordinator dies, and as many after
GROUP_SETTINGS = {**SETTINGS, "offsets.topic.num.partitions": 3,
                  "offsets.topic.replication.factor": 3, "group.initial.rebalance.delay.ms": 0}


@pytest.fixture
def cluster(broker_process, zookeeper):
    brokers = {i: broker_process(broker_id=i, zookeeper=zookeeper, overrides=GROUP_SETTINGS)
               for i in (1, 2, 3)}
    wait_for(lambda: all(len(live_brokers(b)) == 3 for b in brokers.values()),
             what="three live brokers everywhere")
    create(brokers[1], TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    wait_for(lambda: fully_replicated(list(brokers.values()), TOPIC, PARTITIONS, 3),
             what="three in-sync replicas of every partition")
    return brokers


def bootstrap(brokers) -> str:
    return ",".join(b.bootstrap for b in brokers.values())


# -- metadata --------------------------------------------------------------------------------


def test_kcat_and_kafka_python_show_replicas_and_isr(cluster):
    brokers = cluster
    # One replica goes away: the ISR shrinks to the two others while replicas stay three.
    brokers[3].kill()
    wait_for(lambda: (m := fully_replicated([brokers[1]], TOPIC, PARTITIONS, 2))
             and all(3 not in x.isr_nodes for x in m.values()), what="ISRs without broker 3")

    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        pytest.fail("kcat is not installed (`make install` installs Debian's kcat)")
    out = subprocess.run([kcat, "-b", brokers[1].bootstrap, "-L", "-t", TOPIC],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    rows = re.findall(r"partition (\d+), leader (\d+), replicas: ([\d,]+), isrs: ([\d,]+)",
                      out.stdout)
    assert len(rows) == PARTITIONS, out.stdout
    for _partition, leader, replicas, isr in rows:
        assert sorted(map(int, replicas.split(","))) == [1, 2, 3]
        assert sorted(map(int, isr.split(","))) == [1, 2]
        assert int(leader) in (1, 2)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.admin import KafkaAdminClient
        from kafka.errors import KafkaConnectionError
    admin = KafkaAdminClient(bootstrap_servers=brokers[2].bootstrap, request_timeout_ms=10_000)
    try:
        # Broker 3 may still be listed (a second after it was found gone; Kafka lists a
        # crashed broker until its session expires); kafka-python's admin may pick it and be
        # refused, and does not try another broker itself.  Its next pick avoids it
        # (reconnect backoff).
        for attempt in range(3):
            try:
                (topic,) = admin.describe_topics([TOPIC])
                break
            except KafkaConnectionError:
                if attempt == 2:
                    raise
    finally:
        admin.close()
    assert len(topic["partitions"]) == PARTITIONS
    for part in topic["partitions"]:
        assert sorted(part["replica_nodes"]) == [1, 2, 3], part
        assert sorted(part["isr_nodes"]) == [1, 2], part


# -- consumer groups across the coordinator's death -------------------------------------------


def coordinator(brokers, group: str) -> int:
    """The broker coordinating ``group`` (FindCoordinator, asked of any live broker)."""
    def ask():
        for b in brokers.values():
            if b.proc.poll() is not None:
                continue
            try:
                with connect(b.bootstrap) as sock:
                    answer = roundtrip(sock, p.FindCoordinatorRequest(key=group, key_type=0), 1)
            except OSError:
                continue
            if answer.error_code == 0:
                return answer.node_id
        return None
    return wait_for(ask, what=f"a coordinator for {group}")


def produce(brokers, first: int, count: int) -> None:
    producer = trilog.sync.Producer(bootstrap(brokers), acks="all", retries=1000,
                                    retry_backoff_ms=50, delivery_timeout_ms=60_000)
    try:
        deliveries = [producer.send(TOPIC, b"v%05d" % i, partition=i % PARTITIONS)
                      for i in range(first, first + count)]
        for d in deliveries:
            d.get(timeout=60)
    finally:
        producer.close()


class KafkaPython:
    """kafka-python's group consumer, as an application uses it."""

    def __init__(self, brokers, group: str) -> None:
        from kafka import KafkaConsumer

        self.consumer = KafkaConsumer(
            TOPIC, bootstrap_servers=bootstrap(brokers), group_id=group,
            enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=6000,
            heartbeat_interval_ms=1000, metadata_max_age_ms=1000, request_timeout_ms=15_000,
            retry_backoff_ms=100)

    def poll(self) -> list[tuple[int, int, bytes]]:
        return [(tp.partition, r.offset, r.value)
                for tp, records in self.consumer.poll(timeout_ms=300).items() for r in records]

    def positions(self) -> dict[int, int]:
        """The consumer's next offset for each partition assigned to it."""
        return _asking_again(lambda: {tp.partition: self.consumer.position(tp)
                                      for tp in self.consumer.assignment()})

    def commit(self) -> bool:
        from kafka.errors import KafkaError

        try:
            self.consumer.commit()
            return True
        except KafkaError:
            return False  # the coordinator moved or the group rebalanced: poll, then retry

    def committed(self) -> dict[int, int | None]:
        from kafka import TopicPartition

        return _asking_again(lambda: {i: self.consumer.committed(TopicPartition(TOPIC, i))
                                      for i in range(PARTITIONS)})

    def close(self) -> None:
        consumer, self.consumer = self.consumer, None
        consumer.close(autocommit=False)
        del consumer
        close_dropped_sockets()


def _asking_again(ask):
    """``ask()``, again while kafka-python raises KafkaConnectionError: it raises when it
    asked a dead broker that Metadata still listed (trilog lists one a second after finding
    it gone, Kafka until its session ends) instead of asking another broker; an application
    asks again, and kafka-python's next pick avoids the refused broker."""
    from kafka.errors import KafkaConnectionError

    deadline = time.monotonic() + 30
    while True:
        try:
            return ask()
        except KafkaConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def close_dropped_sockets() -> None:
    """kafka-python 3.0 keeps the sockets of its refused connection attempts (to the
    killed broker) referenced, unclosed, until the interpreter exits, where pytest reports
    them as unraisable ResourceWarnings.  Close them: TCP sockets that are neither
    connected nor listening."""
    gc.collect()
    for obj in gc.get_objects():
        if not isinstance(obj, socket.socket) or obj.fileno() < 0 or \
                obj.family != socket.AF_INET or obj.type != socket.SOCK_STREAM:
            continue
        try:
            obj.getpeername()
            continue  # connected: somebody's live connection
        except OSError:
            pass
        if not obj.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            obj.close()


class ConfluentKafka:
    """librdkafka's group consumer (confluent-kafka), as an application uses it."""

    def __init__(self, brokers, group: str) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer({
            "bootstrap.servers": bootstrap(brokers), "group.id": group,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
            "topic.metadata.refresh.interval.ms": 1000, "reconnect.backoff.max.ms": 500})
        self.consumer.subscribe([TOPIC])

    def poll(self) -> list[tuple[int, int, bytes]]:
        out = []
        for m in self.consumer.consume(num_messages=1000, timeout=0.3):
            if m.error() is None:
                out.append((m.partition(), m.offset(), m.value()))
        return out

    def positions(self) -> dict[int, int]:
        return {tp.partition: tp.offset
                for tp in self.consumer.position(self.consumer.assignment())}

    def commit(self) -> bool:
        from confluent_kafka import KafkaException

        try:
            self.consumer.commit(asynchronous=False)
            return True
        except KafkaException as exc:
            # Nothing consumed since the last commit is not a failure.
            return "_NO_OFFSET" in str(exc)

    def committed(self) -> dict[int, int | None]:
        from confluent_kafka import TopicPartition

        tps = self.consumer.committed([TopicPartition(TOPIC, i) for i in range(PARTITIONS)],
                                      timeout=20)
        return {tp.partition: tp.offset if tp.offset >= 0 else None for tp in tps}

    def close(self) -> None:
        self.consumer.close()


def consume(consumer, seen: list, total: int, timeout: float = 90.0) -> None:
    """Poll until ``total`` distinct records were seen and the consumer's positions are at
    the end of every partition, then commit; until a commit is taken (a rebalance may send
    the consumer back to the last committed offsets: it reads those records again)."""
    deadline = time.monotonic() + timeout
    end = total // PARTITIONS
    while True:
        assert time.monotonic() < deadline, \
            f"consumed {len({v for *_, v in seen})} of {total} records"
        seen.extend(consumer.poll())
        if len({value for _p, _o, value in seen}) < total:
            continue
        if consumer.positions() != {i: end for i in range(PARTITIONS)}:
            continue
        if consumer.commit():
            return


@pytest.mark.parametrize("client", [KafkaPython, ConfluentKafka],
                         ids=["kafka-python", "confluent-kafka"])
def test_a_consumer_group_survives_its_coordinators_death(cluster, client):
    brokers = cluster
    group = f"billing-{client.__name__}"
    produce(brokers, 0, HALF)
    consumer = client(brokers, group)
    try:
        seen: list[tuple[int, int, bytes]] = []
        consume(consumer, seen, HALF)
        half_way = consumer.committed()
        per_partition = HALF // PARTITIONS
        assert half_way == {i: per_partition for i in range(PARTITIONS)}
        wait_for(lambda: fully_replicated(list(brokers.values()), "__consumer_offsets", 3, 3),
                 what="the offsets topic fully replicated")

        dead = coordinator(brokers, group)
        brokers[dead].kill()
        produce(brokers, HALF, HALF)
        before = len(seen)
        consume(consumer, seen, 2 * HALF)
        after_kill = seen[before:]
    finally:
        consumer.close()

    # Every record arrived; after the coordinator's death the group went on from its
    # committed offsets (never from the beginning: they were not lost).
    assert {v for *_, v in seen} == {b"v%05d" % i for i in range(2 * HALF)}
    for partition, offset, _value in after_kill:
        assert offset >= half_way[partition], (partition, offset, half_way)
    # A new member of the group starts where the group left off.
    again = client(brokers, group)
    try:
        assert again.committed() == {i: 2 * per_partition for i in range(PARTITIONS)}
        assert again.poll() + again.poll() + again.poll() == []
    finally:
        again.close()
