"""The seeds' consumer connector, with streams, in its parts:

- ``_base``: what both coordination modes share (``GroupConsumerConnector``: streams,
  positions, commits; Kafka's consumer's ``Fetcher`` feeds the streams' queues);
- ``_broker``: broker coordination (``BrokerConsumerConnector``: Kafka's group protocol,
  through Kafka's consumer's ``ConsumerCoordinator``);
- ``_zookeeper``: the seeds' ZooKeeper coordination (``ZooKeeperConsumerConnector``);
- ``_streams``: the streams (``MessageStream``); ``_config``: the settings
  (``GroupConfig``) and what a connector reads (``ConnectorSubscription``); ``_open``:
  ``open_consumer_connector``.
"""

from trilog.client.connector._base import GroupConsumerConnector
from trilog.client.connector._broker import BrokerConsumerConnector
from trilog.client.connector._config import ConnectorSubscription, ConsumerOptions, GroupConfig
from trilog.client.connector._open import open_consumer_connector
from trilog.client.connector._streams import FilterStreams, MessageStream, TopicStreams
from trilog.client.connector._zookeeper import (
    ConsumerRebalanceFailedError,
    ZooKeeperConsumerConnector,
)

__all__ = [
    "BrokerConsumerConnector",
    "ConnectorSubscription",
    "ConsumerOptions",
    "ConsumerRebalanceFailedError",
    "FilterStreams",
    "GroupConfig",
    "GroupConsumerConnector",
    "MessageStream",
    "TopicStreams",
    "ZooKeeperConsumerConnector",
    "open_consumer_connector",
]
