"""``LogManager``: every partition log of a broker, across its ``log.dirs``.

Each log dir holds ``<topic>-<partition>/`` directories, a ``recovery-point-offset-checkpoint``
and, between a clean shutdown and the next start, the ``.kafka_cleanshutdown`` marker.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from collections.abc import Iterable, Mapping

from trilog._topic import validate_topic_name
from trilog.errors import TrilogError
from trilog.storage._checkpoint import OffsetCheckpoint
from trilog.storage._config import LogConfig
from trilog.storage._log import Log, _now_ms, _unlink, parse_partition_dir_name

logger = logging.getLogger("trilog.storage")

RECOVERY_POINT_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"


class LogManager:
    """Opens, creates, flushes, cleans and closes the logs of every log dir.

    At start every ``<topic>-<partition>`` directory is opened; logs are recovered
    (re-validated after their recovery point) only in a log dir without the clean-shutdown
    marker, which is then removed so that a crash is detected next time.  Each log dir is
    locked (``flock`` on ``.lock``) against a second broker.

    Invariants: at most one ``Log`` per (topic, partition); a log's directory is
    ``<log dir>/<topic>-<partition>`` with a topic name that passed ``validate_topic_name``,
    so no name can reach outside a log dir.

    Thread-safe: the broker calls it from worker threads.  One lock guards the table of
    logs; flushing, retention and checkpointing work on snapshots of it, and each ``Log``
    is itself thread-safe.
    """

    def __init__(
        self,
        log_dirs: Iterable[str | os.PathLike] | str | os.PathLike,
        default_config: LogConfig | None = None,
        *,
        topic_configs: Mapping[str, LogConfig] | None = None,
    ) -> None:
        if isinstance(log_dirs, (str, os.PathLike)):
            log_dirs = [log_dirs]
        self.log_dirs = [os.path.abspath(os.fspath(d)) for d in log_dirs]
        if not self.log_dirs:
            raise ValueError("at least one log dir is needed")
        if len(set(self.log_dirs)) != len(self.log_dirs):
            raise ValueError(f"duplicate log dirs in {self.log_dirs}")
        self.default_config = default_config or LogConfig()
        self._topic_configs = dict(topic_configs or {})
        self._lock = threading.RLock()
        self._checkpoint_lock = threading.Lock()
        self._logs: dict[tuple[str, int], Log] = {}
        self._log_dir_of: dict[tuple[str, int], str] = {}
        self._lock_fds: list[int] = []
        self._closed = False
        try:
            for log_dir in self.log_dirs:
                os.makedirs(log_dir, exist_ok=True)
                self._lock_dir(log_dir)
            for log_dir in self.log_dirs:
                self._load_dir(log_dir)
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
        names = sorted(os.listdir(log_dir))
        if not clean and any(os.path.isdir(os.path.join(log_dir, n)) for n in names):
            logger.warning("%s: no clean-shutdown marker; recovering its logs", log_dir)
        for name in names:
            path = os.path.join(log_dir, name)
            if not os.path.isdir(path):
                continue
            if name.endswith(".deleted"):
                _unlink(path)  # a delete interrupted by a crash
                continue
            try:
                topic, partition = parse_partition_dir_name(name)
                validate_topic_name(topic)
            except (ValueError, TrilogError) as exc:
                logger.warning("%s: skipping directory %r: %s", log_dir, name, exc)
                continue
            key = (topic, partition)
            if key in self._logs:
                logger.warning(
                    "%s: %s-%d is also in %s; skipping this copy",
                    log_dir,
                    topic,
                    partition,
                    self._log_dir_of[key],
                )
                continue
            self._logs[key] = Log(
                path,
                self.config_for(topic),
                recovery_point=recovery_points.get(key, 0),
                needs_recovery=not clean,
                topic=topic,
                partition=partition,
            )
            self._log_dir_of[key] = log_dir
        if clean:
            os.unlink(marker)
            _fsync_dir(log_dir)

    # -- configs -------------------------------------------------------------------------

    def config_for(self, topic: str) -> LogConfig:
        return self._topic_configs.get(topic, self.default_config)

    def update_topic_config(self, topic: str, config: LogConfig) -> None:
        """Use ``config`` for the topic's existing logs and for the ones created later."""
        with self._lock:
            self._topic_configs[topic] = config
            for (t, _p), log in self._logs.items():
                if t == topic:
                    log.config = config

    # -- the table of logs ---------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        """The partition's log, created in the log dir with the fewest partitions if new.

        ``InvalidTopicError`` for an illegal topic name (nothing is created)."""
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
            counts = {d: 0 for d in self.log_dirs}
            for d in self._log_dir_of.values():
                counts[d] += 1
            log_dir = min(self.log_dirs, key=lambda d: counts[d])
            if config is not None:
                self._topic_configs.setdefault(topic, config)
            path = os.path.join(log_dir, f"{topic}-{partition}")
            assert os.path.dirname(path) == log_dir
            log = Log(
                path,
                config or self.config_for(topic),
                needs_recovery=False,
                topic=topic,
                partition=partition,
            )
            _fsync_dir(log_dir)
            self._logs[key] = log
            self._log_dir_of[key] = log_dir
            logger.info("created log for %s-%d in %s", topic, partition, log_dir)
            return log

    def delete_log(self, topic: str, partition: int) -> bool:
        """Close and remove a partition's log; False if there was none.  Open slices of it
        stay readable until closed."""
        with self._lock:
            log = self._logs.pop((topic, partition), None)
            self._log_dir_of.pop((topic, partition), None)
        if log is None:
            return False
        log.delete()
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

    def flush_due_logs(self, now_ms: int | None = None) -> list[tuple[str, int]]:
        """Flush every log whose ``flush_interval_ms`` has passed or that rolled a segment
        since its last flush; return which.  The broker calls this from a worker thread
        every so often (e.g. each second, or ``min(flush_interval_ms)`` if smaller)."""
        now = now_ms if now_ms is not None else _now_ms()
        flushed = []
        for log in self.logs():
            if log.flush_due(now) and log.maybe_flush(now):
                flushed.append((log.topic, log.partition))
        return flushed

    def cleanup_logs(self, now_ms: int | None = None) -> dict[tuple[str, int], list[int]]:
        """Apply retention to every log; return ``{(topic, partition): [deleted segment
        base offsets]}`` for the logs that lost segments.  The broker calls this every
        ``log.retention.check.interval.ms`` (Kafka's default: 5 minutes)."""
        now = now_ms if now_ms is not None else _now_ms()
        deleted = {}
        for log in self.logs():
            gone = log.delete_old_segments(now)
            if gone:
                deleted[(log.topic, log.partition)] = gone
        return deleted

    def checkpoint_recovery_points(self) -> None:
        """Write each log dir's ``recovery-point-offset-checkpoint``."""
        with self._checkpoint_lock:
            with self._lock:
                by_dir: dict[str, dict[tuple[str, int], int]] = {d: {} for d in self.log_dirs}
                for key, log in self._logs.items():
                    by_dir[self._log_dir_of[key]][key] = log.recovery_point
            for log_dir, offsets in by_dir.items():
                OffsetCheckpoint(os.path.join(log_dir, RECOVERY_POINT_CHECKPOINT_FILE)).write(
                    offsets
                )

    def shutdown(self) -> None:
        """Flush and close every log, checkpoint, write the clean-shutdown markers, and
        release the log dirs.  Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            logs = list(self._logs.values())
        for log in logs:
            log.close()  # flushes first
        self.checkpoint_recovery_points()
        for log_dir in self.log_dirs:
            marker = os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            _fsync_dir(log_dir)
        self._unlock_dirs()
        logger.info("log manager shut down cleanly (%d logs)", len(logs))

    close = shutdown

    def _check_open(self) -> None:
        if self._closed:
            raise TrilogError("the log manager is shut down")

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc_info) -> None:
        self.shutdown()


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
