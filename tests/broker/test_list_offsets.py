"""ListOffsets: earliest, latest and by timestamp (v1+), and Kafka 0.8's v0 offset lists.

Both through kafka-python (``beginning_offsets``, ``end_offsets``, ``offsets_for_times``)
and over the raw protocol at every version.
"""

from __future__ import annotations

import time

import pytest
from broker_helpers import (
    EARLIEST,
    LATEST,
    connect,
    create_topic,
    kafka_consumer,
    list_offsets_request,
    only_partition,
    produce,
    produce_request,
    roundtrip,
)
from kafka import TopicPartition

from trilog.records import build_batch

T0 = int(time.time() * 1000) - 3_600_000  # an hour ago: timestamps well apart from "now"

# (timestamps of one batch); offsets follow in order: batch 0 is offsets 0-2, and so on.
BATCHES = [
    [T0 + 0, T0 + 10, T0 + 20],
    [T0 + 30, T0 + 40],
    [T0 + 100, T0 + 70, T0 + 90],  # out of order inside a batch (allowed with CreateTime)
    [T0 + 200],
]
TIMESTAMPS = [ts for b in BATCHES for ts in b]


@pytest.fixture
def topic_broker(broker_process):
    # Tiny segments, so v0's list of segment base offsets has several entries.
    broker = broker_process(overrides={"log.segment.bytes": 1024})
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "times", 1)
        create_topic(sock, "empty", 1)
        offset = 0
        for timestamps in BATCHES:
            data = build_batch([(ts, None, b"at-%d" % (ts - T0) + b"." * 250)
                                for ts in timestamps])
            part = only_partition(roundtrip(sock, produce_request("times", 0, data), 3))
            assert part.error_code == 0 and part.base_offset == offset
            offset += len(timestamps)
    return broker


def _expected_for(target: int) -> tuple[int, int] | None:
    """Kafka's rule: the first offset (in log order) whose timestamp is >= target."""
    for offset, ts in enumerate(TIMESTAMPS):
        if ts >= target:
            return offset, ts
    return None


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_raw_by_timestamp_earliest_latest(topic_broker, version):
    with connect(topic_broker.bootstrap) as sock:
        for target in [T0 - 1000, T0, T0 + 5, T0 + 20, T0 + 21, T0 + 41, T0 + 80, T0 + 95,
                       T0 + 100, T0 + 101, T0 + 200, T0 + 201]:
            part = only_partition(roundtrip(sock, list_offsets_request("times", 0, target),
                                            version))
            assert part.error_code == 0
            expected = _expected_for(target)
            if expected is None:
                assert (part.offset, part.timestamp) == (-1, -1), target
            else:
                assert (part.offset, part.timestamp) == expected, (target - T0, expected)
        earliest = only_partition(roundtrip(sock, list_offsets_request("times", 0, EARLIEST),
                                            version))
        latest = only_partition(roundtrip(sock, list_offsets_request("times", 0, LATEST),
                                          version))
        assert (earliest.error_code, earliest.offset) == (0, 0)
        assert (latest.error_code, latest.offset) == (0, len(TIMESTAMPS))
        assert earliest.timestamp == latest.timestamp == -1
        empty = only_partition(roundtrip(sock, list_offsets_request("empty", 0, LATEST), version))
        assert (empty.error_code, empty.offset) == (0, 0)
        empty = only_partition(roundtrip(sock, list_offsets_request("empty", 0, T0), version))
        assert (empty.error_code, empty.offset) == (0, -1)
        unknown = only_partition(roundtrip(sock, list_offsets_request("times", 7, LATEST),
                                           version))
        assert unknown.error_code == 3
        unknown = only_partition(roundtrip(sock, list_offsets_request("nope", 0, LATEST),
                                           version))
        assert unknown.error_code == 3


def test_raw_v0_offset_lists(topic_broker):
    segments = sorted(int(f.stem) for f in topic_broker.log_dir.glob("times-0/*.log"))
    assert len(segments) >= 3, "the test wants several segments"
    leo = len(TIMESTAMPS)
    with connect(topic_broker.bootstrap) as sock:
        def v0(timestamp, max_n):
            part = only_partition(roundtrip(sock, list_offsets_request("times", 0, timestamp,
                                                                       max_n), 0))
            assert part.error_code == 0
            return list(part.old_style_offsets)

        # Kafka 0.8: the log end offset, then segment base offsets, newest first.
        assert v0(LATEST, 100) == sorted([leo] + segments, reverse=True)
        assert v0(LATEST, 1) == [leo]
        assert v0(LATEST, 2) == [leo, segments[-1]]
        assert v0(EARLIEST, 100) == [0]
        # A time before any segment was written: nothing.
        assert v0(0, 10) == []
        # Now: every segment qualifies (they were all modified before now).
        now = int(time.time() * 1000) + 1000
        assert v0(now, 100)[-1] == 0
        empty = only_partition(roundtrip(sock, list_offsets_request("empty", 0, LATEST, 10), 0))
        assert list(empty.old_style_offsets) == [0]


def test_kafka_python_offsets(topic_broker):
    consumer = kafka_consumer(topic_broker.bootstrap)
    tp = TopicPartition("times", 0)
    empty = TopicPartition("empty", 0)
    try:
        assert consumer.beginning_offsets([tp, empty]) == {tp: 0, empty: 0}
        assert consumer.end_offsets([tp, empty]) == {tp: len(TIMESTAMPS), empty: 0}
        for target in [T0, T0 + 15, T0 + 41, T0 + 95, T0 + 150, T0 + 201]:
            found = consumer.offsets_for_times({tp: target})[tp]
            expected = _expected_for(target)
            if expected is None:
                assert found is None
            else:
                assert (found.offset, found.timestamp) == expected
        assert consumer.offsets_for_times({empty: T0}) == {empty: None}
    finally:
        consumer.close()


def test_offsets_follow_appends(topic_broker):
    consumer = kafka_consumer(topic_broker.bootstrap)
    tp = TopicPartition("times", 0)
    try:
        with connect(topic_broker.bootstrap) as sock:
            now = int(time.time() * 1000)
            produce(sock, "times", 0, [b"new-1", b"new-2"], timestamp=now)
        assert consumer.end_offsets([tp]) == {tp: len(TIMESTAMPS) + 2}
        found = consumer.offsets_for_times({tp: now})[tp]
        assert (found.offset, found.timestamp) == (len(TIMESTAMPS), now)
    finally:
        consumer.close()
