"""Cancellation is prompt and leaves nothing behind: no task outlives its nursery, every
Delivery ends (ProducerClosedError, never silence), no unclosed socket or coroutine is left
for the garbage collector to warn about."""

from __future__ import annotations

import warnings
from contextlib import aclosing

import pytest
import trio
import trio.lowlevel
from client_helpers import (
    all_tasks,
    assert_no_new_tasks,
    collect_resource_warnings,
    create_topic,
    drain_earlier_garbage,
)

import trilog


def _prefetch_tasks(consumer) -> list:
    return [t for t in consumer._nursery.child_tasks if "prefetch" in t.name]


@pytest.mark.parametrize("broker_up", [True, False], ids=["broker-up", "broker-down"])
async def test_cancelling_a_producer_with_pending_sends(broker, broker_up):
    await create_topic(broker.bootstrap, "pending", 2)
    drain_earlier_garbage()
    before = all_tasks()
    deliveries: list[trilog.Delivery] = []
    waited: dict = {}

    async def wait_outside(name, delivery):
        try:
            waited[name] = await delivery.wait()
        except trilog.TrilogError as exc:
            waited[name] = exc

    async with trio.open_nursery() as outside:
        with trio.CancelScope() as scope:
            async with trilog.open_producer(
                    bootstrap_servers=broker.bootstrap, linger_ms=60_000, batch_size=4096,
                    retries=1_000_000, delivery_timeout_ms=60_000) as producer:
                await producer.partitions_for("pending")
                if not broker_up:
                    await trio.to_thread.run_sync(broker.stop)
                # Full batches on partition 0 go out (or into retries); partition 1 lingers.
                for i in range(40):
                    deliveries.append(await producer.send("pending", value=bytes(1000),
                                                          partition=i % 2 * (i > 20)))
                outside.start_soon(wait_outside, "lingering", deliveries[-1])
                outside.start_soon(wait_outside, "first", deliveries[0])
                await trio.sleep(0.2)
                start = trio.current_time()
                scope.cancel()
                await trio.sleep_forever()  # pragma: no cover
        assert scope.cancelled_caught
        assert trio.current_time() - start < 2.0
    # Every delivery has an outcome; the unacknowledged ones say why.
    assert all(d.done() for d in deliveries)
    failed = 0
    for d in deliveries:
        try:
            d.result()
        except trilog.ProducerClosedError:
            failed += 1
    assert failed >= 1
    if not broker_up:
        assert failed == len(deliveries)
    assert set(waited) == {"lingering", "first"}
    assert isinstance(waited["lingering"], trilog.ProducerClosedError)
    if broker_up:
        assert waited["first"] == deliveries[0].result()
    with pytest.raises(trilog.ProducerClosedError):
        producer.send_nowait("pending", value=b"late", partition=0)
    await assert_no_new_tasks(before)
    assert collect_resource_warnings() == []


async def test_cancelling_a_producer_while_send_waits_for_room(broker):
    await create_topic(broker.bootstrap, "no-room", 1)
    drain_earlier_garbage()
    before = all_tasks()
    with trio.move_on_after(1.0) as scope:
        async with trilog.open_producer(bootstrap_servers=broker.bootstrap,
                                        buffer_memory=4096, linger_ms=60_000) as producer:
            await producer.partitions_for("no-room")
            await trio.to_thread.run_sync(broker.stop)
            first = await producer.send("no-room", value=bytes(4000), partition=0)
            await producer.send("no-room", value=bytes(1000), partition=0)  # waits
    assert scope.cancelled_caught
    with pytest.raises(trilog.ProducerClosedError):
        first.result()
    await assert_no_new_tasks(before)
    assert collect_resource_warnings() == []


async def test_cancelling_a_consumer_in_the_middle_of_iterate(broker):
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap) as producer:
        for i in range(5):
            await producer.send("follow", value=b"%d" % i, partition=0)
    drain_earlier_garbage()
    before = all_tasks()
    seen = []
    cancelled_at: list[float] = []
    async with trio.open_nursery() as outer:
        with trio.CancelScope() as scope:
            async with trilog.open_simple_consumer(bootstrap_servers=broker.bootstrap,
                                                   fetch_max_wait_ms=10_000) as consumer:
                async for record in consumer.iterate("follow", 0, 0):
                    seen.append(record.offset)
                    if len(seen) == 5:
                        # The next fetch is a 10 s long poll: cancel while it waits.
                        outer.start_soon(_cancel_later, scope, 0.3, cancelled_at)
        assert scope.cancelled_caught
        assert trio.current_time() - cancelled_at[0] < 2.0
    assert seen == [0, 1, 2, 3, 4]
    await assert_no_new_tasks(before)
    assert collect_resource_warnings() == []


async def _cancel_later(scope: trio.CancelScope, delay: float, at: list) -> None:
    await trio.sleep(delay)
    at.append(trio.current_time())
    scope.cancel()


async def test_cancelling_only_the_iteration_stops_its_prefetch(broker):
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap) as producer:
        await producer.send_and_wait("follow", value=b"x", partition=1)
    async with trilog.open_simple_consumer(bootstrap_servers=broker.bootstrap,
                                           fetch_max_wait_ms=500) as consumer:
        start = trio.current_time()
        with trio.move_on_after(0.5):
            async for _record in consumer.iterate("follow", 1, 0):
                pass
        assert trio.current_time() - start < 1.5
        with trio.fail_after(1):
            while _prefetch_tasks(consumer):
                await trio.sleep(0.01)
        # The consumer is still fine: the cancelled long poll did not break its connection.
        assert [r.value for r in await consumer.fetch("follow", 1, 0)] == [b"x"]
        # aclosing() is the clean way to stop early.
        async with aclosing(consumer.iterate("follow", 1, 0)) as records:
            async for _record in records:
                break
        with trio.fail_after(1):
            while _prefetch_tasks(consumer):
                await trio.sleep(0.01)


async def test_breaking_out_of_iterate_leaves_no_warning_and_no_task(broker):
    """Regression: iterate was an async generator; breaking out of a plain ``async for``
    left its cleanup to trio's asyncgen finalizer (ResourceWarning, an error here)."""
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap) as producer:
        for i in range(3):
            await producer.send("follow", value=b"%d" % i, partition=2)
    async with trilog.open_simple_consumer(bootstrap_servers=broker.bootstrap,
                                           fetch_max_wait_ms=10_000) as consumer:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            async for record in consumer.iterate("follow", 2, 0):
                if record.offset == 1:
                    break
            for _ in range(5):
                await trio.lowlevel.checkpoint()
        assert [str(w.message) for w in caught] == []
        with trio.fail_after(1):
            while _prefetch_tasks(consumer):
                await trio.sleep(0.01)
