"""trilog's producer against a real broker process: order, codecs, and the knobs of the API."""

from __future__ import annotations

import json
import time

import pytest
import trio
from client_helpers import create_topic, kafka_consume, read_partition, read_topic
from kafka_helpers import lend_snappy

import trilog
from trilog.errors import MessageTooLargeError
from trilog.records import MemoryRecords, codec_for_name, is_available

# -- order ------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_in_flight", [1, 5])
async def test_offsets_per_partition_are_contiguous_and_in_send_order(broker, max_in_flight):
    partitions, per_partition = 4, 1500
    await create_topic(broker.bootstrap, "ordered", partitions)
    sent: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    deliveries = []
    # Small batches: many requests, several in flight per connection at once.  Records go in
    # bursts (send_nowait, no checkpoint) so that many batches are ready at the same time.
    async with trilog.open_producer(
            bootstrap_servers=broker.bootstrap, batch_size=2048, linger_ms=1,
            max_in_flight_requests_per_connection=max_in_flight) as producer:
        await producer.partitions_for("ordered")
        for i in range(per_partition * partitions):
            p = (i * 7) % partitions  # interleave the partitions
            value = f"{p}:{len(sent[p]):06d}:".encode() + b"x" * (i % 50)
            sent[p].append(value)
            delivery = producer.send_nowait("ordered", value=value, partition=p)
            deliveries.append((p, value, delivery))
            if i % 400 == 399:
                await trio.sleep(0.005)  # let the sender drain the burst
    for p, _value, d in deliveries:
        assert d.result().partition == p
    stored = await read_topic(broker.bootstrap, "ordered", range(partitions))
    for p in range(partitions):
        assert [r.offset for r in stored[p]] == list(range(per_partition))
        assert [r.value for r in stored[p]] == sent[p]
        acked = [d.result().offset for q, _v, d in deliveries if q == p]
        assert acked == list(range(per_partition))


# -- compression ---------------------------------------------------------------------------------

CODECS = [
    pytest.param(name, marks=pytest.mark.skipif(
        not is_available(codec_for_name(name)), reason=f"no {name} library installed"))
    for name in ("gzip", "lz4", "snappy", "zstd")
]


def _kafka_python_has(name: str) -> bool:
    from kafka import codec

    return {"gzip": codec.has_gzip, "lz4": codec.has_lz4, "snappy": codec.has_snappy,
            "zstd": codec.has_zstd}[name]()


@pytest.mark.parametrize("codec", CODECS)
async def test_compressed_batches_read_back_by_trilog_and_kafka_python(broker, codec,
                                                                      monkeypatch):
    lend_snappy(monkeypatch)
    n = 600
    await create_topic(broker.bootstrap, "zipped", 2)
    records = [(f"key-{i}".encode(), (f"value {i} " * 20).encode(),
                [("seq", str(i).encode())]) for i in range(n)]
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap,
                                    compression_type=codec, batch_size=16384) as producer:
        for i, (key, value, headers) in enumerate(records):
            await producer.send("zipped", value=value, key=key, partition=i % 2,
                                headers=headers)

    async with trilog.open_simple_consumer(bootstrap_servers=broker.bootstrap) as consumer:
        got = {p: await read_partition(consumer, "zipped", p) for p in (0, 1)}
        raw = await consumer.fetch("zipped", 0, 0)
    for p in (0, 1):
        assert [(r.key, r.value, list(r.headers)) for r in got[p]] == \
            [(k, v, h) for k, v, h in records[p::2]]
    # The stored batches really carry the codec, and it shrank the (repetitive) values.
    codecs = {b.compression_type for b in MemoryRecords(bytes(raw._data)).batches()}
    assert codecs == {codec_for_name(codec)}
    assert raw.size_in_bytes < sum(len(v) for _k, v, _h in records[0::2]) / 3

    if not _kafka_python_has(codec):
        pytest.skip(f"kafka-python cannot decode {codec} here (trilog's part passed)")
    by_kafka = await trio.to_thread.run_sync(kafka_consume, broker.bootstrap, "zipped",
                                             [0, 1], n)
    for p in (0, 1):
        assert [(r.offset, r.key, r.value, r.headers) for r in by_kafka[p]] == \
            [(i, k, v, h) for i, (k, v, h) in enumerate(records[p::2])]


# -- producer details ------------------------------------------------------------------------


async def test_on_delivery_is_called_once_per_record_with_metadata(broker):
    outcomes = []
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap,
                                    on_delivery=outcomes.append, batch_size=1024) as producer:
        deliveries = [await producer.send("calls", value=b"%d" % i, partition=i % 3)
                      for i in range(90)]
    assert len(outcomes) == 90
    assert all(isinstance(o, trilog.RecordMetadata) for o in outcomes)
    assert sorted(outcomes) == sorted(d.result() for d in deliveries)
    assert len({(o.partition, o.offset) for o in outcomes}) == 90


