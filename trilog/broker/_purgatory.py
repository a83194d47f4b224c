"""Where long-poll fetches wait for data (Kafka calls it the fetch purgatory).

A fetch that finds fewer than ``min_bytes`` parks a ``FetchWaiter`` on the partitions it
asked for.  Each append reports its partition and byte count; a waiter wakes once its
partitions received ``min_bytes`` in total, when its ``max_wait_ms`` passes, or when the
broker shuts down.  Nothing polls.  Runs in the trio thread only (not thread-safe).
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
        self._closed = False

    def __len__(self) -> int:
        return len({w for ws in self._waiters.values() for w in ws})

    def data_appended(self, tp: TopicPartition, size: int) -> None:
        waiters = self._waiters.get(tp)
        if not waiters:
            return
        for waiter in list(waiters):
            waiter.needed -= size
            if waiter.needed <= 0:
                waiter.event.set()

    async def wait(self, partitions: list[TopicPartition], needed: int, timeout_s: float) -> None:
        """Wait until ``needed`` more bytes arrived on ``partitions``, or the timeout."""
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
