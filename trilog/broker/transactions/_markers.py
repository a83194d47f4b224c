"""Transaction markers, from the coordinator to the partitions' leaders (Kafka's
``TransactionMarkerChannelManager``).

Once a transaction's PrepareCommit or PrepareAbort is in the transaction log, a COMMIT or
ABORT marker must reach every partition of the transaction.  ``write_markers`` groups the
partitions by their leader now, sends each leader one WriteTxnMarkers request (a leader that
is this broker is asked in process, without the network), and retries what did not land:

- a partition whose leader moved, is unknown, has too few in-sync replicas, timed out or
  failed on disk: again after a pause, to its leader then (Kafka retries these forever);
- a partition whose topic was deleted: dropped (nothing there to mark);
- TRANSACTION_COORDINATOR_FENCED / INVALID_PRODUCER_EPOCH: a newer coordinator or epoch owns
  the transaction; this one gives up (``MarkersFenced``).

It returns when every marker is written, or raises ``MarkersAbandoned`` when ``still_mine()``
says the coordinator lost the transaction's partition (the new coordinator sends them
again).  One connection per broker, kept open and shared by every transaction's requests.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

import trio

from trilog._topic import PartitionKey
from trilog.broker._limits import RateLimitedLog
from trilog.broker.cluster import Cluster
from trilog.errors import (
    NO_ERROR,
    InvalidProducerEpochError,
    NetworkError,
    ProducerFencedError,
    TransactionCoordinatorFencedError,
    TrilogError,
    UnknownTopicOrPartitionError,
)
from trilog.net import BrokerConnection, ClientSecurity, open_connection
from trilog.protocol import WriteTxnMarkersRequest

log = logging.getLogger("trilog.broker.transactions")
_unreachable = RateLimitedLog(log, 30.0)

#: The pause before markers that did not land are sent again (doubling up to the maximum).
RETRY_BACKOFF_S = 0.05
MAX_RETRY_BACKOFF_S = 1.0
_FENCED = frozenset({TransactionCoordinatorFencedError.code, InvalidProducerEpochError.code,
                     ProducerFencedError.code})


class MarkersFenced(TrilogError):
    """A partition leader knows a newer coordinator or producer epoch: this coordinator's
    markers are no longer wanted."""


class MarkersAbandoned(TrilogError):
    """The coordinator lost the transaction's partition while its markers were sent."""


class Marker(Protocol):
    """Write one marker to partitions led here: ``{partition: error code}``."""

    def __call__(self, producer_id: int, producer_epoch: int, commit: bool,
                 coordinator_epoch: int, partitions: list[PartitionKey]
                 ) -> Awaitable[Mapping[PartitionKey, int]]: ...


