"""The replica fetcher's retry timing, on a mock trio clock (no broker): a leader that has not
heard of its leadership yet is asked again after 20 ms, then less and less often, and a long
poll of the other partitions does not hold a due retry back."""

from __future__ import annotations

import types

import trio

from trilog.broker._fetcher import FIRST_RETRY_S, FetchState, _Fetcher

CONFIG = {"replica.fetch.wait.max.ms": 500, "replica.fetch.min.bytes": 1,
          "replica.fetch.max.bytes": 1 << 20, "replica.fetch.backoff.ms": 1000,
          "replica.socket.timeout.ms": 30_000}


def fetcher() -> _Fetcher:
    return _Fetcher(types.SimpleNamespace(config=CONFIG), leader=2)  # type: ignore[arg-type]


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
    waiting.retry_at = trio.current_time() + 5.0  # due after the long poll anyway
    assert f._wait_ms() == 500
    waiting.retry_at = trio.current_time() - 1.0  # due already: it goes into this fetch
    assert f._wait_ms() == 500
