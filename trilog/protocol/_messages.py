"""The messages trilog speaks: every supported API's request and response, as data.

Versions are Kafka's. Most APIs here stop at their last non-flexible version; the flexible
versions implemented (KIP-482: compact strings, bytes and arrays, a tagged-field section
ending every struct, request header v2 and response header v1, see ``_schema`` and
``_framing``) are, all told::

    FindCoordinator 3   InitProducerId 2-4   AddPartitionsToTxn 3   AddOffsetsToTxn 3
    EndTxn 3            WriteTxnMarkers 1    TxnOffsetCommit 3
    DescribeTransactions 0                   ListTransactions 0-1
    DescribeClientQuotas 1                   AlterClientQuotas 1

Every message declares Kafka's ``flexibleVersions`` (``flexible="N+"``), also where they
all lie past the versions implemented here: the header version of any (api key, version)
then follows from the declarations, even for a version trilog does not speak.

Field and struct names are Kafka's JSON message specs
(``clients/src/main/resources/common/message/*.json``) with field names in snake_case, so
``TopicData`` is ``topic_data``, ``PartitionIndex`` is ``partition_index`` and
``ThrottleTimeMs`` is ``throttle_time_ms``; struct classes keep Kafka's names and hang off
their parent (``ProduceRequest.TopicProduceData.PartitionProduceData``). Where Kafka renamed
a field its current name is used (OffsetCommit's ``generation_id_or_member_epoch``), except
AddPartitionsToTxn v0-3, whose fields keep the names they had before Kafka added the
batched v4 (see its declaration).

Supported (``API_VERSIONS``)::

    Produce(0) 0-7      Fetch(1) 0-10        ListOffsets(2) 0-4    Metadata(3) 0-7
    LeaderAndIsr(4) 0-3 StopReplica(5) 0-1   UpdateMetadata(6) 0-5 ControlledShutdown(7) 1-2
    OffsetCommit(8) 0-7 OffsetFetch(9) 0-7   FindCoordinator(10) 0-3
    JoinGroup(11) 0-5   Heartbeat(12) 0-3    LeaveGroup(13) 0-3    SyncGroup(14) 0-3
    DescribeGroups(15) 0-4                   ListGroups(16) 0-2
    SaslHandshake(17) 0-1                    SaslAuthenticate(36) 0-1
    DescribeAcls(29) 0-1 CreateAcls(30) 0-1  DeleteAcls(31) 0-1
    ApiVersions(18) 0-2 CreateTopics(19) 0-3 DeleteTopics(20) 0-3    DeleteRecords(21) 0-1
    InitProducerId(22) 0-4                   OffsetForLeaderEpoch(23) 0-3
    AddPartitionsToTxn(24) 0-3               AddOffsetsToTxn(25) 0-3
    EndTxn(26) 0-3                           WriteTxnMarkers(27) 0-1
    TxnOffsetCommit(28) 0-3
    DescribeConfigs(32) 0-3                  AlterConfigs(33) 0-1
    DescribeLogDirs(35) 0-1                  CreatePartitions(37) 0-1
    DeleteGroups(42) 0-1                     ElectLeaders(43) 0-1
    IncrementalAlterConfigs(44) 0            OffsetDelete(47) 0
    DescribeClientQuotas(48) 0-1             AlterClientQuotas(49) 0-1
    DescribeTransactions(65) 0               ListTransactions(66) 0-1

Not encoded: the flexible versions of the other APIs above (declaring one is adding its
``flexible=`` and the fields it adds); DescribeCluster(60), whose every version is
flexible; AddPartitionsToTxn v4+ (KIP-890's batched form, which brokers send each other);
ControlledShutdown v0, whose request header (Kafka 0.8's) lacks the client_id that every
other request header carries.
What a broker *advertises* in ApiVersions is its own choice among these (the APIs it has
handlers for): the inter-broker APIs (4-7) are here so that brokers can speak them.

``records`` fields (Produce request, Fetch response) are opaque: decoded as a memoryview into
the frame, encoded from bytes or, for zero-copy, from a size-known reference (see
``encode_fetch_response_parts``). Defaults follow Kafka's JSON ``default`` values, except
``replica_id`` which defaults to -1 (what every consumer sends).

Adding an API is adding a ``message(...)`` pair below and nothing else.
"""

from __future__ import annotations

import enum

from trilog.protocol._primitives import (
    BOOLEAN,
    BYTES,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    RECORDS,
    STRING,
    Array,
)
from trilog.protocol._schema import Field, Message, Struct, message


