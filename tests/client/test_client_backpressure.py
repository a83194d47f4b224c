"""Backpressure and delivery timeouts with the broker gone: bounded memory, ``send`` waits,
``send_nowait`` refuses, every delivery ends (DeliveryTimeoutError after delivery_timeout_ms),
and the same producer works again once the broker is back."""

from __future__ import annotations

import pytest
import trio
from client_helpers import create_topic, read_topic

import trilog

BUFFER = 64 * 1024
TIMEOUT_S = 2.0
VALUE = bytes(1000)


def _stuck_producer(broker, **kw):
    settings = {"bootstrap_servers": broker.bootstrap, "buffer_memory": BUFFER,
                "delivery_timeout_ms": int(TIMEOUT_S * 1000), "retries": 1_000_000,
                "retry_backoff_ms": 50, "batch_size": 8192, "linger_ms": 5}
    settings.update(kw)
    return trilog.open_producer(**settings)


def _fill(producer, topic: str) -> list:
    """send_nowait until the buffer is full (it must refuse, not grow)."""
    deliveries = []
    with pytest.raises(trilog.BufferFullError):
        for i in range(1000):
            deliveries.append(producer.send_nowait(topic, value=VALUE, partition=i % 2))
    # At least half the buffer holds records (per-batch reservations may leave the rest).
    assert BUFFER // 2 // len(VALUE) <= len(deliveries) <= BUFFER // len(VALUE)
    return deliveries


async def _outcomes(deliveries) -> list:
    out = []
    for d in deliveries:
        try:
            out.append(await d.wait())
        except trilog.TrilogError as exc:
            out.append(exc)
    return out


async def test_backpressure_with_the_broker_stopped(broker, broker_process):
    await create_topic(broker.bootstrap, "stuck", 2)
    peak = 0
    async with _stuck_producer(broker) as producer:
        await producer.partitions_for("stuck")
        await trio.to_thread.run_sync(broker.stop)

        async with trio.open_nursery() as nursery:
            async def watch_memory():
                nonlocal peak
                while True:
                    peak = max(peak, producer.accumulator.buffer_used)
                    await trio.sleep(0.002)

            nursery.start_soon(watch_memory)
            start = trio.current_time()
            deliveries = _fill(producer, "stuck")
            assert producer.accumulator.buffer_used <= BUFFER

            # send waits for room ...
            blocked_done = trio.Event()
            blocked: list = []

            async def send_when_room():
                try:
                    blocked.append(await producer.send("stuck", value=VALUE, partition=0))
                except trilog.DeliveryTimeoutError as exc:  # no room within the timeout
                    blocked.append(exc)
                blocked_done.set()

            nursery.start_soon(send_when_room)
            await trio.sleep(0.5)
            assert not blocked_done.is_set(), "send did not wait for buffer_memory"
            assert producer.accumulator.buffer_used <= BUFFER

            # ... every queued delivery fails (none is lost or left hanging), and the
            # blocked send ends too.
            with trio.fail_after(4 * TIMEOUT_S):
                outcomes = await _outcomes(deliveries)
                await blocked_done.wait()
            assert all(isinstance(o, trilog.TrilogError) for o in outcomes), outcomes[:3]
            assert trio.current_time() - start >= TIMEOUT_S - 0.1
            if isinstance(blocked[0], trilog.Delivery):
                with trio.fail_after(4 * TIMEOUT_S):
                    with pytest.raises(trilog.TrilogError):
                        await blocked[0].wait()
            nursery.cancel_scope.cancel()
        assert 0 < peak <= BUFFER
        assert producer.accumulator.buffer_used == 0

        # The broker comes back on the same port: the same producer delivers again.
        await trio.to_thread.run_sync(
            lambda: broker_process(broker.log_dir, port=broker.port))
        with trio.fail_after(10):
            meta = await producer.send_and_wait("stuck", value=b"after", partition=1)
    assert meta.offset == 0
    stored = await read_topic(broker.bootstrap, "stuck", [0, 1])
    assert [r.value for r in stored[1]] == [b"after"]
    assert stored[0] == []


async def test_deliveries_fail_with_delivery_timeout_error_on_time(broker):
    """Regression: batches queued behind the reconnect backoff used to fail late (1.7-3x
    delivery_timeout_ms) with the last NetworkError instead of DeliveryTimeoutError."""
    await create_topic(broker.bootstrap, "late", 2)
    async with _stuck_producer(broker) as producer:
        await producer.partitions_for("late")
        await trio.to_thread.run_sync(broker.stop)
        start = trio.current_time()
        deliveries = _fill(producer, "late")
        with trio.fail_after(4 * TIMEOUT_S):
            outcomes = await _outcomes(deliveries)
        took = trio.current_time() - start
        assert {type(o) for o in outcomes} == {trilog.DeliveryTimeoutError}, str(outcomes[0])
        assert TIMEOUT_S - 0.1 <= took <= TIMEOUT_S + 1.0, took


async def test_a_record_larger_than_buffer_memory_is_refused(broker):
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap,
                                    buffer_memory=8192) as producer:
        with trio.fail_after(2), pytest.raises(trilog.errors.MessageTooLargeError):
            await producer.send("huge", value=bytes(9000), partition=0)
        meta = await producer.send_and_wait("huge", value=bytes(7000), partition=0)
    assert meta.offset == 0
