"""Helpers for the client's end-to-end tests: topics, reading a partition back, the task tree,
and blocking kafka-python helpers (on the shared ``kafka_helpers``; call them through
``trio.to_thread.run_sync``)."""

from __future__ import annotations

import gc
import warnings

import trio
from kafka_helpers import consume_partitions, kafka_consumer, kafka_producer

import trilog
from trilog.client import SimpleConsumer


async def create_topic(bootstrap: str, name: str, partitions: int = 1,
                       timeout: float = 15.0):
    """Create ``name`` through the broker and wait until every partition has a leader."""
    async with trilog.open_admin(bootstrap) as admin:
        await admin.create_topic(name, partitions)
        with trio.fail_after(timeout):
            while True:
                (info,) = await admin.describe_topics([name])
                if (info.error is None and len(info.partitions) == partitions
                        and all(p.leader >= 0 for p in info.partitions)):
                    return info
                await trio.sleep(0.05)


async def read_partition(consumer: SimpleConsumer, topic: str, partition: int,
                         start: int = 0) -> list[trilog.ConsumerRecord]:
    """Every record of ``topic-partition`` from ``start`` to the log end offset."""
    (end,) = await consumer.offsets_before(topic, partition, trilog.LATEST)
    out: list[trilog.ConsumerRecord] = []
    offset = start
    for _ in range(100_000):
        if offset >= end:
            return out
        fetched = await consumer.fetch(topic, partition, offset)
        out.extend(fetched)
        assert fetched.next_offset > offset, f"no progress at {topic}-{partition}@{offset}"
        offset = fetched.next_offset
    raise AssertionError("read_partition did not reach the end")


async def read_topic(bootstrap: str, topic: str, partitions) -> dict[int, list]:
    async with trilog.open_simple_consumer(bootstrap_servers=bootstrap) as consumer:
        return {p: await read_partition(consumer, topic, p) for p in partitions}


def all_tasks() -> set:
    """Every task of the current trio run (the tree under the root task)."""
    out = set()
    stack = [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        out.add(task)
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return out


async def assert_no_new_tasks(before: set, timeout: float = 1.0) -> None:
    """No task started since ``before`` is still alive (giving finalizers ``timeout``)."""
    with trio.move_on_after(timeout):
        while all_tasks() - before:
            await trio.sleep(0.01)
    left = all_tasks() - before
    assert not left, f"tasks outlived their nursery: {sorted(t.name for t in left)}"


def drain_earlier_garbage() -> None:
    """Collect what earlier tests in this process left behind (a kafka-python client's
    sockets in a reference cycle, say), so that ``collect_resource_warnings`` at this
    test's end reports this test's leaks only."""
    collect_resource_warnings()


def collect_resource_warnings() -> list:
    """Run the garbage collector and return the ResourceWarnings (and unraisable errors)
    it produced: unclosed sockets, never-awaited coroutines."""
    import sys

    unraisable = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                gc.collect()
    finally:
        sys.unraisablehook = old_hook
    bad = [w for w in caught if issubclass(w.category, (ResourceWarning, RuntimeWarning))]
    return bad + unraisable


# -- kafka-python (blocking) ----------------------------------------------------------------


def kafka_produce(bootstrap: str, topic: str, records, **kw) -> list:
    """Send ``records`` (dicts of KafkaProducer.send keyword arguments) and return their
    RecordMetadata, in order."""
    producer = kafka_producer(bootstrap, **kw)
    try:
        futures = [producer.send(topic, **r) for r in records]
        producer.flush(30)
        return [f.get(30) for f in futures]
    finally:
        producer.close(10)


def kafka_consume(bootstrap: str, topic: str, partitions, expected: int,
                  timeout: float = 30.0) -> dict[int, list]:
    """Read ``partitions`` from the beginning with kafka-python until ``expected`` records
    came, then poll once more to see that nothing else is there."""
    consumer = kafka_consumer(bootstrap)
    try:
        return consume_partitions(consumer, topic, partitions, expected, timeout)
    finally:
        consumer.close()
