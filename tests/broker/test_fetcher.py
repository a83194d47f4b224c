"""The replica fetcher's retry timing, on a mock trio clock (no broker): a leader that has not
heard of its leadership yet is asked again after 20 ms, then less and less often, and a long
poll of the other partitions does not hold a due retry back."""

from __future__ import annotations

import contextlib
import functools
import types

import trio
import trio.testing
from broker_helpers import serve_kafka

from trilog.broker.replication._fetcher import (
    FIRST_RETRY_S,
    FetcherConfig,
    FetchState,
    ReplicaFetchers,
    _Fetcher,
)

CONFIG = {"replica.fetch.wait.max.ms": 500, "replica.fetch.min.bytes": 1,
          "replica.fetch.max.bytes": 1 << 20, "replica.fetch.backoff.ms": 1000,
          "replica.socket.timeout.ms": 30_000}


def fetcher() -> _Fetcher:
    logs = types.SimpleNamespace(get_log=lambda topic, partition: object())
    replicas = types.SimpleNamespace(logs=logs, broker_id=1)
    owner = ReplicaFetchers(replicas, lambda: [], FetcherConfig.of(CONFIG))  # type: ignore[arg-type]
    return _Fetcher(owner, leader=2)


async def test_a_partition_the_leader_does_not_know_yet_is_retried_soon_then_less_often(mock_clock):
    st = FetchState(leader_epoch=3)
    assert st.ready()
    delays = []
    for _ in range(8):
        st.not_yet(1.0)
        delays.append(round(st.retry_at - trio.current_time(), 6))
        assert not st.ready()
    assert FIRST_RETRY_S == 0.02
    assert delays == [0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.0, 1.0]


async def test_many_failures_stay_at_the_backoff(mock_clock):
    st = FetchState(leader_epoch=3, failures=10_000)
    st.not_yet(1.0)
    assert round(st.retry_at - trio.current_time(), 6) == 1.0


async def test_the_long_poll_waits_no_longer_than_the_next_retry_is_due(mock_clock):
    f = fetcher()
    f.partitions[("t", 0)] = FetchState(leader_epoch=1, truncating=False)
    assert f._wait_ms() == 500  # nothing to retry: replica.fetch.wait.max.ms
    waiting = FetchState(leader_epoch=1)
    f.partitions[("t", 1)] = waiting
    waiting.not_yet(1.0)  # due in 20 ms
    assert f._wait_ms() == 20
    mock_clock.jump(0.0195)
    assert f._wait_ms() == 1  # rounded up: never a poll of 0 ms before it is due
    waiting.retry_at = trio.current_time() + 5.0  # due after the long poll anyway
    assert f._wait_ms() == 500
    waiting.retry_at = trio.current_time() - 1.0  # its truncation is due: no poll at all
    assert f._wait_ms() == 0
    waiting.truncating = False  # a fetch retry due: it goes into this fetch
    assert f._wait_ms() == 500


# -- a partition added during a long poll ------------------------------------------------------


