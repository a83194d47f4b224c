"""The clients' ``statistics()``: the producer's, the simple consumer's and the group
consumer's counters move as records flow (against a real broker process), and the blocking
facades pass them through.  No timing assertions: latencies are only checked for sense."""

from __future__ import annotations

import pytest
import trio
from client_helpers import create_topic

import trilog
import trilog.sync


def _check_latency(stats: dict, name: str) -> None:
    avg, top = stats[f"{name}_latency_avg_ms"], stats[f"{name}_latency_max_ms"]
    assert 0 <= avg <= top


async def test_producer_statistics_follow_what_is_sent(broker):
    await create_topic(broker.bootstrap, "stats", 1)
    value = b"v" * 100
    async with trilog.open_producer(broker.bootstrap, linger_ms=20,
                                    buffer_memory=1 << 20) as producer:
        before = producer.statistics()
        assert before == {
            "records_sent": 0, "bytes_sent": 0, "batches_sent": 0, "batch_size_avg": 0.0,
            "requests": 0, "request_latency_avg_ms": 0.0, "request_latency_max_ms": 0.0,
            "buffer_total_bytes": 1 << 20, "buffer_available_bytes": 1 << 20,
            "record_errors": 0, "retries": 0}
        await producer.partitions_for("stats")
        deliveries = [producer.send_nowait("stats", value, partition=0) for _ in range(100)]
        queued = producer.statistics()
        assert queued["buffer_available_bytes"] < queued["buffer_total_bytes"]
        assert queued["records_sent"] == 0  # still lingering in the open batch
        await producer.flush()
        assert all(d.exception() is None for d in deliveries)
        first = producer.statistics()
        assert first["records_sent"] == 100
        assert first["bytes_sent"] > 100 * len(value)
        assert first["batches_sent"] >= 1 and first["requests"] >= 1
        assert first["batch_size_avg"] == first["bytes_sent"] / first["batches_sent"]
        assert first["buffer_available_bytes"] == first["buffer_total_bytes"]
        assert first["record_errors"] == first["retries"] == 0
        _check_latency(first, "request")
        await producer.send_and_wait("stats", value, partition=0)
        second = producer.statistics()
        assert second["records_sent"] == 101
        assert second["bytes_sent"] > first["bytes_sent"]
        assert second["requests"] == first["requests"] + 1


async def test_producer_statistics_count_failed_records_and_split_batches(broker_process):
    broker = broker_process(overrides={"message.max.bytes": 1024, "num.partitions": 1})
    async with trilog.open_producer(broker.bootstrap, linger_ms=50) as producer:
        await producer.partitions_for("small")
        # Ten records of 300 bytes in one batch: the broker refuses it, it goes again in
        # halves (and so on) until each part fits.
        deliveries = [producer.send_nowait("small", b"s" * 300, partition=0)
                      for _ in range(10)]
        await producer.flush()
        assert all(d.exception() is None for d in deliveries)
        split = producer.statistics()
        assert split["records_sent"] == 10  # each record once, however often it was split
        assert split["batches_sent"] > 1
        assert split["record_errors"] == 0
        with pytest.raises(trilog.ApiError):  # MESSAGE_TOO_LARGE: alone, it cannot be split
            await producer.send_and_wait("small", b"L" * 2000, partition=0)
        failed = producer.statistics()
        assert failed["record_errors"] == 1
        assert failed["records_sent"] == 11


async def _produce(bootstrap: str, topic: str, n: int, partition: int | None = None) -> None:
    async with trilog.open_producer(bootstrap, linger_ms=20) as producer:
        await producer.partitions_for(topic)
        for i in range(n):
            producer.send_nowait(topic, b"%04d" % i, partition=partition if partition is not None
                                 else i % 3)
        await producer.flush()


async def test_simple_consumer_statistics_count_records_bytes_and_lag(broker):
    await create_topic(broker.bootstrap, "fetched", 1)
    await _produce(broker.bootstrap, "fetched", 50, partition=0)
    async with trilog.open_simple_consumer(broker.bootstrap) as consumer:
        assert consumer.statistics()["fetches"] == 0
        first = await consumer.fetch("fetched", 0, 0, max_bytes=1)  # one batch at least
        stats = consumer.statistics()
        assert stats["fetches"] == 1
        assert stats["records_consumed"] == first.record_count == len(first)
        assert stats["bytes_consumed"] == first.size_in_bytes > 0
        assert stats["lag"] == {"fetched": {0: 50 - first.next_offset}}
        assert stats["lag_max"] == 50 - first.next_offset
        _check_latency(stats, "fetch")
        position = first.next_offset
        while position < 50:
            fetched = await consumer.fetch("fetched", 0, position)
            position = fetched.next_offset
        stats = consumer.statistics()
        assert stats["records_consumed"] == 50
        assert stats["lag"] == {"fetched": {0: 0}} and stats["lag_max"] == 0
        # From inside a batch: only the records from the asked offset count.
        middle = await consumer.fetch("fetched", 0, 45)
        assert middle.record_count == len(middle) == 5
        assert consumer.statistics()["records_consumed"] == 55


async def test_group_consumer_statistics_count_records_lag_and_rebalances(broker_process):
    broker = broker_process(overrides={"num.partitions": 3, "group.initial.rebalance.delay.ms": 0,
                                       "offsets.topic.num.partitions": 1})
    await create_topic(broker.bootstrap, "grouped", 3)
    await _produce(broker.bootstrap, "grouped", 90)
    async with trilog.open_consumer_connector("stats-group", bootstrap_servers=broker.bootstrap,
                                    topics={"grouped": 1}, auto_offset_reset="smallest",
                                    consumer_timeout_ms=1000) as consumer:
        got = [record async for record in consumer.streams["grouped"][0]]
        assert len(got) == 90
        stats = consumer.statistics()
        assert stats["records_consumed"] == 90
        assert stats["bytes_consumed"] > 90 * 4
        assert stats["fetches"] >= 1
        assert stats["rebalances"] >= 1
        assert stats["assigned_partitions"] == 3
        assert stats["lag"] == {"grouped": {0: 0, 1: 0, 2: 0}}
        _check_latency(stats, "fetch")
        await _produce(broker.bootstrap, "grouped", 30)
        with trio.fail_after(30):  # a guard, not a timing assertion
            while consumer.statistics()["records_consumed"] < 120:
                await trio.sleep(0.05)


def test_the_sync_facades_pass_statistics_through(broker_process, tmp_path):
    broker = broker_process(overrides={"num.partitions": 1, "group.initial.rebalance.delay.ms": 0,
                                       "offsets.topic.num.partitions": 1})
    with trilog.sync.Producer(broker.bootstrap) as producer:
        for i in range(10):
            producer.send("sync-stats", b"%d" % i)
        producer.flush()
        assert producer.statistics()["records_sent"] == 10
    assert producer.statistics()["records_sent"] == 10  # the last counters once closed
    with trilog.sync.SimpleConsumer(broker.bootstrap) as consumer:
        fetched = consumer.fetch("sync-stats", 0, 0)
        assert consumer.statistics()["records_consumed"] == len(fetched) == 10
    with trilog.sync.ConsumerConnector("sync-group", bootstrap_servers=broker.bootstrap,
                              topics={"sync-stats": 1}, auto_offset_reset="smallest",
                              consumer_timeout_ms=1000) as group:
        assert len(list(group.streams["sync-stats"][0])) == 10
        stats = group.statistics()
        assert stats["records_consumed"] == 10 and stats["rebalances"] >= 1
