"""InitProducerId (22): producer ids for idempotent producers, the default of today's Kafka
clients.

The principal needs IdempotentWrite on the cluster, or Write on some topic (Kafka's rule).
Transactions are not supported yet: a transactional id gets INVALID_REQUEST.  The sequence
numbers of each id are checked by the log it appends to (``storage/_producer_state.py``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

import trio

from trilog._time import now_ms
from trilog.broker.cluster import Cluster
from trilog.broker.network import ApiHandler
from trilog.broker.security import Access, AclOperation, ResourceType
from trilog.errors import ClusterAuthorizationFailedError, InvalidRequestError, KafkaStorageError
from trilog.protocol import ApiKey, InitProducerIdResponse, RequestHeader
from trilog.storage import write_atomically

log = logging.getLogger("trilog.broker.requests")


class ProducerIdApi:
    """Serves InitProducerId.  Runs in the trio thread; reservations go to a worker thread."""

    def __init__(self, cluster: Cluster, access: Access, ids: ProducerIds) -> None:
        self.cluster = cluster
        self.access = access
        self.ids = ids

    def apis(self) -> Mapping[int, ApiHandler]:
        return {ApiKey.INIT_PRODUCER_ID: self.init_producer_id}

    async def init_producer_id(self, request: Any, header: RequestHeader) -> Any:
        R = InitProducerIdResponse
        if request.transactional_id is not None:
            await trio.lowlevel.checkpoint()
            return R(throttle_time_ms=0, error_code=InvalidRequestError.code, producer_id=-1,
                     producer_epoch=-1)
        access = self.access
        if access.enabled and not (
                access(AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER)
                or any(access(AclOperation.WRITE, ResourceType.TOPIC, t)
                       for t in self.cluster.topics())):
            await trio.lowlevel.checkpoint()
            return R(throttle_time_ms=0, error_code=ClusterAuthorizationFailedError.code,
                     producer_id=-1, producer_epoch=-1)
        try:
            producer_id = await trio.to_thread.run_sync(self.ids.allocate)
        except OSError as exc:
            log.error("cannot record producer ids in %s: %s", self.ids.path, exc)
            return R(throttle_time_ms=0, error_code=KafkaStorageError.code, producer_id=-1,
                     producer_epoch=-1)
        return R(throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=0)


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
