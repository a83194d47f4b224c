"""ZooKeeper: the only package that imports kazoo.

- ``open_zookeeper`` / ``ZooKeeper``: kazoo under trio (calls in worker threads, watches as
  ``trio_util.AsyncValue``), with trilog's own exceptions.
- ``_layout`` names: the seeds' paths and JSON (``/brokers/ids``, ``/brokers/topics``,
  ``/cluster/id``, ``/consumers/...``).
- ``ZooKeeperServer``: a standalone ZooKeeper for development and tests.
"""

from trilog.zk._client import (
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    ZooKeeper,
    ZooKeeperError,
    ZooKeeperUnavailableError,
    open_zookeeper,
)
from trilog.zk._layout import (
    BROKER_IDS,
    BROKER_TOPICS,
    CLUSTER_ID,
    CONSUMERS,
    BrokerRegistration,
    assign_replicas,
    broker_path,
    consumer_ids_path,
    consumer_offset_path,
    consumer_owner_path,
    decode_cluster_id,
    decode_partition_state,
    decode_topic_assignment,
    encode_cluster_id,
    encode_partition_state,
    encode_topic_assignment,
    partition_state_path,
    topic_path,
)
from trilog.zk._server import (
    INSTALL_HINT,
    ZooKeeperNotFoundError,
    ZooKeeperServer,
    ZooKeeperStartError,
    find_zookeeper_classpath,
)

__all__ = [
    "BROKER_IDS",
    "BROKER_TOPICS",
    "CLUSTER_ID",
    "CONSUMERS",
    "INSTALL_HINT",
    "BrokerRegistration",
    "NoNodeError",
    "NodeExistsError",
    "NotEmptyError",
    "ZooKeeper",
    "ZooKeeperError",
    "ZooKeeperNotFoundError",
    "ZooKeeperServer",
    "ZooKeeperStartError",
    "ZooKeeperUnavailableError",
    "assign_replicas",
    "broker_path",
    "consumer_ids_path",
    "consumer_offset_path",
    "consumer_owner_path",
    "decode_cluster_id",
    "decode_partition_state",
    "decode_topic_assignment",
    "encode_cluster_id",
    "encode_partition_state",
    "encode_topic_assignment",
    "find_zookeeper_classpath",
    "open_zookeeper",
    "partition_state_path",
    "topic_path",
]
