"""The replication APIs of issue 13, at every version trilog encodes.

LeaderAndIsr (4), StopReplica (5), UpdateMetadata (6) and ControlledShutdown (7) are
inter-broker APIs that kafka-python does not implement: their layout is checked against byte
vectors written here field by field from Kafka's JSON specs
(``clients/src/main/resources/common/message/*.json``), independently of trilog's schema.
OffsetForLeaderEpoch (23) and ElectLeaders (43) get the same byte vectors and are also
encoded and decoded both ways by both of kafka-python's implementations (its JSON-generated
classes and its hand-written 2.x ones). ``test_messages`` adds random samples of all of them.
"""

import struct
import warnings

import pytest

from trilog import protocol as p
from trilog.errors import LocalProtocolError, UnsupportedVersionError

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from kafka.protocol.admin.topics import ElectLeadersRequest as KpElectLeadersRequest
    from kafka.protocol.admin.topics import ElectLeadersResponse as KpElectLeadersResponse
    from kafka.protocol.consumer.fetch import FetchRequest as KpFetchRequest
    from kafka.protocol.consumer.offsets import (
        OffsetForLeaderEpochRequest as KpOffsetForLeaderEpochRequest,
    )
    from kafka.protocol.consumer.offsets import (
        OffsetForLeaderEpochResponse as KpOffsetForLeaderEpochResponse,
    )
    from kafka.protocol.metadata.metadata import MetadataResponse as KpMetadataResponse
    from kafka.protocol.old import admin as kp_old_admin
    from kafka.protocol.old import offset_for_leader_epoch as kp_old_ofle


# -- Wire primitives, written out (not trilog's) ---------------------------------------------


def i8(v):
    return struct.pack(">b", v)


def i16(v):
    return struct.pack(">h", v)


def i32(v):
    return struct.pack(">i", v)


def i64(v):
    return struct.pack(">q", v)


def boolean(v):
    return b"\x01" if v else b"\x00"


def string(v):
    if v is None:
        return i16(-1)
    data = v.encode()
    return i16(len(data)) + data


def array(items):
    """``items``: already-encoded elements, or None for a null array."""
    if items is None:
        return i32(-1)
    return i32(len(items)) + b"".join(items)


def int32s(values):
    return array([i32(v) for v in values])


def by_topic(rows):
    """[(topic, ...), ...] -> {topic: [row, ...]} in first-seen order."""
    groups = {}
    for row in rows:
        groups.setdefault(row[0], []).append(row)
    return groups


def at_version(value, version):
    """``value`` as a decoder of ``version`` returns it: absent fields at their defaults."""
    if isinstance(value, list):
        return [at_version(v, version) for v in value]
    if not isinstance(value, p.StructValue):
        return value
    out = type(value).__new__(type(value))
    for f in value._struct.fields:
        if f.in_version(version):
            setattr(out, f.name, at_version(getattr(value, f.name), version))
        else:
            setattr(out, f.name, f.make_default())
    return out


# -- LeaderAndIsr (4) ------------------------------------------------------------------------

LAI_STATES = [
    # topic, partition, controller_epoch, leader, leader_epoch, isr, partition_epoch,
    # replicas, adding_replicas, removing_replicas, is_new
    ("events", 0, 7, 1, 4, [1, 2], 12, [1, 2, 3], [3], [], True),
    ("événements", 2, 7, 3, 9, [3], 0, [3, 1], [], [1], False),
    ("events", 5, 6, -1, 2147483647, [], -1, [2], [2, 4], [5], False),
]
LAI_LEADERS = [(1, "broker-1.example", 9092), (3, "", 0)]


