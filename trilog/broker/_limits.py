"""What the broker can hold: file descriptors, connections, partitions, and quiet logging.

A broker shares one descriptor table between its connections and its log (an open ``.log``
file per segment, plus the short-lived files of checkpoints, rolls, fetches and new
partitions).  Kafka leaves the balance to the operator; a flood of connections then makes
the next checkpoint fail.  Here the log comes first:

- at start the soft ``RLIMIT_NOFILE`` is raised to the hard limit (:func:`raise_fd_limit`);
- :class:`DescriptorBudget` says how many connections fit beside the log's open files and
  ``RESERVED_FDS`` more (the acceptor refuses the rest), and how many new partitions fit
  beside the connections (CreateTopics refuses the rest).  Partitions may use half of the
  reserve, so that a topic can still be created while connections are at their cap; the
  other half is for short-lived work (checkpoints, rolls, fetches).

:class:`RateLimitedLog` keeps a fault that repeats (a full disk, a connection flood) to one
log line per key and interval.
"""

from __future__ import annotations

import logging
import resource
import time
from typing import Callable

from trilog.errors import InvalidPartitionsError, PolicyViolationError

log = logging.getLogger("trilog.broker")

#: Descriptors never given to connections nor to new partitions: checkpoints, segment rolls,
#: fetches (one duplicate per partition being sent), ZooKeeper, worker threads, listeners.
RESERVED_FDS = 128
#: How long the count of the log's open files may be reused (it walks every partition).
_LOG_FILES_TTL_S = 1.0


def raise_fd_limit() -> int:
    """Raise the soft descriptor limit to the hard one; return the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft if soft != resource.RLIM_INFINITY else target
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:  # e.g. above fs.nr_open
        log.warning("cannot raise the descriptor limit from %d to %d: %s", soft, target, exc)
        return soft
    return target


class DescriptorBudget:
    """Shares ``limit`` descriptors between the log, connections and ``RESERVED_FDS``.

    ``log_files()`` counts the descriptors the log holds open now (``LogManager.open_files``);
    it is called at most once a second.  Runs in the trio thread.
    """

    def __init__(self, limit: int, log_files: Callable[[], int], *,
                 reserved: int = RESERVED_FDS) -> None:
        self.limit = limit
        self.reserved = reserved
        self._log_files = log_files
        self._cached = (0, -_LOG_FILES_TTL_S)  # (count, when)
        #: the connections open now (the network keeps it current)
        self.open_connections = 0

    def log_files(self, *, fresh: bool = False) -> int:
        count, when = self._cached
        now = time.monotonic()
        if fresh or now - when >= _LOG_FILES_TTL_S:
            count = self._log_files()
            self._cached = (count, now)
        return count

    def connection_room(self) -> int:
        """How many connections may be open at once, beside the log and the reserve."""
        return max(0, self.limit - self.reserved - self.log_files())

    def partition_room(self, open_connections: int | None = None) -> int:
        """How many more partitions (one open file each) fit beside the open connections
        (``open_connections``, or those the network counts), into half of the reserve (see
        the module docstring)."""
        if open_connections is None:
            open_connections = self.open_connections
        held = self.log_files(fresh=True) + open_connections
        return max(0, self.limit - self.reserved // 2 - held)

    def describe(self) -> str:
        return (f"descriptor limit {self.limit}: {self.log_files(fresh=True)} held by the log, "
                f"{self.reserved} reserved for its work, room for {self.connection_room()} "
                "connections")


class RateLimitedLog:
    """Log a message at most once per ``key`` and ``interval_s``; count what was held back.

    ``log.warning(key, msg, *args)`` logs now, with "(N similar messages suppressed)" added
    when earlier ones were held back, or holds it back.  Not thread-safe per key: callers in
    worker threads may race on the count, which only affects that count.
    """

    def __init__(self, logger: logging.Logger, interval_s: float) -> None:
        self._logger = logger
        self.interval_s = interval_s
        self._last: dict[object, tuple[float, int]] = {}  # key -> (when logged, suppressed)

    def log(self, level: int, key: object, msg: str, *args: object) -> bool:
        """Log now if ``key`` was quiet for ``interval_s``; return whether it logged."""
        now = time.monotonic()
        when, suppressed = self._last.get(key, (-self.interval_s, 0))
        if now - when < self.interval_s:
            self._last[key] = (when, suppressed + 1)
            return False
        self._last[key] = (now, 0)
        if suppressed:
            msg += " (%d similar messages suppressed)"
            args = (*args, suppressed)
        self._logger.log(level, msg, *args)
        return True

    def info(self, key: object, msg: str, *args: object) -> bool:
        return self.log(logging.INFO, key, msg, *args)

    def warning(self, key: object, msg: str, *args: object) -> bool:
        return self.log(logging.WARNING, key, msg, *args)

    def error(self, key: object, msg: str, *args: object) -> bool:
        return self.log(logging.ERROR, key, msg, *args)


class PartitionBudget:
    """The partitions a CreateTopics (or an auto-creation) may add to this broker.

    ``held()`` counts the partitions this broker holds; ``descriptor_room()`` how many more
    open files fit beside the connections (``DescriptorBudget.partition_room``).  ``check``
    raises the error Kafka's clients understand before anything is created.
    """

    def __init__(self, per_topic: int, per_broker: int, held: Callable[[], int],
                 descriptor_room: Callable[[], int]) -> None:
        self.per_topic = per_topic
        self.per_broker = per_broker
        self._held = held
        self._descriptor_room = descriptor_room

    def check(self, topic: str, partitions: int, here: int) -> None:
        """A topic of ``partitions`` partitions, ``here`` of them on this broker."""
        if partitions > self.per_topic:
            raise InvalidPartitionsError(
                f"topic {topic!r} with {partitions} partitions: a topic may have at most "
                f"{self.per_topic} (max.partitions.per.topic)"
            )
        held = self._held()
        if held + here > self.per_broker:
            raise PolicyViolationError(
                f"topic {topic!r} would put {here} more partitions on this broker, which holds "
                f"{held} of at most {self.per_broker} (max.broker.partitions)"
            )
        room = self._descriptor_room()
        if here > room:
            raise PolicyViolationError(
                f"topic {topic!r} needs {here} file descriptors on this broker, and its budget "
                f"has room for {room} beside the open connections (raise `ulimit -n`)"
            )
