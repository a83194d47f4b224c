"""Where long-poll fetches wait for data (Kafka calls it the fetch purgatory).

A fetch that finds fewer than ``min_bytes`` parks a ``FetchWaiter`` on the partitions it
asked for.  Each append reports its partition and byte count; a waiter wakes once its
partitions received ``min_bytes`` in total, when its ``max_wait_ms`` passes, or when the
broker shuts down.  Nothing polls.  Runs in the trio thread only (not thread-safe).

A fetch reads before it parks: bytes appended meanwhile would wake nobody.  So it takes a
``mark`` of its partitions' append counters before reading, and ``wait(..., since=mark)``
counts what arrived after the mark (Kafka checks again after registering its delayed fetch,
for the same reason).

In a cluster (``follow_high_watermark``) a consumer reads only below the high watermark:
appended bytes count towards its ``min_bytes`` but wake it only once the high watermark
moves (``high_watermark_moved``, itself counted as one byte), so it is not answered with
nothing just before its records become readable.  Followers read to the log end: appends
wake them, high watermark moves do not (they learn it from their next answer anyway).
"""

from __future__ import annotations

import trio

from trilog._topic import PartitionKey


class FetchWaiter:
    __slots__ = ("needed", "event", "partitions", "replica")

    def __init__(self, partitions: list[PartitionKey], needed: int, replica: bool) -> None:
        self.partitions = partitions
        self.needed = needed
        self.replica = replica
        self.event = trio.Event()


class FetchPurgatory:
    def __init__(self, follow_high_watermark: bool = False) -> None:
        self._follow_hw = follow_high_watermark
        self._waiters: dict[PartitionKey, set[FetchWaiter]] = {}
        self._appended: dict[PartitionKey, int] = {}  # bytes reported per partition
        self._moves: dict[PartitionKey, int] = {}  # high watermark moves per partition
        self._closed = False

    def __len__(self) -> int:
        return len({w for ws in self._waiters.values() for w in ws})

    def mark(self, partitions: list[PartitionKey], replica: bool = False) -> int:
        """The partitions' counter now, for ``wait(since=...)``: bytes appended, and for a
        consumer's fetch (not a ``replica``'s) high watermark moves too."""
        appended = self._appended
        total = sum(appended.get(tp, 0) for tp in partitions)
        if not replica:
            moves = self._moves
            total += sum(moves.get(tp, 0) for tp in partitions)
        return total

    def data_appended(self, tp: PartitionKey, size: int) -> None:
        self._appended[tp] = self._appended.get(tp, 0) + size
        waiters = self._waiters.get(tp)
        if not waiters:
            return
        for waiter in list(waiters):
            waiter.needed -= size
            if waiter.needed <= 0 and (waiter.replica or not self._follow_hw):
                waiter.event.set()

    def high_watermark_moved(self, tp: PartitionKey) -> None:
        """Records of ``tp`` became readable to consumers (one byte's worth of news)."""
        self._moves[tp] = self._moves.get(tp, 0) + 1
        waiters = self._waiters.get(tp)
        if not waiters:
            return
        for waiter in list(waiters):
            if not waiter.replica:
                waiter.needed -= 1
                if waiter.needed <= 0:
                    waiter.event.set()

    async def wait(self, partitions: list[PartitionKey], needed: int, timeout_s: float,
                   since: int | None = None, replica: bool = False) -> None:
        """Wait until ``needed`` more bytes arrived on ``partitions`` (counting from the
        ``mark`` ``since`` when given, taken with the same ``replica``), or the timeout."""
        if since is not None:
            needed -= self.mark(partitions, replica) - since
        if self._closed or needed <= 0:
            await trio.lowlevel.checkpoint()
            return
        waiter = FetchWaiter(partitions, needed, replica)
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