class TransactionMarkers:
    """Sends markers; ``run()`` holds the connections (in the coordinator's nursery)."""

    def __init__(self, cluster: Cluster, write_local: Marker, *,
                 security: ClientSecurity | None, timeout_ms: int) -> None:
        self.cluster = cluster
        self.write_local = write_local
        self.security = security
        self.timeout_s = timeout_ms / 1000
        self._nursery: trio.Nursery | None = None
        self._connections: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, trio.Lock] = {}

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None

    async def write_markers(self, producer_id: int, producer_epoch: int, commit: bool,
                            coordinator_epoch: int, partitions: frozenset[PartitionKey],
                            still_mine: Callable[[], bool]) -> None:
        """Write the marker to every partition; see the module docstring."""
        remaining = set(partitions)
        backoff = RETRY_BACKOFF_S
        while remaining:
            if not still_mine():
                raise MarkersAbandoned(f"producer {producer_id}: the coordinator moved")
            by_leader: dict[int, list[PartitionKey]] = {}
            for tp in sorted(remaining):
                leader = self.cluster.leader(*tp)
                if leader is None:  # the topic or partition is gone: nothing to mark
                    log.info("no marker for %s-%d (deleted)", *tp)
                    remaining.discard(tp)
                elif leader >= 0:
                    by_leader.setdefault(leader, []).append(tp)
            results: dict[PartitionKey, int] = {}

            async def send(leader: int, tps: list[PartitionKey]) -> None:
                results.update(await self._send(leader, producer_id, producer_epoch, commit,
                                                coordinator_epoch, tps))

            async with trio.open_nursery() as nursery:
                for leader, tps in by_leader.items():
                    nursery.start_soon(send, leader, tps)
            for tp, code in results.items():
                if code == NO_ERROR:
                    remaining.discard(tp)
                elif code in _FENCED:
                    raise MarkersFenced(f"{tp[0]}-{tp[1]} refused the marker of producer "
                                        f"{producer_id} (error {code})")
                elif code == UnknownTopicOrPartitionError.code and self.cluster.leader(*tp) is None:
                    remaining.discard(tp)
            if remaining:
                await trio.sleep(backoff)
                backoff = min(backoff * 2, MAX_RETRY_BACKOFF_S)

    async def _send(self, leader: int, producer_id: int, producer_epoch: int, commit: bool,
                    coordinator_epoch: int, tps: list[PartitionKey]) -> dict[PartitionKey, int]:
        """One leader's answer per partition (-1 for every one when it cannot be asked)."""
        if leader == self.cluster.broker.node_id:
            return dict(await self.write_local(producer_id, producer_epoch, commit,
                                               coordinator_epoch, tps))
        topics: dict[str, list[int]] = {}
        for topic, partition in tps:
            topics.setdefault(topic, []).append(partition)
        R = WriteTxnMarkersRequest
        M = R.WritableTxnMarker
        request = R(markers=[M(producer_id=producer_id, producer_epoch=producer_epoch,
                               transaction_result=commit, coordinator_epoch=coordinator_epoch,
                               topics=[M.WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                                       for t, ps in topics.items()])])
        try:
            conn = await self._connection(leader)
            response = await conn.request(request)
        except (TrilogError, OSError) as exc:
            _unreachable.warning(leader, "cannot send transaction markers to broker %d (%s); "
                                 "retrying", leader, exc)
            return {tp: -1 for tp in tps}
        out: dict[PartitionKey, int] = {}
        for marker in response.markers:
            for topic in marker.topics:
                for p in topic.partitions:
                    out[(topic.name, p.partition_index)] = p.error_code
        return out

    async def _connection(self, broker_id: int) -> BrokerConnection:
        conn = self._connections.get(broker_id)
        if conn is not None and not conn.closed:
            return conn
        lock = self._connecting.setdefault(broker_id, trio.Lock())
        async with lock:
            conn = self._connections.get(broker_id)
            if conn is not None and not conn.closed:
                return conn
            node = next((b for b in self.cluster.brokers() if b.node_id == broker_id), None)
            if node is None or self._nursery is None:
                raise NetworkError(f"broker {broker_id} is not live")
            with trio.fail_after(self.timeout_s):
                conn = await self._nursery.start(self._hold, broker_id, node.host, node.port)
            return conn

    async def _hold(self, broker_id: int, host: str, port: int,
                    task_status: trio.TaskStatus[BrokerConnection] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        """Keep a connection to ``broker_id`` open until it fails (then the next request
        opens another)."""
        conn: BrokerConnection | None = None
        try:
            async with open_connection(host, port, security=self.security,
                                       client_id=f"txn-coordinator-{self.cluster.broker.node_id}",
                                       connect_timeout_s=self.timeout_s,
                                       request_timeout_s=self.timeout_s) as conn:
                self._connections[broker_id] = conn
                task_status.started(conn)
                await conn.wait_closed()
        except (TrilogError, OSError):
            if conn is None:
                raise  # (to the caller of start)
        finally:
            if conn is not None and self._connections.get(broker_id) is conn:
                del self._connections[broker_id]
