"""Offset commits of one ``__consumer_offsets`` partition in a cluster: the next commit is
appended while the last waits for the in-sync replicas (they are replicated together), and
the cache takes them in log order, whichever is acknowledged first (a stand-in replica
manager decides when each one is replicated)."""

from __future__ import annotations

import contextlib

import trio
import trio.testing

from trilog.broker.groups._offsets import OFFSETS_TOPIC, OffsetManager
from trilog.broker.replication import FetchPurgatory, LocalReplicaManager
from trilog.errors import NO_ERROR, CoordinatorNotAvailableError, RequestTimedOutError
from trilog.protocol import OffsetAndMetadata
from trilog.storage import LogManager

TP = ("t", 0)


class _Cluster:
    """This broker (1) leads partition 0 of the offsets topic."""

    def leader(self, topic: str, partition: int) -> int | None:
        return 1 if (topic, partition) == (OFFSETS_TOPIC, 0) else None

    def min_insync_replicas(self, topic: str) -> int:
        return 1


class Replicas(LocalReplicaManager):
    """Appends for real, and holds every ``wait_replicated`` until the test answers it."""

    def __init__(self, logs: LogManager) -> None:
        super().__init__(1, logs, FetchPurgatory(), trio.CapacityLimiter(2), _Cluster(),
                         message_max_bytes=1 << 20)
        self.waiting: list[tuple[int, trio.Event, list[int]]] = []  # (end, go, [code])

    async def wait_replicated(self, tp, end, deadline) -> int:
        assert tp[0] == OFFSETS_TOPIC
        go, code = trio.Event(), [NO_ERROR]
        self.waiting.append((end, go, code))
        await go.wait()
        return code[0]

    async def until_waiting(self, n: int) -> None:
        """Until ``n`` commits wait (their appends run in worker threads first)."""
        with trio.fail_after(10):
            while len(self.waiting) < n:
                await trio.sleep(0.005)

    def answer(self, index: int, code: int = NO_ERROR) -> None:
        _end, go, box = self.waiting[index]
        box[0] = code
        go.set()


@contextlib.asynccontextmanager
async def offsets_partition_0(tmp_path):
    """An offset manager leading partition 0 of the offsets topic (loaded), and the
    stand-in replica manager it waits on: ``(manager, replicas)``."""
    logs = LogManager(str(tmp_path / "data"), replicated=True)
    replicas = Replicas(logs)
    try:
        logs.get_or_create_log(OFFSETS_TOPIC, 0)
        manager = OffsetManager(replicas, trio.CapacityLimiter(2), segment_bytes=1 << 20,
                                retention_ms=86_400_000)
        manager.begin_load(0)
        await manager.load(0)
        yield manager, replicas
    finally:
        logs.close()


async def commits_in_flight(tmp_path, answers):
    """Two commits of TP (offset 1, then 2) by one group; the replicas answer them in the
    order and with the codes of ``answers``: ``(codes of the commits, cached offset)``."""
    async with offsets_partition_0(tmp_path) as (manager, replicas):
        codes: dict[int, int] = {}

        async def commit(offset: int) -> None:
            codes[offset] = await manager.commit(0, "g", {TP: OffsetAndMetadata(offset)})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(commit, 1)
            await replicas.until_waiting(1)
            nursery.start_soon(commit, 2)
            # Appended while the first waits for the replicas: the lock is not held meanwhile.
            await replicas.until_waiting(2)
            assert [end for end, _go, _code in replicas.waiting] == [1, 2]
            for index, code in answers:
                replicas.answer(index, code)
                await trio.testing.wait_all_tasks_blocked()
                if index == 1 and len(codes) == 0:
                    # The later commit is replicated first: it waits for the earlier one.
                    assert manager.fetch(0, "g") == {}
        cached = manager.fetch(0, "g").get(TP)
        return codes, None if cached is None else cached.offset


async def test_commits_are_replicated_together_and_cached_in_log_order(tmp_path):
    codes, cached = await commits_in_flight(tmp_path, [(1, NO_ERROR), (0, NO_ERROR)])
    assert codes == {1: NO_ERROR, 2: NO_ERROR}
    assert cached == 2  # not 1, although commit 1 was acknowledged last


async def test_a_failed_earlier_commit_does_not_hold_back_or_undo_a_later_one(tmp_path):
    codes, cached = await commits_in_flight(tmp_path, [(1, NO_ERROR),
                                                       (0, RequestTimedOutError.code)])
    assert codes == {1: CoordinatorNotAvailableError.code, 2: NO_ERROR}
    assert cached == 2


async def test_a_failed_later_commit_leaves_the_earlier_one(tmp_path):
    codes, cached = await commits_in_flight(tmp_path, [(0, NO_ERROR),
                                                       (1, RequestTimedOutError.code)])
    assert codes == {1: NO_ERROR, 2: CoordinatorNotAvailableError.code}
    assert cached == 1


async def test_a_replicated_commit_cancelled_in_the_queue_still_reaches_the_cache(tmp_path):
    """Commit 2 is replicated and waits for commit 1's turn when its request is cancelled
    (its connection went, the broker stops): its record is in the log, so the cache takes
    it too, in its turn."""
    async with offsets_partition_0(tmp_path) as (manager, replicas):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.commit, 0, "g", {TP: OffsetAndMetadata(1)})
            await replicas.until_waiting(1)
            second = trio.CancelScope()

            async def commit_two() -> None:
                with second:
                    await manager.commit(0, "g", {TP: OffsetAndMetadata(2)})

            nursery.start_soon(commit_two)
            await replicas.until_waiting(2)
            replicas.answer(1)  # replicated; now it waits for commit 1's turn
            await trio.testing.wait_all_tasks_blocked()
            second.cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert manager.fetch(0, "g") == {}  # commit 1 is still waiting
            replicas.answer(0)
        assert manager.fetch(0, "g")[TP].offset == 2
