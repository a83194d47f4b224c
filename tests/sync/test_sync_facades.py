"""trilog.sync: blocking facades over the trio client, used from plain threads."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

import trilog.sync as ts
from trilog.errors import MessageTooLargeError, OffsetOutOfRangeError
from trilog.sync._portal import loop_thread


@pytest.fixture
def bootstrap(broker_process):
    return broker_process(overrides={"num.partitions": 4}).bootstrap


def _no_loop_thread_left(timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if loop_thread() is None and not any(
            t.name == "trilog-sync-loop" for t in threading.enumerate()
        ):
            return True
        time.sleep(0.01)
    return False


def test_eight_threads_share_one_producer_and_every_send_is_delivered(bootstrap):
    per_thread, threads = 10_000, 8
    deliveries: list[list] = [[] for _ in range(threads)]
    with ts.Producer(bootstrap, linger_ms=2) as producer:
        producer.partitions_for("shared")

        def work(n: int) -> None:
            for i in range(per_thread):
                deliveries[n].append(producer.send("shared", b"%d:%d" % (n, i)))

        workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        producer.flush()
        metas = [d.get(timeout=30) for ds in deliveries for d in ds]
    assert len(metas) == per_thread * threads
    assert len({(m.partition, m.offset) for m in metas}) == per_thread * threads
    with ts.SimpleConsumer(bootstrap) as consumer:
        ends = [consumer.offsets_before("shared", p)[0] for p in range(4)]
        assert sum(ends) == per_thread * threads
        values = {r.value for p in range(4)
                  for r in consumer.iterate("shared", p, 0, end_offset=ends[p])}
    assert values == {b"%d:%d" % (n, i) for n in range(threads) for i in range(per_thread)}
    assert _no_loop_thread_left()


def test_facades_share_one_loop_thread_and_it_ends_with_the_last(bootstrap):
    with ts.Producer(bootstrap) as producer:
        first = loop_thread()
        with ts.SimpleConsumer(bootstrap) as consumer:
            assert loop_thread() is first
            producer.send_and_wait("t", b"v")
            assert [r.value for r in consumer.fetch("t", *_partition_of(consumer, "t"))] == [b"v"]
        assert loop_thread() is first and first.is_alive()
    assert _no_loop_thread_left()
    with pytest.raises(ts.FacadeClosedError):
        producer.send("t", b"late")


def _partition_of(consumer, topic):
    for p in consumer.partitions_for(topic):
        if consumer.offsets_before(topic, p)[0] > 0:
            return p, 0
    raise AssertionError("no partition has the record")


def test_exceptions_cross_unchanged(bootstrap):
    with ts.Producer(bootstrap) as producer:
        producer.send_and_wait("errs", b"x", partition=0)
        with pytest.raises(TypeError, match="value must be bytes"):
            producer.send("errs", "not bytes")
    with ts.SimpleConsumer(bootstrap) as consumer:
        with pytest.raises(OffsetOutOfRangeError) as info:
            consumer.fetch("errs", 0, 50)
        assert (info.value.log_start_offset, info.value.log_end_offset) == (0, 1)


def test_keyboard_interrupt_stops_a_blocking_call_promptly(bootstrap):
    with ts.Producer(bootstrap) as producer:
        producer.send_and_wait("idle", b"x", partition=0)
    with ts.SimpleConsumer(bootstrap) as consumer:
        timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            consumer.fetch("idle", 0, 1, max_wait_ms=4_000, min_bytes=1)
        assert time.monotonic() - started < 5
        # The facade still works after the interrupted call.
        assert [r.value for r in consumer.fetch("idle", 0, 0)] == [b"x"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_fork_parent_facade_refuses_child_facade_works(bootstrap):
    with ts.Producer(bootstrap) as producer:
        producer.send_and_wait("forked", b"parent", partition=0)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report through the pipe, never return into pytest
            code = 1
            try:
                try:
                    producer.send("forked", b"from child")
                    message = b"parent facade worked in the child"
                except ts.ForkedFacadeError:
                    producer.close()  # returns: the parent's queue is not the child's to drain
                    with ts.Producer(bootstrap) as own:
                        own.send_and_wait("forked", b"child", partition=0)
                    message, code = b"ok", 0
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                message = repr(exc).encode()
            os.write(write, message)
            os._exit(code)
        os.close(write)
        _, status = os.waitpid(pid, 0)
        with os.fdopen(read, "rb") as pipe:
            message = pipe.read()
        assert message == b"ok" and os.waitstatus_to_exitcode(status) == 0
        producer.send_and_wait("forked", b"parent again", partition=0)
    with ts.SimpleConsumer(bootstrap) as consumer:
        assert [r.value for r in consumer.fetch("forked", 0, 0)] == \
            [b"parent", b"child", b"parent again"]


def test_group_consumer_facade_reads_with_blocking_streams(zookeeper, broker_process):
    broker = broker_process(zookeeper=zookeeper, broker_id=1, overrides={"num.partitions": 2})
    with ts.Producer(broker.bootstrap) as producer:
        for i in range(40):
            producer.send("grouped", b"%d" % i, partition=i % 2)
        producer.flush()
    with ts.ConsumerConnector("sync-group", zookeeper=zookeeper, topics={"grouped": 2},
                     auto_offset_reset="smallest", consumer_timeout_ms=1500) as consumer:
        got: list = []
        readers = [threading.Thread(target=lambda s=s: got.extend(s))
                   for s in consumer.streams["grouped"]]
        for r in readers:
            r.start()
        for r in readers:
            r.join()
        assert sorted(consumer.owned) == [("grouped", 0), ("grouped", 1)]
        consumer.commit_offsets()
    assert sorted(int(r.value) for r in got) == list(range(40))
    assert _no_loop_thread_left()


def test_send_many_and_list_topics(bootstrap):
    with ts.Producer(bootstrap) as producer:
        deliveries = producer.send_many(
            [("bulk", b"%d" % i, None, i % 4) for i in range(100)]
            + [("bulk", b"h", b"k", 0, [("trace", b"1")])])
        metas = [d.get(timeout=30) for d in deliveries]
    assert [m.partition for m in metas[:100]] == [i % 4 for i in range(100)]
    with ts.SimpleConsumer(bootstrap) as consumer:
        assert "bulk" in consumer.list_topics()
        last = list(consumer.fetch("bulk", 0, metas[-1].offset))
        assert (last[0].key, last[0].headers[0].key) == (b"k", "trace")


def test_send_returns_at_once_its_errors_come_from_get_and_order_is_kept(bootstrap):
    with ts.Producer(bootstrap, max_request_size=1000) as producer:
        too_large = producer.send("order", bytes(5000), partition=0)
        first = producer.send("order", b"first", partition=0)
        second = producer.send_and_wait("order", b"second", partition=0)
        with pytest.raises(MessageTooLargeError):
            too_large.get(timeout=10)
        assert too_large.done()
        assert (first.get(timeout=10).offset, second.offset) == (0, 1)


def test_close_hands_over_every_queued_record(bootstrap):
    with ts.Producer(bootstrap) as producer:
        pending = [producer.send("queued", b"%d" % i, partition=0) for i in range(3000)]
    assert [d.get(timeout=10).offset for d in pending] == list(range(3000))
    with ts.SimpleConsumer(bootstrap) as consumer:
        values = [r.value for r in consumer.iterate("queued", 0, 0, end_offset=3000)]
    assert values == [b"%d" % i for i in range(3000)]


def test_flush_waits_for_what_was_queued_before_it_not_for_an_empty_queue():
    """Another thread keeps the queue busy (the producer is slower than the sender), yet a
    flush returns once the records queued before it are handed over."""
    from contextlib import asynccontextmanager

    from trilog.sync._facades import SyncDelivery, _Outbox
    from trilog.sync._portal import Portal

    class SlowProducer:
        def send_nowait(self, topic, value, key, **kwargs):
            time.sleep(0.0001)
            return object()

    @asynccontextmanager
    async def opened():
        yield SlowProducer()

    portal = Portal(opened(), "test producer")
    outbox = _Outbox(portal, portal.value)
    outbox.LIMIT = 256  # short bursts: the test is quick
    stop = threading.Event()

    def keep_sending() -> None:
        while not stop.is_set():  # as fast as it can: it keeps the queue full
            outbox.put(("t", b"v", None, {}, SyncDelivery(None, portal, outbox)))

    sender = threading.Thread(target=keep_sending)
    flushed = threading.Event()
    flusher = threading.Thread(target=lambda: (outbox.wait_empty(), flushed.set()))
    try:
        sender.start()
        time.sleep(0.1)
        mine = SyncDelivery(None, portal, outbox)
        outbox.put(("t", b"mine", None, {}, mine))
        flusher.start()
        assert flushed.wait(5)  # while the other thread still sends
        assert mine._delivery is not None
    finally:
        stop.set()
        sender.join()
        if flusher.ident is not None:  # started
            flusher.join()
        portal.close()


def test_a_wait_from_the_loop_thread_itself_raises_instead_of_hanging():
    """A callback running in the loop thread (on_delivery, say) that waits for the queue
    would wait for itself forever: it gets a RuntimeError."""
    from contextlib import asynccontextmanager

    import trio

    from trilog.client import BufferFullError
    from trilog.sync._facades import SyncDelivery, _Outbox
    from trilog.sync._portal import Portal

    class FullProducer:  # never has room: the drain task waits in send()
        def __init__(self):
            self.room = trio.Event()

        def send_nowait(self, *args, **kwargs):
            raise BufferFullError("full")

        async def send(self, *args, **kwargs):
            await self.room.wait()
            return object()

    @asynccontextmanager
    async def opened():
        yield FullProducer()

    portal = Portal(opened(), "test producer")
    outbox = _Outbox(portal, portal.value)
    pending = SyncDelivery(None, portal, outbox)
    outbox.put(("t", b"v", None, {}, pending))
    with pytest.raises(RuntimeError, match="loop thread"):
        portal.run_sync(outbox.wait_empty)
    with pytest.raises(RuntimeError, match="loop thread"):
        portal.run_sync(outbox.wait_handed, pending, None)
    portal.run_sync(portal.value.room.set)
    outbox.wait_empty()  # from this thread it is fine
    assert pending._delivery is not None
    portal.close()


def test_a_prepared_transaction_is_committed_by_another_client(bootstrap):
    with ts.Producer(bootstrap, transactional_id="sync-2pc") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("sync-2pc", b"prepared", partition=0)
        prepared = producer.prepare_transaction()
    # Closed, and left open: a read_committed reader sees nothing yet.
    with ts.SimpleConsumer(bootstrap, isolation_level="read_committed") as consumer:
        assert consumer.offsets_before("sync-2pc", 0) == [0]
    ts.end_transactions([prepared], commit=True, bootstrap_servers=bootstrap)
    ts.end_transactions([], commit=True)  # nothing to end: no connection
    with ts.SimpleConsumer(bootstrap, isolation_level="read_committed") as consumer:
        deadline = time.monotonic() + 10
        while consumer.offsets_before("sync-2pc", 0) != [2]:  # the record and its marker
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert [r.value for r in consumer.iterate("sync-2pc", 0, 0, end_offset=2)] == \
            [b"prepared"]
    assert _no_loop_thread_left()
