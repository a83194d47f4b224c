"""Following a topic that does not exist yet, as a Kafka consumer does with an assigned
partition: ``SimpleConsumer.iterate`` (and the blocking facade's) asks Metadata, which
creates the topic when the broker auto-creates topics, and otherwise waits until someone
creates it.  A one-shot ``fetch`` still raises, and creates nothing."""

from __future__ import annotations

import threading

import pytest
import trio
from client_helpers import (
    all_tasks,
    assert_no_new_tasks,
    collect_resource_warnings,
    create_topic,
    drain_earlier_garbage,
)

import trilog
import trilog.sync
from trilog.errors import InvalidTopicError, UnknownTopicOrPartitionError

_NO_AUTO_CREATE = {"auto.create.topics.enable": "false", "num.partitions": 1}


async def _topics(bootstrap: str) -> list[str]:
    async with trilog.open_admin(bootstrap) as admin:
        return await admin.list_topics()


async def _produce(bootstrap: str, topic: str, values) -> None:
    async with trilog.open_producer(bootstrap_servers=bootstrap, linger_ms=0) as producer:
        for value in values:
            await producer.send_and_wait(topic, value, partition=0)


async def _collect(consumer, topic: str, count: int, into: list) -> None:
    async with consumer.iterate(topic, 0, 0) as records:
        async for record in records:
            into.append(record.value)
            if len(into) == count:
                return


async def test_iterate_creates_a_missing_topic_when_the_broker_auto_creates(broker):
    got: list[bytes] = []
    async with trilog.open_simple_consumer(bootstrap_servers=broker.bootstrap) as consumer:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_collect, consumer, "later", 3, got)
            # The consumer's own Metadata request created the topic ...
            with trio.fail_after(15):
                while "later" not in await _topics(broker.bootstrap):
                    await trio.sleep(0.05)
            # ... and it follows it from offset 0: records produced afterwards arrive.
            await _produce(broker.bootstrap, "later", [b"a", b"b", b"c"])
            with trio.fail_after(15):
                while len(got) < 3:
                    await trio.sleep(0.05)
    assert got == [b"a", b"b", b"c"]


async def test_iterate_waits_for_a_topic_someone_else_creates(broker_process):
    broker = broker_process(overrides=_NO_AUTO_CREATE)
    got: list[bytes] = []
    async with trilog.open_simple_consumer(bootstrap_servers=broker.bootstrap) as consumer:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_collect, consumer, "made-later", 2, got)
            await trio.sleep(1.5)  # several Metadata rounds: the consumer is still waiting
            assert got == []
            assert "made-later" not in await _topics(broker.bootstrap)
            await create_topic(broker.bootstrap, "made-later", 1)
            await _produce(broker.bootstrap, "made-later", [b"x", b"y"])
            with trio.fail_after(15):
                while len(got) < 2:
                    await trio.sleep(0.05)
    assert got == [b"x", b"y"]


async def test_a_cancelled_wait_leaves_nothing_behind(broker_process):
    broker = broker_process(overrides=_NO_AUTO_CREATE)
    drain_earlier_garbage()
    before = all_tasks()
    async with trilog.open_simple_consumer(bootstrap_servers=broker.bootstrap) as consumer:
        with trio.move_on_after(1) as waited:
            async for _record in consumer.iterate("never", 0, 0):
                raise AssertionError("no topic, no record")
        assert waited.cancelled_caught
        # The consumer is still usable after the cancelled wait.
        await create_topic(broker.bootstrap, "there", 1)
        assert list(await consumer.fetch("there", 0, 0)) == []
    await assert_no_new_tasks(before)
    assert collect_resource_warnings() == []
    assert "never" not in await _topics(broker.bootstrap)


async def test_an_illegal_topic_name_raises_at_once(broker):
    async with trilog.open_simple_consumer(bootstrap_servers=broker.bootstrap) as consumer:
        with trio.fail_after(5), pytest.raises(InvalidTopicError):
            async for _record in consumer.iterate("no spaces allowed", 0, 0):
                pass


async def test_a_one_shot_fetch_still_raises_and_creates_nothing(broker):
    """Kafka's low-level fetch answers UNKNOWN_TOPIC_OR_PARTITION; only a consumer that
    follows a partition waits for it."""
    async with trilog.open_simple_consumer(bootstrap_servers=broker.bootstrap) as consumer:
        with trio.fail_after(10), pytest.raises(UnknownTopicOrPartitionError):
            await consumer.fetch("not-here", 0, 0)
    assert "not-here" not in await _topics(broker.bootstrap)


async def test_the_blocking_iterate_waits_for_the_topic_too(broker_process):
    broker = broker_process(overrides=_NO_AUTO_CREATE)
    got: list[bytes] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:
            with trilog.sync.SimpleConsumer(broker.bootstrap) as consumer:
                got.extend(r.value for r in consumer.iterate("sync-later", 0, 0, end_offset=2))
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        await trio.sleep(1.5)
        assert reader.is_alive() and not errors, errors
        await create_topic(broker.bootstrap, "sync-later", 1)
        await _produce(broker.bootstrap, "sync-later", [b"p", b"q"])
    finally:
        await trio.to_thread.run_sync(reader.join, 30)
    assert not reader.is_alive()
    assert errors == [] and got == [b"p", b"q"]

    def read_a_bad_name() -> None:
        with trilog.sync.SimpleConsumer(broker.bootstrap) as consumer, \
                pytest.raises(InvalidTopicError):
            next(iter(consumer.iterate("bad/name", 0, 0)))

    with trio.fail_after(10):  # at once, not after a wait
        await trio.to_thread.run_sync(read_a_bad_name)


async def test_allow_auto_create_topics_false_waits_without_creating(broker):
    async with trilog.open_simple_consumer(bootstrap_servers=broker.bootstrap,
                                           allow_auto_create_topics=False) as consumer:
        with trio.move_on_after(1) as waited:
            async for _record in consumer.iterate("not-made", 0, 0):
                raise AssertionError("no topic, no record")
        assert waited.cancelled_caught
    assert "not-made" not in await _topics(broker.bootstrap)
