"""A broker process stopped cleanly (SIGTERM) and restarted on the same port and log dir
while a producer keeps sending: every acknowledged record is in the log, at the offset its
acknowledgement gave, in send order, exactly once.  Killed (SIGKILL) instead: nothing
acknowledged is lost; a record whose answer was lost may be there twice (acks=1 without
idempotence), but never out of order; with ``enable_idempotence`` not even that: the broker
rebuilds its producer table from the log and recognizes the retry."""

from __future__ import annotations

import signal

import pytest
import trio
from client_helpers import create_topic, read_topic

import trilog

PARTITIONS = 3


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
async def test_broker_restart_mid_stream(broker_process, sig, idempotent):
    broker = broker_process()
    await create_topic(broker.bootstrap, "stream", PARTITIONS)
    sent: list[tuple[bytes, int, trilog.Delivery]] = []
    stop_sending = trio.Event()
    restarts = []

    async with trilog.open_producer(
            bootstrap_servers=broker.bootstrap, acks="all" if idempotent else 1,
            enable_idempotence=idempotent,
            max_in_flight_requests_per_connection=5 if idempotent else 1, retries=1_000_000,
            retry_backoff_ms=50, delivery_timeout_ms=60_000, linger_ms=2,
            batch_size=4096) as producer:

        async def produce():
            for i in range(200_000):
                if stop_sending.is_set():
                    return
                value = b"%08d" % i
                sent.append((value, i % PARTITIONS,
                             await producer.send("stream", value=value,
                                                 partition=i % PARTITIONS)))
                if i % 20 == 19:
                    await trio.sleep(0.002)  # a steady stream, not one burst

        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce)
            await trio.sleep(1.0)
            acked_before = sum(1 for _v, _p, d in sent if d.done())
            code = await trio.to_thread.run_sync(broker.stop, sig)
            assert code == (0 if sig == signal.SIGTERM else -signal.SIGKILL), broker.stderr()
            restarts.append(await trio.to_thread.run_sync(
                lambda: broker_process(broker.log_dir, port=broker.port)))
            await trio.sleep(1.0)
            stop_sending.set()
        with trio.fail_after(30):
            await producer.flush()

    assert acked_before > 100
    assert len(sent) > 2 * acked_before  # records went on being sent across the restart
    failures = [(v, d) for v, _p, d in sent if not isinstance(_outcome(d), trilog.RecordMetadata)]
    assert failures == [], f"{len(failures)} failed, e.g. {_outcome(failures[0][1])!r}"

    stored = await read_topic(restarts[0].bootstrap, "stream", range(PARTITIONS))
    for p in range(PARTITIONS):
        values = [r.value for r in stored[p]]
        unique = list(dict.fromkeys(values))
        if sig == signal.SIGTERM or idempotent:
            assert len(values) == len(unique), \
                f"{len(values) - len(unique)} duplicates in partition {p} after the restart"
        assert unique == sorted(unique), f"partition {p} is out of send order"
        by_offset = {r.offset: r.value for r in stored[p]}
        for value, partition, delivery in sent:
            if partition == p:
                meta = delivery.result()
                assert by_offset.get(meta.offset) == value, (p, meta.offset, value)
        assert set(unique) == {v for v, q, _d in sent if q == p}


def _outcome(delivery: trilog.Delivery):
    try:
        return delivery.result()
    except trilog.TrilogError as exc:
        return exc
