"""Replication on real broker processes and a real ZooKeeper: a topic with three replicas
survives the loss of its leader, followers converge to the leader's log byte for byte, and
``acks=all`` means what it says."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from broker_helpers import (
    batch,
    connect,
    fetch_request,
    only_partition,
    produce_request,
    roundtrip,
)

from trilog import protocol as p
from trilog.records import iter_batches

pytestmark = pytest.mark.slow

NOT_ENOUGH_REPLICAS = 19
SETTINGS = {"zookeeper.session.timeout.ms": 4000, "replica.lag.time.max.ms": 3000,
            "replica.fetch.wait.max.ms": 100, "log.segment.bytes": 64 * 1024,
            "default.replication.factor": 3}


def wait_for(predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def metadata(broker, topic: str):
    try:
        with connect(broker.bootstrap) as sock:
            response = roundtrip(sock, p.MetadataRequest(topics=[
                p.MetadataRequest.MetadataRequestTopic(name=topic)]), 5)
    except OSError:
        return None
    (t,) = response.topics
    return {x.partition_index: x for x in t.partitions} if t.error_code == 0 else None


def create(broker, topic: str, partitions: int, factor: int, configs=None) -> None:
    R = p.CreateTopicsRequest
    with connect(broker.bootstrap) as sock:
        (result,) = roundtrip(sock, R(topics=[R.CreatableTopic(
            name=topic, num_partitions=partitions, replication_factor=factor, assignments=[],
            configs=[R.CreatableTopic.CreatableTopicConfig(name=k, value=v)
                     for k, v in (configs or {}).items()])], timeout_ms=15_000), 3).topics
    assert result.error_code == 0, result


def fully_replicated(brokers, topic: str, partitions: int, factor: int):
    """Every broker's metadata shows every partition led, with ``factor`` in-sync replicas."""
    for b in brokers:
        meta = metadata(b, topic)
        if not meta or len(meta) != partitions:
            return False
        if any(x.leader_id < 0 or len(x.isr_nodes) != factor for x in meta.values()):
            return False
    return metadata(brokers[0], topic)


def produce_all(broker, topic: str, partition: int, values, acks: int = -1) -> int:
    with connect(broker.bootstrap) as sock:
        part = only_partition(roundtrip(sock, produce_request(
            topic, partition, batch(values), acks=acks), 3))
    return part.error_code


def read_all(broker, topic: str, partition: int) -> list[bytes]:
    out: list[bytes] = []
    offset = 0
    with connect(broker.bootstrap) as sock:
        while True:
            part = only_partition(roundtrip(sock, fetch_request(topic, partition, offset), 4))
            assert part.error_code == 0, part
            for b in iter_batches(bytes(part.records or b"")):
                out.extend(r.value for r in b.records() if r.offset >= offset)
                offset = max(offset, b.next_offset)
            if offset >= part.high_watermark:
                return out


def log_bytes(log_dir: Path, topic: str, partition: int) -> bytes:
    directory = log_dir / f"{topic}-{partition}"
    return b"".join((directory / name).read_bytes()
                    for name in sorted(os.listdir(directory)) if name.endswith(".log"))


@pytest.fixture
def three(broker_process, zookeeper):
    def start(i: int, log_dir=None):
        return broker_process(log_dir, broker_id=i, zookeeper=zookeeper, overrides=SETTINGS)
    brokers = {i: start(i) for i in (1, 2, 3)}
    wait_for(lambda: len(live_brokers(brokers[1])) == 3, what="three brokers registered")
    return brokers, start


def live_brokers(broker) -> list[int]:
    with connect(broker.bootstrap) as sock:
        return [b.node_id for b in roundtrip(sock, p.MetadataRequest(topics=[]), 1).brokers]


def test_a_replicated_topic_survives_its_leaders_death(three):
    brokers, start = three
    create(brokers[1], "r", 3, 3)
    meta = wait_for(lambda: fully_replicated(list(brokers.values()), "r", 3, 3),
                    what="three in-sync replicas everywhere")
    assert all(sorted(x.replica_nodes) == [1, 2, 3] for x in meta.values())
    leader_id = meta[0].leader_id
    leader = brokers[leader_id]
    acked = []
    for i in range(50):
        values = [b"r%03d-%d" % (i, j) for j in range(10)]
        assert produce_all(leader, "r", 0, values) == 0
        acked.extend(values)
    leader.kill()
    survivors = [b for i, b in brokers.items() if i != leader_id]
    new_meta = wait_for(lambda: (m := metadata(survivors[0], "r")) and m[0].leader_id not in
                        (-1, leader_id) and m, what="a new leader")
    new_leader = brokers[new_meta[0].leader_id]
    # Nothing acknowledged is lost.  (A new leader's high watermark, what consumers may
    # read, catches up with its log once its follower fetched: Kafka's behaviour too.)
    wait_for(lambda: read_all(new_leader, "r", 0) == acked, what="every acked record")
    more = [b"after-%d" % j for j in range(10)]
    wait_for(lambda: produce_all(new_leader, "r", 0, more) == 0, what="acks=all with 2 ISR")
    # The dead broker returns, catches up, rejoins the ISR; the logs are identical.
    brokers[leader_id] = start(leader_id, leader.log_dir)
    wait_for(lambda: fully_replicated(list(brokers.values()), "r", 3, 3),
             what="the returned broker back in the ISR")
    assert read_all(new_leader, "r", 0) == acked + more
    wait_for(lambda: len({log_bytes(b.log_dir, "r", 0) for b in brokers.values()}) == 1,
             what="identical logs on every replica")


def test_acks_all_needs_min_insync_replicas(three):
    brokers, _start = three
    create(brokers[1], "m", 1, 3, {"min.insync.replicas": "2"})
    meta = wait_for(lambda: fully_replicated(list(brokers.values()), "m", 1, 3),
                    what="three in-sync replicas")
    leader_id = meta[0].leader_id
    followers = [b for i, b in brokers.items() if i != leader_id]
    assert produce_all(brokers[leader_id], "m", 0, [b"one"]) == 0
    for f in followers:
        f.kill()
    # The followers leave the ISR after replica.lag.time.max.ms; then acks=all is refused
    # before appending, and acks=1 still works.
    wait_for(lambda: produce_all(brokers[leader_id], "m", 0, [b"two"]) ==
             NOT_ENOUGH_REPLICAS, what="NOT_ENOUGH_REPLICAS")
    assert produce_all(brokers[leader_id], "m", 0, [b"three"], acks=1) == 0
