"""The broker's scheduled log work (Kafka's ``LogManager`` scheduler): time-based flushes and
recovery-point checkpoints, retention, and the log cleaner.

**Flushes** (``LogFlusher``): ``log.flush.interval.ms`` per log and the recovery-point
checkpoints every ``log.flush.offset.checkpoint.interval.ms``, checked every
``log.flush.scheduler.interval.ms``; each fsync is timed for the metrics.  **Retention**
(``RetentionChecker``): every ``log.retention.check.interval.ms``, the segments past
``retention.ms`` / ``retention.bytes``.  A failing disk is logged (once a minute per
partition) and tried again on the next tick: it never stops the broker.

**The log cleaner** (``LogCleanerTask``): ``trilog/storage/_cleaner_manager.py`` decides which log to clean and ``_cleaner.py`` cleans it;
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
import time
from collections.abc import Callable
from typing import Any

import trio

from trilog._time import now_ms
from trilog.broker._limits import RateLimitedLog
from trilog.broker._metrics import FLUSH_BUCKETS_S, Buckets
from trilog.storage import Log, LogManager

log = logging.getLogger("trilog.broker.cleaner")
tasks_log = logging.getLogger("trilog.broker")

#: A timer's fault that repeats (a full disk) is logged once a minute per partition.
_timer_faults = RateLimitedLog(tasks_log, 60.0)


def _timer_fault(what: str) -> Callable[[Log, OSError], None]:
    def report(lg: Log, exc: OSError) -> None:
        _timer_faults.error((what, lg.topic, lg.partition), "%s of %s-%d failed: %s", what,
                            lg.topic, lg.partition, exc)
    return report


class LogFlusher:
    """Time-based flushes and periodic recovery checkpoints (see the module docstring)."""

    def __init__(self, logs: LogManager, limiter: trio.CapacityLimiter, *, scheduler_ms: int,
                 flush_ms: int | None, checkpoint_ms: int) -> None:
        self.logs = logs
        self.limiter = limiter
        interval = scheduler_ms / 1000
        if flush_ms is not None:
            interval = min(interval, max(flush_ms, 1) / 1000)
        self.checkpoint_s = checkpoint_ms / 1000
        self.interval_s = min(interval, self.checkpoint_s)
        #: the flushes' fsync times (``trilog_log_flush_seconds``)
        self.times = Buckets(FLUSH_BUCKETS_S)

    async def run(self) -> None:
        next_checkpoint = trio.current_time() + self.checkpoint_s
        on_error = _timer_fault("flush")
        while True:
            await trio.sleep(self.interval_s)
            await trio.to_thread.run_sync(self._flush_due_logs, on_error, limiter=self.limiter)
            if trio.current_time() >= next_checkpoint:
                next_checkpoint = trio.current_time() + self.checkpoint_s
                try:
                    await trio.to_thread.run_sync(self.logs.checkpoint_recovery_points,
                                                  limiter=self.limiter)
                except OSError as exc:
                    _timer_faults.error("checkpoint", "writing the recovery-point checkpoints "
                                        "failed (the previous ones stay): %s", exc)

    def _flush_due_logs(self, on_error: Callable[[Log, OSError], None]) -> None:
        """Blocking: ``LogManager.flush_due_logs``, timing each partition's flush."""
        now = now_ms()
        for lg in self.logs.logs():
            try:
                if lg.flush_due(now):
                    started = time.perf_counter()
                    if lg.maybe_flush(now):
                        self.times.observe(time.perf_counter() - started)
            except OSError as exc:
                on_error(lg, exc)


class RetentionChecker:
    """Deletes the segments retention no longer keeps (see the module docstring)."""

    def __init__(self, logs: LogManager, limiter: trio.CapacityLimiter, *,
                 interval_ms: int) -> None:
        self.logs = logs
        self.limiter = limiter
        self.interval_s = interval_ms / 1000

    async def run(self) -> None:
        on_error = _timer_fault("retention")
        while True:
            await trio.sleep(self.interval_s)
            deleted = await trio.to_thread.run_sync(self.logs.cleanup_logs, None, on_error,
                                                    limiter=self.limiter)
            for (topic, partition), bases in deleted.items():
                tasks_log.info("retention deleted %d segments of %s-%d", len(bases), topic,
                               partition)


class ProducerExpiry:
    """Forgets the producers of every log that wrote nothing for
    ``producer.id.expiration.ms`` and have no transaction open (Kafka's
    ``producer.id.expiration.check.interval.ms`` task)."""

    def __init__(self, logs: LogManager, limiter: trio.CapacityLimiter, *,
                 interval_ms: int) -> None:
        self.logs = logs
        self.limiter = limiter
        self.interval_s = interval_ms / 1000

    async def run(self) -> None:
        while True:
            await trio.sleep(self.interval_s)
            removed = await trio.to_thread.run_sync(self.logs.remove_expired_producers,
                                                    limiter=self.limiter)
            if removed:
                tasks_log.info("forgot %d expired producers", removed)


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
