"""``open_consumer``: Kafka's consumer, or the seeds' consumer connector with streams.

    async with open_consumer("events", group_id="g", bootstrap_servers="h:9092") as c:
        async for record in c: ...                     # Kafka's consumer (_kafka_consumer.py)

    async with open_consumer("g", bootstrap_servers="h:9092", topics={"events": 2}) as c:
        async for record in c.streams["events"][0]: ...   # the connector: topics= or topic_filter=

``open_consumer_connector`` opens the connector alone, in one of two coordination modes:

- ``coordination="zookeeper"`` (the default when ``zookeeper`` is given): the seeds'
  ZooKeeper consumer connector, ``_group_zookeeper.py``;
- ``coordination="broker"`` (the default otherwise): Kafka's group protocol through the
  group's coordinator, ``_group_broker.py``.

Both share ``_group_base.GroupConsumerConnector``: the streams (``_streams.py``), the
processed-offset bookkeeping, the commits and the fetchers; a mode decides only *which*
partitions the member owns.  Every setting travels as one ``GroupConfig``
(``_group_config.py``), checked before anything connects.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Unpack, overload

from trilog.net import SecurityOptions, client_security
from trilog.client._assignment import TopicFilter
from trilog.client._group_base import GroupConsumerConnector
from trilog.client._group_broker import open_broker_consumer
from trilog.client._group_config import ConsumerOptions, GroupConfig
from trilog.client._group_zookeeper import open_zookeeper_consumer
from trilog.client._kafka_consumer import Consumer, KafkaConsumerOptions, open_kafka_consumer
from trilog.client._streams import FilterStreams, TopicStreams

Opener = Callable[[GroupConfig], AbstractAsyncContextManager[GroupConsumerConnector[Any]]]


@overload
def open_consumer(group_id: str, *, topics: dict[str, int], topic_filter: None = None,
                  **options: Unpack[ConsumerOptions]
                  ) -> AbstractAsyncContextManager[GroupConsumerConnector[TopicStreams]]: ...


@overload
def open_consumer(group_id: str, *, topic_filter: TopicFilter, topics: None = None,
                  **options: Unpack[ConsumerOptions]
                  ) -> AbstractAsyncContextManager[GroupConsumerConnector[FilterStreams]]: ...


@overload
def open_consumer(*topics: str | Iterable[str], **options: Unpack[KafkaConsumerOptions]
                  ) -> AbstractAsyncContextManager[Consumer]: ...


def open_consumer(*args: Any, **options: Any) -> AbstractAsyncContextManager[Any]:
    """A consumer for the body of ``async with``.

    ``open_consumer(*topics, group_id=..., bootstrap_servers=..., ...)`` is Kafka's consumer
    (``Consumer``: subscribe, poll, seek, pause, commit, rebalance listeners), with
    kafka-python's names and defaults; see ``_kafka_consumer.open_kafka_consumer``.

    ``open_consumer(group_id, topics={topic: streams}, ...)`` or ``(group_id,
    topic_filter=...)`` is the seeds' consumer connector with its streams; see
    ``open_consumer_connector``.
    """
    if "topics" in options or "topic_filter" in options:
        return open_consumer_connector(*args, **options)
    return open_kafka_consumer(*args, **options)


@overload
def open_consumer_connector(
    group_id: str, *, topics: dict[str, int], topic_filter: None = None,
    **options: Unpack[ConsumerOptions]
) -> AbstractAsyncContextManager[GroupConsumerConnector[TopicStreams]]: ...


@overload
def open_consumer_connector(
    group_id: str, *, topic_filter: TopicFilter, topics: None = None,
    **options: Unpack[ConsumerOptions]
) -> AbstractAsyncContextManager[GroupConsumerConnector[FilterStreams]]: ...


@asynccontextmanager
async def open_consumer_connector(
    group_id: str,
    *,
    zookeeper: str | None = None,
    bootstrap_servers: str | list[str] | None = None,
    topics: dict[str, int] | None = None,
    topic_filter: TopicFilter | None = None,
    num_streams: int = 1,
    coordination: str | None = None,
    auto_offset_reset: str = "largest",
    enable_auto_commit: bool = True,
    auto_commit_interval_ms: int = 5000,
    offsets_storage: str | None = None,
    dual_commit_enabled: bool = False,
    consumer_timeout_ms: int = -1,
    rebalance_max_retries: int = 4,
    rebalance_backoff_ms: int = 2000,
    queued_max_chunks: int = 2,
    fetch_max_bytes: int = 1 << 20,
    fetch_max_wait_ms: int = 100,
    client_id: str | None = None,
    consumer_id: str | None = None,
    zookeeper_session_timeout_ms: int = 6000,
    session_timeout_ms: int = 10_000,
    heartbeat_interval_ms: int = 3000,
    max_poll_interval_ms: int = 300_000,
    rebalance_timeout_ms: int | None = None,
    metadata_max_age_ms: int = 300_000,
    retry_backoff_ms: int = 100,
    request_timeout_ms: int = 30_000,
    **security: Unpack[SecurityOptions],
) -> AsyncIterator[GroupConsumerConnector[Any]]:
    """A group consumer (see the module docstring); ``ValueError`` for bad settings.

    ``coordination="zookeeper"`` (the default when ``zookeeper`` is given) is the seeds'
    connector: offsets default to ZooKeeper storage, Kafka 0.8's default, and
    ``rebalance_*``/``zookeeper_*`` tune it.  ``coordination="broker"`` (the default
    otherwise) is Kafka's group protocol through the group's coordinator, with offsets in
    the broker; ``session_timeout_ms``, ``heartbeat_interval_ms``,
    ``max_poll_interval_ms`` (the JoinGroup rebalance timeout unless
    ``rebalance_timeout_ms``), ``metadata_max_age_ms`` (how often a topic filter looks for
    new topics), ``retry_backoff_ms`` and ``request_timeout_ms`` tune it, as in
    ``KafkaConsumer``.  ``security_protocol``, ``ssl_*``, ``sasl_*``: TLS and SASL to the
    brokers, as ``open_producer``.
    """
    config = GroupConfig(
        group_id=group_id, zookeeper=zookeeper, bootstrap_servers=bootstrap_servers,
        topics=topics, topic_filter=topic_filter, num_streams=num_streams,
        coordination=coordination, auto_offset_reset=auto_offset_reset,
        enable_auto_commit=enable_auto_commit, auto_commit_interval_ms=auto_commit_interval_ms,
        offsets_storage=offsets_storage, dual_commit_enabled=dual_commit_enabled,
        consumer_timeout_ms=consumer_timeout_ms, rebalance_max_retries=rebalance_max_retries,
        rebalance_backoff_ms=rebalance_backoff_ms, queued_max_chunks=queued_max_chunks,
        fetch_max_bytes=fetch_max_bytes, fetch_max_wait_ms=fetch_max_wait_ms,
        client_id=client_id, consumer_id=consumer_id,
        zookeeper_session_timeout_ms=zookeeper_session_timeout_ms,
        session_timeout_ms=session_timeout_ms, heartbeat_interval_ms=heartbeat_interval_ms,
        max_poll_interval_ms=max_poll_interval_ms, rebalance_timeout_ms=rebalance_timeout_ms,
        metadata_max_age_ms=metadata_max_age_ms, retry_backoff_ms=retry_backoff_ms,
        request_timeout_ms=request_timeout_ms, security=client_security(security))
    opener: Opener = (open_zookeeper_consumer if config.mode == "zookeeper"
                      else open_broker_consumer)
    async with opener(config) as connector:
        yield connector
