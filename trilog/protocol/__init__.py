"""Kafka's wire protocol: bytes <-> request/response objects. Pure: no I/O, no trio.

Build a message from its generated class (field names are Kafka's JSON names in snake_case,
nested structs hang off their parent class)::

    from trilog import protocol as p

    req = p.MetadataRequest(topics=[p.MetadataRequest.MetadataRequestTopic(name="events")])
    data = p.encode_request(req, api_version=1, correlation_id=7, client_id="me")  # framed

    splitter = p.FrameSplitter(max_frame_size=100 << 20)
    for payload in splitter.feed(data):
        header, body = p.decode_request(payload)          # body == req
        resp = p.MetadataResponse(brokers=[...], topics=[...])
        out = p.encode_response(resp, header.api_version, header.correlation_id)

    corr = p.read_correlation_id(payload)                 # client side: find the request
    _, resp = p.decode_response(payload, p.ApiKey.METADATA, 1)

Modules: ``_primitives`` (wire types, Reader/Writer, length caps), ``_schema`` (the schema
DSL and generated classes), ``_messages`` (every supported API as data), ``_framing``
(frames, headers, whole messages, zero-copy fetch, ApiVersions fallback), ``_offsets_topic``
(the key and value records of ``__consumer_offsets``).
"""

from trilog.protocol._consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    RANGE_ASSIGNOR,
    ConsumerAssignment,
    ConsumerSubscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from trilog.protocol._framing import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameDecoder,
    FrameSplitter,
    RecordsRef,
    RequestHeader,
    ResponseHeader,
    api_versions_response,
    decode_request,
    decode_response,
    encode_api_versions_fallback,
    encode_fetch_response_parts,
    encode_request,
    encode_response,
    encode_response_parts,
    frame,
    peek_request_header,
    read_correlation_id,
)
from trilog.protocol._messages import (
    API_VERSIONS,
    REQUEST_CLASSES,
    RESPONSE_CLASSES,
    ApiKey,
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    InitProducerIdRequest,
    InitProducerIdResponse,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    ProduceRequest,
    ProduceResponse,
    SyncGroupRequest,
    SyncGroupResponse,
    request_class,
    response_class,
)
from trilog.protocol._messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
)
from trilog.protocol._messages import (
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from trilog.protocol._offsets_topic import (
    OffsetAndMetadata,
    OffsetKey,
    OffsetsRecordError,
    decode_offset_value,
    decode_offsets_key,
    encode_offset_key,
    encode_offset_value,
)
from trilog.protocol._primitives import (
    BOOLEAN,
    BYTES,
    DEFAULT_MAX_LENGTH,
    INT8,
    INT16,
    INT32,
    INT64,
    NULLABLE_BYTES,
    NULLABLE_STRING,
    RECORDS,
    STRING,
    UINT32,
    UNSIGNED_VARINT,
    VARINT,
    VARLONG,
    Array,
    Reader,
    Type,
    Writer,
)
from trilog.protocol._schema import Field, Message, Struct, StructValue, message

__all__ = [
    "API_VERSIONS",
    "BOOLEAN",
    "BYTES",
    "DEFAULT_MAX_FRAME_SIZE",
    "DEFAULT_MAX_LENGTH",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "NULLABLE_BYTES",
    "NULLABLE_STRING",
    "RECORDS",
    "REQUEST_CLASSES",
    "RESPONSE_CLASSES",
    "STRING",
    "UINT32",
    "UNSIGNED_VARINT",
    "VARINT",
    "VARLONG",
    "ApiKey",
    "ApiVersionsRequest",
    "ApiVersionsResponse",
    "Array",
    "CreateTopicsRequest",
    "CreateTopicsResponse",
    "DeleteTopicsRequest",
    "DeleteTopicsResponse",
    "DescribeGroupsRequest",
    "DescribeGroupsResponse",
    "FetchRequest",
    "FetchResponse",
    "Field",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "FrameDecoder",
    "FrameSplitter",
    "HeartbeatRequest",
    "InitProducerIdRequest",
    "InitProducerIdResponse",
    "HeartbeatResponse",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "ListGroupsRequest",
    "ListGroupsResponse",
    "ListOffsetsRequest",
    "ListOffsetsResponse",
    "Message",
    "MetadataRequest",
    "MetadataResponse",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "ProduceRequest",
    "ProduceResponse",
    "Reader",
    "RecordsRef",
    "RequestHeader",
    "ResponseHeader",
    "Struct",
    "StructValue",
    "SyncGroupRequest",
    "SyncGroupResponse",
    "Type",
    "Writer",
    "api_versions_response",
    "decode_request",
    "decode_response",
    "encode_api_versions_fallback",
    "encode_fetch_response_parts",
    "encode_request",
    "encode_response",
    "encode_response_parts",
    "frame",
    "message",
    "peek_request_header",
    "read_correlation_id",
    "request_class",
    "response_class",
]

# The admin APIs of issue 12 (configs, partitions, records, groups, log dirs).
__all__ += [
    "AlterConfigsRequest",
    "AlterConfigsResponse",
    "CreatePartitionsRequest",
    "CreatePartitionsResponse",
    "DeleteGroupsRequest",
    "DeleteGroupsResponse",
    "DeleteRecordsRequest",
    "DeleteRecordsResponse",
    "DescribeConfigsRequest",
    "DescribeConfigsResponse",
    "DescribeLogDirsRequest",
    "DescribeLogDirsResponse",
    "IncrementalAlterConfigsRequest",
    "IncrementalAlterConfigsResponse",
    "OffsetDeleteRequest",
    "OffsetDeleteResponse",
]

# The replication APIs of issue 13: controller -> broker (LeaderAndIsr, StopReplica,
# UpdateMetadata), broker -> controller (ControlledShutdown), follower -> leader
# (OffsetForLeaderEpoch), admin -> controller (ElectLeaders).
__all__ += [
    "ControlledShutdownRequest",
    "ControlledShutdownResponse",
    "ElectLeadersRequest",
    "ElectLeadersResponse",
    "LeaderAndIsrRequest",
    "LeaderAndIsrResponse",
    "OffsetForLeaderEpochRequest",
    "OffsetForLeaderEpochResponse",
    "StopReplicaRequest",
    "StopReplicaResponse",
    "UpdateMetadataRequest",
    "UpdateMetadataResponse",
]

# Kafka's ConsumerProtocol (``_consumer_protocol``): subscriptions and assignments of
# ``consumer`` groups.
__all__ += [
    "CONSUMER_PROTOCOL_TYPE",
    "RANGE_ASSIGNOR",
    "ConsumerAssignment",
    "ConsumerSubscription",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
]

# The records of ``__consumer_offsets`` (``_offsets_topic``): committed offsets as Kafka's
# group coordinator writes them.
__all__ += [
    "OffsetAndMetadata",
    "OffsetKey",
    "OffsetsRecordError",
    "decode_offset_value",
    "decode_offsets_key",
    "encode_offset_key",
    "encode_offset_value",
]
