"""More partitions than descriptors (issue 25 item 3, issue 27 item 2): a broker process under a
low hard RLIMIT_NOFILE holds more partitions than it may keep files open, serves every one
of them (produce, a fetch of all at once, Metadata), keeps its connections' floor, stops
cleanly and serves again after a restart and after a SIGKILL; only a limit too low for the
log's minimum is refused, with POLICY_VIOLATION naming `ulimit -n`.
"""

from __future__ import annotations

import os
import signal
import time

from broker_helpers import (
    batch,
    connect,
    create_topic,
    create_topics_request,
    metadata_request,
    records_of,
    roundtrip,
)

from trilog import protocol as p

POLICY_VIOLATION = 44
PARTITIONS = 300
#: log files the broker may keep open under this limit: 256 - 128 reserved - 64 (floor)
LIMIT = 256


def produce_all(sock, topic: str, partitions: int) -> None:
    R = p.ProduceRequest
    request = R(transactional_id=None, acks=1, timeout_ms=10_000, topic_data=[
        R.TopicProduceData(name=topic, partition_data=[
            R.TopicProduceData.PartitionProduceData(index=i, records=batch([f"v{i}".encode()]))
            for i in range(partitions)])])
    response = roundtrip(sock, request, 3)
    errors = [r.error_code for t in response.responses for r in t.partition_responses]
    assert errors == [0] * partitions


def fetch_every(sock, topic: str, partitions: int) -> dict[int, list[bytes]]:
    """One Fetch of every partition from offset 0: each partition's values."""
    R = p.FetchRequest
    request = R(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=64 << 20,
                isolation_level=0, topics=[R.FetchTopic(topic=topic, partitions=[
                    R.FetchTopic.FetchPartition(partition=i, fetch_offset=0,
                                                partition_max_bytes=1 << 16)
                    for i in range(partitions)])])
    response = roundtrip(sock, request, 4)
    out = {}
    for part in response.responses[0].partitions:
        assert part.error_code == 0
        out[part.partition_index] = [r.value for r in records_of(part.records)]
    return out


def check_served(broker, topic: str = "wide") -> None:
    with connect(broker.bootstrap) as sock:
        meta = roundtrip(sock, metadata_request(None), 1)
        (wide,) = [t for t in meta.topics if t.name == topic]
        assert len(wide.partitions) == PARTITIONS
        got = fetch_every(sock, topic, PARTITIONS)
        assert got == {i: [f"v{i}".encode()] for i in range(PARTITIONS)}
    assert len(os.listdir(f"/proc/{broker.pid}/fd")) < LIMIT


def test_more_partitions_than_descriptors_serve_stop_and_restart(broker_process):
    broker = broker_process(fd_limit=LIMIT)
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "wide", PARTITIONS)
        produce_all(sock, "wide", PARTITIONS)
    check_served(broker)
    assert broker.stop() == 0  # a clean shutdown

    restarted = broker_process(broker.log_dir, fd_limit=LIMIT)
    check_served(restarted)
    # Connections keep their floor beside the log's files: 40 clients at once are served.
    clients = [connect(restarted.bootstrap) for _ in range(40)]
    try:
        for sock in clients:
            assert roundtrip(sock, metadata_request([]), 1).topics == []
    finally:
        for sock in clients:
            sock.close()
    restarted.proc.send_signal(signal.SIGKILL)
    restarted.proc.wait(10)

    recovered = broker_process(broker.log_dir, fd_limit=LIMIT)
    check_served(recovered)
    assert "room for 0 connections" not in recovered.stderr_path.read_text()


def test_a_limit_below_the_logs_minimum_refuses_new_partitions_and_keeps_serving(
        broker_process):
    """Under 200 descriptors the log's share (200 - 128 - 64) is below its minimum of 32
    files: CreateTopics and auto-creation are refused, naming `ulimit -n`; what exists is
    served, and a restart serves again."""
    broker = broker_process()
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "kept", 3)
        produce_all(sock, "kept", 3)
    assert broker.stop() == 0
    low = broker_process(broker.log_dir, fd_limit=200)
    for _ in range(2):
        with connect(low.bootstrap) as sock:
            (result,) = roundtrip(sock, create_topics_request({"more": 1}), 2).topics
            assert result.error_code == POLICY_VIOLATION
            assert "ulimit -n" in result.error_message
            meta = roundtrip(sock, metadata_request(["auto-1", "kept"]), 4)
            errors = {t.name: t.error_code for t in meta.topics}
            assert errors == {"auto-1": POLICY_VIOLATION, "kept": 0}
            assert fetch_every(sock, "kept", 3) == {i: [f"v{i}".encode()] for i in range(3)}
        assert low.stop() == 0
        assert not [d for d in os.listdir(broker.log_dir) if d.startswith(("more", "auto"))]
        low = broker_process(broker.log_dir, fd_limit=200)


def test_the_all_topics_metadata_follows_new_partitions(broker_process):
    """The cached answer of a topic is rebuilt when its partitions change."""
    broker = broker_process()
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "grows", 2)
        before = {t.name: len(t.partitions) for t in
                  roundtrip(sock, metadata_request(None), 1).topics}
        R = p.CreatePartitionsRequest
        response = roundtrip(sock, R(topics=[R.CreatePartitionsTopic(
            name="grows", count=5, assignments=None)], timeout_ms=10_000,
            validate_only=False), 1)
        assert response.results[0].error_code == 0
        deadline = time.monotonic() + 10
        while True:
            after = {t.name: len(t.partitions) for t in
                     roundtrip(sock, metadata_request(None), 1).topics}
            if after["grows"] == 5 or time.monotonic() > deadline:
                break
        assert (before["grows"], after["grows"]) == (2, 5)