def leader_and_isr_request(v):
    R = p.LeaderAndIsrRequest
    states = [
        R.LeaderAndIsrPartitionState(
            topic_name=t, partition_index=pi, controller_epoch=ce, leader=ld, leader_epoch=le,
            isr=isr, partition_epoch=pe, replicas=rs, adding_replicas=add,
            removing_replicas=rm, is_new=new)
        for t, pi, ce, ld, le, isr, pe, rs, add, rm, new in LAI_STATES
    ]
    msg = R(controller_id=1, controller_epoch=7, broker_epoch=0x1_0000_0002,
            live_leaders=[R.LeaderAndIsrLiveLeader(broker_id=b, host_name=h, port=port)
                          for b, h, port in LAI_LEADERS])
    if v <= 1:
        msg.ungrouped_partition_states = states
    else:
        msg.topic_states = [
            R.LeaderAndIsrTopicState(
                topic_name=t, partition_states=[s for s in states if s.topic_name == t])
            for t in by_topic(LAI_STATES)
        ]

    def state(row):
        t, pi, ce, ld, le, isr, pe, rs, add, rm, new = row
        out = string(t) if v <= 1 else b""
        out += i32(pi) + i32(ce) + i32(ld) + i32(le) + int32s(isr) + i32(pe) + int32s(rs)
        if v >= 3:
            out += int32s(add) + int32s(rm)
        if v >= 1:
            out += boolean(new)
        return out

    data = i32(1) + i32(7)
    if v >= 2:
        data += i64(0x1_0000_0002)
    if v <= 1:
        data += array([state(row) for row in LAI_STATES])
    else:
        data += array([string(t) + array([state(row) for row in rows])
                       for t, rows in by_topic(LAI_STATES).items()])
    data += array([i32(b) + string(h) + i32(port) for b, h, port in LAI_LEADERS])
    return msg, data


LAI_ERRORS = [("events", 0, 0), ("événements", 2, 56), ("", -1, -1)]


def leader_and_isr_response(v):
    R = p.LeaderAndIsrResponse
    msg = R(error_code=0, partition_errors=[
        R.LeaderAndIsrPartitionError(topic_name=t, partition_index=pi, error_code=e)
        for t, pi, e in LAI_ERRORS])
    data = i16(0) + array([string(t) + i32(pi) + i16(e) for t, pi, e in LAI_ERRORS])
    return msg, data


# -- StopReplica (5) -------------------------------------------------------------------------

SR_PARTITIONS = [("events", 0), ("events", 5), ("événements", 2)]


def stop_replica_request(v):
    R = p.StopReplicaRequest
    msg = R(controller_id=2, controller_epoch=11, broker_epoch=-1 if v == 0 else 77,
            delete_partitions=True)
    if v == 0:
        msg.ungrouped_partitions = [R.StopReplicaPartitionV0(topic_name=t, partition_index=pi)
                                    for t, pi in SR_PARTITIONS]
    else:
        msg.topics = [R.StopReplicaTopicV1(name=t, partition_indexes=[pi for _, pi in rows])
                      for t, rows in by_topic(SR_PARTITIONS).items()]
    data = i32(2) + i32(11)
    if v >= 1:
        data += i64(77)
    data += boolean(True)
    if v == 0:
        data += array([string(t) + i32(pi) for t, pi in SR_PARTITIONS])
    else:
        data += array([string(t) + int32s([pi for _, pi in rows])
                       for t, rows in by_topic(SR_PARTITIONS).items()])
    return msg, data


def stop_replica_response(v):
    R = p.StopReplicaResponse
    rows = [("events", 0, 0), ("événements", 2, 56)]
    msg = R(error_code=0, partition_errors=[
        R.StopReplicaPartitionError(topic_name=t, partition_index=pi, error_code=e)
        for t, pi, e in rows])
    data = i16(0) + array([string(t) + i32(pi) + i16(e) for t, pi, e in rows])
    return msg, data


# -- UpdateMetadata (6) ----------------------------------------------------------------------

UM_STATES = [
    # topic, partition, controller_epoch, leader, leader_epoch, isr, zk_version, replicas,
    # offline_replicas
    ("events", 0, 7, 1, 4, [1, 2], 12, [1, 2, 3], [3]),
    ("__consumer_offsets", 49, 7, 2, 0, [2], 1, [2], []),
    ("events", 1, 7, -1, 5, [], 13, [3, 1], [3, 1]),
]
UM_BROKERS = [
    # id, v0 host, v0 port, endpoints (port, host, listener, security_protocol), rack
    (1, "b1", 9092, [(9092, "b1", "PLAINTEXT", 0), (9093, "b1.tls", "SSL", 1)], "rack-a"),
    (2, "b2", 19092, [(19092, "b2", "INTERNAL", 0)], None),
    (3, "b3", 9092, [], ""),
]


