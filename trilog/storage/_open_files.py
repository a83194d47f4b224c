"""``SegmentFiles``: the bounded cache of open segment log files, one per process.

A broker with more partitions than descriptors (50,000 partitions under ``ulimit -n`` 1024)
cannot keep every segment's ``.log`` file open, as Kafka does.  So a ``LogSegment`` opens its
file when it is first used and the cache closes the least recently used ones once more than
``capacity`` are open (the broker sets it from its descriptor budget: what the connections'
floor and the reserve leave).  A closed segment file is opened again on its next use.

The hot path stays a plain attribute read: ``LogSegment.fd`` of an open file returns it and
sets the segment's ``used`` flag (the clock algorithm's reference bit, instead of moving the
segment in a list on every use).  Eviction walks from the oldest opened segment: one used
since the hand last passed keeps its file and goes to the back with the flag cleared.

Who may close whose descriptor: whoever uses ``LogSegment.fd`` raw (appends, truncation,
recovery) holds the segment's ``guard`` (its ``Log``'s append lock, held while opening too);
eviction only closes a file whose guard it can take without waiting, so it never closes a
descriptor in use, and a thread never waits here for another log's lock (no lock order to
break).  Segments without a guard (the cleaner's segment being written, a segment outside
a ``Log``) or ``pinned`` ones (the cleaner's replaced segments, unlinked but still read) are
never evicted; readers take descriptors of their own (``LogSegment.dup_fd``), which the cache
neither counts nor closes: a fetch's ``sendfile`` reads its own duplicate.

``capacity`` None: no bound.  A process that sets none gets half its soft descriptor limit
(``default_capacity``).  Thread-safe.
"""

from __future__ import annotations

import resource
import threading
from collections import OrderedDict
from typing import Protocol


class CachedFile(Protocol):
    """What the cache needs of a segment."""

    used: bool

    def evict(self) -> bool:
        """Close the file if nobody uses it (its guard free); whether it did."""


class SegmentFiles:
    """Open segment files, at most ``capacity`` of them once evictable ones exist."""

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._open: OrderedDict[CachedFile, None] = OrderedDict()
        #: How many files the cache has closed (for tests and metrics).
        self.evictions = 0

    def __len__(self) -> int:
        """The segment files open now (those the cache could not close counted too)."""
        return len(self._open)

    def opened(self, segment: CachedFile) -> None:
        """``segment`` opened its file: count it, and close others if over capacity."""
        with self._lock:
            self._open[segment] = None
            capacity = self.capacity
            if capacity is not None and len(self._open) > capacity:
                self._evict_locked(len(self._open) - capacity, segment)

    def closed(self, segment: CachedFile) -> None:
        """``segment`` closed its file (closed, deleted or evicted by its own log)."""
        with self._lock:
            self._open.pop(segment, None)

    def set_capacity(self, capacity: int | None) -> None:
        """A new bound, applied now (files over it are closed where nobody uses them)."""
        with self._lock:
            self.capacity = capacity
            if capacity is not None and len(self._open) > capacity:
                self._evict_locked(len(self._open) - capacity, None)

    def _evict_locked(self, excess: int, keep: CachedFile | None) -> None:
        """Close ``excess`` files, oldest unused first; one pass of the clock at most
        (twice round: a first pass may only clear the used flags)."""
        order = self._open
        budget = 2 * len(order)
        while excess > 0 and budget > 0:
            budget -= 1
            segment = next(iter(order))
            if segment is keep:
                order.move_to_end(segment)
                continue
            if segment.used:
                segment.used = False
                order.move_to_end(segment)
                continue
            if segment.evict():
                del order[segment]
                self.evictions += 1
                excess -= 1
            else:
                order.move_to_end(segment)


def default_capacity() -> int:
    """Half the process's soft descriptor limit: the bound of a process that sets none (a
    tool or a test opening a ``LogManager``; the broker sets it from its budget)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 16
    return max(16, soft // 2)


#: The process's cache: the descriptor table is per process, as is its bound.
SEGMENT_FILES = SegmentFiles(default_capacity())
