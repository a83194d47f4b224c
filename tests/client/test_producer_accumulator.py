"""The producer's accumulator without a broker: every record lands in exactly one batch."""

from __future__ import annotations

import random

import trio

from trilog.client.producer import Producer, ProducerConfig
from trilog.records import RecordBatch


class _Metadata:
    def partitions_for(self, topic):
        return (0, 1, 2)

    def available_partitions(self, topic):
        return (0, 1, 2)


class _Client:
    class metadata:  # noqa: N801 - stands in for an AsyncValue
        value = _Metadata()


def _producer(batch_size: int) -> Producer:
    return Producer(_Client(), ProducerConfig(
        acks=1, linger_ms=5, batch_size=batch_size, buffer_memory=1 << 30,
        compression_type=None, key_serializer=None, value_serializer=None, partitioner=None,
        retries=0, retry_backoff_ms=100, delivery_timeout_ms=60_000, request_timeout_ms=1000,
        max_in_flight_requests_per_connection=1, max_request_size=1 << 20, on_delivery=None))


async def test_mixed_keyed_unkeyed_and_explicit_records_each_land_in_one_batch():
    rng = random.Random(7)
    producer = _producer(batch_size=600)
    sent = []
    for i in range(3000):
        value = b"%d:" % i + b"v" * rng.choice([0, 10, 100, 700])  # some fill a batch alone
        kind = rng.choice(["unkeyed", "keyed", "explicit"])
        key = b"k%d" % rng.randrange(20) if kind == "keyed" else None
        partition = rng.randrange(3) if kind == "explicit" else None
        delivery = producer.send_nowait("t", value, key, partition=partition)
        assert isinstance(delivery.index, int)
        sent.append((delivery, value))
    for delivery, value in sent:  # the delivery points at its own record
        batch = delivery.batch
        data = batch.data if batch.data is not None else batch.builder.build()
        assert RecordBatch(data).records()[delivery.index].value == value
    batches = {id(d.batch): d.batch for d, _v in sent}.values()
    assert sum(len(b.builder) for b in batches) == len(sent)
    for b in batches:
        assert len(b.builder) == 1 or b.builder.size_in_bytes <= 600
    await trio.lowlevel.checkpoint()


async def test_a_fatal_producer_id_renewal_fails_the_records_and_closes_the_producer():
    from trilog.client.producer import ProducerClosedError
    from trilog.errors import UnsupportedVersionError

    producer = Producer(_Client(), ProducerConfig(
        acks=-1, linger_ms=5, batch_size=600, buffer_memory=1 << 30, compression_type=None,
        key_serializer=None, value_serializer=None, partitioner=None, retries=5,
        retry_backoff_ms=1, delivery_timeout_ms=60_000, request_timeout_ms=1000,
        max_in_flight_requests_per_connection=5, max_request_size=1 << 20, on_delivery=None,
        enable_idempotence=True))
    deliveries = [producer.send_nowait("t", b"v" * 100, partition=i % 3) for i in range(30)]

    async def refused():
        raise UnsupportedVersionError("no InitProducerId here")

    producer.idempotence.init_producer_id = refused
    producer.idempotence.gap = True
    await producer.sender.renew_producer_id()
    assert all(isinstance(d.exception(), UnsupportedVersionError) for d in deliveries)
    try:
        producer.send_nowait("t", b"late", partition=0)
    except ProducerClosedError:
        pass
    else:
        raise AssertionError("the producer should be closed")


async def test_a_partition_busy_with_a_batch_in_flight_keeps_its_next_batch_open():
    """Kafka's accumulator: linger makes a batch ready, but while its partition has a batch
    in flight (acks=all waiting for the followers) it keeps taking records, instead of a
    row of one-record batches each waiting for its own round trip."""
    producer = _producer(batch_size=1 << 20)
    accumulator = producer.accumulator
    tp = ("t", 0)
    accumulator.mute(tp)
    first = producer.send_nowait("t", b"a", partition=0)
    later = trio.current_time() + 1.0  # well past linger_ms
    accumulator.seal_lingering(later)
    assert accumulator.open_batch(tp) is first.batch and not accumulator.queued(tp)
    second = producer.send_nowait("t", b"b", partition=0)
    assert second.batch is first.batch  # the same open batch grew
    accumulator.unmute(tp)  # the request in flight was answered
    accumulator.seal_lingering(later)
    assert accumulator.open_batch(tp) is None
    assert [len(b.builder) for b in accumulator.queued(tp)] == [2]
    await trio.lowlevel.checkpoint()