async def test_on_delivery_gets_the_error_of_a_failed_record(broker_process):
    broker = broker_process(overrides={"message.max.bytes": 2000})
    outcomes = []
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap,
                                    on_delivery=outcomes.append) as producer:
        ok = await producer.send("limits", value=b"small", partition=0)
        await producer.flush()
        big = [await producer.send("limits", value=bytes(5000), partition=0) for _ in range(2)]
        await producer.flush()
    assert ok.result().offset == 0
    for d in big:
        with pytest.raises(MessageTooLargeError):
            d.result()
    assert outcomes[0] == ok.result()
    assert len(outcomes) == 3 and all(isinstance(o, MessageTooLargeError) for o in outcomes[1:])


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
async def test_a_batch_too_large_for_the_broker_is_split_and_sent_again(broker_process,
                                                                        idempotent):
    # The broker takes batches of 4000 bytes at most; the producer builds them up to 64 KiB.
    broker = broker_process(overrides={"message.max.bytes": 4000})
    values = [b"%04d:" % i + b"v" * 95 for i in range(300)]
    values.insert(150, b"too large on its own" + bytes(5000))
    outcomes = []
    known = [b"known"] if idempotent else []  # the producer's id is known before the split
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap, linger_ms=50,
                                    on_delivery=outcomes.append,
                                    acks="all" if idempotent else 1,
                                    enable_idempotence=idempotent,
                                    max_in_flight_requests_per_connection=1) as producer:
        for value in known:
            await producer.send_and_wait("split", value, partition=0)
        await producer.partitions_for("split")
        deliveries = [producer.send_nowait("split", value=v, partition=0) for v in values]
    big = deliveries.pop(150)
    with pytest.raises(MessageTooLargeError):
        big.result()
    first = len(known)
    assert [d.result().offset for d in deliveries] == list(range(first, first + 300))  # order
    stored = await read_topic(broker.bootstrap, "split", [0])
    assert [r.value for r in stored[0]] == known + values[:150] + values[151:]
    assert len(outcomes) == first + 301
    assert sorted(o.offset for o in outcomes if isinstance(o, trilog.RecordMetadata)) == \
        list(range(first + 300))
    assert sum(isinstance(o, MessageTooLargeError) for o in outcomes) == 1


async def test_send_and_wait_does_not_wait_for_linger(broker):
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap,
                                    linger_ms=30_000) as producer:
        await producer.partitions_for("prompt")
        start = trio.current_time()
        meta = await producer.send_and_wait("prompt", value=b"now", partition=1)
        assert trio.current_time() - start < 1.0
        # A second record in the same partition is not held back by the first batch.
        start = trio.current_time()
        meta2 = await producer.send_and_wait("prompt", value=b"again", partition=1)
        assert trio.current_time() - start < 1.0
    assert (meta.topic, meta.partition, meta.offset) == ("prompt", 1, 0)
    assert meta2.offset == 1


async def test_leaving_the_block_flushes_lingering_records(broker):
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap,
                                    linger_ms=60_000) as producer:
        deliveries = [await producer.send("lingering", value=b"%d" % i, partition=0)
                      for i in range(10)]
        assert not any(d.done() for d in deliveries)
    assert [d.result().offset for d in deliveries] == list(range(10))


async def test_key_and_value_serializers(broker):
    values = [{"n": i, "tags": ["a", "b"]} for i in range(20)]
    async with trilog.open_producer(
            bootstrap_servers=broker.bootstrap, key_serializer=str.encode,
            value_serializer=lambda v: json.dumps(v).encode()) as producer:
        for v in values:
            await producer.send("json", value=v, key=f"k{v['n']}", partition=0)
        await producer.send("json", value=None, key="tombstone", partition=0)
    async with trilog.open_simple_consumer(
            bootstrap_servers=broker.bootstrap, key_deserializer=bytes.decode,
            value_deserializer=json.loads) as consumer:
        got = await read_partition(consumer, "json", 0)
    assert [(r.key, r.value) for r in got] == \
        [(f"k{v['n']}", v) for v in values] + [("tombstone", None)]


async def test_custom_partitioner(broker):
    seen = []

    def last_partition(key, partitions):
        seen.append((key, tuple(partitions)))
        return partitions[-1]

    async with trilog.open_producer(bootstrap_servers=broker.bootstrap,
                                    partitioner=last_partition) as producer:
        metas = [await producer.send_and_wait("custom", value=b"v", key=k)
                 for k in (b"a", None, b"c")]
        assert {m.partition for m in metas} == {2}
        assert seen == [(b"a", (0, 1, 2)), (None, (0, 1, 2)), (b"c", (0, 1, 2))]
        # An explicit partition wins over the partitioner.
        assert (await producer.send_and_wait("custom", value=b"v", partition=0)).partition == 0
        assert len(seen) == 3

    async with trilog.open_producer(bootstrap_servers=broker.bootstrap,
                                    partitioner=lambda key, parts: 99) as producer:
        with pytest.raises(ValueError, match="99"):
            await producer.send("custom", value=b"v")


