"""Old clients: magic 0/1 message sets in, down-converted message sets out.

Raw Produce v0/v1/v2 with message sets built by ``trilog.records.build_message_set`` and
Fetch v0/v1/v2 (down-converted) and v4 (RecordBatch v2); then kafka-python itself pinned
to 0.8.2 / 0.9 / 0.10 protocol versions.
"""

from __future__ import annotations

import time

import pytest
from broker_helpers import (
    batch,
    connect,
    create_topic,
    fetch_request,
    kafka_consumer,
    kafka_producer,
    only_partition,
    produce_request,
    records_of,
    roundtrip,
)
from kafka import TopicPartition
from kafka_helpers import lend_xxhash

from trilog.records import GZIP, LZ4, NONE, MemoryRecords, build_message_set

NO_TIMESTAMP = -1


def _legacy_records(magic: int, start: int, n: int, ts0: int):
    return [(ts0 + i if magic else NO_TIMESTAMP,
             None if i % 3 == 0 else b"key-%d" % (start + i),
             b"value-%d" % (start + i) if i % 5 else b"")
            for i in range(n)]


def _fetch(sock, topic, offset, version):
    part = only_partition(roundtrip(sock, fetch_request(topic, 0, offset), version))
    assert part.error_code == 0
    data = bytes(part.records or b"")
    return data, records_of(data), part.high_watermark


@pytest.mark.parametrize("codec", [NONE, GZIP, LZ4], ids=["none", "gzip", "lz4"])
@pytest.mark.parametrize("magic, produce_version", [(0, 0), (0, 1), (1, 2)])
def test_raw_legacy_produce_and_fetch_every_version(broker_process, magic, produce_version,
                                                    codec):
    broker = broker_process()
    ts0 = int(time.time() * 1000) - 10_000
    sent = []
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "old")
        for start, n in [(0, 7), (7, 1), (8, 12)]:
            records = _legacy_records(magic, start, n, ts0 + start)
            message_set = build_message_set(records, magic=magic, compression_type=codec)
            part = only_partition(roundtrip(sock, produce_request("old", 0, message_set),
                                            produce_version))
            assert part.error_code == 0, part
            assert part.base_offset == start
            sent.extend(records)
        # A modern batch after the old ones: old fetchers see it down-converted.
        modern_ts = int(time.time() * 1000)
        part = only_partition(roundtrip(sock, produce_request("old", 0, batch(
            [b"modern-1", b"modern-2"], key=b"mk", timestamp=modern_ts)), 3))
        assert part.base_offset == len(sent)
        sent.extend([(modern_ts, b"mk", b"modern-1"), (modern_ts, b"mk", b"modern-2")])

        for fetch_version, want_magic in [(0, 0), (1, 0), (2, 1), (3, 1), (4, 2)]:
            data, got, hw = _fetch(sock, "old", 0, fetch_version)
            assert hw == len(sent)
            assert MemoryRecords(data).magics() == {want_magic}, fetch_version
            assert [r.offset for r in got] == list(range(len(sent))), fetch_version
            assert [(r.key, r.value) for r in got] == [(k, v) for _, k, v in sent]
            if want_magic == 0:
                assert all(r.timestamp == NO_TIMESTAMP for r in got)
            else:
                assert [r.timestamp for r in got] == [ts for ts, _, _ in sent], fetch_version
            # From the middle: the first record returned is at or before the asked offset,
            # and nothing before it is missing after it.
            data, got, _ = _fetch(sock, "old", 9, fetch_version)
            got = [r for r in got if r.offset >= 9]
            assert [r.offset for r in got] == list(range(9, len(sent)))


def test_corrupt_legacy_message_is_refused(broker_process):
    broker = broker_process()
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "old")
        message_set = bytearray(build_message_set([(-1, b"k", b"v")], magic=0))
        message_set[-1] ^= 0xFF  # breaks the CRC32
        part = only_partition(roundtrip(sock, produce_request("old", 0, bytes(message_set)), 0))
        assert part.error_code == 2  # CORRUPT_MESSAGE
        _, got, hw = _fetch(sock, "old", 0, 0)
        assert (got, hw) == ([], 0)


@pytest.mark.parametrize("compression", [None, "gzip", "lz4"])
@pytest.mark.parametrize("api_version", [(0, 8, 2), (0, 9), (0, 10, 0)],
                         ids=["0.8.2", "0.9", "0.10"])
def test_kafka_python_as_an_old_client(broker_process, api_version, compression,
                                      monkeypatch):
    lend_xxhash(monkeypatch)  # kafka-python frames 0.8/0.9's LZ4 with the xxhash package
    broker = broker_process()
    topic = "legacy"
    n = 3000
    t0 = int(time.time() * 1000)
    producer = kafka_producer(broker.bootstrap, api_version=api_version,
                              compression_type=compression, linger_ms=5, batch_size=16384)
    try:
        futures = [producer.send(topic, key=b"k%d" % (i % 7), value=b"v%d" % i)
                   for i in range(n)]
        producer.flush(timeout=30)
        offsets = [f.get(timeout=0).offset for f in futures]
    finally:
        producer.close(timeout=10)
    t1 = int(time.time() * 1000)
    assert offsets == list(range(n))
    consumer = kafka_consumer(broker.bootstrap, api_version=api_version)
    tp = TopicPartition(topic, 0)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = []
        deadline = time.monotonic() + 30
        while len(got) < n:
            assert time.monotonic() < deadline, len(got)
            for recs in consumer.poll(timeout_ms=500).values():
                got.extend(recs)
    finally:
        consumer.close()
    assert [r.offset for r in got] == list(range(n))
    assert [(r.key, r.value) for r in got] == [(b"k%d" % (i % 7), b"v%d" % i) for i in range(n)]
    if api_version >= (0, 10):
        assert all(t0 - 5 <= r.timestamp <= t1 + 5 for r in got)
    else:
        assert all(r.timestamp in (None, -1) for r in got)
