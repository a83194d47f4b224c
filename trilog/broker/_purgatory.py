"""Where long-poll fetches wait for data (Kafka calls it the fetch purgatory).

A fetch that finds fewer than ``min_bytes`` parks a ``FetchWaiter`` on the partitions it
asked for.  Each append reports its partition and byte count; a waiter wakes once its
partitions received ``min_bytes`` in total, when its ``max_wait_ms`` passes, or when the
broker shuts down.  Nothing polls.  Runs in the trio thread only (not thread-safe).

A fetch reads (in a worker thread) before it parks: bytes appended meanwhile would wake
nobody.  So it takes a ``mark`` of its partitions' append counters before reading, and
``wait(..., since=mark)`` counts what arrived after the mark (Kafka checks again after
registering its delayed fetch, for the same reason).
"""

from __future__ import annotations

import trio

TopicPartition = tuple[str, int]


class FetchWaiter:
    __slots__ = ("needed", "event", "partitions")

    def __init__(self, partitions: list[TopicPartition], needed: int) -> None:
        self.partitions = partitions
        self.needed = needed
        self.event = trio.Event()


class FetchPurgatory:
    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, set[FetchWaiter]] = {}
        self._appended: dict[TopicPartition, int] = {}  # bytes reported per partition
        self._closed = False

    def __len__(self) -> int:
        return len({w for ws in self._waiters.values() for w in ws})

    def mark(self, partitions: list[TopicPartition]) -> int:
        """The partitions' append counter now, for ``wait(since=...)``."""
        appended = self._appended
        return sum(appended.get(tp, 0) for tp in partitions)

    def data_appended(self, tp: TopicPartition, size: int) -> None:
        self._appended[tp] = self._appended.get(tp, 0) + size
        waiters = self._waiters.get(tp)
        if not waiters:
            return
        for waiter in list(waiters):
            waiter.needed -= size
            if waiter.needed <= 0:
                waiter.event.set()

    async def wait(self, partitions: list[TopicPartition], needed: int, timeout_s: float,
                   since: int | None = None) -> None:
        """Wait until ``needed`` more bytes arrived on ``partitions`` (counting from the
        ``mark`` ``since`` when given), or the timeout."""
        if since is not None:
            needed -= self.mark(partitions) - since
        if self._closed or needed <= 0:
            await trio.lowlevel.checkpoint()
            return
        waiter = FetchWaiter(partitions, needed)
        for tp in partitions:
            self._waiters.setdefault(tp, set()).add(waiter)
        try:
            with trio.move_on_after(timeout_s):
                await waiter.event.wait()
        finally:
            for tp in partitions:
                waiters = self._waiters.get(tp)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._waiters[tp]

    def wake_all(self) -> None:
        """Shutdown: every parked fetch answers now with what it has."""
        self._closed = True
        for waiters in self._waiters.values():
            for waiter in waiters:
                waiter.event.set()
