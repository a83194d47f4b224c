"""What the replication tests share: three broker processes' settings, waits, and raw
protocol reads of Metadata, produce and fetch answers (see tests/broker/test_replication*.py)."""

from __future__ import annotations

import os
from pathlib import Path

from broker_helpers import (
    batch,
    connect,
    fetch_request,
    only_partition,
    produce_request,
    roundtrip,
    wait_for,
)
from kazoo.client import KazooClient

from trilog import protocol as p
from trilog.records import iter_batches

NOT_ENOUGH_REPLICAS = 19
SETTINGS = {"zookeeper.session.timeout.ms": 4000, "replica.lag.time.max.ms": 3000,
            "replica.fetch.wait.max.ms": 100, "log.segment.bytes": 64 * 1024,
            "default.replication.factor": 3}


def metadata(broker, topic: str):
    """``{partition: PartitionMetadata}`` as ``broker`` answers (None if unreachable or the
    topic is unknown); partitions without a leader are included (``leader_id`` -1)."""
    try:
        with connect(broker.bootstrap) as sock:
            response = roundtrip(sock, p.MetadataRequest(topics=[
                p.MetadataRequest.MetadataRequestTopic(name=topic)]), 5)
    except OSError:
        return None
    (t,) = response.topics
    return {x.partition_index: x for x in t.partitions} if t.error_code == 0 else None


def create(broker, topic: str, partitions: int, factor: int, configs=None,
           replicas: list[int] | None = None) -> None:
    """Create ``topic`` through ``broker`` once it knows ``factor`` live brokers (the
    controller's word, which may come a moment after the brokers registered); with
    ``replicas``, its one partition on those brokers, the first its preferred leader."""
    wait_for(lambda: len(live_brokers(broker)) >= factor, what=f"{factor} live brokers")
    R = p.CreateTopicsRequest
    T = R.CreatableTopic
    assignments = [] if replicas is None else [
        T.CreatableReplicaAssignment(partition_index=0, broker_ids=replicas)]
    with connect(broker.bootstrap) as sock:
        (result,) = roundtrip(sock, R(topics=[T(
            name=topic, num_partitions=-1 if replicas else partitions,
            replication_factor=-1 if replicas else factor, assignments=assignments,
            configs=[T.CreatableTopicConfig(name=k, value=v)
                     for k, v in (configs or {}).items()])], timeout_ms=15_000), 3).topics
    assert result.error_code == 0, result


def fully_replicated(brokers, topic: str, partitions: int, factor: int):
    for b in brokers:
        meta = metadata(b, topic)
        if not meta or len(meta) != partitions:
            return False
        if any(x.leader_id < 0 or len(x.isr_nodes) != factor for x in meta.values()):
            return False
    return metadata(brokers[0], topic)


def produce_all(broker, topic: str, partition: int, values, acks: int = -1) -> int:
    try:
        with connect(broker.bootstrap) as sock:
            part = only_partition(roundtrip(sock, produce_request(
                topic, partition, batch(values), acks=acks), 3))
    except OSError:
        return -1
    return part.error_code


def read_all(broker, topic: str, partition: int) -> list[bytes] | None:
    """Every record value below the high watermark, read from ``broker`` (None if it
    answers with an error: not the leader yet, say)."""
    records = read_records(broker, topic, partition)
    return None if records is None else [value for _offset, value in records]


def read_records(broker, topic: str, partition: int) -> list[tuple[int, bytes]] | None:
    """``(offset, value)`` of every record below the high watermark, read from ``broker``
    (None if it answers with an error)."""
    out: list[tuple[int, bytes]] = []
    offset = 0
    with connect(broker.bootstrap) as sock:
        while True:
            part = only_partition(roundtrip(sock, fetch_request(topic, partition, offset), 4))
            if part.error_code != 0:
                return None
            for b in iter_batches(bytes(part.records or b"")):
                out.extend((r.offset, r.value) for r in b.records() if r.offset >= offset)
                offset = max(offset, b.next_offset)
            if offset >= part.high_watermark:
                return out


def log_bytes(log_dir: Path, topic: str, partition: int) -> bytes:
    directory = log_dir / f"{topic}-{partition}"
    return b"".join((directory / name).read_bytes()
                    for name in sorted(os.listdir(directory)) if name.endswith(".log"))


def live_brokers(broker) -> list[int]:
    with connect(broker.bootstrap) as sock:
        return [b.node_id for b in roundtrip(sock, p.MetadataRequest(topics=[]), 1).brokers]


def controller_id(broker) -> int | None:
    """The controller ``broker`` names in Metadata (None if unreachable)."""
    try:
        with connect(broker.bootstrap) as sock:
            return roundtrip(sock, p.MetadataRequest(topics=[]), 1).controller_id
    except OSError:
        return None


def registered(zookeeper: str) -> set[int]:
    """The broker ids registered in ZooKeeper now (ephemeral nodes of live sessions)."""
    client = KazooClient(zookeeper)
    client.start(timeout=10)
    try:
        return {int(x) for x in client.get_children("/brokers/ids")}
    finally:
        client.stop()
        client.close()


def wait_unregistered(zookeeper: str, broker_id: int) -> None:
    """A SIGKILLed broker's session ends after ``zookeeper.session.timeout.ms``; only then
    may a broker with its id start again."""
    wait_for(lambda: broker_id not in registered(zookeeper), what=f"broker {broker_id}'s "
             "ZooKeeper session to end")
