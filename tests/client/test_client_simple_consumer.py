"""The simple consumer against a real broker process: fetch, multifetch, offsets_before,
out-of-range errors, and iterate's long poll and prefetch."""

from __future__ import annotations

from contextlib import aclosing

import pytest
import trio
from client_helpers import create_topic
from pacing_helpers import check_paced

import trilog
from trilog.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from trilog.records import MemoryRecords


async def _produce_one_batch(bootstrap: str, topic: str, values, partition: int = 0,
                             **kw) -> list[trilog.RecordMetadata]:
    """``values`` as a single batch: queued without a checkpoint in between, then flushed."""
    async with trilog.open_producer(bootstrap_servers=bootstrap, linger_ms=50) as producer:
        await producer.partitions_for(topic)
        deliveries = [producer.send_nowait(topic, value=v, partition=partition, **kw)
                      for v in values]
        await producer.flush()
    return [d.result() for d in deliveries]


async def test_fetch_from_inside_a_batch_skips_the_earlier_records(broker):
    await create_topic(broker.bootstrap, "mid", 1)
    values = [b"r%d" % i for i in range(10)]
    metas = await _produce_one_batch(broker.bootstrap, "mid", values)
    assert [m.offset for m in metas] == list(range(10))
    async with trilog.open_simple_consumer(bootstrap_servers=broker.bootstrap) as consumer:
        fetched = await consumer.fetch("mid", 0, 6)
        # The broker answers from the start of the batch holding offset 6 ...
        (batch,) = MemoryRecords(bytes(fetched._data)).batches()
        assert batch.base_offset == 0
        # ... and the consumer hands out only what was asked for.
        assert [(r.offset, r.value) for r in fetched] == [(i, values[i]) for i in range(6, 10)]
        assert len(fetched) == 4
        assert fetched.next_offset == 10 and fetched.high_watermark == 10
        assert list(await consumer.fetch("mid", 0, 10)) == []


async def test_a_record_larger_than_max_bytes_still_comes_back(broker):
    big = bytes(range(256)) * 800  # 200 kB
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap) as producer:
        await producer.send_and_wait("big", value=big, partition=0)
        await producer.send_and_wait("big", value=b"small", partition=0)
    async with trilog.open_simple_consumer(bootstrap_servers=broker.bootstrap) as consumer:
        fetched = await consumer.fetch("big", 0, 0, max_bytes=1000)
        assert [(r.offset, r.value) for r in fetched] == [(0, big)]
        assert fetched.next_offset == 1
        (again,) = await consumer.multifetch([("big", 0, 0, 100)])
        assert [r.value for r in again] == [big]
        assert [r.value for r in await consumer.fetch("big", 0, 1, max_bytes=100)] == [b"small"]


async def test_multifetch_answers_in_the_order_asked(broker):
    await create_topic(broker.bootstrap, "a", 2)
    await create_topic(broker.bootstrap, "b", 1)
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap) as producer:
        for topic, partition in (("a", 0), ("a", 1), ("b", 0)):
            for i in range(5):
                await producer.send(topic, value=f"{topic}{partition}-{i}".encode(),
                                    partition=partition)
    async with trilog.open_simple_consumer(bootstrap_servers=broker.bootstrap) as consumer:
        asked = [("b", 0, 3, 1 << 20), ("a", 1, 0, 1 << 20), ("a", 0, 4, 1 << 20)]
        got = await consumer.multifetch(asked)
        assert [(f.topic, f.partition, f.offset) for f in got] == [a[:3] for a in asked]
        assert [[r.value for r in f] for f in got] == [
            [b"b0-3", b"b0-4"], [b"a1-%d" % i for i in range(5)], [b"a0-4"]]
        with pytest.raises(UnknownTopicOrPartitionError):
            await consumer.multifetch([("a", 0, 0, 1000), ("a", 7, 0, 1000)])


async def test_offsets_before(broker_process):
    broker = broker_process(overrides={"log.segment.bytes": 1024})
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap) as producer:
        # Three batches stamped 1000, 2000, 3000 (two records each), then enough records
        # to roll a few 1 KiB segments.
        for ts in (1000, 2000, 3000):
            for i in range(2):
                await producer.send("timed", value=b"%d-%d" % (ts, i), partition=0,
                                    timestamp_ms=ts)
            await producer.flush()
        for i in range(20):
            await producer.send_and_wait("timed", value=bytes(200), partition=0,
                                         timestamp_ms=10_000 + i)
    async with trilog.open_simple_consumer(bootstrap_servers=broker.bootstrap) as consumer:
        assert await consumer.offsets_before("timed", 0, trilog.EARLIEST) == [0]
        assert await consumer.offsets_before("timed", 0, trilog.LATEST) == [26]
        assert await consumer.offsets_before("timed", 0, 0) == [0]
        assert await consumer.offsets_before("timed", 0, 1000) == [0]
        assert await consumer.offsets_before("timed", 0, 1001) == [2]
        assert await consumer.offsets_before("timed", 0, 2000) == [2]
        assert await consumer.offsets_before("timed", 0, 2500) == [4]
        assert await consumer.offsets_before("timed", 0, 10_005) == [11]
        assert await consumer.offsets_before("timed", 0, 10_020) == []  # nothing that recent
        # Kafka 0.8's answer: segment starts, newest first, the log end offset leading.
        many = await consumer.offsets_before("timed", 0, trilog.LATEST, max_offsets=100)
        assert many[0] == 26 and many[-1] == 0 and len(many) >= 4
        assert many == sorted(set(many), reverse=True)
        assert await consumer.offsets_before("timed", 0, trilog.LATEST, max_offsets=2) == \
            many[:2]
        with pytest.raises(UnknownTopicOrPartitionError):
            await consumer.offsets_before("no-such-topic", 0)