class _Leader:
    """A leader that answers ApiVersions and OffsetForLeaderEpoch (once ``epochs_go`` is set),
    answers a Fetch with no wait at once with no records, and parks every other Fetch
    forever (a long poll with nothing to send): what a follower asks, connection by
    connection."""

    def __init__(self) -> None:
        self.asked: list[tuple[int, str, list[tuple[str, int]]]] = []  # (conn, api, partitions)
        self.parked = trio.Event()
        self.epochs_asked = trio.Event()
        self.epochs_go = trio.Event()
        self.epochs_go.set()
        self.connections = 0

    async def serve(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        conn = self.connections

        async def answer(header, request):
            from trilog.protocol import ApiKey, FetchResponse, OffsetForLeaderEpochResponse

            asked = [(t.topic, p.partition) for t in request.topics for p in t.partitions]
            if header.api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
                self.asked.append((conn, "epochs", asked))
                self.epochs_asked.set()
                await self.epochs_go.wait()
                R = OffsetForLeaderEpochResponse
                return R(throttle_time_ms=0, topics=[R.OffsetForLeaderTopicResult(
                    topic=t.topic, partitions=[R.OffsetForLeaderTopicResult.EpochEndOffset(
                        error_code=0, partition=p.partition, leader_epoch=1, end_offset=0)
                        for p in t.partitions]) for t in request.topics])
            assert header.api_key == ApiKey.FETCH, f"unexpected request {header.api_key}"
            self.asked.append((conn, "fetch", asked))
            if request.max_wait_ms > 0:
                self.parked.set()
                await trio.sleep_forever()
            F = FetchResponse
            PD = F.FetchableTopicResponse.PartitionData
            return F(throttle_time_ms=0, error_code=0, session_id=0, responses=[
                F.FetchableTopicResponse(topic=t.topic, partitions=[
                    PD(partition_index=p.partition, error_code=0, high_watermark=0,
                       last_stable_offset=0, log_start_offset=0, aborted_transactions=None,
                       records=b"")
                    for p in t.partitions]) for t in request.topics])

        await serve_kafka(stream, answer)


@contextlib.asynccontextmanager
async def _following(leader: _Leader, tmp_path):
    """Replica fetchers of broker 1 (logs t-0 and t-1), broker 2 being ``leader``."""
    from trilog.storage import LogManager

    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(
            functools.partial(trio.serve_tcp, leader.serve, 0, host="127.0.0.1"))
        port = listener.socket.getsockname()[1]
        logs = LogManager(str(tmp_path / "data"), replicated=True)
        for p in (0, 1):
            logs.get_or_create_log("t", p)
        replicas = types.SimpleNamespace(broker_id=1, logs=logs,
                                         limiter=trio.CapacityLimiter(2))
        fetchers = ReplicaFetchers(
            replicas,  # type: ignore[arg-type]
            lambda: [types.SimpleNamespace(node_id=2, host="127.0.0.1", port=port)],
            FetcherConfig.of(CONFIG))
        nursery.start_soon(fetchers.run)
        await trio.testing.wait_all_tasks_blocked()
        try:
            yield fetchers
        finally:
            nursery.cancel_scope.cancel()
            logs.close()


async def _until_fetched(leader: _Leader, tp: tuple[str, int]) -> None:
    with trio.fail_after(10):  # without the fix: never (the long poll never ends here)
        while not any(tp in parts for _c, api, parts in leader.asked if api == "fetch"):
            await trio.sleep(0.01)


async def test_a_partition_added_during_a_long_poll_is_fetched_without_waiting_for_it(tmp_path):
    """The leader parks the follower's Fetch of t-0 (forever here; up to
    replica.fetch.wait.max.ms in life); t-1, added meanwhile, is asked for at once on a new
    connection, not after the poll."""
    leader = _Leader()
    async with _following(leader, tmp_path) as fetchers:
        fetchers.add(("t", 0), leader=2, leader_epoch=1)
        with trio.fail_after(10):
            await leader.parked.wait()
        assert leader.asked == [(1, "epochs", [("t", 0)]), (1, "fetch", [("t", 0)])]
        fetchers.add(("t", 1), leader=2, leader_epoch=1)
        await _until_fetched(leader, ("t", 1))
        assert leader.asked[2:] == [(2, "epochs", [("t", 1)]),
                                    (2, "fetch", [("t", 0), ("t", 1)])]


async def test_a_partition_added_during_a_truncation_is_not_left_behind_a_long_poll(tmp_path):
    """t-1 comes while the leader is still answering t-0's OffsetForLeaderEpoch: the next
    Fetch does not wait at the leader, so that t-1's truncation comes right after it."""
    leader = _Leader()
    leader.epochs_go = trio.Event()
    async with _following(leader, tmp_path) as fetchers:
        fetchers.add(("t", 0), leader=2, leader_epoch=1)
        with trio.fail_after(10):
            await leader.epochs_asked.wait()
        fetchers.add(("t", 1), leader=2, leader_epoch=1)
        leader.epochs_go.set()
        await _until_fetched(leader, ("t", 1))
        assert leader.asked == [(1, "epochs", [("t", 0)]), (1, "fetch", [("t", 0)]),
                                (1, "epochs", [("t", 1)]), (1, "fetch", [("t", 0), ("t", 1)])]
