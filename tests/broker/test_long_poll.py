"""Long-poll fetch: woken by appends, not by the clock; otherwise waits ``max_wait_ms``.

In-process brokers (``open_broker``) and trio streams, so timings are of the broker alone.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing
from broker_helpers import (
    batch,
    create_topics_request,
    fetch_request,
    only_partition,
    produce_request,
    records_of,
    trio_connect,
    trio_read_response,
    trio_roundtrip,
    trio_send,
)

from trilog import protocol as p
from trilog.broker import open_broker


@pytest.fixture
async def broker(tmp_path):
    async with open_broker({"port": 0, "log.dirs": str(tmp_path / "data")}) as b:
        admin = await trio_connect(b.port)
        response = await trio_roundtrip(admin, create_topics_request({"t": 2, "other": 1}), 2)
        assert all(t.error_code == 0 for t in response.topics)
        await admin.aclose()
        yield b


async def _produce(port: int, topic: str, partition: int, values) -> int:
    stream = await trio_connect(port)
    try:
        response = await trio_roundtrip(stream, produce_request(topic, partition, batch(values)), 3)
    finally:
        await stream.aclose()
    part = only_partition(response)
    assert part.error_code == 0
    return part.base_offset


class Parked:
    """A fetch sent on its own connection; ``await parked.answer()`` gives (seconds, part)."""

    def __init__(self, stream, corr, version, sent_at):
        self.stream, self.corr, self.version, self.sent_at = stream, corr, version, sent_at

    @classmethod
    async def send(cls, port, request, version=4):
        stream = await trio_connect(port)
        corr = await trio_send(stream, request, version)
        return cls(stream, corr, version, trio.current_time())

    async def answer(self):
        response = await trio_read_response(self.stream, p.FetchRequest, self.version, self.corr)
        elapsed = trio.current_time() - self.sent_at
        await self.stream.aclose()
        return elapsed, response


async def _wait_parked(broker, n: int) -> None:
    with trio.fail_after(5):
        while broker.statistics()["parked_fetches"] != n:
            await trio.sleep(0.005)


async def test_append_wakes_a_parked_fetch(broker):
    parked = await Parked.send(broker.port, fetch_request("t", 0, 0, max_wait_ms=5000, min_bytes=1))
    await _wait_parked(broker, 1)
    await trio.sleep(0.3)
    await _produce(broker.port, "t", 0, [b"wake up"])
    with trio.fail_after(4):
        elapsed, response = await parked.answer()
    assert 0.3 <= elapsed < 1.5, elapsed  # woken by the append, well before 5 s
    part = only_partition(response)
    assert part.error_code == 0
    assert [r.value for r in records_of(part.records)] == [b"wake up"]
    assert broker.statistics()["parked_fetches"] == 0


async def test_parked_at_the_log_end_of_a_non_empty_partition(broker):
    await _produce(broker.port, "t", 1, [b"old-1", b"old-2"])
    parked = await Parked.send(broker.port, fetch_request("t", 1, 2, max_wait_ms=5000, min_bytes=1))
    await _wait_parked(broker, 1)
    await _produce(broker.port, "t", 1, [b"new"])
    with trio.fail_after(4):
        elapsed, response = await parked.answer()
    assert elapsed < 1.5
    recs = [r for r in records_of(only_partition(response).records) if r.offset >= 2]
    assert [(r.offset, r.value) for r in recs] == [(2, b"new")]


async def test_min_bytes_accumulate_over_appends(broker):
    chunk = [b"z" * 1000]
    parked = await Parked.send(broker.port,
                               fetch_request("t", 0, 0, max_wait_ms=8000, min_bytes=1800))
    await _wait_parked(broker, 1)
    await _produce(broker.port, "t", 0, chunk)  # ~1.1 kB: not enough
    await trio.sleep(0.4)
    assert broker.statistics()["parked_fetches"] == 1, "woken before min_bytes arrived"
    await _produce(broker.port, "t", 0, chunk)  # now past 1800 bytes
    with trio.fail_after(4):
        elapsed, response = await parked.answer()
    assert elapsed < 2
    assert len(records_of(only_partition(response).records)) == 2


async def test_append_to_another_partition_of_the_request_wakes_it(broker):
    R = p.FetchRequest
    request = fetch_request("t", 0, 0, max_wait_ms=5000, min_bytes=1)
    request.topics[0].partitions.append(
        R.FetchTopic.FetchPartition(partition=1, fetch_offset=0, partition_max_bytes=1 << 20)
    )
    parked = await Parked.send(broker.port, request)
    await _wait_parked(broker, 1)
    await _produce(broker.port, "t", 1, [b"on partition 1"])
    with trio.fail_after(4):
        elapsed, response = await parked.answer()
    assert elapsed < 1.5
    parts = {x.partition_index: x for x in response.responses[0].partitions}
    assert [r.value for r in records_of(parts[1].records)] == [b"on partition 1"]
    assert records_of(parts[0].records) == []


async def test_appends_elsewhere_do_not_wake_it(broker):
    parked = await Parked.send(broker.port,
                               fetch_request("t", 0, 0, max_wait_ms=1200, min_bytes=1))
    await _wait_parked(broker, 1)
    await _produce(broker.port, "other", 0, [b"not for you"])
    await _produce(broker.port, "t", 1, [b"not for you either"])
    with trio.fail_after(5):
        elapsed, response = await parked.answer()
    assert elapsed >= 1.1, elapsed
    assert records_of(only_partition(response).records) == []


async def test_min_bytes_above_what_is_there_waits_max_wait(broker):
    await _produce(broker.port, "t", 0, [b"small"])
    parked = await Parked.send(broker.port,
                               fetch_request("t", 0, 0, max_wait_ms=1000, min_bytes=1 << 20))
    with trio.fail_after(5):
        elapsed, response = await parked.answer()
    assert 0.9 <= elapsed < 3, elapsed
    # The answer holds what was there.
    assert [r.value for r in records_of(only_partition(response).records)] == [b"small"]


async def test_max_wait_zero_answers_at_once(broker):
    parked = await Parked.send(broker.port, fetch_request("t", 0, 0, max_wait_ms=0, min_bytes=1))
    with trio.fail_after(5):
        elapsed, response = await parked.answer()
    assert elapsed < 0.5
    assert only_partition(response).error_code == 0


async def test_fetch_of_unknown_partition_does_not_park(broker):
    parked = await Parked.send(broker.port,
                               fetch_request("nope", 0, 0, max_wait_ms=5000, min_bytes=1))
    with trio.fail_after(5):
        elapsed, response = await parked.answer()
    assert elapsed < 1
    assert only_partition(response).error_code == 3


async def test_many_parked_fetches_all_wake(broker):
    parked = [await Parked.send(broker.port,
                                fetch_request("t", 0, 0, max_wait_ms=5000, min_bytes=1))
              for _ in range(20)]
    await _wait_parked(broker, 20)
    await _produce(broker.port, "t", 0, [b"for everyone"])
    with trio.fail_after(4):
        for fetch in parked:
            elapsed, response = await fetch.answer()
            assert elapsed < 3
            assert [r.value for r in records_of(only_partition(response).records)] == [
                b"for everyone"
            ]


async def test_bytes_appended_while_a_fetch_reads_wake_it_at_once():
    from trilog.broker.replication._purgatory import FetchPurgatory

    purgatory = FetchPurgatory()
    tps = [("t", 0), ("t", 1)]
    mark = purgatory.mark(tps)  # before the fetch's read (in a worker thread) ...
    purgatory.data_appended(("t", 1), 10)  # ... an append lands meanwhile
    with trio.fail_after(1):  # without the mark it would sleep the whole max_wait
        await purgatory.wait(tps, 5, timeout_s=30, since=mark)
    mark = purgatory.mark(tps)
    purgatory.data_appended(("u", 0), 10)  # another partition's append counts for nothing
    with trio.move_on_after(0.05) as scope:
        await purgatory.wait(tps, 5, timeout_s=30, since=mark)
    assert scope.cancelled_caught


async def test_in_a_cluster_consumers_wake_when_the_high_watermark_moves_followers_on_appends():
    """A consumer reads below the high watermark: an append alone would answer it with
    nothing, so it waits for the high watermark to move; a follower reads to the log end:
    an append wakes it, a high watermark move does not."""
    from trilog.broker.replication._purgatory import FetchPurgatory

    purgatory = FetchPurgatory(follow_high_watermark=True)
    tp = ("t", 0)
    woken: list[str] = []

    async def park(name: str, replica: bool) -> None:
        await purgatory.wait([tp], 1, timeout_s=30, replica=replica)
        woken.append(name)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(park, "consumer", False)
            nursery.start_soon(park, "follower", True)
            await trio.testing.wait_all_tasks_blocked()
            purgatory.data_appended(tp, 100)
            await trio.testing.wait_all_tasks_blocked()
            assert woken == ["follower"]
            nursery.start_soon(park, "follower again", True)
            await trio.testing.wait_all_tasks_blocked()
            purgatory.high_watermark_moved(tp)
            await trio.testing.wait_all_tasks_blocked()
            assert woken == ["follower", "consumer"]
            nursery.cancel_scope.cancel()
    # A move between a consumer's mark and its wait is not lost either.
    mark = purgatory.mark([tp])
    purgatory.high_watermark_moved(tp)
    with trio.fail_after(1):
        await purgatory.wait([tp], 1, timeout_s=30, since=mark)
