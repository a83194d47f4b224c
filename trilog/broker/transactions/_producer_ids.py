"""Producer ids, unique across brokers and restarts (Kafka's ``ProducerIdManager``): what
InitProducerId hands out (``_coordinator.py``), to idempotent and transactional producers.
"""

from __future__ import annotations

import logging
import os
import threading

from trilog._time import now_ms
from trilog.storage import write_atomically

log = logging.getLogger("trilog.broker.requests")


class ProducerIds:
    """Producer ids unique across brokers and restarts.

    ``ms << 20 | (broker_id % 256) << 12 | counter`` stays below 2**63 until the year 2248
    and allows 4096 ids per broker per millisecond of uptime before it borrows from the
    future (it never repeats: the counter carries into the time bits).  Ids are reserved in
    blocks in ``producer-id.checkpoint`` (first log dir), and a restarted broker starts
    above the reservation even if the clock went back: a reused id could make a new
    producer's first batch look like a duplicate of an old producer's.
    """

    FILE = "producer-id.checkpoint"
    BLOCK = 1000  # ids reserved on disk at a time

    def __init__(self, broker_id: int, directory: str) -> None:
        self.path = self._path = os.path.join(directory, self.FILE)
        last = self._read()
        ms = max(now_ms(), (last >> 20) + 1)
        self._base = (ms << 20) | ((broker_id % 256) << 12)
        self._n = 0
        self._reserved = 0  # ids below this index are covered by the file
        self._lock = threading.Lock()

    def _id(self, n: int) -> int:
        return self._base + (n % 4096) + (n // 4096) * (1 << 20)

    def allocate(self) -> int:
        """The next id; the file covers it before it is handed out (blocking: a thread)."""
        with self._lock:
            n = self._n
            if n >= self._reserved:
                self._reserve(n + self.BLOCK)  # raises OSError: nothing handed out
            self._n = n + 1
            return self._id(n)

    def _reserve(self, until: int) -> None:
        """Cover the ids below index ``until`` on disk (file and rename made durable)."""
        write_atomically(self._path, f"{self._id(until - 1)}\n".encode())
        self._reserved = until

    def _read(self) -> int:
        try:
            with open(self._path) as f:
                return int(f.read().strip())
        except FileNotFoundError:
            return -1
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable %s (%s)", self._path, exc)
            return -1