def update_metadata_request(v):
    R = p.UpdateMetadataRequest
    states = [
        R.UpdateMetadataPartitionState(
            topic_name=t, partition_index=pi, controller_epoch=ce, leader=ld, leader_epoch=le,
            isr=isr, zk_version=zv, replicas=rs, offline_replicas=off)
        for t, pi, ce, ld, le, isr, zv, rs, off in UM_STATES
    ]
    brokers = [
        R.UpdateMetadataBroker(
            id=b, v0_host=h, v0_port=port, rack=rack, endpoints=[
                R.UpdateMetadataBroker.UpdateMetadataEndpoint(
                    port=ep, host=eh, listener=ln, security_protocol=sp)
                for ep, eh, ln, sp in endpoints])
        for b, h, port, endpoints, rack in UM_BROKERS
    ]
    msg = R(controller_id=3, controller_epoch=7, broker_epoch=1234567890123, live_brokers=brokers)
    if v <= 4:
        msg.ungrouped_partition_states = states
    else:
        msg.topic_states = [
            R.UpdateMetadataTopicState(
                topic_name=t, partition_states=[s for s in states if s.topic_name == t])
            for t in by_topic(UM_STATES)
        ]

    def state(row):
        t, pi, ce, ld, le, isr, zv, rs, off = row
        out = string(t) if v <= 4 else b""
        out += i32(pi) + i32(ce) + i32(ld) + i32(le) + int32s(isr) + i32(zv) + int32s(rs)
        if v >= 4:
            out += int32s(off)
        return out

    def broker(row):
        b, h, port, endpoints, rack = row
        out = i32(b)
        if v == 0:
            out += string(h) + i32(port)
        else:
            out += array([i32(ep) + string(eh) + (string(ln) if v >= 3 else b"") + i16(sp)
                          for ep, eh, ln, sp in endpoints])
        if v >= 2:
            out += string(rack)
        return out

    data = i32(3) + i32(7)
    if v >= 5:
        data += i64(1234567890123)
    if v <= 4:
        data += array([state(row) for row in UM_STATES])
    else:
        data += array([string(t) + array([state(row) for row in rows])
                       for t, rows in by_topic(UM_STATES).items()])
    data += array([broker(row) for row in UM_BROKERS])
    return msg, data


def update_metadata_response(v):
    return p.UpdateMetadataResponse(error_code=11), i16(11)


# -- ControlledShutdown (7) ------------------------------------------------------------------


def controlled_shutdown_request(v):
    msg = p.ControlledShutdownRequest(broker_id=2, broker_epoch=4294967296)
    return msg, i32(2) + (i64(4294967296) if v >= 2 else b"")


def controlled_shutdown_response(v):
    R = p.ControlledShutdownResponse
    rows = [("events", 3), ("événements", 0)]
    msg = R(error_code=0, remaining_partitions=[
        R.RemainingPartition(topic_name=t, partition_index=pi) for t, pi in rows])
    return msg, i16(0) + array([string(t) + i32(pi) for t, pi in rows])


# -- OffsetForLeaderEpoch (23) ---------------------------------------------------------------

OFLE_REQUEST = [
    # topic, [(partition, current_leader_epoch, leader_epoch)]
    ("events", [(0, 7, 6), (3, -1, 2)]),
    ("événements", []),
    ("t", [(2147483647, 0, -1)]),
]
OFLE_RESPONSE = [
    # topic, [(error_code, partition, leader_epoch, end_offset)]
    ("events", [(0, 0, 6, 1234), (74, 3, -1, -1)]),
    ("t", [(75, 1, 9, 9223372036854775807)]),
]


