"""CreateTopics (19) and DeleteTopics (20), as the cluster (standalone, or ZooKeeper's
assignment znodes) makes and removes topics.

Create needs Create on the cluster or the topic; Delete needs Delete on the topic and
``delete.topic.enable``, and is refused for internal topics.  Each topic's outcome is its
own error code (with a message for CreateTopics); the request never fails as a whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trilog.broker._metrics import RequestMetrics
from trilog.broker.cluster import INTERNAL_TOPICS, Cluster
from trilog.broker.network import ApiHandler
from trilog.broker.security import Access, AclOperation, ResourceType
from trilog.errors import ApiError, TopicAuthorizationFailedError, TopicDeletionDisabledError
from trilog.protocol import ApiKey, CreateTopicsResponse, DeleteTopicsResponse, RequestHeader


class TopicApis:
    """Serves CreateTopics and DeleteTopics.  Runs in the trio thread."""

    def __init__(self, cluster: Cluster, access: Access, metrics: RequestMetrics, *,
                 delete_enabled: bool) -> None:
        self.cluster = cluster
        self.access = access
        self.metrics = metrics
        self.delete_enabled = delete_enabled

    def apis(self) -> Mapping[int, ApiHandler]:
        return {ApiKey.CREATE_TOPICS: self.create_topics,
                ApiKey.DELETE_TOPICS: self.delete_topics}

    async def create_topics(self, request: Any, header: RequestHeader) -> Any:
        R = CreateTopicsResponse
        results = []
        for t in request.topics:
            assignment = {a.partition_index: list(a.broker_ids) for a in t.assignments}
            try:
                if not (self.access(AclOperation.CREATE, ResourceType.CLUSTER)
                        or self.access(AclOperation.CREATE, ResourceType.TOPIC, t.name)):
                    raise TopicAuthorizationFailedError(f"not authorized to create {t.name}")
                await self.cluster.create_topic(
                    t.name, t.num_partitions, t.replication_factor, assignment or None,
                    validate_only=getattr(request, "validate_only", False),
                    configs={c.name: c.value for c in t.configs},
                )
                results.append(R.CreatableTopicResult(name=t.name, error_code=0))
            except ApiError as exc:
                results.append(R.CreatableTopicResult(name=t.name, error_code=exc.code,
                                                      error_message=str(exc)))
        return R(throttle_time_ms=0, topics=results)

    async def delete_topics(self, request: Any, header: RequestHeader) -> Any:
        R = DeleteTopicsResponse
        results = []
        for name in request.topic_names:
            try:
                if not self.access(AclOperation.DELETE, ResourceType.TOPIC, name):
                    raise TopicAuthorizationFailedError(f"not authorized to delete {name}")
                if not self.delete_enabled:
                    raise TopicDeletionDisabledError()
                if name in INTERNAL_TOPICS:
                    raise TopicAuthorizationFailedError(f"{name} is internal")
                await self.cluster.delete_topic(name)
                self.metrics.forget_topic(name)
                results.append(R.DeletableTopicResult(name=name, error_code=0))
            except ApiError as exc:
                results.append(R.DeletableTopicResult(name=name, error_code=exc.code))
        return R(throttle_time_ms=0, responses=results)
