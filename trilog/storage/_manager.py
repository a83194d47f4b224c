"""``LogManager``: every partition log of a broker, across its ``log.dirs``.

Each log dir holds ``<topic>-<partition>/`` directories, a ``recovery-point-offset-checkpoint``,
a ``log-start-offset-checkpoint`` (the logs whose start offset DeleteRecords moved past their
first segment's base offset), for a replicating broker a ``replication-offset-checkpoint``
(each log's high watermark) and, between a clean shutdown and the next start, the
``.kafka_cleanshutdown`` marker.  While
a topic's partitions are being created, a ``.creating-*`` marker in the first log dir lists
them: a start that finds one removes those partitions (their creation never completed).
"""

from __future__ import annotations

import fcntl
import gc
import logging
import os
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager

from trilog import _time
from trilog._topic import validate_topic_name
from trilog.errors import TrilogError, UnknownTopicOrPartitionError
from trilog.storage._checkpoint import OffsetCheckpoint
from trilog.storage._config import LogConfig
from trilog.storage._files import fsync_dir, remove, sync_filesystem, write_atomically
from trilog.storage._log import Log, parse_partition_dir_name
from trilog.storage._open_files import SEGMENT_FILES
from trilog.storage._cleaner_manager import LogCleanerManager

logger = logging.getLogger("trilog.storage")

RECOVERY_POINT_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILE = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT_FILE = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
CREATING_PREFIX = ".creating-"

#: ``on_error(log, exc)``: what the timers' sweeps call for a log that failed, before going on.
ErrorHandler = Callable[[Log, OSError], None]


@contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection meanwhile.  Opening the logs makes millions of objects
    that live as long as the broker, and almost no garbage: the collector would walk them
    again and again as they pile up (a third of the CPU of opening 50,000 logs).  It runs
    again afterwards."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class LogManager:
    """Opens, creates, flushes, cleans and closes the logs of every log dir.

    At start every ``<topic>-<partition>`` directory is opened; logs are recovered
    (re-validated after their recovery point) only in a log dir without the clean-shutdown
    marker, which is then removed so that a crash is detected next time.  Each log dir is
    locked (``flock`` on ``.lock``) against a second broker.

    ``replicated=True`` (a broker of a replicating cluster) opens and creates every log
    ``replicated`` (``Log``: a high watermark its replica manager sets), reads each log's
    high watermark back from ``replication-offset-checkpoint`` at start (clamped to the
    recovered log), and writes that file in ``checkpoint_high_watermarks`` and at shutdown.
    The default keeps a standalone broker's logs as before replication (high watermark =
    log end offset, no such file).

    Invariants: at most one ``Log`` per (topic, partition); a log's directory is
    ``<log dir>/<topic>-<partition>`` with a topic name that passed ``validate_topic_name``,
    so no name can reach outside a log dir.

    Thread-safe: the broker calls it from worker threads.  One lock guards the table of
    logs; flushing, retention and checkpointing work on snapshots of it, and each ``Log``
    is itself thread-safe.
    """

    def __init__(
        self,
        log_dirs: Iterable[str | os.PathLike[str]] | str | os.PathLike[str],
        default_config: LogConfig | None = None,
        *,
        topic_configs: Mapping[str, LogConfig] | None = None,
        replicated: bool = False,
        load_threads: int = 1,
    ) -> None:
        if isinstance(log_dirs, (str, os.PathLike)):
            log_dirs = [log_dirs]
        self.log_dirs = [os.path.abspath(os.fspath(d)) for d in log_dirs]
        if not self.log_dirs:
            raise ValueError("at least one log dir is needed")
        if len(set(self.log_dirs)) != len(self.log_dirs):
            raise ValueError(f"duplicate log dirs in {self.log_dirs}")
        self.default_config = default_config or LogConfig()
        #: Whether the logs are ``replicated`` (their high watermarks set by the broker).
        self.replicated = replicated
        #: Threads opening the logs of a log dir at start (``num.recovery.threads.per.data.dir``).
        self.load_threads = load_threads
        self._topic_configs = dict(topic_configs or {})
        self._lock = threading.RLock()
        self._checkpoint_lock = threading.Lock()
        self._logs: dict[tuple[str, int], Log] = {}
        self._log_dir_of: dict[tuple[str, int], str] = {}
        self._dir_counts = {d: 0 for d in self.log_dirs}  # partitions per log dir
        self._lock_fds: list[int] = []
        self._closed = False
        try:
            for log_dir in self.log_dirs:
                os.makedirs(log_dir, exist_ok=True)
                self._lock_dir(log_dir)
            for log_dir in self.log_dirs:
                self._undo_interrupted_creations(log_dir)
            with _collector_paused():
                for log_dir in self.log_dirs:
                    self._load_dir(log_dir)
            #: The log cleaner (``cleanup.policy=compact``): the broker runs its passes.
            self.cleaner = LogCleanerManager(self)
        except BaseException:
            for log in self._logs.values():
                log._close_handles()
            self._unlock_dirs()
            raise

    # -- start ---------------------------------------------------------------------------

    def _lock_dir(self, log_dir: str) -> None:
        fd = os.open(os.path.join(log_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise TrilogError(f"log dir {log_dir} is in use by another process") from None
        self._lock_fds.append(fd)

    def _unlock_dirs(self) -> None:
        fds, self._lock_fds = self._lock_fds, []
        for fd in fds:
            os.close(fd)  # closing releases the flock

    def _load_dir(self, log_dir: str) -> None:
        marker = os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)
        clean = os.path.exists(marker)
        recovery_points = OffsetCheckpoint(
            os.path.join(log_dir, RECOVERY_POINT_CHECKPOINT_FILE)
        ).read()
        log_starts = OffsetCheckpoint(
            os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT_FILE)
        ).read()
        high_watermarks = OffsetCheckpoint(
            os.path.join(log_dir, REPLICATION_OFFSET_CHECKPOINT_FILE)
        ).read() if self.replicated else {}
        with os.scandir(log_dir) as entries:  # (no stat a name: d_type says which are dirs)
            names = sorted(e.name for e in entries if e.is_dir())
        if not clean and names:
            logger.warning("%s: no clean-shutdown marker; recovering its logs", log_dir)
        keys = self._partition_dirs(log_dir, names)

        def open_log(key: tuple[str, int]) -> Log:
            topic, partition = key
            return Log(f"{log_dir}/{topic}-{partition}", self.config_for(topic),
                       recovery_point=recovery_points.get(key, 0), needs_recovery=not clean,
                       topic=topic, partition=partition, log_start_offset=log_starts.get(key, 0),
                       replicated=self.replicated, high_watermark=high_watermarks.get(key),
                       clean_shutdown=clean, listed=True)

        for key, log in zip(keys, self._in_parallel(open_log, keys)):
            self._add(key, log, log_dir)
        if clean:
            os.unlink(marker)
            fsync_dir(log_dir)

    def _partition_dirs(self, log_dir: str, names: list[str]) -> list[tuple[str, int]]:
        """The partitions whose directories ``names`` (of ``log_dir``) are, less those
        another log dir holds; leftovers of interrupted deletes are removed."""
        keys = []
        for name in names:
            if name.endswith(".deleted"):
                remove(os.path.join(log_dir, name))  # a delete interrupted by a crash
                continue
            try:
                topic, partition = parse_partition_dir_name(name)
                validate_topic_name(topic)
            except (ValueError, TrilogError) as exc:
                logger.warning("%s: skipping directory %r: %s", log_dir, name, exc)
                continue
            key = (topic, partition)
            if key in self._logs:
                logger.warning("%s: %s-%d is also in %s; skipping this copy", log_dir, topic,
                               partition, self._log_dir_of[key])
                continue
            keys.append(key)
        return keys

    def _in_parallel(self, open_log: Callable[[tuple[str, int]], Log],
                     keys: list[tuple[str, int]]) -> list[Log]:
        """``open_log`` of every key, on ``load_threads`` threads (more than one help only
        where opening waits on a slow disk: from the page cache it computes, and threads
        contend for the GIL); all or nothing: if one fails, the others are closed without a
        flush and the first error is raised."""
        if self.load_threads <= 1 or len(keys) < 2:
            opened: list[Log] = []
            try:
                for key in keys:
                    opened.append(open_log(key))
            except BaseException:
                for log in opened:
                    log._close_handles()
                raise
            return opened
        with ThreadPoolExecutor(self.load_threads, thread_name_prefix="log-load") as pool:
            futures = [pool.submit(open_log, key) for key in keys]
        error = next((f.exception() for f in futures if f.exception() is not None), None)
        if error is not None:
            for f in futures:
                if f.exception() is None:
                    f.result()._close_handles()
            raise error
        return [f.result() for f in futures]

    def _undo_interrupted_creations(self, log_dir: str) -> None:
        """Remove the partitions a crash left half-created (see ``create_logs``)."""
        for name in sorted(os.listdir(log_dir)):
            if not name.startswith(CREATING_PREFIX) or name.endswith(".tmp"):
                continue
            path = os.path.join(log_dir, name)
            try:
                with open(path, encoding="utf-8") as f:
                    topic, *partitions = f.read().split()
                doomed = [f"{topic}-{int(p)}" for p in partitions]
            except (OSError, ValueError) as exc:
                logger.warning("%s: ignoring unreadable %s: %s", log_dir, name, exc)
                doomed = []
            for d in self.log_dirs:
                for dir_name in doomed:
                    if os.path.isdir(os.path.join(d, dir_name)):
                        logger.warning("%s: removing %s, whose creation never completed",
                                       d, dir_name)
                        remove(os.path.join(d, dir_name))
                fsync_dir(d)
            os.unlink(path)
            fsync_dir(log_dir)

    # -- configs -------------------------------------------------------------------------

    def config_for(self, topic: str) -> LogConfig:
        return self._topic_configs.get(topic, self.default_config)

    def update_topic_config(self, topic: str, config: LogConfig | None) -> None:
        """Use ``config`` for the topic's existing logs and for the ones created later;
        ``None``: the default config again (a deleted topic's name may come back)."""
        with self._lock:
            if config is None:
                self._topic_configs.pop(topic, None)
                config = self.default_config
            else:
                self._topic_configs[topic] = config
            for (t, _p), log in self._logs.items():
                if t == topic:
                    log.config = config

    # -- the table of logs ---------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def _add(self, key: tuple[str, int], log: Log, log_dir: str) -> None:
        """Under the lock (or while opening): ``log`` joins the table."""
        self._logs[key] = log
        self._log_dir_of[key] = log_dir
        self._dir_counts[log_dir] += 1

    def log_dir_of(self, topic: str, partition: int) -> str | None:
        """The log dir holding the partition's log, or None."""
        return self._log_dir_of.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        """The partition's log, created in the log dir with the fewest partitions if new.

        ``InvalidTopicError`` for an illegal topic name (nothing is created)."""
        return self._get_or_create_log(topic, partition, config, sync_dir=True)

    def _get_or_create_log(self, topic: str, partition: int, config: LogConfig | None, *,
                           sync_dir: bool) -> Log:
        """``get_or_create_log``; ``sync_dir=False``: the caller fsyncs the log dir."""
        key = (topic, partition)
        log = self._logs.get(key)
        if log is not None:
            return log
        validate_topic_name(topic)
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            raise ValueError(f"partition must be a non-negative int, not {partition!r}")
        with self._lock:
            self._check_open()
            log = self._logs.get(key)
            if log is not None:
                return log
            counts = self._dir_counts
            log_dir = min(self.log_dirs, key=lambda d: counts[d])
            if config is not None:
                self._topic_configs.setdefault(topic, config)
            path = os.path.join(log_dir, f"{topic}-{partition}")
            assert os.path.dirname(path) == log_dir
            existed = os.path.exists(path)
            try:
                log = Log(
                    path,
                    config or self.config_for(topic),
                    needs_recovery=False,
                    topic=topic,
                    partition=partition,
                    replicated=self.replicated,
                )
                if sync_dir:
                    fsync_dir(log_dir)
            except BaseException:
                if not existed:  # no half-made partition directory is left behind
                    remove(path)
                raise
            self._add(key, log, log_dir)
            logger.info("created log for %s-%d in %s", topic, partition, log_dir)
            return log

    def create_logs(self, topic: str, partitions: Iterable[int],
                    config: LogConfig | None = None) -> list[Log]:
        """Create the logs of a topic's ``partitions``, all or nothing.

        If one cannot be created (a full disk, no descriptor left), the ones this call
        created are deleted again and the error is raised.  A marker listing the partitions
        is written first and removed once all exist, so that a crash in between is undone
        at the next start.
        """
        partitions = [p for p in partitions if (topic, p) not in self._logs]
        if not partitions:
            return []
        validate_topic_name(topic)
        marker = os.path.join(self.log_dirs[0], f"{CREATING_PREFIX}{uuid.uuid4().hex}")
        write_atomically(marker, (" ".join([topic, *map(str, partitions)]) + "\n").encode())
        created: list[Log] = []
        try:
            for p in partitions:
                if (topic, p) not in self._logs:
                    created.append(self._get_or_create_log(topic, p, config, sync_dir=False))
            for log_dir in self.log_dirs:  # once, not once a partition
                fsync_dir(log_dir)
        except BaseException:
            for log in created:
                self.delete_log(log.topic, log.partition)
            raise
        finally:
            remove(marker)
        return created

    def open_files(self) -> int:
        """Descriptors the logs hold open now: the segment files the process's cache holds
        open (``SEGMENT_FILES``, at most its capacity), plus the log dirs' locks."""
        return len(SEGMENT_FILES) + len(self._lock_fds)

    def delete_log(self, topic: str, partition: int) -> bool:
        """Close and remove a partition's log; False if there was none.  Open slices of it
        stay readable until closed."""
        with self._lock:
            log = self._logs.pop((topic, partition), None)
            log_dir = self._log_dir_of.pop((topic, partition), None)
            if log_dir is not None:
                self._dir_counts[log_dir] -= 1
        if log is None:
            return False
        log.delete()
        self.cleaner.forget(topic, partition, log_dir)
        logger.info("deleted log for %s-%d", topic, partition)
        return True

    def logs(self) -> list[Log]:
        """A snapshot of every open log."""
        return list(self._logs.values())

    def __len__(self) -> int:
        return len(self._logs)

    def __contains__(self, key: tuple[str, int]) -> bool:
        return key in self._logs

    # -- the broker's timers -------------------------------------------------------------

    def flush_due_logs(self, now_ms: int | None = None,
                       on_error: ErrorHandler | None = None) -> list[tuple[str, int]]:
        """Flush every log whose ``flush_interval_ms`` has passed or that rolled a segment
        since its last flush; return which.  The broker calls this from a worker thread
        every so often (e.g. each second, or ``min(flush_interval_ms)`` if smaller).

        With ``on_error``, a log whose flush fails (``OSError``: a full or failing disk) is
        reported to it and the sweep goes on (its data stays unflushed, retried next time);
        without, the error is raised."""
        now = now_ms if now_ms is not None else _time.now_ms()
        flushed = []
        for log in self.logs():
            try:
                if log.flush_due(now) and log.maybe_flush(now):
                    flushed.append((log.topic, log.partition))
            except OSError as exc:
                if on_error is None:
                    raise
                on_error(log, exc)
        return flushed

    def cleanup_logs(self, now_ms: int | None = None, on_error: ErrorHandler | None = None
                     ) -> dict[tuple[str, int], list[int]]:
        """Apply retention to every log; return ``{(topic, partition): [deleted segment
        base offsets]}`` for the logs that lost segments.  The broker calls this every
        ``log.retention.check.interval.ms`` (Kafka's default: 5 minutes).  ``on_error`` as
        for ``flush_due_logs``."""
        now = now_ms if now_ms is not None else _time.now_ms()
        deleted = {}
        for log in self.logs():
            try:
                gone = log.delete_old_segments(now)
            except OSError as exc:
                if on_error is None:
                    raise
                on_error(log, exc)
                continue
            if gone:
                deleted[(log.topic, log.partition)] = gone
        return deleted

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Forget, in every log, the producers idle for ``producer_id_expiration_ms`` with
        no transaction open (Kafka runs this every
        ``producer.id.expiration.check.interval.ms``, 10 minutes); return how many went."""
        now = now_ms if now_ms is not None else _time.now_ms()
        return sum(log.remove_expired_producers(now) for log in self.logs() if not log.closed)

    def checkpoint_recovery_points(self) -> None:
        """Write each log dir's ``recovery-point-offset-checkpoint`` and
        ``log-start-offset-checkpoint`` (the broker's checkpoint timer calls this)."""
        with self._checkpoint_lock:
            failure: OSError | None = None
            try:
                self._checkpoint_recovery_points(self.log_dirs)
            except OSError as exc:
                failure = exc
            try:
                self._checkpoint_log_starts(self.log_dirs)
            except OSError as exc:
                failure = failure or exc
            if failure is not None:
                raise failure

    def _checkpoint_log_starts(self, log_dirs: Iterable[str]) -> None:
        """Under the checkpoint lock: write ``log-start-offset-checkpoint`` of ``log_dirs``
        with the logs whose start offset lies past their first segment's base offset
        (Kafka writes only those: the others' start is their first segment)."""
        with self._lock:
            by_dir: dict[str, dict[tuple[str, int], int]] = {d: {} for d in log_dirs}
            for key, log in self._logs.items():
                log_dir = self._log_dir_of[key]
                start = log.log_start_offset
                if log_dir in by_dir and start > log.segments[0].base_offset:
                    by_dir[log_dir][key] = start
        failure: OSError | None = None
        for log_dir, offsets in by_dir.items():
            try:
                OffsetCheckpoint(os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT_FILE)).write(
                    offsets)
            except OSError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    def delete_records_before(self, topic: str, partition: int, offset: int) -> int:
        """DeleteRecords for one partition: ``Log.delete_records_before(offset)``, then the
        log dir's ``log-start-offset-checkpoint`` is written before returning, so that an
        answered request survives a crash.

        ``offset`` -1 means the high watermark.  Returns the partition's log start offset
        afterwards (the low watermark of Kafka's response).  Raises
        ``UnknownTopicOrPartitionError`` when this broker has no such log,
        ``OffsetOutOfRangeError`` for an offset above the high watermark (or below -1),
        ``PolicyViolationError`` when the topic's cleanup.policy does not include delete,
        ``TrilogError`` when the log manager or the log is closed, and ``OSError`` when the
        checkpoint cannot be written (the log start offset has moved in memory, and segments
        wholly below it may be gone; a retry writes the checkpoint again).  Blocking: call it
        from a worker thread.
        """
        self._check_open()
        log = self._logs.get((topic, partition))
        if log is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} has no log here")
        low_watermark = log.delete_records_before(offset)
        with self._checkpoint_lock:
            log_dir = self._log_dir_of.get((topic, partition))
            if log_dir is not None:
                self._checkpoint_log_starts([log_dir])
        return low_watermark

    def checkpoint_high_watermarks(self) -> None:
        """Write each log dir's ``replication-offset-checkpoint`` with the high watermark of
        its ``replicated`` logs (Kafka's ``ReplicaManager.checkpointHighWatermarks``: the
        broker calls it every ``replica.high.watermark.checkpoint.interval.ms``, 5 s by
        default; ``shutdown`` calls it too).  A dir whose file cannot be written keeps the
        old one (a lower high watermark after a crash: safe); the first error is raised
        after the other dirs are written."""
        with self._checkpoint_lock:
            self._checkpoint_high_watermarks(self.log_dirs)

    def _checkpoint_high_watermarks(self, log_dirs: Iterable[str]) -> None:
        with self._lock:
            by_dir: dict[str, dict[tuple[str, int], int]] = {d: {} for d in log_dirs}
            for key, log in self._logs.items():
                log_dir = self._log_dir_of[key]
                if log_dir in by_dir and log.replicated:
                    by_dir[log_dir][key] = log.high_watermark
        failure: OSError | None = None
        for log_dir, offsets in by_dir.items():
            try:
                OffsetCheckpoint(os.path.join(log_dir, REPLICATION_OFFSET_CHECKPOINT_FILE)
                                 ).write(offsets)
            except OSError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    def _checkpoint_recovery_points(self, log_dirs: Iterable[str]) -> None:
        """Under the checkpoint lock: write ``recovery-point-offset-checkpoint`` of
        ``log_dirs``."""
        with self._lock:
            by_dir: dict[str, dict[tuple[str, int], int]] = {d: {} for d in log_dirs}
            for key, log in self._logs.items():
                log_dir = self._log_dir_of[key]
                if log_dir in by_dir:
                    by_dir[log_dir][key] = log.recovery_point
        failure: OSError | None = None
        for log_dir, offsets in by_dir.items():
            try:
                OffsetCheckpoint(os.path.join(log_dir, RECOVERY_POINT_CHECKPOINT_FILE)
                                 ).write(offsets)
            except OSError as exc:  # the others are still written; the old file stays
                failure = failure or exc
        if failure is not None:
            raise failure

    def truncate_to(self, topic: str, partition: int, offset: int) -> None:
        """A follower's truncation (Kafka's ``LogManager.truncateTo``): ``Log.truncate_to``,
        then the log dir's checkpoints are written before returning: the recovery point
        (a crash must re-validate what is appended at the truncated offsets again) and, for a
        replicated log, the high watermark (never one above the truncated log).

        ``UnknownTopicOrPartitionError`` when this broker has no such log; ``OSError`` when
        a checkpoint cannot be written (the log is truncated).  Blocking."""
        self._truncate(topic, partition, lambda log: log.truncate_to(offset))

    def truncate_fully_and_start_at(self, topic: str, partition: int, offset: int) -> None:
        """``Log.truncate_fully_and_start_at`` (a follower whose log ends below its leader's
        log start), then the log dir's checkpoints as for ``truncate_to``, the log start
        offset's too."""
        self._truncate(topic, partition, lambda log: log.truncate_fully_and_start_at(offset))

    def _truncate(self, topic: str, partition: int, cut: Callable[[Log], None]) -> None:
        self._check_open()
        log = self._logs.get((topic, partition))
        if log is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} has no log here")
        cut(log)
        with self._checkpoint_lock:
            log_dir = self._log_dir_of.get((topic, partition))
            if log_dir is None:
                return
            self._checkpoint_recovery_points([log_dir])
            self._checkpoint_log_starts([log_dir])
            if log.replicated:
                self._checkpoint_high_watermarks([log_dir])

    def shutdown(self) -> None:
        """Flush and close every log, checkpoint, write the clean-shutdown markers, and
        release the log dirs.  Idempotent.

        Needs no free space: on a full or failing disk every log is still closed; a log dir
        whose logs could not all be flushed gets no clean-shutdown marker (its logs are
        recovered at the next start), and a checkpoint that cannot be written keeps the old
        one (recovery then starts further back)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            logs = list(self._logs.items())
        unclean = self._close_logs(logs)
        try:
            self.checkpoint_recovery_points()
        except OSError as exc:
            logger.error("cannot write the recovery-point checkpoints at shutdown: %s", exc)
        if self.replicated or any(log.replicated for _key, log in logs):
            try:
                self.checkpoint_high_watermarks()
            except OSError as exc:
                logger.error("cannot write the high-watermark checkpoints at shutdown: %s", exc)
        for log_dir in self.log_dirs:
            if log_dir in unclean:
                continue
            try:
                write_atomically(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE), b"")
            except OSError as exc:
                logger.error("%s: cannot write the clean-shutdown marker (%s); its logs will be "
                             "recovered at the next start", log_dir, exc)
        self._unlock_dirs()
        logger.info("log manager shut down (%d logs)", len(logs))

    close = shutdown

    def _close_logs(self, logs: list[tuple[tuple[str, int], Log]]) -> set[str]:
        """Close every log without an fsync, then make each log dir's file system durable
        in one ``syncfs`` (not three fsyncs a log: 50,000 logs stop in seconds) and move
        the recovery points to the log ends.  Return the log dirs that could not be made
        durable (their logs are recovered at the next start)."""
        unclean: set[str] = set()
        for key, log in logs:
            try:
                log.close(sync=False)
            except OSError as exc:
                log_dir = self._log_dir_of[key]
                unclean.add(log_dir)
                logger.error("%s: cannot write %s-%d at shutdown (%s); it will be recovered "
                             "at the next start", log_dir, log.topic, log.partition, exc)
        for log_dir in self.log_dirs:
            if log_dir in unclean:
                continue
            try:
                sync_filesystem(log_dir)
            except OSError as exc:
                unclean.add(log_dir)
                logger.error("%s: cannot sync its file system at shutdown (%s); its logs "
                             "will be recovered at the next start", log_dir, exc)
        for key, log in logs:
            if self._log_dir_of[key] not in unclean:
                log.synced()
        return unclean

    def _check_open(self) -> None:
        if self._closed:
            raise TrilogError("the log manager is shut down")

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

