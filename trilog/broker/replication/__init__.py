"""The partitions a broker holds and the one path that appends to them.

``ReplicaManager.append_records`` is the one entry for a client's produce and the
coordinators' writes (offset commits), ``append_as_follower`` a follower's copy of its
leader's batches: both through the same checks, leader epochs, log append (the idempotent
producers' check under the log), fetch wake-ups and high watermark.  Standalone,
``LocalReplicaManager`` leads every partition.  In a ZooKeeper cluster, ``Leadership`` applies
the controller's LeaderAndIsr / UpdateMetadata / StopReplica and answers
OffsetForLeaderEpoch, ``ReplicaFetchers`` copy the leaders' logs, ``ZooKeeperIsr`` writes ISR
changes, and ``ControlledShutdown`` moves leaderships away before a stop.
``FetchPurgatory`` is where long polls wait for appends.
"""

from trilog.broker.replication._fetcher import FetcherConfig, FetchState, ReplicaFetchers
from trilog.broker.replication._isr import ZooKeeperIsr
from trilog.broker.replication._leadership import Leadership
from trilog.broker.replication._partition import FollowerState, Partition
from trilog.broker.replication._purgatory import FetchPurgatory
from trilog.broker.replication._replica_manager import (
    Appended,
    AppendOrigin,
    AppendResult,
    ClusterView,
    IsrChannel,
    LocalReplicaManager,
    ReplicaManager,
    is_legacy,
    partition_error,
)
from trilog.broker.replication._shutdown import ControlledShutdown

__all__ = [
    "AppendOrigin",
    "AppendResult",
    "Appended",
    "ClusterView",
    "ControlledShutdown",
    "FetchPurgatory",
    "FetchState",
    "FetcherConfig",
    "FollowerState",
    "IsrChannel",
    "Leadership",
    "LocalReplicaManager",
    "Partition",
    "ReplicaFetchers",
    "ReplicaManager",
    "ZooKeeperIsr",
    "is_legacy",
    "partition_error",
]
