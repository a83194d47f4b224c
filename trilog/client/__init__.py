"""trilog's trio-native Kafka client (work in progress: connections and topic admin)."""

from trilog.client._admin import Admin, BrokerAddress, PartitionInfo, TopicInfo, open_admin, parse_bootstrap
from trilog.client._connection import BrokerConnection, open_connection

__all__ = [
    "Admin",
    "BrokerAddress",
    "BrokerConnection",
    "PartitionInfo",
    "TopicInfo",
    "open_admin",
    "open_connection",
    "parse_bootstrap",
]
