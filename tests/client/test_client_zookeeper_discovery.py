"""Finding the cluster through ZooKeeper (seed 002, "Automatic producer load balancing"):
three broker processes, a producer and a simple consumer given only the ZooKeeper connect
string, then a fourth broker that the running producer starts using without a restart."""

from __future__ import annotations

import signal

import trio
from client_helpers import read_partition

import trilog


async def _wait_for_brokers(bootstrap: str, ids: set[int], timeout: float = 15) -> None:
    async with trilog.open_admin(bootstrap) as admin:
        with trio.fail_after(timeout):
            while {b.node_id for b in await admin.brokers()} != ids:
                await trio.sleep(0.05)


async def _create(bootstrap: str, topic: str, partitions: int):
    async with trilog.open_admin(bootstrap) as admin:
        await admin.create_topic(topic, partitions)
        with trio.fail_after(15):
            while True:
                (info,) = await admin.describe_topics([topic])
                if len(info.partitions) == partitions and \
                        all(p.leader >= 0 for p in info.partitions):
                    return {p.partition: p.leader for p in info.partitions}
                await trio.sleep(0.05)


async def test_discovery_through_zookeeper_and_a_broker_added_later(broker_process,
                                                                     zookeeper):
    brokers = [broker_process(broker_id=i, zookeeper=zookeeper) for i in (1, 2, 3)]
    for b in brokers:
        await _wait_for_brokers(b.bootstrap, {1, 2, 3})
    leaders = await _create(brokers[0].bootstrap, "before", 6)
    assert set(leaders.values()) == {1, 2, 3}

    async with trilog.open_producer(zookeeper=zookeeper) as producer, \
            trilog.open_simple_consumer(zookeeper=zookeeper) as consumer:
        metas = [await producer.send_and_wait("before", value=b"before-%d" % p, partition=p)
                 for p in range(6)]
        assert [(m.partition, m.offset) for m in metas] == [(p, 0) for p in range(6)]
        for p in range(6):
            assert [r.value for r in await read_partition(consumer, "before", p)] == \
                [b"before-%d" % p]
        assert set(producer.client.metadata.value.brokers) == {1, 2, 3}

        # A fourth broker joins.
        fourth = await trio.to_thread.run_sync(
            lambda: broker_process(broker_id=4, zookeeper=zookeeper))
        await _wait_for_brokers(fourth.bootstrap, {1, 2, 3, 4})

        # A new topic is spread over all four live brokers ...
        leaders = await _create(fourth.bootstrap, "after", 8)
        assert set(leaders.values()) == {1, 2, 3, 4}
        # ... and the same producer writes to every partition, the new broker's included.
        deliveries = [await producer.send("after", value=b"after-%d" % p, partition=p)
                      for p in range(8)]
        # Unkeyed records too: the sticky partitioner may pick any of the eight.
        for i in range(40):
            deliveries.append(await producer.send("after", value=b"spread-%d" % i))
            if i % 4 == 3:
                await producer.flush()  # a new sticky partition per batch
        with trio.fail_after(15):
            await producer.flush()
        metas = [d.result() for d in deliveries]
        assert set(producer.client.metadata.value.brokers) == {1, 2, 3, 4}
        assert {m.partition for m in metas[:8]} == set(range(8))
        assert len({m.partition for m in metas[8:]}) > 1

        for p in range(8):
            values = [r.value for r in await read_partition(consumer, "after", p)]
            assert values[0] == b"after-%d" % p
            assert values[1:] == [b"spread-%d" % i for i, m in enumerate(metas[8:])
                                  if m.partition == p]
        # One multifetch over partitions led by four brokers.
        fetched = await consumer.multifetch([("after", p, 0, 1 << 20) for p in range(8)])
        assert [next(iter(f)).value for f in fetched] == [b"after-%d" % p for p in range(8)]
    # The new broker's partitions really live on the new broker.
    mine = sorted(p for p, leader in leaders.items() if leader == 4)
    assert mine
    for p in mine:
        segment_dir = fourth.log_dir / f"after-{p}"
        assert segment_dir.is_dir(), sorted(x.name for x in fourth.log_dir.iterdir())
        assert sum(f.stat().st_size for f in segment_dir.glob("*.log")) > 0


async def test_a_new_broker_is_learnt_even_when_brokers_see_it_late(broker_process,
                                                                    zookeeper):
    """The race made certain: the old brokers are paused (SIGSTOP) while the fourth
    registers, so the client's metadata request, sent when its watch fires, is answered
    before they have seen the new registration.  (Regression: the client used to publish
    that stale answer and keep it until metadata_max_age_ms.)"""
    brokers = [broker_process(broker_id=i, zookeeper=zookeeper) for i in (1, 2, 3)]
    for b in brokers:
        await _wait_for_brokers(b.bootstrap, {1, 2, 3})
    async with trilog.open_producer(zookeeper=zookeeper) as producer:
        assert set(producer.client.metadata.value.brokers) == {1, 2, 3}
        await trio.sleep(0.5)  # the refreshes of the client's start are over
        try:
            for b in brokers:
                b.proc.send_signal(signal.SIGSTOP)
            await trio.to_thread.run_sync(
                lambda: broker_process(broker_id=4, zookeeper=zookeeper))
            await trio.sleep(0.5)  # the client's watch fires; its refresh waits on a broker
        finally:
            for b in brokers:
                b.proc.send_signal(signal.SIGCONT)
        with trio.move_on_after(5):
            while 4 not in producer.client.metadata.value.brokers:
                await trio.sleep(0.05)
        assert set(producer.client.metadata.value.brokers) == {1, 2, 3, 4}
