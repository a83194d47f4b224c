"""Kafka 3's producer defaults: ``acks="all"`` with idempotence, retries bounded by the
delivery timeout, idempotence dropped (with a warning) only against a broker that cannot
give producer ids, and kafka-python's three-argument partitioners."""

from __future__ import annotations

import logging

import pytest
from client_helpers import create_topic, read_topic

import trilog
from trilog.client.producer import MAX_RETRIES, producer_guarantees
from trilog.client.producer._idempotence import Idempotence
from trilog.errors import UnsupportedVersionError


def test_the_guarantees_settle_as_kafka_3s():
    assert producer_guarantees(None, None) == ("all", True, False)
    assert producer_guarantees(None, True) == ("all", True, True)  # idempotence alone: acks=all
    assert producer_guarantees(-1, None) == (-1, True, False)
    assert producer_guarantees(1, None) == (1, False, False)  # explicit acks=1: no idempotence
    assert producer_guarantees(0, False) == (0, False, True)
    assert producer_guarantees(None, False) == ("all", False, True)
    assert producer_guarantees(None, None, retries=0) == ("all", False, False)
    with pytest.raises(ValueError, match="enable_idempotence=True needs acks='all'"):
        producer_guarantees(1, True)


async def test_a_default_producer_is_idempotent_with_acks_all(broker):
    async with trilog.open_producer(broker.bootstrap) as producer:
        assert producer.idempotent and producer.config.guarantees.acks == -1
        assert producer.config.retries == MAX_RETRIES
        await producer.send_and_wait("defaults", b"v")
    async with trilog.open_producer(broker.bootstrap, acks=1) as producer:
        assert not producer.idempotent and producer.config.guarantees.acks == 1


async def test_idempotence_falls_back_with_a_warning_only_when_not_asked_for(
        broker, monkeypatch, caplog):
    async def no_producer_ids(self):
        raise UnsupportedVersionError("the broker has no InitProducerId")

    monkeypatch.setattr(Idempotence, "init_producer_id", no_producer_ids)
    with caplog.at_level(logging.WARNING, logger="trilog.producer"):
        async with trilog.open_producer(broker.bootstrap) as producer:
            assert not producer.idempotent
            await producer.send_and_wait("fallback", b"still written")
    assert "producing without idempotence" in caplog.text
    with pytest.raises(UnsupportedVersionError):
        async with trilog.open_producer(broker.bootstrap, enable_idempotence=True):
            pass


async def test_a_kafka_python_partitioner_gets_all_and_available_partitions(broker):
    await create_topic(broker.bootstrap, "three-args", 5)
    seen = []

    def last_available(key, all_partitions, available):
        seen.append((tuple(all_partitions), tuple(available)))
        return available[-1]

    async with trilog.open_producer(broker.bootstrap, partitioner=last_available) as producer:
        metadata = await producer.send_and_wait("three-args", b"v", key=b"k")
    assert metadata.partition == 4 and seen == [((0, 1, 2, 3, 4), (0, 1, 2, 3, 4))]

    class ByLength:  # kafka-python 2's partitioner classes: __call__(key, all, available)
        def __call__(self, key, all_partitions, available_partitions):
            return all_partitions[len(key) % len(all_partitions)]

    async with trilog.open_producer(broker.bootstrap, partitioner=ByLength()) as producer:
        placed = [(await producer.send_and_wait("three-args", b"v", key=k)).partition
                  for k in (b"a", b"bb", b"user-7")]
    assert placed == [1, 2, 1]
    # and trilog's own two-argument form still works
    async with trilog.open_producer(broker.bootstrap,
                                    partitioner=lambda key, partitions: 3) as producer:
        assert (await producer.send_and_wait("three-args", b"v", key=b"x")).partition == 3
    stored = await read_topic(broker.bootstrap, "three-args", range(5))
    assert sum(len(records) for records in stored.values()) == 5
