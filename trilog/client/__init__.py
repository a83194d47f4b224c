"""trilog's trio-native Kafka client: producer, consumer, simple consumer, admin.

Every object with background work is an ``async with open_*(...)`` that owns its nursery.
"""

from trilog.client._admin import (
    Admin,
    AdminConfig,
    AdminOptions,
    ConfigEntry,
    ConfigResource,
    DeletedRecords,
    LogDirInfo,
    LogDirPartition,
    PartitionInfo,
    TopicInfo,
    open_admin,
)
from trilog.client._brokers import BrokerAddress, parse_bootstrap
from trilog.client._assignment import Blacklist, TopicFilter, Whitelist, assign_ranges
from trilog.client._client import Client, open_client
from trilog.net import BrokerConnection, open_connection
from trilog.client._consumer import (
    EARLIEST,
    LATEST,
    ConsumerRecord,
    FetchedRecords,
    SimpleConsumer,
    SimpleConsumerOptions,
    open_simple_consumer,
)
from trilog.client._group import open_consumer, open_consumer_connector
from trilog.client._kafka_consumer import (
    Consumer,
    ConsumerConfig,
    ConsumerRebalanceListener,
    IllegalStateError,
    KafkaConsumerOptions,
    NoOffsetForPartitionError,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)
from trilog.client._group_base import GroupConsumerConnector
from trilog.client._group_config import ConsumerOptions
from trilog.client._group_broker import BrokerConsumerConnector
from trilog.client._group_zookeeper import ConsumerRebalanceFailedError, ZooKeeperConsumerConnector
from trilog.client._metadata import ClusterMetadata, Node
from trilog.client.producer import (
    BufferFullError,
    DefaultPartitioner,
    Delivery,
    DeliveryTimeoutError,
    Producer,
    ProducerClosedError,
    ProducerConfig,
    ProducerOptions,
    RecordMetadata,
    murmur2,
    open_producer,
    partition_for_key,
)
from trilog.client._groups_admin import (
    GroupAdmin,
    GroupAdminConfig,
    GroupAdminOptions,
    GroupDescription,
    GroupMember,
    OffsetReset,
    PartitionOffsets,
    ResetPlan,
    open_group_admin,
)
from trilog.net import ClientSecurity, SecurityConfigError, SecurityOptions
from trilog.client._streams import MessageStream

__all__ = [
    "Blacklist",
    "BrokerConsumerConnector",
    "ConsumerOptions",
    "ConsumerRebalanceFailedError",
    "GroupConsumerConnector",
    "MessageStream",
    "TopicFilter",
    "Whitelist",
    "ZooKeeperConsumerConnector",
    "assign_ranges",
    "open_consumer",
    "open_consumer_connector",
    "Consumer",
    "ConsumerConfig",
    "ConsumerRebalanceListener",
    "IllegalStateError",
    "KafkaConsumerOptions",
    "NoOffsetForPartitionError",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "TopicPartition",
    "EARLIEST",
    "LATEST",
    "Admin",
    "AdminConfig",
    "AdminOptions",
    "ConfigEntry",
    "ConfigResource",
    "DeletedRecords",
    "LogDirInfo",
    "LogDirPartition",
    "BrokerAddress",
    "BrokerConnection",
    "BufferFullError",
    "Client",
    "ClusterMetadata",
    "ConsumerRecord",
    "DefaultPartitioner",
    "Delivery",
    "DeliveryTimeoutError",
    "FetchedRecords",
    "Node",
    "PartitionInfo",
    "Producer",
    "ProducerClosedError",
    "ProducerConfig",
    "ProducerOptions",
    "RecordMetadata",
    "SimpleConsumer",
    "SimpleConsumerOptions",
    "TopicInfo",
    "murmur2",
    "open_admin",
    "open_client",
    "open_connection",
    "open_producer",
    "open_simple_consumer",
    "parse_bootstrap",
    "partition_for_key",
    "GroupAdmin",
    "GroupAdminConfig",
    "GroupAdminOptions",
    "GroupDescription",
    "GroupMember",
    "OffsetReset",
    "PartitionOffsets",
    "ResetPlan",
    "open_group_admin",
    "ClientSecurity",
    "SecurityConfigError",
    "SecurityOptions",
]
