"""``open_consumer_connector``: the seeds' consumer connector, with its streams.

    async with open_consumer_connector("g", bootstrap_servers="h:9092",
                                       topics={"events": 2}) as c:
        async for record in c.streams["events"][0]: ...   # topics= or topic_filter=

In one of two coordination modes:

- ``coordination="zookeeper"`` (the default when ``zookeeper`` is given): the seeds'
  ZooKeeper consumer connector, ``_zookeeper.py``;
- ``coordination="broker"`` (the default otherwise): Kafka's group protocol through the
  group's coordinator, ``_broker.py`` (Kafka's consumer's coordinator and fetcher).

Both share ``_base.GroupConsumerConnector``: the streams (``_streams.py``), the
processed-offset bookkeeping, the commits and the fetcher; a mode decides only *which*
partitions the member owns.  Every setting travels as one ``GroupConfig`` and what it reads
as one ``ConnectorSubscription`` (``_config.py``), both checked before anything connects.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any, Unpack, overload

from trilog.client._assignment import TopicFilter
from trilog.client._settings import config_from_options
from trilog.client.connector._base import GroupConsumerConnector
from trilog.client.connector._broker import open_broker_consumer
from trilog.client.connector._config import ConnectorSubscription, ConsumerOptions, GroupConfig
from trilog.client.connector._streams import FilterStreams, TopicStreams
from trilog.client.connector._zookeeper import open_zookeeper_consumer


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


def open_consumer_connector(
    group_id: str, *, topics: dict[str, int] | None = None,
    topic_filter: TopicFilter | None = None, **options: Unpack[ConsumerOptions]
) -> AbstractAsyncContextManager[GroupConsumerConnector[Any]]:
    """A group consumer with streams (see the module docstring) for the body of ``async
    with``: ``TypeError`` for an unknown keyword, ``ValueError`` for a bad setting, before
    anything connects.

    ``topics={topic: number of streams}``, or ``topic_filter=`` (a ``Whitelist`` or
    ``Blacklist``) over ``num_streams`` streams.  ``coordination="zookeeper"`` (the default
    when ``zookeeper`` is given) is the seeds' connector: offsets default to ZooKeeper
    storage, Kafka 0.8's default, and ``rebalance_*``/``zookeeper_*`` tune it.
    ``coordination="broker"`` (the default otherwise) is Kafka's group protocol through the
    group's coordinator, with offsets in the broker; ``session_timeout_ms``,
    ``heartbeat_interval_ms``, ``max_poll_interval_ms`` (the JoinGroup rebalance timeout
    unless ``rebalance_timeout_ms``), ``metadata_max_age_ms`` (how often a topic filter
    looks for new topics), ``retry_backoff_ms`` and ``request_timeout_ms`` tune it, as in
    ``KafkaConsumer``.  ``listener``: a ``ConsumerRebalanceListener`` told when the
    member's partitions are assigned and revoked (or lost), as Kafka's consumer's.
    ``isolation_level="read_committed"``: only the records of committed transactions, as
    ``KafkaConsumer``'s.  ``security_protocol``, ``ssl_*``, ``sasl_*``: TLS and SASL to the brokers, as
    ``open_producer``.
    """
    config = config_from_options(GroupConfig, options, "open_consumer_connector")
    wanted = ConnectorSubscription(group_id, topics, topic_filter)
    if config.mode == "zookeeper":
        return open_zookeeper_consumer(wanted, config)
    return open_broker_consumer(wanted, config)