class ApiKey(enum.IntEnum):
    """Kafka's API keys (all of them, for naming; ``API_VERSIONS`` says what trilog serves)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    CREATE_DELEGATION_TOKEN = 38
    RENEW_DELEGATION_TOKEN = 39
    EXPIRE_DELEGATION_TOKEN = 40
    DESCRIBE_DELEGATION_TOKEN = 41
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    UPDATE_FEATURES = 57
    ENVELOPE = 58
    FETCH_SNAPSHOT = 59
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    UNREGISTER_BROKER = 64
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    ALLOCATE_PRODUCER_IDS = 67
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    CONTROLLER_REGISTRATION = 70
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72
    ASSIGN_REPLICAS_TO_DIRS = 73
    LIST_CONFIG_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    ADD_RAFT_VOTER = 80
    REMOVE_RAFT_VOTER = 81
    UPDATE_RAFT_VOTER = 82
    INITIALIZE_SHARE_GROUP_STATE = 83
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DELETE_SHARE_GROUP_STATE = 86
    READ_SHARE_GROUP_STATE_SUMMARY = 87
    STREAMS_GROUP_HEARTBEAT = 88
    STREAMS_GROUP_DESCRIBE = 89
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


# fmt: off
F = Field
K = ApiKey

# -- Produce (0) --------------------------------------------------------------------------
# v1: throttle_time_ms; v2: log_append_time_ms; v3: transactional_id (and RecordBatch v2);
# v5: log_start_offset; v4, v6, v7 change only semantics.

ProduceRequest = message(K.PRODUCE, "ProduceRequest", (0, 7), [
    F("transactional_id", STRING, "3+", nullable="3+", default=None),
    F("acks", INT16),
    F("timeout_ms", INT32),
    F("topic_data", Array(Struct("TopicProduceData", [
        F("name", STRING),
        F("partition_data", Array(Struct("PartitionProduceData", [
            F("index", INT32),
            F("records", RECORDS),
        ]))),
    ]))),
], flexible="9+")

ProduceResponse = message(K.PRODUCE, "ProduceResponse", (0, 7), [
    F("responses", Array(Struct("TopicProduceResponse", [
        F("name", STRING),
        F("partition_responses", Array(Struct("PartitionProduceResponse", [
            F("index", INT32),
            F("error_code", INT16),
            F("base_offset", INT64),
            F("log_append_time_ms", INT64, "2+", default=-1),
            F("log_start_offset", INT64, "5+", default=-1),
        ]))),
    ]))),
    F("throttle_time_ms", INT32, "1+"),
], flexible="9+")

# -- Fetch (1) ----------------------------------------------------------------------------
# v1: throttle; v3: max_bytes; v4: isolation_level, last_stable_offset, aborted_transactions;
# v5: log_start_offset; v7: fetch sessions; v9: current_leader_epoch; v10 = v9.

FetchRequest = message(K.FETCH, "FetchRequest", (0, 10), [
    F("replica_id", INT32, default=-1),
    F("max_wait_ms", INT32),
    F("min_bytes", INT32),
    F("max_bytes", INT32, "3+", default=0x7FFFFFFF),
    F("isolation_level", INT8, "4+"),
    F("session_id", INT32, "7+"),
    F("session_epoch", INT32, "7+", default=-1),
    F("topics", Array(Struct("FetchTopic", [
        F("topic", STRING),
        F("partitions", Array(Struct("FetchPartition", [
            F("partition", INT32),
            F("current_leader_epoch", INT32, "9+", default=-1),
            F("fetch_offset", INT64),
            F("log_start_offset", INT64, "5+", default=-1),
            F("partition_max_bytes", INT32),
        ]))),
    ]))),
    F("forgotten_topics_data", Array(Struct("ForgottenTopic", [
        F("topic", STRING),
        F("partitions", Array(INT32)),
    ])), "7+"),
], flexible="12+")

FetchResponse = message(K.FETCH, "FetchResponse", (0, 10), [
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16, "7+"),
    F("session_id", INT32, "7+"),
    F("responses", Array(Struct("FetchableTopicResponse", [
        F("topic", STRING),
        F("partitions", Array(Struct("PartitionData", [
            F("partition_index", INT32),
            F("error_code", INT16),
            F("high_watermark", INT64),
            F("last_stable_offset", INT64, "4+", default=-1),
            F("log_start_offset", INT64, "5+", default=-1),
            F("aborted_transactions", Array(Struct("AbortedTransaction", [
                F("producer_id", INT64),
                F("first_offset", INT64),
            ])), "4+", nullable="4+"),
            F("records", RECORDS),
        ]))),
    ]))),
], flexible="12+")

# -- ListOffsets (2) ----------------------------------------------------------------------
# v0 returns several offsets per partition; v1 one offset with its timestamp; v2: isolation
# level and throttle; v4: leader epochs.

ListOffsetsRequest = message(K.LIST_OFFSETS, "ListOffsetsRequest", (0, 4), [
    F("replica_id", INT32, default=-1),
    F("isolation_level", INT8, "2+"),
    F("topics", Array(Struct("ListOffsetsTopic", [
        F("name", STRING),
        F("partitions", Array(Struct("ListOffsetsPartition", [
            F("partition_index", INT32),
            F("current_leader_epoch", INT32, "4+", default=-1),
            F("timestamp", INT64),
            F("max_num_offsets", INT32, "0", default=1),
        ]))),
    ]))),
], flexible="6+")

ListOffsetsResponse = message(K.LIST_OFFSETS, "ListOffsetsResponse", (0, 4), [
    F("throttle_time_ms", INT32, "2+"),
    F("topics", Array(Struct("ListOffsetsTopicResponse", [
        F("name", STRING),
        F("partitions", Array(Struct("ListOffsetsPartitionResponse", [
            F("partition_index", INT32),
            F("error_code", INT16),
            F("old_style_offsets", Array(INT64), "0"),
            F("timestamp", INT64, "1+", default=-1),
            F("offset", INT64, "1+", default=-1),
            F("leader_epoch", INT32, "4+", default=-1),
        ]))),
    ]))),
], flexible="6+")

#: ``authorized_operations`` when the request did not ask for them (Kafka's INT32_MIN)
AUTHORIZED_OPERATIONS_OMITTED = -2147483648

# -- Metadata (3) -------------------------------------------------------------------------
# v0: an empty topic list means all topics; v1+: null means all, empty means none. v7:
# leader epochs; v8: authorized operations on request; v9: flexible (librdkafka trusts the
# leader epochs of a broker serving v9+, KIP-320).

MetadataRequest = message(K.METADATA, "MetadataRequest", (0, 9), [
    F("topics", Array(Struct("MetadataRequestTopic", [
        F("name", STRING),
    ])), nullable="1+"),
    F("allow_auto_topic_creation", BOOLEAN, "4+", default=True),
    F("include_cluster_authorized_operations", BOOLEAN, "8-10", default=False),
    F("include_topic_authorized_operations", BOOLEAN, "8+", default=False),
], flexible="9+")

MetadataResponse = message(K.METADATA, "MetadataResponse", (0, 9), [
    F("throttle_time_ms", INT32, "3+"),
    F("brokers", Array(Struct("MetadataResponseBroker", [
        F("node_id", INT32),
        F("host", STRING),
        F("port", INT32),
        F("rack", STRING, "1+", nullable="1+", default=None),
    ]))),
    F("cluster_id", STRING, "2+", nullable="2+", default=None),
    F("controller_id", INT32, "1+", default=-1),
    F("topics", Array(Struct("MetadataResponseTopic", [
        F("error_code", INT16),
        F("name", STRING),
        F("is_internal", BOOLEAN, "1+"),
        F("partitions", Array(Struct("MetadataResponsePartition", [
            F("error_code", INT16),
            F("partition_index", INT32),
            F("leader_id", INT32),
            F("leader_epoch", INT32, "7+", default=-1),
            F("replica_nodes", Array(INT32)),
            F("isr_nodes", Array(INT32)),
            F("offline_replicas", Array(INT32), "5+"),
        ]))),
        F("topic_authorized_operations", INT32, "8+", default=AUTHORIZED_OPERATIONS_OMITTED),
    ]))),
    F("cluster_authorized_operations", INT32, "8-10", default=AUTHORIZED_OPERATIONS_OMITTED),
], flexible="9+")

# -- LeaderAndIsr (4) ---------------------------------------------------------------------
# Controller -> broker. v1: is_new; v2: broker_epoch, and the partition states move from one
# flat list (ungrouped_partition_states, each naming its topic) into topic_states, where a
# state's topic_name is absent (read it from its LeaderAndIsrTopicState); v3: adding_replicas
# and removing_replicas (note: before is_new on the wire); v4+ are flexible.
# partition_epoch is the ZooKeeper version of the partition's state node (Kafka's former
# ZkVersion).

_LeaderAndIsrPartitionState = Struct("LeaderAndIsrPartitionState", [
    F("topic_name", STRING, "0-1"),
    F("partition_index", INT32),
    F("controller_epoch", INT32),
    F("leader", INT32),
    F("leader_epoch", INT32),
    F("isr", Array(INT32)),
    F("partition_epoch", INT32),
    F("replicas", Array(INT32)),
    F("adding_replicas", Array(INT32), "3+"),
    F("removing_replicas", Array(INT32), "3+"),
    F("is_new", BOOLEAN, "1+"),
])

LeaderAndIsrRequest = message(K.LEADER_AND_ISR, "LeaderAndIsrRequest", (0, 3), [
    F("controller_id", INT32),
    F("controller_epoch", INT32),
    F("broker_epoch", INT64, "2+", default=-1),
    F("ungrouped_partition_states", Array(_LeaderAndIsrPartitionState), "0-1"),
    F("topic_states", Array(Struct("LeaderAndIsrTopicState", [
        F("topic_name", STRING),
        F("partition_states", Array(_LeaderAndIsrPartitionState)),
    ])), "2+"),
    F("live_leaders", Array(Struct("LeaderAndIsrLiveLeader", [
        F("broker_id", INT32),
        F("host_name", STRING),
        F("port", INT32),
    ]))),
], flexible="4+")

LeaderAndIsrResponse = message(K.LEADER_AND_ISR, "LeaderAndIsrResponse", (0, 3), [
    F("error_code", INT16),
    F("partition_errors", Array(Struct("LeaderAndIsrPartitionError", [
        F("topic_name", STRING),
        F("partition_index", INT32),
        F("error_code", INT16),
    ]))),
], flexible="4+")

# -- StopReplica (5) ----------------------------------------------------------------------
# Controller -> broker. v1: broker_epoch, and the partitions grouped by topic (topics)
# instead of one (topic_name, partition_index) list; v2+ are flexible.

StopReplicaRequest = message(K.STOP_REPLICA, "StopReplicaRequest", (0, 1), [
    F("controller_id", INT32),
    F("controller_epoch", INT32),
    F("broker_epoch", INT64, "1+", default=-1),
    F("delete_partitions", BOOLEAN, "0-2"),
    F("ungrouped_partitions", Array(Struct("StopReplicaPartitionV0", [
        F("topic_name", STRING),
        F("partition_index", INT32),
    ])), "0"),
    F("topics", Array(Struct("StopReplicaTopicV1", [
        F("name", STRING),
        F("partition_indexes", Array(INT32)),
    ])), "1-2"),
], flexible="2+")

StopReplicaResponse = message(K.STOP_REPLICA, "StopReplicaResponse", (0, 1), [
    F("error_code", INT16),
    F("partition_errors", Array(Struct("StopReplicaPartitionError", [
        F("topic_name", STRING),
        F("partition_index", INT32),
        F("error_code", INT16),
    ]))),
], flexible="2+")

# -- UpdateMetadata (6) -------------------------------------------------------------------
# Controller -> broker. v0: one host and port per broker (v0_host, v0_port); v1: endpoints
# (port *before* host; security_protocol is Kafka's SecurityProtocol id, 0 = PLAINTEXT);
# v2: rack; v3: listener; v4: offline_replicas; v5: broker_epoch, and the partition states
# grouped by topic (topic_states; a state's topic_name is then absent); v6+ are flexible.

_UpdateMetadataPartitionState = Struct("UpdateMetadataPartitionState", [
    F("topic_name", STRING, "0-4"),
    F("partition_index", INT32),
    F("controller_epoch", INT32),
    F("leader", INT32),
    F("leader_epoch", INT32),
    F("isr", Array(INT32)),
    F("zk_version", INT32),
    F("replicas", Array(INT32)),
    F("offline_replicas", Array(INT32), "4+"),
])

UpdateMetadataRequest = message(K.UPDATE_METADATA, "UpdateMetadataRequest", (0, 5), [
    F("controller_id", INT32),
    F("controller_epoch", INT32),
    F("broker_epoch", INT64, "5+", default=-1),
    F("ungrouped_partition_states", Array(_UpdateMetadataPartitionState), "0-4"),
    F("topic_states", Array(Struct("UpdateMetadataTopicState", [
        F("topic_name", STRING),
        F("partition_states", Array(_UpdateMetadataPartitionState)),
    ])), "5+"),
    F("live_brokers", Array(Struct("UpdateMetadataBroker", [
        F("id", INT32),
        F("v0_host", STRING, "0"),
        F("v0_port", INT32, "0"),
        F("endpoints", Array(Struct("UpdateMetadataEndpoint", [
            F("port", INT32),
            F("host", STRING),
            F("listener", STRING, "3+"),
            F("security_protocol", INT16),
        ])), "1+"),
        F("rack", STRING, "2+", nullable="0+", default=None),
    ]))),
], flexible="6+")

UpdateMetadataResponse = message(K.UPDATE_METADATA, "UpdateMetadataResponse", (0, 5), [
    F("error_code", INT16),
], flexible="6+")

# -- ControlledShutdown (7) ---------------------------------------------------------------
# Broker -> controller. v0 is left out: its request header has no client_id (header v0),
# which decode_request does not read; v1 is v0 with the standard header; v2: broker_epoch;
# v3+ are flexible.

ControlledShutdownRequest = message(K.CONTROLLED_SHUTDOWN, "ControlledShutdownRequest", (1, 2), [
    F("broker_id", INT32),
    F("broker_epoch", INT64, "2+", default=-1),
], flexible="3+")

ControlledShutdownResponse = message(
    K.CONTROLLED_SHUTDOWN, "ControlledShutdownResponse", (1, 2), [
    F("error_code", INT16),
    F("remaining_partitions", Array(Struct("RemainingPartition", [
        F("topic_name", STRING),
        F("partition_index", INT32),
    ]))),
], flexible="3+")

# -- OffsetCommit (8) ---------------------------------------------------------------------
# v1: generation/member and a per-partition commit_timestamp (v1 only); v2-4: retention;
# v3: throttle; v6: committed_leader_epoch.

OffsetCommitRequest = message(K.OFFSET_COMMIT, "OffsetCommitRequest", (0, 7), [
    F("group_id", STRING),
    F("generation_id_or_member_epoch", INT32, "1+", default=-1),
    F("member_id", STRING, "1+"),
    F("group_instance_id", STRING, "7+", nullable="7+", default=None),
    F("retention_time_ms", INT64, "2-4", default=-1),
    F("topics", Array(Struct("OffsetCommitRequestTopic", [
        F("name", STRING),
        F("partitions", Array(Struct("OffsetCommitRequestPartition", [
            F("partition_index", INT32),
            F("committed_offset", INT64),
            F("committed_leader_epoch", INT32, "6+", default=-1),
            F("commit_timestamp", INT64, "1", default=-1),
            F("committed_metadata", STRING, nullable="0+"),
        ]))),
    ]))),
], flexible="8+")

OffsetCommitResponse = message(K.OFFSET_COMMIT, "OffsetCommitResponse", (0, 7), [
    F("throttle_time_ms", INT32, "3+"),
    F("topics", Array(Struct("OffsetCommitResponseTopic", [
        F("name", STRING),
        F("partitions", Array(Struct("OffsetCommitResponsePartition", [
            F("partition_index", INT32),
            F("error_code", INT16),
        ]))),
    ]))),
], flexible="8+")

# -- OffsetFetch (9) ----------------------------------------------------------------------
# v2: null topics means all, top-level error_code; v3: throttle; v5: committed_leader_epoch;
# v6 is flexible; v7: require_stable (KIP-447: UNSTABLE_OFFSET_COMMIT for a partition with a
# transaction's offsets pending); v8+ (not here) batch the groups (KIP-709).

OffsetFetchRequest = message(K.OFFSET_FETCH, "OffsetFetchRequest", (0, 7), [
    F("group_id", STRING),
    F("topics", Array(Struct("OffsetFetchRequestTopic", [
        F("name", STRING),
        F("partition_indexes", Array(INT32)),
    ])), nullable="2+"),
    F("require_stable", BOOLEAN, "7+", default=False),
], flexible="6+")

OffsetFetchResponse = message(K.OFFSET_FETCH, "OffsetFetchResponse", (0, 7), [
    F("throttle_time_ms", INT32, "3+"),
    F("topics", Array(Struct("OffsetFetchResponseTopic", [
        F("name", STRING),
        F("partitions", Array(Struct("OffsetFetchResponsePartition", [
            F("partition_index", INT32),
            F("committed_offset", INT64),
            F("committed_leader_epoch", INT32, "5+", default=-1),
            F("metadata", STRING, nullable="0+"),
            F("error_code", INT16),
        ]))),
    ]))),
    F("error_code", INT16, "2+"),
], flexible="6+")

# -- FindCoordinator (10) -----------------------------------------------------------------
# v1: key_type (0 = group, 1 = transaction), throttle, error_message; v2 changes only
# semantics; v3 is flexible; v4+ (not here) batch the keys (KIP-699).

FindCoordinatorRequest = message(K.FIND_COORDINATOR, "FindCoordinatorRequest", (0, 3), [
    F("key", STRING),
    F("key_type", INT8, "1+"),
], flexible="3+")

FindCoordinatorResponse = message(K.FIND_COORDINATOR, "FindCoordinatorResponse", (0, 3), [
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F("error_message", STRING, "1+", nullable="1+", default=None),
    F("node_id", INT32),
    F("host", STRING),
    F("port", INT32),
], flexible="3+")

# -- Group membership (11-14) -------------------------------------------------------------

JoinGroupRequest = message(K.JOIN_GROUP, "JoinGroupRequest", (0, 5), [
    F("group_id", STRING),
    F("session_timeout_ms", INT32),
    F("rebalance_timeout_ms", INT32, "1+", default=-1),
    F("member_id", STRING),
    F("group_instance_id", STRING, "5+", nullable="5+", default=None),
    F("protocol_type", STRING),
    F("protocols", Array(Struct("JoinGroupRequestProtocol", [
        F("name", STRING),
        F("metadata", BYTES),
    ]))),
], flexible="6+")

JoinGroupResponse = message(K.JOIN_GROUP, "JoinGroupResponse", (0, 5), [
    F("throttle_time_ms", INT32, "2+"),
    F("error_code", INT16),
    F("generation_id", INT32, default=-1),
    F("protocol_name", STRING),
    F("leader", STRING),
    F("member_id", STRING),
    F("members", Array(Struct("JoinGroupResponseMember", [
        F("member_id", STRING),
        F("group_instance_id", STRING, "5+", nullable="5+", default=None),
        F("metadata", BYTES),
    ]))),
], flexible="6+")

HeartbeatRequest = message(K.HEARTBEAT, "HeartbeatRequest", (0, 3), [
    F("group_id", STRING),
    F("generation_id", INT32),
    F("member_id", STRING),
    F("group_instance_id", STRING, "3+", nullable="3+", default=None),
], flexible="4+")

HeartbeatResponse = message(K.HEARTBEAT, "HeartbeatResponse", (0, 3), [
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
], flexible="4+")

LeaveGroupRequest = message(K.LEAVE_GROUP, "LeaveGroupRequest", (0, 3), [
    F("group_id", STRING),
    F("member_id", STRING, "0-2", default=""),
    F("members", Array(Struct("MemberIdentity", [
        F("member_id", STRING),
        F("group_instance_id", STRING, nullable="0+", default=None),
    ])), "3+", default=[]),
], flexible="4+")

LeaveGroupResponse = message(K.LEAVE_GROUP, "LeaveGroupResponse", (0, 3), [
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F("members", Array(Struct("MemberResponse", [
        F("member_id", STRING),
        F("group_instance_id", STRING, nullable="0+", default=None),
        F("error_code", INT16),
    ])), "3+", default=[]),
], flexible="4+")

SyncGroupRequest = message(K.SYNC_GROUP, "SyncGroupRequest", (0, 3), [
    F("group_id", STRING),
    F("generation_id", INT32),
    F("member_id", STRING),
    F("group_instance_id", STRING, "3+", nullable="3+", default=None),
    F("assignments", Array(Struct("SyncGroupRequestAssignment", [
        F("member_id", STRING),
        F("assignment", BYTES),
    ]))),
], flexible="4+")

SyncGroupResponse = message(K.SYNC_GROUP, "SyncGroupResponse", (0, 3), [
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F("assignment", BYTES),
], flexible="4+")

# -- DescribeGroups (15) / ListGroups (16) ------------------------------------------------
# v1: throttle_time_ms; v2 changes only semantics (throttling after the response).

DescribeGroupsRequest = message(K.DESCRIBE_GROUPS, "DescribeGroupsRequest", (0, 4), [
    F("groups", Array(STRING)),
    F("include_authorized_operations", BOOLEAN, "3+", default=False),
], flexible="5+")

DescribeGroupsResponse = message(K.DESCRIBE_GROUPS, "DescribeGroupsResponse", (0, 4), [
    F("throttle_time_ms", INT32, "1+"),
    F("groups", Array(Struct("DescribedGroup", [
        F("error_code", INT16),
        F("group_id", STRING),
        F("group_state", STRING),
        F("protocol_type", STRING),
        F("protocol_data", STRING),
        F("members", Array(Struct("DescribedGroupMember", [
            F("member_id", STRING),
            F("group_instance_id", STRING, "4+", nullable="4+", default=None),
            F("client_id", STRING),
            F("client_host", STRING),
            F("member_metadata", BYTES),
            F("member_assignment", BYTES),
        ]))),
        # a bit field: 1 << AclOperation code for each operation allowed on the group
        F("authorized_operations", INT32, "3+", default=AUTHORIZED_OPERATIONS_OMITTED),
    ]))),
], flexible="5+")

ListGroupsRequest = message(K.LIST_GROUPS, "ListGroupsRequest", (0, 2), [], flexible="3+")

ListGroupsResponse = message(K.LIST_GROUPS, "ListGroupsResponse", (0, 2), [
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F("groups", Array(Struct("ListedGroup", [
        F("group_id", STRING),
        F("protocol_type", STRING),
    ]))),
], flexible="3+")

# -- ApiVersions (18) ---------------------------------------------------------------------
# The request is empty before v3. The response puts throttle_time_ms *after* the array, so a
# v0 response is a prefix of v1/v2: that is what makes the UNSUPPORTED_VERSION fallback work.

ApiVersionsRequest = message(K.API_VERSIONS, "ApiVersionsRequest", (0, 2), [], flexible="3+")

ApiVersionsResponse = message(K.API_VERSIONS, "ApiVersionsResponse", (0, 2), [
    F("error_code", INT16),
    F("api_keys", Array(Struct("ApiVersion", [
        F("api_key", INT16),
        F("min_version", INT16),
        F("max_version", INT16),
    ]))),
    F("throttle_time_ms", INT32, "1+"),
], flexible="3+")

# -- SaslHandshake (17) / SaslAuthenticate (36) ---------------------------------------------
# After a SaslHandshake v1 the mechanism's tokens travel in SaslAuthenticate requests; after
# a v0 handshake they travel as bare size-delimited frames (no header).  SaslAuthenticate
# v1 adds the session lifetime; v2+ are flexible.

SaslHandshakeRequest = message(K.SASL_HANDSHAKE, "SaslHandshakeRequest", (0, 1), [
    F("mechanism", STRING),
])

SaslHandshakeResponse = message(K.SASL_HANDSHAKE, "SaslHandshakeResponse", (0, 1), [
    F("error_code", INT16),
    F("mechanisms", Array(STRING)),
])

SaslAuthenticateRequest = message(K.SASL_AUTHENTICATE, "SaslAuthenticateRequest", (0, 1), [
    F("auth_bytes", BYTES),
], flexible="2+")

SaslAuthenticateResponse = message(K.SASL_AUTHENTICATE, "SaslAuthenticateResponse", (0, 1), [
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=None),
    F("auth_bytes", BYTES),
    F("session_lifetime_ms", INT64, "1+"),
], flexible="2+")

# -- DescribeAcls (29) / CreateAcls (30) / DeleteAcls (31) ---------------------------------
# Codes: resource type (1 ANY, 2 TOPIC, 3 GROUP, 4 CLUSTER, 5 TRANSACTIONAL_ID), pattern type
# (1 ANY, 2 MATCH, 3 LITERAL, 4 PREFIXED; v0 knows LITERAL only), operation (1 ANY, 2 ALL,
# 3 READ ... 12 IDEMPOTENT_WRITE), permission (1 ANY, 2 DENY, 3 ALLOW).  v2+ are flexible.

DescribeAclsRequest = message(K.DESCRIBE_ACLS, "DescribeAclsRequest", (0, 1), [
    F("resource_type_filter", INT8),
    F("resource_name_filter", STRING, nullable="0+", default=None),
    F("pattern_type_filter", INT8, "1+", default=3),
    F("principal_filter", STRING, nullable="0+", default=None),
    F("host_filter", STRING, nullable="0+", default=None),
    F("operation", INT8),
    F("permission_type", INT8),
], flexible="2+")

DescribeAclsResponse = message(K.DESCRIBE_ACLS, "DescribeAclsResponse", (0, 1), [
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=None),
    F("resources", Array(Struct("DescribeAclsResource", [
        F("resource_type", INT8),
        F("resource_name", STRING),
        F("pattern_type", INT8, "1+", default=3),
        F("acls", Array(Struct("AclDescription", [
            F("principal", STRING),
            F("host", STRING),
            F("operation", INT8),
            F("permission_type", INT8),
        ]))),
    ]))),
], flexible="2+")

CreateAclsRequest = message(K.CREATE_ACLS, "CreateAclsRequest", (0, 1), [
    F("creations", Array(Struct("AclCreation", [
        F("resource_type", INT8),
        F("resource_name", STRING),
        F("resource_pattern_type", INT8, "1+", default=3),
        F("principal", STRING),
        F("host", STRING),
        F("operation", INT8),
        F("permission_type", INT8),
    ]))),
], flexible="2+")

CreateAclsResponse = message(K.CREATE_ACLS, "CreateAclsResponse", (0, 1), [
    F("throttle_time_ms", INT32),
    F("results", Array(Struct("AclCreationResult", [
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=None),
    ]))),
], flexible="2+")

DeleteAclsRequest = message(K.DELETE_ACLS, "DeleteAclsRequest", (0, 1), [
    F("filters", Array(Struct("DeleteAclsFilter", [
        F("resource_type_filter", INT8),
        F("resource_name_filter", STRING, nullable="0+", default=None),
        F("pattern_type_filter", INT8, "1+", default=3),
        F("principal_filter", STRING, nullable="0+", default=None),
        F("host_filter", STRING, nullable="0+", default=None),
        F("operation", INT8),
        F("permission_type", INT8),
    ]))),
], flexible="2+")

DeleteAclsResponse = message(K.DELETE_ACLS, "DeleteAclsResponse", (0, 1), [
    F("throttle_time_ms", INT32),
    F("filter_results", Array(Struct("DeleteAclsFilterResult", [
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=None),
        F("matching_acls", Array(Struct("DeleteAclsMatchingAcl", [
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+", default=None),
            F("resource_type", INT8),
            F("resource_name", STRING),
            F("pattern_type", INT8, "1+", default=3),
            F("principal", STRING),
            F("host", STRING),
            F("operation", INT8),
            F("permission_type", INT8),
        ]))),
    ]))),
], flexible="2+")

# -- CreateTopics (19) / DeleteTopics (20) ------------------------------------------------

CreateTopicsRequest = message(K.CREATE_TOPICS, "CreateTopicsRequest", (0, 3), [
    F("topics", Array(Struct("CreatableTopic", [
        F("name", STRING),
        F("num_partitions", INT32),
        F("replication_factor", INT16),
        F("assignments", Array(Struct("CreatableReplicaAssignment", [
            F("partition_index", INT32),
            F("broker_ids", Array(INT32)),
        ]))),
        F("configs", Array(Struct("CreatableTopicConfig", [
            F("name", STRING),
            F("value", STRING, nullable="0+"),
        ]))),
    ]))),
    F("timeout_ms", INT32, default=60000),
    F("validate_only", BOOLEAN, "1+"),
], flexible="5+")

CreateTopicsResponse = message(K.CREATE_TOPICS, "CreateTopicsResponse", (0, 3), [
    F("throttle_time_ms", INT32, "2+"),
    F("topics", Array(Struct("CreatableTopicResult", [
        F("name", STRING),
        F("error_code", INT16),
        F("error_message", STRING, "1+", nullable="0+", default=None),
    ]))),
], flexible="5+")

DeleteTopicsRequest = message(K.DELETE_TOPICS, "DeleteTopicsRequest", (0, 3), [
    F("topic_names", Array(STRING)),
    F("timeout_ms", INT32),
], flexible="4+")

DeleteTopicsResponse = message(K.DELETE_TOPICS, "DeleteTopicsResponse", (0, 3), [
    F("throttle_time_ms", INT32, "1+"),
    F("responses", Array(Struct("DeletableTopicResult", [
        F("name", STRING),
        F("error_code", INT16),
    ]))),
], flexible="4+")

# -- InitProducerId (22) -------------------------------------------------------------------
# v1 changes only semantics (throttling after the response); v2 is flexible; v3: the
# producer's current producer_id and producer_epoch, so that it can ask for its epoch to be
# bumped instead of a new id (KIP-360; -1 when it has none); v4 adds only the error
# PRODUCER_FENCED (KIP-588). v5+ (KIP-890, KIP-939) are not here.

InitProducerIdRequest = message(K.INIT_PRODUCER_ID, "InitProducerIdRequest", (0, 4), [
    F("transactional_id", STRING, nullable="0+"),
    F("transaction_timeout_ms", INT32),
    F("producer_id", INT64, "3+", default=-1),
    F("producer_epoch", INT16, "3+", default=-1),
], flexible="2+")

InitProducerIdResponse = message(K.INIT_PRODUCER_ID, "InitProducerIdResponse", (0, 4), [
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("producer_id", INT64, default=-1),
    F("producer_epoch", INT16, default=-1),
], flexible="2+")

# -- DeleteRecords (21) --------------------------------------------------------------------
# v1 changes only semantics (throttling after the response); v2+ are flexible. An offset of
# -1 means the high watermark.

DeleteRecordsRequest = message(K.DELETE_RECORDS, "DeleteRecordsRequest", (0, 1), [
    F("topics", Array(Struct("DeleteRecordsTopic", [
        F("name", STRING),
        F("partitions", Array(Struct("DeleteRecordsPartition", [
            F("partition_index", INT32),
            F("offset", INT64),
        ]))),
    ]))),
    F("timeout_ms", INT32, default=60000),
], flexible="2+")

DeleteRecordsResponse = message(K.DELETE_RECORDS, "DeleteRecordsResponse", (0, 1), [
    F("throttle_time_ms", INT32),
    F("topics", Array(Struct("DeleteRecordsTopicResult", [
        F("name", STRING),
        F("partitions", Array(Struct("DeleteRecordsPartitionResult", [
            F("partition_index", INT32),
            F("low_watermark", INT64, default=-1),
            F("error_code", INT16),
        ]))),
    ]))),
], flexible="2+")

# -- OffsetForLeaderEpoch (23) -------------------------------------------------------------
# A follower (or a consumer) asks where a leader epoch ends. v1: leader_epoch in the answer;
# v2: current_leader_epoch (fencing) and throttle_time_ms; v3: replica_id; v4+ are flexible.
# replica_id defaults to Kafka's -2 (DEBUGGING_REPLICA_ID, may read past the high watermark):
# that is what a v0-2 request means, since followers sent those; a consumer sends -1.

OffsetForLeaderEpochRequest = message(
    K.OFFSET_FOR_LEADER_EPOCH, "OffsetForLeaderEpochRequest", (0, 3), [
    F("replica_id", INT32, "3+", default=-2),
    F("topics", Array(Struct("OffsetForLeaderTopic", [
        F("topic", STRING),
        F("partitions", Array(Struct("OffsetForLeaderPartition", [
            F("partition", INT32),
            F("current_leader_epoch", INT32, "2+", default=-1),
            F("leader_epoch", INT32),
        ]))),
    ]))),
], flexible="4+")

OffsetForLeaderEpochResponse = message(
    K.OFFSET_FOR_LEADER_EPOCH, "OffsetForLeaderEpochResponse", (0, 3), [
    F("throttle_time_ms", INT32, "2+"),
    F("topics", Array(Struct("OffsetForLeaderTopicResult", [
        F("topic", STRING),
        F("partitions", Array(Struct("EpochEndOffset", [
            F("error_code", INT16),
            F("partition", INT32),
            F("leader_epoch", INT32, "1+", default=-1),
            F("end_offset", INT64, default=-1),
        ]))),
    ]))),
], flexible="4+")

# -- Transactions (24-28) -------------------------------------------------------------------
# Producer -> transaction coordinator: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn (KIP-98);
# producer -> group coordinator: TxnOffsetCommit; transaction coordinator -> partition
# leaders: WriteTxnMarkers. In each, the version before the flexible one adds only the error
# PRODUCER_FENCED (KIP-588), and earlier versions change only semantics, except where noted.

# AddPartitionsToTxn v0-3 keeps the field names of Kafka's spec before KIP-890: v4+ (not
# encoded here; brokers send them to verify a partition is in a transaction) batch several
# transactions, and Kafka renamed the v0-3 fields (v3_and_below_transactional_id,
# v3_and_below_topics; results_by_topic_v3_and_below, results_by_partition) to tell them
# apart. The bytes are the same.

AddPartitionsToTxnRequest = message(K.ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxnRequest", (0, 3), [
    F("transactional_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("topics", Array(Struct("AddPartitionsToTxnTopic", [
        F("name", STRING),
        F("partitions", Array(INT32)),
    ]))),
], flexible="3+")

AddPartitionsToTxnResponse = message(
    K.ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxnResponse", (0, 3), [
    F("throttle_time_ms", INT32),
    F("results", Array(Struct("AddPartitionsToTxnTopicResult", [
        F("name", STRING),
        F("results", Array(Struct("AddPartitionsToTxnPartitionResult", [
            F("partition_index", INT32),
            F("partition_error_code", INT16),
        ]))),
    ]))),
], flexible="3+")

AddOffsetsToTxnRequest = message(K.ADD_OFFSETS_TO_TXN, "AddOffsetsToTxnRequest", (0, 3), [
    F("transactional_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("group_id", STRING),
], flexible="3+")

AddOffsetsToTxnResponse = message(K.ADD_OFFSETS_TO_TXN, "AddOffsetsToTxnResponse", (0, 3), [
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
], flexible="3+")

# committed: True to commit the transaction, False to abort it.

EndTxnRequest = message(K.END_TXN, "EndTxnRequest", (0, 3), [
    F("transactional_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("committed", BOOLEAN),
], flexible="3+")

EndTxnResponse = message(K.END_TXN, "EndTxnResponse", (0, 3), [
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
], flexible="3+")

# WriteTxnMarkers: v1 is v0 made flexible (Kafka 4 dropped v0). transaction_result: True
# for a COMMIT marker, False for ABORT.

WriteTxnMarkersRequest = message(K.WRITE_TXN_MARKERS, "WriteTxnMarkersRequest", (0, 1), [
    F("markers", Array(Struct("WritableTxnMarker", [
        F("producer_id", INT64),
        F("producer_epoch", INT16),
        F("transaction_result", BOOLEAN),
        F("topics", Array(Struct("WritableTxnMarkerTopic", [
            F("name", STRING),
            F("partition_indexes", Array(INT32)),
        ]))),
        F("coordinator_epoch", INT32),
    ]))),
], flexible="1+")

WriteTxnMarkersResponse = message(K.WRITE_TXN_MARKERS, "WriteTxnMarkersResponse", (0, 1), [
    F("markers", Array(Struct("WritableTxnMarkerResult", [
        F("producer_id", INT64),
        F("topics", Array(Struct("WritableTxnMarkerTopicResult", [
            F("name", STRING),
            F("partitions", Array(Struct("WritableTxnMarkerPartitionResult", [
                F("partition_index", INT32),
                F("error_code", INT16),
            ]))),
        ]))),
    ]))),
], flexible="1+")

# TxnOffsetCommit: v2: committed_leader_epoch; v3 is flexible and adds the member's
# generation_id, member_id and group_instance_id, which the group coordinator checks as an
# OffsetCommit's (KIP-447).

TxnOffsetCommitRequest = message(K.TXN_OFFSET_COMMIT, "TxnOffsetCommitRequest", (0, 3), [
    F("transactional_id", STRING),
    F("group_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("generation_id", INT32, "3+", default=-1),
    F("member_id", STRING, "3+", default=""),
    F("group_instance_id", STRING, "3+", nullable="3+", default=None),
    F("topics", Array(Struct("TxnOffsetCommitRequestTopic", [
        F("name", STRING),
        F("partitions", Array(Struct("TxnOffsetCommitRequestPartition", [
            F("partition_index", INT32),
            F("committed_offset", INT64),
            F("committed_leader_epoch", INT32, "2+", default=-1),
            F("committed_metadata", STRING, nullable="0+"),
        ]))),
    ]))),
], flexible="3+")

TxnOffsetCommitResponse = message(K.TXN_OFFSET_COMMIT, "TxnOffsetCommitResponse", (0, 3), [
    F("throttle_time_ms", INT32),
    F("topics", Array(Struct("TxnOffsetCommitResponseTopic", [
        F("name", STRING),
        F("partitions", Array(Struct("TxnOffsetCommitResponsePartition", [
            F("partition_index", INT32),
            F("error_code", INT16),
        ]))),
    ]))),
], flexible="3+")

# -- DescribeTransactions (65) / ListTransactions (66) --------------------------------------
# Admin -> transaction coordinator (KIP-664); every version is flexible. transaction_state
# is the state's name as Kafka's admin tools print it ("Ongoing", "PrepareCommit", ...).
# ListTransactions v1: duration_filter (only transactions running longer than that many
# ms; -1: all; KIP-994). Empty filters match everything.

DescribeTransactionsRequest = message(
    K.DESCRIBE_TRANSACTIONS, "DescribeTransactionsRequest", (0, 0), [
    F("transactional_ids", Array(STRING)),
], flexible="0+")

DescribeTransactionsResponse = message(
    K.DESCRIBE_TRANSACTIONS, "DescribeTransactionsResponse", (0, 0), [
    F("throttle_time_ms", INT32),
    F("transaction_states", Array(Struct("TransactionState", [
        F("error_code", INT16),
        F("transactional_id", STRING),
        F("transaction_state", STRING),
        F("transaction_timeout_ms", INT32),
        F("transaction_start_time_ms", INT64),
        F("producer_id", INT64),
        F("producer_epoch", INT16),
        F("topics", Array(Struct("TopicData", [
            F("topic", STRING),
            F("partitions", Array(INT32)),
        ]))),
    ]))),
], flexible="0+")

ListTransactionsRequest = message(K.LIST_TRANSACTIONS, "ListTransactionsRequest", (0, 1), [
    F("state_filters", Array(STRING)),
    F("producer_id_filters", Array(INT64)),
    F("duration_filter", INT64, "1+", default=-1),
], flexible="0+")

ListTransactionsResponse = message(K.LIST_TRANSACTIONS, "ListTransactionsResponse", (0, 1), [
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("unknown_state_filters", Array(STRING)),
    F("transaction_states", Array(Struct("TransactionState", [
        F("transactional_id", STRING),
        F("producer_id", INT64),
        F("transaction_state", STRING),
    ]))),
], flexible="0+")

# -- DescribeConfigs (32) ------------------------------------------------------------------
# v1: include_synonyms, config_source replaces is_default, synonyms; v2 changes only
# semantics; v3: include_documentation, config_type, documentation; v4+ are flexible.
# resource_type: 2 = topic, 4 = broker, 8 = broker logger (Kafka's ConfigResource.Type).

DescribeConfigsRequest = message(K.DESCRIBE_CONFIGS, "DescribeConfigsRequest", (0, 3), [
    F("resources", Array(Struct("DescribeConfigsResource", [
        F("resource_type", INT8),
        F("resource_name", STRING),
        F("configuration_keys", Array(STRING), nullable="0+", default=None),
    ]))),
    F("include_synonyms", BOOLEAN, "1+"),
    F("include_documentation", BOOLEAN, "3+"),
], flexible="4+")

DescribeConfigsResponse = message(K.DESCRIBE_CONFIGS, "DescribeConfigsResponse", (0, 3), [
    F("throttle_time_ms", INT32),
    F("results", Array(Struct("DescribeConfigsResult", [
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=None),
        F("resource_type", INT8),
        F("resource_name", STRING),
        F("configs", Array(Struct("DescribeConfigsResourceResult", [
            F("name", STRING),
            F("value", STRING, nullable="0+", default=None),
            F("read_only", BOOLEAN),
            F("config_source", INT8, "1+", default=-1),
            F("is_default", BOOLEAN, "0"),
            F("is_sensitive", BOOLEAN),
            F("synonyms", Array(Struct("DescribeConfigsSynonym", [
                F("name", STRING),
                F("value", STRING, nullable="0+", default=None),
                F("source", INT8),
            ])), "1+"),
            F("config_type", INT8, "3+"),
            F("documentation", STRING, "3+", nullable="0+", default=None),
        ]))),
    ]))),
], flexible="4+")

# -- AlterConfigs (33) / IncrementalAlterConfigs (44) ---------------------------------------
# AlterConfigs v1 changes only semantics, v2+ are flexible; IncrementalAlterConfigs v1+ are
# flexible. config_operation: 0 = set, 1 = delete, 2 = append, 3 = subtract.

AlterConfigsRequest = message(K.ALTER_CONFIGS, "AlterConfigsRequest", (0, 1), [
    F("resources", Array(Struct("AlterConfigsResource", [
        F("resource_type", INT8),
        F("resource_name", STRING),
        F("configs", Array(Struct("AlterableConfig", [
            F("name", STRING),
            F("value", STRING, nullable="0+"),
        ]))),
    ]))),
    F("validate_only", BOOLEAN),
], flexible="2+")

AlterConfigsResponse = message(K.ALTER_CONFIGS, "AlterConfigsResponse", (0, 1), [
    F("throttle_time_ms", INT32),
    F("responses", Array(Struct("AlterConfigsResourceResponse", [
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=None),
        F("resource_type", INT8),
        F("resource_name", STRING),
    ]))),
], flexible="2+")

IncrementalAlterConfigsRequest = message(
    K.INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigsRequest", (0, 0), [
    F("resources", Array(Struct("AlterConfigsResource", [
        F("resource_type", INT8),
        F("resource_name", STRING),
        F("configs", Array(Struct("AlterableConfig", [
            F("name", STRING),
            F("config_operation", INT8),
            F("value", STRING, nullable="0+"),
        ]))),
    ]))),
    F("validate_only", BOOLEAN),
], flexible="1+")

IncrementalAlterConfigsResponse = message(
    K.INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigsResponse", (0, 0), [
    F("throttle_time_ms", INT32),
    F("responses", Array(Struct("AlterConfigsResourceResponse", [
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=None),
        F("resource_type", INT8),
        F("resource_name", STRING),
    ]))),
], flexible="1+")

# -- DescribeLogDirs (35) -------------------------------------------------------------------
# v1 changes only semantics (throttling after the response); v2+ are flexible. Null topics
# means every partition.

DescribeLogDirsRequest = message(K.DESCRIBE_LOG_DIRS, "DescribeLogDirsRequest", (0, 1), [
    F("topics", Array(Struct("DescribableLogDirTopic", [
        F("topic", STRING),
        F("partitions", Array(INT32)),
    ])), nullable="0+", default=None),
], flexible="2+")

DescribeLogDirsResponse = message(K.DESCRIBE_LOG_DIRS, "DescribeLogDirsResponse", (0, 1), [
    F("throttle_time_ms", INT32),
    F("results", Array(Struct("DescribeLogDirsResult", [
        F("error_code", INT16),
        F("log_dir", STRING),
        F("topics", Array(Struct("DescribeLogDirsTopic", [
            F("name", STRING),
            F("partitions", Array(Struct("DescribeLogDirsPartition", [
                F("partition_index", INT32),
                F("partition_size", INT64),
                F("offset_lag", INT64),
                F("is_future_key", BOOLEAN),
            ]))),
        ]))),
    ]))),
], flexible="2+")

# -- CreatePartitions (37) ------------------------------------------------------------------
# v1 changes only semantics (throttling after the response); v2+ are flexible. Null
# assignments lets the broker place the new partitions.

CreatePartitionsRequest = message(K.CREATE_PARTITIONS, "CreatePartitionsRequest", (0, 1), [
    F("topics", Array(Struct("CreatePartitionsTopic", [
        F("name", STRING),
        F("count", INT32),
        F("assignments", Array(Struct("CreatePartitionsAssignment", [
            F("broker_ids", Array(INT32)),
        ])), nullable="0+", default=None),
    ]))),
    F("timeout_ms", INT32, default=60000),
    F("validate_only", BOOLEAN),
], flexible="2+")

CreatePartitionsResponse = message(K.CREATE_PARTITIONS, "CreatePartitionsResponse", (0, 1), [
    F("throttle_time_ms", INT32),
    F("results", Array(Struct("CreatePartitionsTopicResult", [
        F("name", STRING),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=None),
    ]))),
], flexible="2+")

# -- DeleteGroups (42) / OffsetDelete (47) --------------------------------------------------
# DeleteGroups v1 changes only semantics, v2+ are flexible; OffsetDelete has only v0.

DeleteGroupsRequest = message(K.DELETE_GROUPS, "DeleteGroupsRequest", (0, 1), [
    F("groups_names", Array(STRING)),
], flexible="2+")

DeleteGroupsResponse = message(K.DELETE_GROUPS, "DeleteGroupsResponse", (0, 1), [
    F("throttle_time_ms", INT32),
    F("results", Array(Struct("DeletableGroupResult", [
        F("group_id", STRING),
        F("error_code", INT16),
    ]))),
], flexible="2+")

OffsetDeleteRequest = message(K.OFFSET_DELETE, "OffsetDeleteRequest", (0, 0), [
    F("group_id", STRING),
    F("topics", Array(Struct("OffsetDeleteRequestTopic", [
        F("name", STRING),
        F("partitions", Array(Struct("OffsetDeleteRequestPartition", [
            F("partition_index", INT32),
        ]))),
    ]))),
])

OffsetDeleteResponse = message(K.OFFSET_DELETE, "OffsetDeleteResponse", (0, 0), [
    F("error_code", INT16),
    F("throttle_time_ms", INT32),
    F("topics", Array(Struct("OffsetDeleteResponseTopic", [
        F("name", STRING),
        F("partitions", Array(Struct("OffsetDeleteResponsePartition", [
            F("partition_index", INT32),
            F("error_code", INT16),
        ]))),
    ]))),
])

# -- ElectLeaders (43) ----------------------------------------------------------------------
# v1: election_type (0 = preferred replica, 1 = unclean: the first live replica when no ISR
# member is alive) and a top-level error_code; v2+ are flexible. Null topic_partitions means
# every partition.

ElectLeadersRequest = message(K.ELECT_LEADERS, "ElectLeadersRequest", (0, 1), [
    F("election_type", INT8, "1+"),
    F("topic_partitions", Array(Struct("TopicPartitions", [
        F("topic", STRING),
        F("partitions", Array(INT32)),
    ])), nullable="0+"),
    F("timeout_ms", INT32, default=60000),
], flexible="2+")

ElectLeadersResponse = message(K.ELECT_LEADERS, "ElectLeadersResponse", (0, 1), [
    F("throttle_time_ms", INT32),
    F("error_code", INT16, "1+"),
    F("replica_election_results", Array(Struct("ReplicaElectionResult", [
        F("topic", STRING),
        F("partition_result", Array(Struct("PartitionResult", [
            F("partition_id", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+", default=None),
        ]))),
    ]))),
], flexible="2+")

# -- DescribeClientQuotas (48) / AlterClientQuotas (49) --------------------------------------
# KIP-546; v1 is v0 made flexible. An entity is a list of (entity_type, entity_name):
# entity_type "user" or "client-id", entity_name None for the <default> entity. A filter
# component's match_type: 0 = exactly the name ``match`` (None: the default), 1 = the
# default, 2 = any entity of that type (the default too). ``strict``: only entities with no
# other entity types than the components name. Values are float64 (a byte rate of 1 MiB/s
# is 1048576.0).

_QuotaEntity = Struct("EntityData", [
    F("entity_type", STRING),
    F("entity_name", STRING, nullable="0+"),
])

DescribeClientQuotasRequest = message(
    K.DESCRIBE_CLIENT_QUOTAS, "DescribeClientQuotasRequest", (0, 1), [
    F("components", Array(Struct("ComponentData", [
        F("entity_type", STRING),
        F("match_type", INT8),
        F("match", STRING, nullable="0+", default=None),
    ]))),
    F("strict", BOOLEAN),
], flexible="1+")

DescribeClientQuotasResponse = message(
    K.DESCRIBE_CLIENT_QUOTAS, "DescribeClientQuotasResponse", (0, 1), [
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=None),
    F("entries", Array(Struct("EntryData", [
        F("entity", Array(_QuotaEntity)),
        F("values", Array(Struct("ValueData", [
            F("key", STRING),
            F("value", FLOAT64),
        ]))),
    ])), nullable="0+"),
], flexible="1+")

AlterClientQuotasRequest = message(
    K.ALTER_CLIENT_QUOTAS, "AlterClientQuotasRequest", (0, 1), [
    F("entries", Array(Struct("EntryData", [
        F("entity", Array(_QuotaEntity)),
        F("ops", Array(Struct("OpData", [
            F("key", STRING),
            F("value", FLOAT64),
            F("remove", BOOLEAN),
        ]))),
    ]))),
    F("validate_only", BOOLEAN),
], flexible="1+")

AlterClientQuotasResponse = message(
    K.ALTER_CLIENT_QUOTAS, "AlterClientQuotasResponse", (0, 1), [
    F("throttle_time_ms", INT32),
    F("entries", Array(Struct("EntryData", [
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=None),
        F("entity", Array(_QuotaEntity)),
    ]))),
], flexible="1+")

del F, K, _LeaderAndIsrPartitionState, _QuotaEntity, _UpdateMetadataPartitionState
# fmt: on

# -- Registries ---------------------------------------------------------------------------

_ALL: list[type[Message]] = [
    v
    for v in list(globals().values())
    if isinstance(v, type) and issubclass(v, Message) and v is not Message
]

#: api key -> request class / response class
REQUEST_CLASSES: dict[int, type[Message]] = {c.API_KEY: c for c in _ALL if c.IS_REQUEST}
RESPONSE_CLASSES: dict[int, type[Message]] = {c.API_KEY: c for c in _ALL if not c.IS_REQUEST}

#: What trilog implements: api key -> (min version, max version), both inclusive.
API_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey(key): (cls.MIN_VERSION, cls.MAX_VERSION) for key, cls in sorted(REQUEST_CLASSES.items())
}

for _key, _req in REQUEST_CLASSES.items():
    _resp = RESPONSE_CLASSES[_key]
    if (_req.MIN_VERSION, _req.MAX_VERSION) != (_resp.MIN_VERSION, _resp.MAX_VERSION):
        raise AssertionError(f"{_req.__name__} and {_resp.__name__} disagree on versions")
del _key, _req, _resp


def request_class(api_key: int) -> type[Message]:
    """The request class of ``api_key``; ``KeyError`` if trilog does not implement it."""
    return REQUEST_CLASSES[api_key]


def response_class(api_key: int) -> type[Message]:
    """The response class of ``api_key``; ``KeyError`` if trilog does not implement it."""
    return RESPONSE_CLASSES[api_key]
