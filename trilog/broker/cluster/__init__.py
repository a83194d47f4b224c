"""What a broker knows of its cluster: brokers, topics, partitions and their leaders.

``Cluster`` is the view the APIs read synchronously (a Metadata request costs no I/O) and
the async ``create_topic`` / ``delete_topic``; ``StandaloneCluster`` is one broker and its
log dirs, ``ZooKeeperCluster`` the seeds' ZooKeeper layout kept current by watches.
``open_cluster`` opens the one the configuration asks for.
"""

from trilog.broker.cluster._cluster import (
    INTERNAL_TOPICS,
    BrokerInfo,
    Cluster,
    StandaloneCluster,
    broker_info,
    check_new_topic,
    load_or_create_meta,
    new_cluster_id,
    plan_new_partitions,
)
from trilog.broker.cluster._zookeeper import (
    BrokerIdInUseError,
    PartitionMeta,
    ZooKeeperCluster,
    open_zookeeper_cluster,
)

__all__ = [
    "INTERNAL_TOPICS",
    "BrokerIdInUseError",
    "BrokerInfo",
    "Cluster",
    "PartitionMeta",
    "StandaloneCluster",
    "ZooKeeperCluster",
    "broker_info",
    "check_new_topic",
    "load_or_create_meta",
    "new_cluster_id",
    "open_zookeeper_cluster",
    "plan_new_partitions",
]
