"""Every API and version: our own round trip, and byte-level interop with kafka-python.

kafka-python 3.0.12 ships two independent implementations, and both are used:

* ``kafka.protocol.<area>`` classes generated from Kafka's JSON specs (attribute names are
  Kafka's snake_case names, like ours): compared field by field through ``to_dict``;
* ``kafka.protocol.old.*`` hand-written per-version classes (kafka-python 2.x): compared
  positionally, value by value in wire order.

In both directions: they encode and we decode, we encode and they decode.
"""

import importlib
import pkgutil
import warnings

import pytest
from protocol_samples import CASE_IDS, CASES, sample

from trilog.protocol import (
    API_VERSIONS,
    REQUEST_CLASSES,
    RESPONSE_CLASSES,
    Array,
    Struct,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import kafka.protocol as kp
    from kafka.protocol.api_message import ApiMessage
    from kafka.protocol.old.api import Request as OldRequest
    from kafka.protocol.old.api import Response as OldResponse


def _collect_kafka_python():
    new, old = {}, {}
    for info in pkgutil.walk_packages(kp.__path__, "kafka.protocol."):
        if "generate_stubs" in info.name:
            continue
        mod = importlib.import_module(info.name)
        for obj in vars(mod).values():
            if not isinstance(obj, type):
                continue
            if issubclass(obj, ApiMessage) and getattr(obj, "_json", None) is not None:
                new[(obj.API_KEY, obj.is_request())] = obj
            elif (
                issubclass(obj, (OldRequest, OldResponse))
                and isinstance(getattr(obj, "API_KEY", None), int)
                and isinstance(getattr(obj, "API_VERSION", None), int)
            ):
                old[(obj.API_KEY, issubclass(obj, OldRequest), obj.API_VERSION)] = obj
    return new, old


KP_NEW, KP_OLD = _collect_kafka_python()


# -- Our own round trip -------------------------------------------------------------------


@pytest.mark.parametrize(("cls", "version"), CASES, ids=CASE_IDS)
@pytest.mark.parametrize("nulls", [False, True], ids=["values", "nulls"])
def test_round_trip(cls, version, nulls):
    for seed in range(3):
        msg = sample(cls, version, nulls=nulls, seed=seed)
        body = msg.encode(version)
        assert cls.decode(body, version) == msg
        # And through a whole frame with a header.
        if cls.IS_REQUEST:
            data = encode_request(msg, version, correlation_id=seed, client_id="c")
            header, decoded = decode_request(data[4:])
            assert (header.api_key, header.api_version, header.correlation_id) == (
                cls.API_KEY,
                version,
                seed,
            )
        else:
            data = encode_response(msg, version, correlation_id=seed)
            header, decoded = decode_response(data[4:], cls.API_KEY, version)
            assert header.correlation_id == seed
        assert decoded == msg
        assert len(data) == 4 + int.from_bytes(data[:4], "big")


@pytest.mark.parametrize(("cls", "version"), CASES, ids=CASE_IDS)
def test_truncated_bodies_raise_remote_protocol_error(cls, version):
    from trilog.errors import RemoteProtocolError

    body = sample(cls, version).encode(version)
    # Every proper prefix is rejected cleanly (never IndexError/struct.error).
    for cut in range(len(body)):
        with pytest.raises(RemoteProtocolError):
            cls.decode(body[:cut], version)
    with pytest.raises(RemoteProtocolError, match="trailing"):
        cls.decode(body + b"\0", version)


def test_registries_cover_the_brief():
    expected = {
        0: (0, 7), 1: (0, 10), 2: (0, 4), 3: (0, 9), 8: (0, 7), 9: (0, 7), 10: (0, 3),
        11: (0, 5), 12: (0, 3), 13: (0, 3), 14: (0, 3), 15: (0, 4), 16: (0, 2), 18: (0, 2),
        19: (0, 3), 20: (0, 3), 21: (0, 1), 22: (0, 4), 32: (0, 3), 33: (0, 1), 35: (0, 1),
        37: (0, 1), 42: (0, 1), 44: (0, 0), 47: (0, 0),
        # Replication (issue 13): ControlledShutdown v0's header has no client_id.
        4: (0, 3), 5: (0, 1), 6: (0, 5), 7: (1, 2), 23: (0, 3), 43: (0, 1),
        # Security (issue 15)
        17: (0, 1), 36: (0, 1), 29: (0, 1), 30: (0, 1), 31: (0, 1),
        # Transactions (issue 24)
        24: (0, 3), 25: (0, 3), 26: (0, 3), 27: (0, 1), 28: (0, 3), 65: (0, 0), 66: (0, 1),
        # Client quotas (issue 25): KIP-546, v1 flexible
        48: (0, 1), 49: (0, 1),
    }  # fmt: skip
    assert dict(API_VERSIONS) == expected
    assert set(REQUEST_CLASSES) == set(RESPONSE_CLASSES) == set(expected)


# -- kafka-python, JSON-generated classes (compared by field name) ---------------------------


#: int32 bit fields, which kafka-python reads as a set of bit numbers ({31}: None)
_BIT_FIELDS = {"authorized_operations"}


def _bits_as_set(value: int) -> set[int] | None:
    bits = {b for b in range(32) if (value & 0xFFFFFFFF) >> b & 1}
    return None if bits == {31} else bits


def _bits_as_int(bits: set[int] | None) -> int:
    unsigned = sum(1 << b for b in ({31} if bits is None else bits))
    return unsigned - (1 << 32) if unsigned >= 1 << 31 else unsigned


def _to_kp(data_cls, d, version):
    """Build a kafka-python DataContainer from our ``to_dict`` output."""
    fields = data_cls._struct.fields
    unknown = set(d) - set(fields)
    assert not unknown, f"{data_cls.__name__} has no fields {unknown}: names disagree"
    kwargs = {}
    for name, value in d.items():
        f = fields[name]
        if name in _BIT_FIELDS:
            value = _bits_as_set(value)
        elif value is not None and f.is_struct_array():
            value = [_to_kp(f.data_class, item, version) for item in value]
        elif value is not None and f.is_struct():
            value = _to_kp(f.data_class, value, version)
        kwargs[name] = value
    return data_cls(version=version, **kwargs)


def _kp_plain(value):
    if isinstance(value, dict):
        return {k: _bits_as_int(v) if k in _BIT_FIELDS else _kp_plain(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_kp_plain(v) for v in value]
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


#: Fields that kafka-python names as Kafka's current spec does and we as its spec before
#: KIP-890 (see AddPartitionsToTxn in _messages): ours -> (theirs, the same for the items).
_KP_RENAMES = {
    (24, True): {"transactional_id": ("v3_and_below_transactional_id", {}),
                 "producer_id": ("v3_and_below_producer_id", {}),
                 "producer_epoch": ("v3_and_below_producer_epoch", {}),
                 "topics": ("v3_and_below_topics", {})},
    (24, False): {"results": ("results_by_topic_v3_and_below", {
        "results": ("results_by_partition", {})})},
    # Metadata v8+: kafka-python drops Kafka's "topic_" and "cluster_" prefixes.
    (3, False): {"cluster_authorized_operations": ("authorized_operations", {}),
                 "topics": ("topics", {"topic_authorized_operations":
                                       ("authorized_operations", {})})},
}


def _renamed(value, renames, *, back=False):
    """``value`` (nested dicts and lists) with its keys renamed ours -> theirs, or back."""
    if isinstance(value, list):
        return [_renamed(v, renames, back=back) for v in value]
    if not isinstance(value, dict) or not renames:
        return value
    if back:
        renames = {theirs: (ours, inner) for ours, (theirs, inner) in renames.items()}
    out = {}
    for key, v in value.items():
        name, inner = renames.get(key, (key, {}))
        out[name] = _renamed(v, inner, back=back)
    return out


@pytest.mark.parametrize(("cls", "version"), CASES, ids=CASE_IDS)
@pytest.mark.parametrize("nulls", [False, True], ids=["values", "nulls"])
def test_kafka_python_json_classes(cls, version, nulls):
    kp_cls = KP_NEW.get((cls.API_KEY, cls.IS_REQUEST))
    if kp_cls is None:  # the inter-broker APIs (see test_replication_messages)
        pytest.skip(f"kafka-python has no {cls.__name__}")
    msg = sample(cls, version, nulls=nulls)
    if cls.API_NAME == "ApiVersions" and not cls.IS_REQUEST:
        # kafka-python reads any ApiVersions response with an error as v0 (see test_framing).
        msg.error_code = 0
    expected = msg.to_dict(version)
    renames = _KP_RENAMES.get((cls.API_KEY, cls.IS_REQUEST), {})

    # We encode, kafka-python decodes.
    theirs = kp_cls.decode(msg.encode(version), version=version)
    assert _renamed(_kp_plain(theirs.to_dict(json=False)), renames, back=True) == expected

    # kafka-python encodes, we decode.
    kp_msg = _to_kp(kp_cls, _renamed(expected, renames), version)
    data = bytes(kp_msg.encode(version=version))
    assert data == msg.encode(version)
    assert cls.decode(data, version) == msg


def test_kafka_python_framed_request_header_interop():
    kp_cls = KP_NEW[(3, True)]
    kp_msg = kp_cls[1](topics=None)
    kp_msg.with_header(correlation_id=42, client_id="kafka-python")
    data = bytes(kp_msg.encode(header=True, framed=True))
    header, body = decode_request(data[4:])
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        3,
        1,
        42,
        "kafka-python",
    )
    assert body.topics is None
    ours = encode_request(body, 1, 42, client_id="kafka-python")
    assert ours == data


_FLEXIBLE = [(cls, v) for cls, v in CASES if cls.is_flexible(v)]


@pytest.mark.parametrize(("cls", "version"), _FLEXIBLE,
                         ids=[f"{cls.__name__}-v{v}" for cls, v in _FLEXIBLE])
def test_kafka_python_flexible_frames(cls, version):
    """Whole frames, headers included (request header v2, response header v1): kafka-python
    encodes and we decode, we encode and kafka-python decodes."""
    kp_cls = KP_NEW[(cls.API_KEY, cls.IS_REQUEST)]
    msg = sample(cls, version)
    renames = _KP_RENAMES.get((cls.API_KEY, cls.IS_REQUEST), {})
    kp_msg = _to_kp(kp_cls, _renamed(msg.to_dict(version), renames), version)
    if cls.IS_REQUEST:
        kp_msg.with_header(correlation_id=42, client_id="kafka-python")
        theirs = bytes(kp_msg.encode(header=True, framed=True))
        header, body = decode_request(theirs[4:])
        assert (header.api_key, header.api_version, header.correlation_id,
                header.client_id) == (cls.API_KEY, version, 42, "kafka-python")
        assert body == msg
        ours = encode_request(msg, version, 42, client_id="kafka-python")
    else:
        kp_msg.with_header(correlation_id=42)
        theirs = bytes(kp_msg.encode(header=True, framed=True))
        header, body = decode_response(theirs[4:], cls.API_KEY, version)
        assert header.correlation_id == 42 and body == msg
        ours = encode_response(msg, version, 42)
    assert ours == theirs
    back = kp_cls.decode(ours, version=version, header=True, framed=True)
    assert back.header.correlation_id == 42
    assert _renamed(_kp_plain(back.to_dict(json=False)), renames, back=True) == msg.to_dict(
        version)


# -- kafka-python, hand-written 2.x classes (compared in wire order) -------------------------


def _wire_values(value, t):
    """Our value as nested tuples/lists in wire order, like kafka-python's old Structs."""
    if value is None:
        return None
    if hasattr(t, "steps"):  # a struct codec at one version
        return tuple(_wire_values(getattr(value, name), ft) for name, ft in t.steps)
    if isinstance(t, Array):
        items = [_wire_values(v, t.item) for v in value]
        if hasattr(t.item, "steps") and len(t.item.steps) == 1:
            # kafka-python 2.x spells an array of one-field structs as an array of that
            # field ([topic_name] for Metadata v0): same bytes.
            items = [item[0] for item in items]
        return items
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


def _old_values(obj):
    if hasattr(obj, "SCHEMA"):
        return tuple(_old_values(getattr(obj, n)) for n in obj.SCHEMA.names)
    if isinstance(obj, (list, tuple)):
        seq = [_old_values(v) for v in obj]
        return tuple(seq) if isinstance(obj, tuple) else seq
    if isinstance(obj, (bytearray, memoryview)):
        return bytes(obj)
    return obj


#: kafka-python.old classes that disagree with Kafka's JSON spec (the JSON classes agree with
#: us): DescribeLogDirsRequest_v0 spells ``partitions`` as one int32, not an array of them.
_KP_OLD_WRONG = {(35, True, 0)}


def _create_partitions_grouped(values):
    """kafka-python.old groups a CreatePartitions topic's count and assignments into one
    ``new_partitions`` struct (the same bytes): our wire values in its shape."""
    topics, *rest = values
    return ([(name, (count, assignments)) for name, count, assignments in topics], *rest)


def _describe_groups_bits(values):
    """kafka-python.old reads a group's ``authorized_operations`` as a set (a BitField)."""
    throttle, groups = values
    return (throttle, [(*group[:-1], _bits_as_set(group[-1])) for group in groups])


def _metadata_bits(values):
    """kafka-python.old reads Metadata v8's topic and cluster ``authorized_operations`` as
    sets (BitFields)."""
    *head, topics, cluster = values
    return (*head, [(*topic[:-1], _bits_as_set(topic[-1])) for topic in topics],
            _bits_as_set(cluster))


#: Old classes that group fields differently but write the same bytes: our values in theirs.
_KP_OLD_SHAPE = {(37, True, v): _create_partitions_grouped for v in (0, 1)}
_KP_OLD_SHAPE.update({(15, False, v): _describe_groups_bits for v in (3, 4)})
_KP_OLD_SHAPE[(3, False, 8)] = _metadata_bits


# -- Hand-built byte vectors (Kafka's JSON spec read field by field) -------------------------


def test_offset_delete_bytes():
    from trilog.protocol import OffsetDeleteRequest, OffsetDeleteResponse

    req = OffsetDeleteRequest(group_id="g", topics=[
        OffsetDeleteRequest.OffsetDeleteRequestTopic(name="t", partitions=[
            OffsetDeleteRequest.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(
                partition_index=2)])])
    data = (b"\x00\x01g" + b"\x00\x00\x00\x01" + b"\x00\x01t"
            + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x02")
    assert req.encode(0) == data
    assert OffsetDeleteRequest.decode(data, 0) == req
    # error_code comes before throttle_time_ms in this response, unlike most.
    resp = OffsetDeleteResponse.decode(b"\x00\x56\x00\x00\x00\x07\x00\x00\x00\x00", 0)
    assert (resp.error_code, resp.throttle_time_ms, resp.topics) == (86, 7, [])


def test_describe_log_dirs_null_topics_and_create_partitions_null_assignments():
    from trilog.protocol import CreatePartitionsRequest, DescribeLogDirsRequest

    assert DescribeLogDirsRequest(topics=None).encode(1) == b"\xff\xff\xff\xff"
    assert DescribeLogDirsRequest.decode(b"\xff\xff\xff\xff", 0).topics is None
    req = CreatePartitionsRequest(topics=[
        CreatePartitionsRequest.CreatePartitionsTopic(name="t", count=3)],
        timeout_ms=5, validate_only=True)
    data = (b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\x00\x00\x00\x03"
            + b"\xff\xff\xff\xff" + b"\x00\x00\x00\x05" + b"\x01")
    assert req.encode(1) == data
    assert CreatePartitionsRequest.decode(data, 0) == req


@pytest.mark.parametrize(("cls", "version"), CASES, ids=CASE_IDS)
def test_kafka_python_old_classes(cls, version):
    old_cls = KP_OLD.get((cls.API_KEY, cls.IS_REQUEST, version))
    if old_cls is None:
        pytest.skip(f"kafka-python.old has no {cls.__name__} v{version}")
    if (cls.API_KEY, cls.IS_REQUEST, version) in _KP_OLD_WRONG:
        pytest.skip(f"kafka-python.old's {cls.__name__} v{version} is not Kafka's")
    codec = cls._struct.codec(version)
    msg = sample(cls, version)
    if cls.API_NAME == "ApiVersions" and not cls.IS_REQUEST:
        msg.error_code = 0  # kafka-python reads an ApiVersions error response as v0
    values = _wire_values(msg, codec)
    reshape = _KP_OLD_SHAPE.get((cls.API_KEY, cls.IS_REQUEST, version))
    if reshape is not None:
        values = reshape(values)

    # kafka-python decodes ours.
    theirs = old_cls.decode(msg.encode(version))
    assert _old_values(theirs) == values

    # kafka-python encodes, we decode.
    data = old_cls(*values).encode()
    assert data == msg.encode(version)
    assert cls.decode(data, version) == msg


def test_struct_sanity():
    # Every nested struct class is reachable from its parent, as documented.
    from trilog.protocol import ProduceRequest

    part = ProduceRequest.TopicProduceData.PartitionProduceData(index=1, records=b"x")
    assert part.to_dict() == {"index": 1, "records": b"x"}
    assert isinstance(ProduceRequest._struct.fields[3].type, Array)
    assert isinstance(ProduceRequest._struct.fields[3].type.item, Struct)
