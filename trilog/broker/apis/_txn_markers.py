"""WriteTxnMarkers (27): a transaction coordinator's COMMIT or ABORT markers, written by the
partitions' leaders (Kafka's ``KafkaApis.handleWriteTxnMarkersRequest``).

Each marker is a control batch (``records.build_end_txn_marker``) appended through the
replica manager's one append path as the coordinator's (origin COORDINATOR: a client may not
write control batches) with ``acks=-1``; the log's producer state closes the producer's
transaction there, and refuses the marker of a coordinator older than the last one it saw
(TRANSACTION_COORDINATOR_FENCED) or of an older producer epoch.  A marker that lands in a
``__consumer_offsets`` partition also tells the group coordinator, which makes the
transaction's offset commits visible (commit) or drops them (abort).

The request is the cluster's business: ClusterAction on the cluster.  The coordinator on this
broker calls ``write`` directly for the partitions led here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import trio

from trilog import _time
from trilog._topic import PartitionKey
from trilog.broker.groups import OFFSETS_TOPIC
from trilog.broker.network import ApiHandler
from trilog.broker.replication import AppendOrigin, ReplicaManager
from trilog.broker.security import Access, AclOperation, ResourceType
from trilog.errors import NO_ERROR, ClusterAuthorizationFailedError
from trilog.protocol import ApiKey, RequestHeader, WriteTxnMarkersResponse
from trilog.records import build_end_txn_marker

#: ``(partition of __consumer_offsets, producer id, commit)`` after its marker landed.
OffsetsMarkerListener = Callable[[int, int, bool], None]


class TxnMarkerApi:
    """Serves WriteTxnMarkers.  Runs in the trio thread."""

    def __init__(self, replicas: ReplicaManager, access: Access, *, timeout_ms: int,
                 offsets_completed: OffsetsMarkerListener) -> None:
        self.replicas = replicas
        self.access = access
        self.timeout_s = timeout_ms / 1000
        self.offsets_completed = offsets_completed

    def apis(self) -> Mapping[int, ApiHandler]:
        return {ApiKey.WRITE_TXN_MARKERS: self.write_txn_markers}

    async def write_txn_markers(self, request: Any, header: RequestHeader) -> Any:
        R = WriteTxnMarkersResponse
        M = R.WritableTxnMarkerResult
        T = M.WritableTxnMarkerTopicResult
        allowed = self.access(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)
        results = []
        for marker in request.markers:
            tps = [(t.name, p) for t in marker.topics for p in t.partition_indexes]
            if allowed:
                codes = await self.write(marker.producer_id, marker.producer_epoch,
                                         bool(marker.transaction_result),
                                         marker.coordinator_epoch, tps)
            else:
                codes = {tp: ClusterAuthorizationFailedError.code for tp in tps}
            by_topic: dict[str, list[Any]] = {}
            for (topic, p) in tps:
                by_topic.setdefault(topic, []).append(
                    T.WritableTxnMarkerPartitionResult(partition_index=p,
                                                       error_code=codes[(topic, p)]))
            results.append(M(producer_id=marker.producer_id, topics=[
                T(name=t, partitions=ps) for t, ps in by_topic.items()]))
        await trio.lowlevel.checkpoint()
        return R(markers=results)

    async def write(self, producer_id: int, producer_epoch: int, commit: bool,
                    coordinator_epoch: int, partitions: list[PartitionKey]
                    ) -> dict[PartitionKey, int]:
        """Append the marker to each partition (led here) and wait for the in-sync replicas:
        each partition's error code."""
        if not partitions:
            await trio.lowlevel.checkpoint()
            return {}
        batch = build_end_txn_marker(producer_id=producer_id, producer_epoch=producer_epoch,
                                     coordinator_epoch=coordinator_epoch, commit=commit,
                                     timestamp_ms=_time.now_ms())
        appended = await self.replicas.append_records(
            dict.fromkeys(partitions, batch), acks=-1, origin=AppendOrigin.COORDINATOR)
        await appended.wait(trio.current_time() + self.timeout_s)
        codes = {tp: appended.results[tp].error for tp in partitions}
        for (topic, p), code in codes.items():
            if topic == OFFSETS_TOPIC and code == NO_ERROR:
                self.offsets_completed(p, producer_id, commit)
        return codes
