"""The broker's log cleaner task: compacts the logs whose ``cleanup.policy`` has ``compact``.

``trilog/storage/_cleaner_manager.py`` decides which log to clean and ``_cleaner.py`` cleans it;
both block, and storage starts no thread.  This task is ``log.cleaner.threads`` loops, each
running one pass at a time in a worker thread of its own limiter (so a long cleaning never
takes a worker the produce and fetch path needs) and sleeping ``log.cleaner.backoff.ms``
when no log is dirty enough.  The offset map's memory, ``log.cleaner.dedupe.buffer.size``,
is shared among the threads, as in Kafka.

A worker thread cannot be cancelled: on shutdown the broker calls ``stop()`` first, which
makes a running pass give up at its next batch (before its next swap), and the loops then
return at once.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from trilog.storage import LogManager

log = logging.getLogger("trilog.broker.cleaner")


class LogCleanerTask:
    """Runs the passes of ``logs.cleaner`` (see the module's description)."""

    def __init__(self, logs: LogManager, *, threads: int, dedupe_buffer_bytes: int,
                 backoff_ms: int) -> None:
        self.cleaner = logs.cleaner
        self.threads = threads
        self.buffer_per_thread = dedupe_buffer_bytes // threads
        self.backoff_s = backoff_ms / 1000
        self._limiter = trio.CapacityLimiter(threads)
        self._wake = trio.Event()

    def statistics(self) -> dict[str, Any]:
        return self.cleaner.statistics()

    def wake(self) -> None:
        """Look for dirty logs now instead of after the backoff (tests, a config change)."""
        self._wake.set()

    def stop(self) -> None:
        """Make running passes give up and no new one start (the broker is stopping)."""
        self.cleaner.stop()

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(self.threads):
                nursery.start_soon(self._loop)

    async def _loop(self) -> None:
        while True:
            result = await trio.to_thread.run_sync(
                self.cleaner.clean_filthiest, self.buffer_per_thread, limiter=self._limiter)
            if result is None:
                with trio.move_on_after(self.backoff_s):
                    await self._wake.wait()
                self._wake = trio.Event()