def ofle_request_wire(v):
    """The request's values in wire order (kafka-python 2.x's positional shape)."""
    topics = [(t, [((pi, cle, le) if v >= 2 else (pi, le)) for pi, cle, le in parts])
              for t, parts in OFLE_REQUEST]
    return (2, topics) if v >= 3 else (topics,)


def ofle_response_wire(v):
    topics = [(t, [((e, pi, le, off) if v >= 1 else (e, pi, off)) for e, pi, le, off in parts])
              for t, parts in OFLE_RESPONSE]
    return (5, topics) if v >= 2 else (topics,)


def offset_for_leader_epoch_request(v):
    R = p.OffsetForLeaderEpochRequest
    T = R.OffsetForLeaderTopic
    msg = R(replica_id=2, topics=[
        T(topic=t, partitions=[
            T.OffsetForLeaderPartition(partition=pi, current_leader_epoch=cle, leader_epoch=le)
            for pi, cle, le in parts])
        for t, parts in OFLE_REQUEST])
    data = i32(2) if v >= 3 else b""
    data += array([string(t) + array([i32(pi) + (i32(cle) if v >= 2 else b"") + i32(le)
                                      for pi, cle, le in parts])
                   for t, parts in OFLE_REQUEST])
    return msg, data


def offset_for_leader_epoch_response(v):
    R = p.OffsetForLeaderEpochResponse
    T = R.OffsetForLeaderTopicResult
    msg = R(throttle_time_ms=5, topics=[
        T(topic=t, partitions=[
            T.EpochEndOffset(error_code=e, partition=pi, leader_epoch=le, end_offset=off)
            for e, pi, le, off in parts])
        for t, parts in OFLE_RESPONSE])
    data = i32(5) if v >= 2 else b""
    data += array([string(t) + array([i16(e) + i32(pi) + (i32(le) if v >= 1 else b"") + i64(off)
                                      for e, pi, le, off in parts])
                   for t, parts in OFLE_RESPONSE])
    return msg, data


# -- ElectLeaders (43) -----------------------------------------------------------------------

EL_REQUEST = [("events", [0, 5]), ("événements", [])]
EL_RESPONSE = [
    # topic, [(partition_id, error_code, error_message)]
    ("events", [(0, 0, None), (5, 84, "Preferred replica 3 is not in the ISR")]),
    ("gone", [(1, 3, "")]),
]


def el_request_wire(v):
    return ((1,) if v >= 1 else ()) + (EL_REQUEST, 30000)


def el_response_wire(v):
    return (7,) + ((41,) if v >= 1 else ()) + (EL_RESPONSE,)


def elect_leaders_request(v):
    R = p.ElectLeadersRequest
    msg = R(election_type=1, timeout_ms=30000, topic_partitions=[
        R.TopicPartitions(topic=t, partitions=parts) for t, parts in EL_REQUEST])
    data = i8(1) if v >= 1 else b""
    data += array([string(t) + int32s(parts) for t, parts in EL_REQUEST]) + i32(30000)
    return msg, data


def elect_leaders_response(v):
    R = p.ElectLeadersResponse
    T = R.ReplicaElectionResult
    msg = R(throttle_time_ms=7, error_code=41, replica_election_results=[
        T(topic=t, partition_result=[
            T.PartitionResult(partition_id=pi, error_code=e, error_message=m)
            for pi, e, m in parts])
        for t, parts in EL_RESPONSE])
    data = i32(7) + (i16(41) if v >= 1 else b"")
    data += array([string(t) + array([i32(pi) + i16(e) + string(m) for pi, e, m in parts])
                   for t, parts in EL_RESPONSE])
    return msg, data


# -- Every version: the bytes, our decoding of them, and a whole frame -----------------------