async def test_values_that_are_not_bytes_are_a_clear_type_error(broker):
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap) as producer:
        with pytest.raises(TypeError, match="value must be bytes.*value_serializer.*str"):
            await producer.send("typed", value="text")
        with pytest.raises(TypeError, match="key must be bytes.*key_serializer.*int"):
            await producer.send("typed", value=b"ok", key=42)
        with pytest.raises(TypeError, match="value must be bytes"):
            producer.send_nowait("typed", value={"a": 1})
        # bytearray and memoryview are bytes enough.
        m1 = await producer.send_and_wait("typed", value=bytearray(b"ba"), partition=0)
        m2 = await producer.send_and_wait("typed", value=memoryview(b"mv"), partition=0)
    assert (m1.offset, m2.offset) == (0, 1)
    got = await read_topic(broker.bootstrap, "typed", [0])
    assert [r.value for r in got[0]] == [b"ba", b"mv"]  # nothing from the failed sends


async def test_acks_zero(broker):
    n = 300
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap, acks=0) as producer:
        deliveries = [await producer.send("fire-and-forget", value=b"%d" % i, partition=i % 3)
                      for i in range(n)]
        await producer.flush()
        assert all(d.done() for d in deliveries)
        meta = deliveries[0].result()  # no error; the offset is unknown without an answer
        assert (meta.topic, meta.partition, meta.offset) == ("fire-and-forget", 0, -1)
    async with trilog.open_simple_consumer(bootstrap_servers=broker.bootstrap) as consumer:
        with trio.fail_after(10):
            while True:
                ends = [(await consumer.offsets_before("fire-and-forget", p))[0]
                        for p in range(3)]
                if sum(ends) == n:
                    break
                await trio.sleep(0.05)
        got = [await read_partition(consumer, "fire-and-forget", p) for p in range(3)]
    assert sorted(int(r.value) for rs in got for r in rs) == list(range(n))


async def test_unknown_topic_is_auto_created(broker):
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap) as producer:
        meta = await producer.send_and_wait("brand-new", value=b"first", key=b"k")
        assert await producer.partitions_for("brand-new") == (0, 1, 2)  # num.partitions=3
    assert meta.offset == 0
    async with trilog.open_admin(broker.bootstrap) as admin:
        assert "brand-new" in await admin.list_topics()
    got = await read_topic(broker.bootstrap, "brand-new", [meta.partition])
    assert [(r.key, r.value) for r in got[meta.partition]] == [(b"k", b"first")]


async def test_record_timestamps_and_headers_round_trip(broker):
    now = int(time.time() * 1000)
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap) as producer:
        m1 = await producer.send_and_wait("stamped", value=b"a", partition=0,
                                          timestamp_ms=1_000_000, headers=[("h", b"1")])
        m2 = await producer.send_and_wait("stamped", value=b"b", partition=0,
                                          headers=[("h", None), ("h", b"")])
    assert m1.timestamp == 1_000_000
    assert now - 1000 <= m2.timestamp <= now + 60_000
    got = (await read_topic(broker.bootstrap, "stamped", [0]))[0]
    assert [(r.timestamp, list(r.headers)) for r in got] == \
        [(1_000_000, [("h", b"1")]), (m2.timestamp, [("h", None), ("h", b"")])]


async def test_a_record_larger_than_batch_size_gets_a_batch_of_its_own(broker):
    big = bytes(range(256)) * 400  # 100 kB, batch_size 16 kB
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap,
                                    batch_size=16384) as producer:
        small = await producer.send("sizes", value=b"before", partition=0)
        large = await producer.send("sizes", value=big, partition=0)
        after = await producer.send("sizes", value=b"after", partition=0)
        with pytest.raises(MessageTooLargeError):  # over max_request_size (1 MiB)
            await producer.send("sizes", value=bytes(2 << 20), partition=0)
    assert [d.result().offset for d in (small, large, after)] == [0, 1, 2]
    got = (await read_topic(broker.bootstrap, "sizes", [0]))[0]
    assert [r.value for r in got] == [b"before", big, b"after"]


async def test_acks_all(broker):
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap, acks="all") as producer:
        metas = [await producer.send_and_wait("all", value=b"%d" % i, partition=0)
                 for i in range(3)]
    assert [m.offset for m in metas] == [0, 1, 2]


