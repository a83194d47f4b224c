"""Produce (0): a client's records appended through the replica manager's one append path.

The principal needs Write on each topic (TOPIC_AUTHORIZATION_FAILED), and a transactional
producer's Write on its transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every
partition); ``acks`` must be -1,
0 or 1 (INVALID_REQUIRED_ACKS); everything else about a partition (it exists, it is led
here, it is not internal, ``min.insync.replicas``, the batches' validity, idempotence) is
``ReplicaManager.append_records``'s, and comes back as that partition's error code.
``acks=0`` gets no answer; ``acks=all`` one once the in-sync replicas have the records
(``Later``: the connection handles its next requests meanwhile, the answers still leave in
order) or the request's ``timeout_ms`` passed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import trio

from trilog._topic import PartitionKey
from trilog.broker._metrics import RequestMetrics
from trilog.broker.network import ApiHandler, Later
from trilog.broker.replication import AppendOrigin, AppendResult, ReplicaManager
from trilog.broker.security import Access, AclOperation, ResourceType
from trilog.errors import (
    InvalidRequiredAcksError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from trilog.protocol import ApiKey, ProduceResponse, RequestHeader

_Partition = ProduceResponse.TopicProduceResponse.PartitionProduceResponse


class ProduceApi:
    """Serves Produce.  Runs in the trio thread."""

    def __init__(self, replicas: ReplicaManager, access: Access,
                 metrics: RequestMetrics) -> None:
        self.replicas = replicas
        self.access = access
        self.metrics = metrics

    def apis(self) -> Mapping[int, ApiHandler]:
        return {ApiKey.PRODUCE: self.produce}

    async def produce(self, request: Any, header: RequestHeader) -> Any:
        acks = request.acks
        order: dict[PartitionKey, None] = {}  # the request's partitions, each once
        refused: dict[PartitionKey, AppendResult] = {}
        entries = {}
        access = self.access
        tid = request.transactional_id
        denied_tid = (tid is not None and access.enabled
                      and not access(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid))
        for topic in request.topic_data:
            may_write = access(AclOperation.WRITE, ResourceType.TOPIC, topic.name)
            for part in topic.partition_data:
                tp = (topic.name, part.index)
                order[tp] = None
                if acks not in (-1, 0, 1):
                    refused[tp] = AppendResult(InvalidRequiredAcksError.code)
                elif denied_tid:
                    refused[tp] = AppendResult(TransactionalIdAuthorizationFailedError.code)
                elif not may_write:
                    refused[tp] = AppendResult(TopicAuthorizationFailedError.code)
                else:
                    entries[tp] = part.records
        appended = await self.replicas.append_records(entries, acks=acks,
                                                      origin=AppendOrigin.CLIENT)
        for tp, result in appended.results.items():
            if result.error == 0:
                self.metrics.produced(tp[0], result.size, result.records)
        if acks == 0:
            return None
        if appended.settled():
            return _response(order, refused, appended.results)
        # The records are appended: the connection's next request need not wait for the
        # in-sync replicas too (the answers still leave in order).
        deadline = trio.current_time() + max(request.timeout_ms, 0) / 1000

        async def replicated() -> Any:
            await appended.wait(deadline)
            return _response(order, refused, appended.results)

        return Later(replicated)


def _response(order: dict[PartitionKey, None], refused: dict[PartitionKey, AppendResult],
              results: dict[PartitionKey, AppendResult]) -> Any:
    R = ProduceResponse
    by_topic: dict[str, list] = {}
    for tp in order:
        r = refused.get(tp) or results[tp]
        by_topic.setdefault(tp[0], []).append(_Partition(
            index=tp[1], error_code=r.error, base_offset=r.base_offset,
            log_append_time_ms=r.log_append_time, log_start_offset=r.log_start_offset))
    return R(responses=[R.TopicProduceResponse(name=n, partition_responses=p)
                        for n, p in by_topic.items()],
             throttle_time_ms=0)