BUILDERS = {
    p.LeaderAndIsrRequest: leader_and_isr_request,
    p.LeaderAndIsrResponse: leader_and_isr_response,
    p.StopReplicaRequest: stop_replica_request,
    p.StopReplicaResponse: stop_replica_response,
    p.UpdateMetadataRequest: update_metadata_request,
    p.UpdateMetadataResponse: update_metadata_response,
    p.ControlledShutdownRequest: controlled_shutdown_request,
    p.ControlledShutdownResponse: controlled_shutdown_response,
    p.OffsetForLeaderEpochRequest: offset_for_leader_epoch_request,
    p.OffsetForLeaderEpochResponse: offset_for_leader_epoch_response,
    p.ElectLeadersRequest: elect_leaders_request,
    p.ElectLeadersResponse: elect_leaders_response,
}
CASES = [(cls, v) for cls in BUILDERS for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1)]
CASE_IDS = [f"{cls.__name__}-v{v}" for cls, v in CASES]


def test_versions_are_kafkas_non_flexible_ones():
    assert {cls.API_NAME: (cls.MIN_VERSION, cls.MAX_VERSION) for cls in BUILDERS} == {
        "LeaderAndIsr": (0, 3), "StopReplica": (0, 1), "UpdateMetadata": (0, 5),
        "ControlledShutdown": (1, 2), "OffsetForLeaderEpoch": (0, 3), "ElectLeaders": (0, 1),
    }
    for cls in BUILDERS:
        assert p.REQUEST_CLASSES[cls.API_KEY] is cls or p.RESPONSE_CLASSES[cls.API_KEY] is cls
        assert p.API_VERSIONS[p.ApiKey(cls.API_KEY)] == (cls.MIN_VERSION, cls.MAX_VERSION)


@pytest.mark.parametrize(("cls", "version"), CASES, ids=CASE_IDS)
def test_bytes_match_kafkas_json_spec(cls, version):
    msg, data = BUILDERS[cls](version)
    assert isinstance(msg, cls)
    assert msg.encode(version) == data
    assert cls.decode(data, version) == at_version(msg, version)


@pytest.mark.parametrize(("cls", "version"), CASES, ids=CASE_IDS)
def test_round_trip_in_a_frame(cls, version):
    msg, _ = BUILDERS[cls](version)
    expected = at_version(msg, version)
    if cls.IS_REQUEST:
        data = p.encode_request(msg, version, correlation_id=99, client_id="controller-3")
        header, decoded = p.decode_request(data[4:])
        assert (header.api_key, header.api_version, header.correlation_id,
                header.client_id) == (cls.API_KEY, version, 99, "controller-3")
    else:
        data = p.encode_response(msg, version, correlation_id=99)
        header, decoded = p.decode_response(data[4:], cls.API_KEY, version)
        assert header.correlation_id == 99
    assert decoded == expected
    assert decoded.encode(version) == msg.encode(version)
    assert len(data) == 4 + int.from_bytes(data[:4], "big")


# -- Shapes the broker must know ---------------------------------------------------------------


def test_leader_and_isr_v2_takes_topic_names_from_topic_states():
    msg, data = leader_and_isr_request(2)
    decoded = p.LeaderAndIsrRequest.decode(data, 2)
    assert decoded.ungrouped_partition_states == []
    assert [t.topic_name for t in decoded.topic_states] == ["events", "événements"]
    assert [s.topic_name for t in decoded.topic_states for s in t.partition_states] == [""] * 3
    # v1 is flat and names the topic in every state.
    decoded = p.LeaderAndIsrRequest.decode(leader_and_isr_request(1)[1], 1)
    assert decoded.topic_states == []
    assert [s.topic_name for s in decoded.ungrouped_partition_states] == [
        "events", "événements", "events"]
    assert decoded.broker_epoch == -1


def test_absent_fields_decode_to_kafkas_defaults():
    # OffsetForLeaderEpoch before v3 was sent by followers: Kafka reads it as replica -2
    # (DEBUGGING_REPLICA_ID), which may read past the high watermark.
    req = p.OffsetForLeaderEpochRequest.decode(offset_for_leader_epoch_request(2)[1], 2)
    assert req.replica_id == -2
    req = p.OffsetForLeaderEpochRequest.decode(offset_for_leader_epoch_request(1)[1], 1)
    assert [pt.current_leader_epoch for pt in req.topics[0].partitions] == [-1, -1]
    resp = p.OffsetForLeaderEpochResponse.decode(offset_for_leader_epoch_response(0)[1], 0)
    assert resp.topics[0].partitions[0].leader_epoch == -1
    assert p.StopReplicaRequest.decode(stop_replica_request(0)[1], 0).broker_epoch == -1
    assert p.ControlledShutdownRequest.decode(i32(4), 1).broker_epoch == -1
    assert p.UpdateMetadataRequest.decode(update_metadata_request(1)[1], 1).live_brokers[0].rack \
        is None
    assert p.ElectLeadersRequest().timeout_ms == 60000


