"""Keyed records land where the Java client (and kafka-python) would put them: murmur2."""

from __future__ import annotations

import trio
from client_helpers import create_topic, kafka_produce, read_topic
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_murmur2

import trilog
from trilog.client import murmur2, partition_for_key

# org.apache.kafka.common.utils.UtilsTest#testMurmur2
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_matches_javas_test_vectors():
    assert {key: murmur2(key) for key in JAVA_VECTORS} == JAVA_VECTORS


@given(st.binary(max_size=200))
def test_murmur2_matches_kafka_python(data):
    assert murmur2(data) & 0xFFFFFFFF == kafka_murmur2(data)
    assert -(1 << 31) <= murmur2(data) < 1 << 31


@given(st.binary(max_size=64), st.integers(1, 1000))
def test_partition_for_key_is_javas_formula(key, n):
    assert partition_for_key(key, n) == (kafka_murmur2(key) & 0x7FFFFFFF) % n


PARTITIONS = 7
KEYS = [f"user-{i}".encode() for i in range(150)] + [b"", b"\x00", bytes(range(256))]


async def test_keyed_placement_equals_kafka_python(broker):
    await create_topic(broker.bootstrap, "by-trilog", PARTITIONS)
    await create_topic(broker.bootstrap, "by-kafka-python", PARTITIONS)
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap) as producer:
        deliveries = [await producer.send("by-trilog", value=b"v", key=k) for k in KEYS]
        await producer.flush()
    trilog_map = {k: d.result().partition for k, d in zip(KEYS, deliveries)}

    metas = await trio.to_thread.run_sync(
        kafka_produce, broker.bootstrap, "by-kafka-python",
        [{"key": k, "value": b"v"} for k in KEYS])
    kafka_map = {k: m.partition for k, m in zip(KEYS, metas)}

    assert len(set(trilog_map.values())) == PARTITIONS  # the keys cover every partition
    assert trilog_map == kafka_map

    # Where the records really are agrees with what the deliveries said.
    stored = await read_topic(broker.bootstrap, "by-trilog", range(PARTITIONS))
    in_log = {r.key: p for p, records in stored.items() for r in records}
    assert in_log == trilog_map