async def test_cancelling_send_and_wait_does_not_cancel_the_record(broker, broker_process):
    """Cancellation is not failure: the caller stops waiting, the record is still sent
    (here: once the stopped broker is back), and the producer carries on."""
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap, retries=1_000_000,
                                    retry_backoff_ms=50,
                                    max_in_flight_requests_per_connection=1) as producer:
        await producer.partitions_for("patient")
        await trio.to_thread.run_sync(broker.stop)
        with trio.move_on_after(0.3) as scope:
            await producer.send_and_wait("patient", value=b"gave up waiting", partition=0)
        assert scope.cancelled_caught
        await trio.to_thread.run_sync(
            lambda: broker_process(broker.log_dir, port=broker.port))
        with trio.fail_after(10):
            meta = await producer.send_and_wait("patient", value=b"next", partition=0)
    assert meta.offset == 1
    got = (await read_topic(broker.bootstrap, "patient", [0]))[0]
    assert [r.value for r in got] == [b"gave up waiting", b"next"]


async def test_an_exception_in_the_body_propagates_and_fails_pending_records(broker):
    with pytest.raises(KeyError, match="boom"):  # itself, not wrapped in an ExceptionGroup
        async with trilog.open_producer(bootstrap_servers=broker.bootstrap,
                                        linger_ms=60_000) as producer:
            delivery = await producer.send("raised", value=b"never flushed", partition=0)
            raise KeyError("boom")
    with pytest.raises(trilog.ProducerClosedError):
        delivery.result()


async def test_a_partition_the_topic_does_not_have_fails_instead_of_hanging(broker):
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap,
                                    delivery_timeout_ms=1000) as producer:
        await producer.send_and_wait("three", value=b"ok", partition=2)
        with trio.fail_after(5):
            try:
                delivery = await producer.send("three", value=b"nowhere", partition=7)
                await delivery.wait()
            except trilog.TrilogError as exc:
                assert "7" in str(exc)
            else:
                raise AssertionError("a record for partition 7 of 3 was acknowledged")


# -- idempotence ---------------------------------------------------------------------------------


async def _stored_batches(bootstrap: str, topic: str, partition: int):
    async with trilog.open_simple_consumer(bootstrap_servers=bootstrap) as consumer:
        fetched = await consumer.fetch(topic, partition, 0)
    return list(MemoryRecords(bytes(fetched._data)).batches())


async def test_idempotent_batches_carry_a_producer_id_and_contiguous_sequences(broker):
    await create_topic(broker.bootstrap, "idem", 2)
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap, acks="all",
                                    enable_idempotence=True, batch_size=1024,
                                    linger_ms=1) as producer:
        await producer.partitions_for("idem")
        deliveries = [producer.send_nowait("idem", b"%05d" % i + b"x" * 50, partition=i % 2)
                      for i in range(400)]
    assert [d.result().offset for d in deliveries] == [i // 2 for i in range(400)]
    for p in (0, 1):
        batches = await _stored_batches(broker.bootstrap, "idem", p)
        assert len(batches) > 5
        assert {b.producer_id for b in batches} == {batches[0].producer_id} and \
            batches[0].producer_id >= 0 and {b.producer_epoch for b in batches} == {0}
        sequences = [b.base_sequence for b in batches]
        counts = [b.record_count for b in batches]
        assert sequences == [sum(counts[:i]) for i in range(len(batches))]  # no gap


async def test_idempotence_needs_acks_all(broker):
    with pytest.raises(ValueError, match="acks='all'"):
        async with trilog.open_producer(bootstrap_servers=broker.bootstrap, acks=1,
                                        enable_idempotence=True):
            pass
    # Alone, enable_idempotence=True sets acks="all" (Kafka 3).
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap,
                                    enable_idempotence=True) as producer:
        assert producer.idempotent and producer.config.guarantees.acks == -1


async def test_a_failed_idempotent_batch_does_not_block_its_partition(broker_process):
    """The failed batch's sequence numbers were never written: the producer starts afresh
    under a new producer id instead of being refused (OUT_OF_ORDER) from then on."""
    broker = broker_process(overrides={"message.max.bytes": 2000})
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap, acks="all",
                                    enable_idempotence=True) as producer:
        first = await producer.send_and_wait("gap", b"first", partition=0)
        with pytest.raises(MessageTooLargeError):
            await producer.send_and_wait("gap", bytes(5000), partition=0)
        after = await producer.send_and_wait("gap", b"after", partition=0)
    assert (first.offset, after.offset) == (0, 1)
    batches = await _stored_batches(broker.bootstrap, "gap", 0)
    assert [r.value for b in batches for r in b] == [b"first", b"after"]
    assert batches[0].producer_id != batches[1].producer_id  # renewed
    assert batches[1].base_sequence == 0
