"""Kafka's consumer, in its parts (aiokafka's and Kafka's own split):

- ``_subscription_state``: what the consumer reads and where it stands
  (``SubscriptionState``, one ``PartitionState`` per assigned partition);
- ``_fetcher``: one fetch loop per leader broker (``Fetcher``), also the seeds'
  connectors';
- ``_coordinator``: the group member (``ConsumerCoordinator``: join, heartbeats, the
  rebalance listener, ``max_poll_interval_ms``, leave), on ``_membership.GroupMembership``
  (the group's requests on the wire), also the broker-coordinated connector's;
- ``_consumer``: the API (``Consumer``) and the hand-out of records and commits;
- ``_config``: the settings (``ConsumerConfig``), ``_open``: ``open_consumer``.
"""

from trilog.client.consumer._config import ConsumerConfig, KafkaConsumerOptions
from trilog.client.consumer._consumer import Consumer
from trilog.client.consumer._coordinator import ConsumerCoordinator, CoordinatedConsumer
from trilog.client.consumer._fetcher import Fetcher, FetchSettings
from trilog.client.consumer._membership import GroupMembership
from trilog.client.consumer._open import open_consumer
from trilog.client.consumer._structs import (
    ConsumerGroupMetadata,
    ConsumerRebalanceListener,
    IllegalStateError,
    NoOffsetForPartitionError,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)
from trilog.client.consumer._subscription_state import PartitionState, SubscriptionState

__all__ = [
    "Consumer",
    "ConsumerConfig",
    "ConsumerCoordinator",
    "ConsumerGroupMetadata",
    "ConsumerRebalanceListener",
    "CoordinatedConsumer",
    "Fetcher",
    "FetchSettings",
    "GroupMembership",
    "IllegalStateError",
    "KafkaConsumerOptions",
    "NoOffsetForPartitionError",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "PartitionState",
    "SubscriptionState",
    "TopicPartition",
    "open_consumer",
]
