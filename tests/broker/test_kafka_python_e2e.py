"""kafka-python, an independent client, against a real ``trilog broker`` process.

30,000 records per run (a hundred batches or more, many fetches), uncompressed / gzip /
lz4, keyed and unkeyed, over three partitions: everything produced comes back with its key, value, offset (contiguous per
partition from 0, equal to what the producer was acknowledged) and CreateTime timestamp.
"""

from __future__ import annotations

import time

import pytest
from broker_helpers import kafka_consumer, kafka_producer
from kafka_helpers import consume_partitions

from trilog.records import GZIP, LZ4, NONE, iter_batches

N = 30_000
PARTITIONS = 3


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
@pytest.mark.parametrize("compression", [None, "gzip", "lz4"])
def test_produce_and_consume_30k(broker_process, compression, keyed):
    broker = broker_process(overrides={"num.partitions": PARTITIONS})
    topic = f"interop-{compression or 'none'}-{'keyed' if keyed else 'unkeyed'}"

    def key_of(i: int) -> bytes | None:
        return b"key-%d" % (i % 997) if keyed else None

    def value_of(i: int) -> bytes:
        return b"value-%06d-" % i + b"x" * (i % 50)

    t0 = int(time.time() * 1000)
    producer = kafka_producer(broker.bootstrap, compression_type=compression)
    try:
        futures = [producer.send(topic, key=key_of(i), value=value_of(i)) for i in range(N)]
        producer.flush(timeout=60)
        acked = [f.get(timeout=0) for f in futures]
    finally:
        producer.close(timeout=10)
    t1 = int(time.time() * 1000)

    acked_offset = {(m.partition, m.offset): i for i, m in enumerate(acked)}
    assert len(acked_offset) == N, "two records were acknowledged at the same offset"
    used = {m.partition for m in acked}
    assert used <= set(range(PARTITIONS))
    if keyed:
        assert used == set(range(PARTITIONS))

    consumer = kafka_consumer(broker.bootstrap)
    try:
        assert consumer.partitions_for_topic(topic) == set(range(PARTITIONS))
        by_partition = consume_partitions(consumer, topic, range(PARTITIONS), N)
    finally:
        consumer.close()

    seen = 0
    key_partition: dict[bytes, int] = {}
    for partition, records in by_partition.items():
        assert [r.offset for r in records] == list(range(len(records))), (
            f"partition {partition}: offsets are not contiguous from 0"
        )
        last_i = -1
        for r in records:
            i = acked_offset[(partition, r.offset)]
            assert i > last_i, "records of one partition came back out of send order"
            last_i = i
            assert r.value == value_of(i)
            assert r.key == key_of(i)
            assert r.timestamp_type == 0  # CreateTime
            assert t0 - 5 <= r.timestamp <= t1 + 5, (r.timestamp, t0, t1)
            if keyed:
                assert key_partition.setdefault(r.key, partition) == partition
        seen += len(records)
    assert seen == N

    # The broker stores the producer's batches as received: still compressed on disk
    # (kafka-python sends a tiny batch uncompressed when compression does not pay).
    codec = {None: NONE, "gzip": GZIP, "lz4": LZ4}[compression]
    stored = set()
    for segment in broker.log_dir.glob(f"{topic}-*/*.log"):
        stored |= {b.compression_type for b in iter_batches(segment.read_bytes())}
    assert codec in stored and stored <= {codec, NONE}