def test_elect_leaders_null_topic_partitions_means_all():
    req = p.ElectLeadersRequest(election_type=0, topic_partitions=None, timeout_ms=1000)
    for v in (0, 1):
        data = req.encode(v)
        assert data == (i8(0) if v else b"") + i32(-1) + i32(1000)
        assert p.ElectLeadersRequest.decode(data, v) == at_version(req, v)


def test_controlled_shutdown_v0_is_not_spoken():
    # Kafka's ControlledShutdown v0 request header has no client_id; trilog's header always
    # has one, so v0 is not offered and a v0 request is an unsupported version.
    with pytest.raises(LocalProtocolError):
        p.ControlledShutdownRequest(broker_id=1).encode(0)
    v0 = i16(7) + i16(0) + i32(5) + i32(1)
    with pytest.raises(UnsupportedVersionError):
        p.decode_request(v0)
    assert p.peek_request_header(v0).api_version == 0
    # v1 uses the standard header.
    v1 = i16(7) + i16(1) + i32(5) + string("broker-1") + i32(1)
    header, body = p.decode_request(v1)
    assert (header.client_id, body.broker_id, body.broker_epoch) == ("broker-1", 1, -1)


def test_api_versions_response_lists_only_what_it_is_given():
    # The protocol layer knows the inter-broker APIs; a broker advertises only the APIs it has
    # handlers for by passing them (api_versions_response's default is everything).
    assert p.ApiKey.LEADER_AND_ISR in p.API_VERSIONS
    served = {p.ApiKey.METADATA: (0, 7), p.ApiKey.API_VERSIONS: (0, 2)}
    resp = p.api_versions_response(versions=served)
    assert [k.api_key for k in resp.api_keys] == [3, 18]
    everything = p.api_versions_response()
    assert {k.api_key for k in everything.api_keys} == {int(k) for k in p.API_VERSIONS}


# -- kafka-python: OffsetForLeaderEpoch and ElectLeaders, both ways ------------------------------


def _to_kp(data_cls, d, version):
    """A kafka-python JSON-class object from our ``to_dict(version)``."""
    fields = data_cls._struct.fields
    assert not set(d) - set(fields), f"{data_cls.__name__}: field names disagree"
    kwargs = {}
    for name, value in d.items():
        f = fields[name]
        if value is not None and f.is_struct_array():
            value = [_to_kp(f.data_class, item, version) for item in value]
        kwargs[name] = value
    return data_cls(version=version, **kwargs)


def _old_values(obj):
    if hasattr(obj, "SCHEMA"):
        return tuple(_old_values(getattr(obj, n)) for n in obj.SCHEMA.names)
    if isinstance(obj, (list, tuple)):
        seq = [_old_values(v) for v in obj]
        return tuple(seq) if isinstance(obj, tuple) else seq
    return obj


KP_JSON = {
    p.OffsetForLeaderEpochRequest: KpOffsetForLeaderEpochRequest,
    p.OffsetForLeaderEpochResponse: KpOffsetForLeaderEpochResponse,
    p.ElectLeadersRequest: KpElectLeadersRequest,
    p.ElectLeadersResponse: KpElectLeadersResponse,
}
KP_OLD = {
    p.OffsetForLeaderEpochRequest: (kp_old_ofle.OffsetForLeaderEpochRequest, ofle_request_wire),
    p.OffsetForLeaderEpochResponse: (kp_old_ofle.OffsetForLeaderEpochResponse,
                                     ofle_response_wire),
    p.ElectLeadersRequest: (kp_old_admin.ElectLeadersRequest, el_request_wire),
    p.ElectLeadersResponse: (kp_old_admin.ElectLeadersResponse, el_response_wire),
}
KP_CASES = [(cls, v) for cls, v in CASES if cls in KP_JSON]
KP_CASE_IDS = [f"{cls.__name__}-v{v}" for cls, v in KP_CASES]