async def test_offset_out_of_range_carries_the_valid_range(broker):
    await _produce_one_batch(broker.bootstrap, "ranged", [b"x"] * 5, partition=2)
    async with trilog.open_simple_consumer(bootstrap_servers=broker.bootstrap) as consumer:
        with pytest.raises(OffsetOutOfRangeError) as info:
            await consumer.fetch("ranged", 2, 100)
        assert (info.value.log_start_offset, info.value.log_end_offset) == (0, 5)
        assert "0..5" in str(info.value)
        assert not info.value.retriable or info.value.code == 1
        # The end itself is in range: nothing yet, not an error.
        assert list(await consumer.fetch("ranged", 2, 5)) == []
        # iterate raises it too, instead of spinning.
        with trio.fail_after(5), pytest.raises(OffsetOutOfRangeError):
            async for _record in consumer.iterate("ranged", 2, 50):
                pass


async def test_iterate_follows_new_records_with_long_polls(broker):
    """While nothing arrives the consumer long-polls (a handful of fetches, not a busy
    loop); records produced later come out in order, promptly."""
    await create_topic(broker.bootstrap, "live", 1)
    fetch_times: list[float] = []
    received: list[tuple[float, int, bytes]] = []
    sent_at: dict[bytes, float] = {}

    async with trilog.open_simple_consumer(bootstrap_servers=broker.bootstrap,
                                           fetch_max_wait_ms=400) as consumer:
        real_fetch = consumer.fetch

        async def counting_fetch(*args, **kw):
            fetch_times.append(trio.current_time())
            return await real_fetch(*args, **kw)

        consumer.fetch = counting_fetch

        async def produce_later():
            await trio.sleep(2.0)  # an idle partition first
            async with trilog.open_producer(bootstrap_servers=broker.bootstrap) as producer:
                for i in range(10):
                    value = b"live-%d" % i
                    sent_at[value] = trio.current_time()
                    await producer.send_and_wait("live", value=value, partition=0)
                    await trio.sleep(0.05)

        start = trio.current_time()
        with trio.fail_after(15):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(produce_later)
                async with aclosing(consumer.iterate("live", 0, 0)) as records:
                    async for record in records:
                        received.append((trio.current_time(), record.offset, record.value))
                        if len(received) == 10:
                            break

    assert [(o, v) for _t, o, v in received] == [(i, b"live-%d" % i) for i in range(10)]
    idle = [t for t in fetch_times if t < start + 1.9]
    assert 2 <= len(idle) <= 10, f"{len(idle)} fetches in 1.9 idle seconds (long poll: ~5)"
    # A long poll answers as soon as data arrives, not at the end of its wait.
    lags = [t - sent_at[v] for t, _o, v in received]
    assert max(lags) < 0.35, lags


async def test_iterate_is_a_cancellation_point_and_lets_other_tasks_run(broker):
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap) as producer:
        await producer.partitions_for("busy")
        for i in range(21_000):  # more than check_paced reads
            producer.send_nowait("busy", b"%d" % i, partition=0)
    async with trilog.open_simple_consumer(bootstrap_servers=broker.bootstrap) as consumer:
        async with aclosing(consumer.iterate("busy", 0, 0)) as records:
            await check_paced(records)


async def test_iterate_prefetches_while_the_caller_works(broker):
    """The next fetch is in flight (or done) while the caller is still on the current
    records, so a slow caller does not add a round trip per fetch."""
    await create_topic(broker.bootstrap, "pre", 1)
    for n in range(3):
        await _produce_one_batch(broker.bootstrap, "pre", [b"%d-%d" % (n, i) * 50
                                                          for i in range(20)])
    fetch_times: list[float] = []
    async with trilog.open_simple_consumer(bootstrap_servers=broker.bootstrap) as consumer:
        real_fetch = consumer.fetch

        async def counting_fetch(*args, **kw):
            fetch_times.append(trio.current_time())
            return await real_fetch(*args, **kw)

        consumer.fetch = counting_fetch
        seen = []
        with trio.fail_after(10):
            # max_bytes below one batch: each fetch returns exactly one (whole) batch.
            async with aclosing(consumer.iterate("pre", 0, 0, max_bytes=100)) as records:
                async for record in records:
                    seen.append(record.offset)
                    if record.offset == 0:
                        first_seen = trio.current_time()
                        await trio.sleep(0.5)  # the caller is busy with the first record
                        during = [t for t in fetch_times if t > first_seen]
                        assert len(during) >= 1, "no fetch was made while the caller worked"
                    if len(seen) == 60:
                        break
    assert seen == list(range(60))
