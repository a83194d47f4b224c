"""What the broker can hold: file descriptors, connections, partitions, and quiet logging.

A broker shares one descriptor table between its connections and its log.  Kafka keeps a
descriptor open per segment and leaves the balance to the operator: under ``ulimit -n``
1024 a thousand partitions left no room for a connection, and a restart again served
nobody.  Here neither side can starve the other:

- at start the soft ``RLIMIT_NOFILE`` is raised to the hard limit (:func:`raise_fd_limit`);
- connections always have a floor, ``max(64, limit / 10)`` descriptors (:func:`connection_floor`);
- ``RESERVED_FDS`` are for short-lived work: checkpoints, rolls, fetches' duplicates (at
  most ``MAX_OPEN_SLICES`` a fetch response), ZooKeeper, worker threads, listeners;
- the log gets the rest (:meth:`DescriptorBudget.log_capacity`) as the bound of its cache of
  open segment files (``trilog.storage.SEGMENT_FILES``): a segment file is opened on use and
  the least recently used ones are closed, so partitions cost memory, not descriptors, and
  a broker holds any number of them (``max.broker.partitions`` is the limit that remains);
- connections may use what the log does not hold now (``connection_room``), never less
  than the floor.

New partitions are refused (POLICY_VIOLATION naming ``ulimit -n``) only when the limit is so
low that the log's share is below ``MIN_LOG_FILES``: a cache that small would reopen files
on every request.

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

#: Descriptors never given to connections nor to the log: checkpoints, segment rolls,
#: fetches (``MAX_OPEN_SLICES`` duplicates a response being sent), ZooKeeper, worker
#: threads, listeners.
RESERVED_FDS = 128
#: A fetch response holds at most this many open slices (a descriptor each, for sendfile);
#: the partitions past them are read into memory (a 1,000-partition fetch under a limit of
#: 1024 would otherwise need 1,000 descriptors at once).
MAX_OPEN_SLICES = 16
#: Connections always have at least ``max(CONNECTION_FLOOR, limit // 10)`` descriptors.
CONNECTION_FLOOR = 64
#: Below this many open segment files for the log, new partitions are refused.
MIN_LOG_FILES = 32
#: How long the count of the log's open files may be reused.
_LOG_FILES_TTL_S = 1.0


def connection_floor(limit: int) -> int:
    """The descriptors kept for connections whatever the log holds."""
    return max(CONNECTION_FLOOR, limit // 10)


def log_capacity(limit: int, reserved: int = RESERVED_FDS) -> int:
    """How many segment files the log may keep open under ``limit`` descriptors."""
    return max(0, limit - reserved - connection_floor(limit))


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
    """Shares ``limit`` descriptors between the log, connections and ``RESERVED_FDS`` (see
    the module docstring).

    ``log_files()`` counts the descriptors the log holds open now (``LogManager.open_files``);
    it is called at most once a second.  Runs in the trio thread.
    """

    def __init__(self, limit: int, log_files: Callable[[], int], *,
                 reserved: int = RESERVED_FDS) -> None:
        self.limit = limit
        self.reserved = reserved
        self.floor = connection_floor(limit)
        self._log_files = log_files
        self._cached = (0, -_LOG_FILES_TTL_S)  # (count, when)
        #: the connections open now (the network keeps it current)
        self.open_connections = 0

    def log_capacity(self) -> int:
        """How many segment files the log may keep open (its cache's bound)."""
        return log_capacity(self.limit, self.reserved)

    def log_files(self, *, fresh: bool = False) -> int:
        count, when = self._cached
        now = time.monotonic()
        if fresh or now - when >= _LOG_FILES_TTL_S:
            count = self._log_files()
            self._cached = (count, now)
        return count

    def connection_room(self) -> int:
        """How many connections may be open at once: what the log and the reserve leave,
        never less than the floor."""
        return max(self.floor, self.limit - self.reserved - self.log_files())

    def partition_room(self) -> int | None:
        """None: any number of new partitions fit (they cost no descriptor of their own);
        0 when the log's share of the limit is below ``MIN_LOG_FILES``."""
        return None if self.log_capacity() >= MIN_LOG_FILES else 0

    def describe(self) -> str:
        return (f"descriptor limit {self.limit}: up to {self.log_capacity()} segment files "
                f"open ({self.log_files(fresh=True)} now), {self.reserved} reserved for the "
                f"log's work, at least {self.floor} for connections (room for "
                f"{self.connection_room()} now)")


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
    fit the descriptor budget (``DescriptorBudget.partition_room``: None, any number).
    ``check`` raises the error Kafka's clients understand before anything is created.
    """

    def __init__(self, per_topic: int, per_broker: int, held: Callable[[], int],
                 descriptor_room: Callable[[], int | None]) -> None:
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
        if room is not None and here > room:
            raise PolicyViolationError(
                f"topic {topic!r}: the descriptor limit leaves the log of this broker too few "
                f"files beside the connections and the reserve (at least {MIN_LOG_FILES}): "
                "raise `ulimit -n`"
            )