@pytest.mark.parametrize(("cls", "version"), KP_CASES, ids=KP_CASE_IDS)
def test_kafka_python_json_classes_both_ways(cls, version):
    msg, data = BUILDERS[cls](version)
    expected = msg.to_dict(version)
    kp_cls = KP_JSON[cls]
    theirs = kp_cls.decode(msg.encode(version), version=version)
    assert theirs.to_dict(json=False) == expected
    kp_bytes = bytes(_to_kp(kp_cls, expected, version).encode(version=version))
    assert kp_bytes == data
    assert cls.decode(kp_bytes, version) == at_version(msg, version)


@pytest.mark.parametrize(("cls", "version"), KP_CASES, ids=KP_CASE_IDS)
def test_kafka_python_old_classes_both_ways(cls, version):
    versions, wire = KP_OLD[cls]
    old_cls = versions[version]
    msg, data = BUILDERS[cls](version)
    assert _old_values(old_cls.decode(msg.encode(version))) == wire(version)
    kp_bytes = old_cls(*wire(version)).encode()
    assert kp_bytes == data
    assert cls.decode(kp_bytes, version) == at_version(msg, version)


# -- What a follower needs of Fetch and Metadata -----------------------------------------------


@pytest.mark.parametrize("version", [9, 10])
def test_follower_fetch_carries_replica_id_and_current_leader_epoch(version):
    R = p.FetchRequest
    req = R(replica_id=2, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
            session_id=0, session_epoch=-1, topics=[
                R.FetchTopic(topic="events", partitions=[
                    R.FetchTopic.FetchPartition(partition=3, current_leader_epoch=9,
                                                fetch_offset=1000, log_start_offset=0,
                                                partition_max_bytes=65536)])],
            forgotten_topics_data=[])
    data = req.encode(version)
    assert data == (
        i32(2) + i32(500) + i32(1) + i32(1 << 20) + i8(0) + i32(0) + i32(-1)
        + array([string("events") + array([
            i32(3) + i32(9) + i64(1000) + i64(0) + i32(65536)])])
        + array([]))
    theirs = KpFetchRequest.decode(data, version=version)
    assert theirs.replica_id == 2
    assert theirs.topics[0].partitions[0].current_leader_epoch == 9
    # (kafka-python cannot re-encode an object it decoded: build one from the fields.)
    kp_bytes = bytes(_to_kp(KpFetchRequest, req.to_dict(version), version).encode(version=version))
    assert kp_bytes == data
    assert R.decode(kp_bytes, version) == req


def test_metadata_v7_carries_leader_epoch_replicas_isr_and_offline_replicas():
    R = p.MetadataResponse
    T = R.MetadataResponseTopic
    resp = R(throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=1, topics=[
        T(error_code=0, name="events", is_internal=False, partitions=[
            T.MetadataResponsePartition(error_code=0, partition_index=0, leader_id=2,
                                        leader_epoch=7, replica_nodes=[2, 1, 3],
                                        isr_nodes=[2, 1], offline_replicas=[3])])])
    data = resp.encode(7)
    partition = (i16(0) + i32(0) + i32(2) + i32(7) + int32s([2, 1, 3]) + int32s([2, 1])
                 + int32s([3]))
    assert data == (i32(0) + array([]) + string(None) + i32(1)
                    + array([i16(0) + string("events") + boolean(False) + array([partition])]))
    theirs = KpMetadataResponse.decode(data, version=7).topics[0].partitions[0]
    assert (theirs.leader_epoch, theirs.replica_nodes, theirs.isr_nodes,
            theirs.offline_replicas) == (7, [2, 1, 3], [2, 1], [3])
