"""Flexible versions (KIP-482): compact encodings and tagged fields in the schema layer, the
request/response header versions, hand-derived frames of the transaction APIs, and
truncated or garbage flexible input.

The frames are written out from Kafka's JSON specs field by field: a compact string is
uvarint(len + 1) and its bytes (0: null), a compact array uvarint(count + 1) and its items
(0: null), and every struct ends with a tagged-field section: uvarint count, then per field
uvarint tag, uvarint size and the bytes.
"""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from protocol_samples import CASES, sample

from trilog.errors import LocalProtocolError, RemoteProtocolError, UnsupportedVersionError
from trilog.protocol import (
    BOOLEAN,
    INT8,
    INT32,
    STRING,
    ApiKey,
    ApiVersionsResponse,
    Array,
    DescribeTransactionsRequest,
    EndTxnRequest,
    EndTxnResponse,
    Field,
    ListTransactionsRequest,
    ProduceRequest,
    Reader,
    RequestHeader,
    ResponseHeader,
    Struct,
    TxnOffsetCommitRequest,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    request_header_version,
    response_header_version,
)

i16, i32, i64 = (struct.Struct(f">{c}").pack for c in "hiq")


def cstr(s):
    return bytes([len(s) + 1]) + s.encode()


def kstr(s):
    return i16(len(s)) + s.encode()


NO_TAGS = b"\x00"

FLEXIBLE_CASES = [(cls, v) for cls, v in CASES if cls.is_flexible(v)]
FLEXIBLE_IDS = [f"{cls.__name__}-v{v}" for cls, v in FLEXIBLE_CASES]


# -- The schema layer, on a struct declared here ----------------------------------------------

Demo = Struct("Demo", [
    Field("name", STRING),
    Field("ids", Array(INT32), nullable="0+"),
    Field("items", Array(Struct("Item", [
        Field("key", STRING, nullable="0+"),
        Field("flag", BOOLEAN),
        Field("weight", INT32, tag=0, default=-1),  # a tagged field of a nested struct
    ]))),
    Field("note", STRING, "1+", nullable="1+", default=None, tag=7),
    Field("extra", Struct("Extra", [Field("level", INT8)]), tag=2),
    Field("count", INT32, tag=1, default=-1),
], flexible="1+")
Item, Extra = Demo.cls.Item, Demo.cls.Extra


def _encode(value, version):
    from trilog.protocol import Writer

    w = Writer()
    Demo.codec(version).write(w, value)
    return w.getvalue()


def _decode(data, version):
    r = Reader(data)
    value = Demo.codec(version).read(r)
    r.expect_end()
    return value


def test_a_non_flexible_version_has_no_compact_encoding_and_no_tagged_field():
    value = Demo.cls(name="n", ids=None, items=[Item(key="k", flag=True, weight=5)], count=3)
    data = _encode(value, 0)
    assert data == kstr("n") + i32(-1) + i32(1) + kstr("k") + b"\x01"
    # Tagged fields are absent from non-flexible versions: they decode as their defaults.
    assert _decode(data, 0) == Demo.cls(name="n", ids=None, items=[Item(key="k", flag=True)])


def test_a_flexible_version_bytes():
    value = Demo.cls(name="n", ids=None, items=[Item(key=None, flag=True)])
    # Every tagged field at its default: every section is empty.
    assert _encode(value, 1) == cstr("n") + b"\x00" + b"\x02" + b"\x00\x01" + NO_TAGS + NO_TAGS
    assert _decode(_encode(value, 1), 1) == value


def test_tagged_fields_are_written_when_not_default_in_tag_order():
    value = Demo.cls(name="", ids=[1], items=[Item(key="", flag=False, weight=9)],
                     note="hi", extra=Extra(level=4), count=-1)
    expected = (
        cstr("") + b"\x02" + i32(1)
        + b"\x02" + cstr("") + b"\x00" + b"\x01" + b"\x00\x04" + i32(9)  # item, weight tag 0
        + b"\x02"  # two tagged fields (count is at its default)
        + b"\x02\x02" + b"\x04" + NO_TAGS  # tag 2: the struct Extra(level=4), its own section
        + b"\x07\x03" + cstr("hi")  # tag 7: a compact string of 3 bytes
    )
    assert _encode(value, 1) == expected
    assert _decode(expected, 1) == value


def test_unknown_tags_are_skipped_and_known_ones_read_wherever_they_come():
    data = (cstr("x") + b"\x01" + b"\x01"  # ids = [], items = []
            + b"\x03"  # three tagged fields, out of order, one unknown
            + b"\x01\x04" + i32(77)  # count
            + b"\x63\x03abc"  # tag 99: unknown, skipped
            + b"\x07\x01\x00")  # note: null, a compact string of one byte
    value = _decode(data, 1)
    assert (value.count, value.note, value.ids, value.items) == (77, None, [], [])
    # A known tag whose bytes do not hold its value is an error (here: no bytes at all).
    with pytest.raises(RemoteProtocolError, match=r"Demo.note \(tag 7\)"):
        _decode(data[:-3] + b"\x07\x00", 1)
    data = data[:-3] + b"\x07\x01\x00"
    value = _decode(data, 1)
    assert (value.count, value.note, value.ids, value.items) == (77, None, [], [])


@pytest.mark.parametrize(
    "tail",
    [
        b"\x01\x01\x05" + i32(1) + b"\x00",  # count's size says 5, its value takes 4
        b"\x01\x01\x03" + i32(1)[:3],  # count's size says 3: too short for an int32
        b"\x01\x01\x09" + i32(1),  # size past the end
        b"\x02\x01\x04" + i32(1),  # two fields announced, one there
        b"\x81",  # a truncated count
        b"",  # no section at all
    ],
)
def test_malformed_tagged_sections_raise_the_protocol_error(tail):
    with pytest.raises(RemoteProtocolError):
        _decode(cstr("x") + b"\x01\x01" + tail, 1)


def test_a_nullable_compact_array_may_be_null_and_others_not():
    value = _decode(cstr("x") + b"\x00" + b"\x01" + NO_TAGS, 1)
    assert value.ids is None
    with pytest.raises(RemoteProtocolError, match="Demo.items"):
        _decode(cstr("x") + b"\x01" + b"\x00" + NO_TAGS, 1)  # items: null, not nullable
    with pytest.raises(LocalProtocolError, match="Demo.items"):
        _encode(Demo.cls(name="x", items=None), 1)


def test_codecs_are_cached_per_version_and_flexibility():
    assert Demo.codec(1) is Demo.codec(1)
    assert Demo.codec(1).flexible and not Demo.codec(0).flexible
    # A nested struct takes its flexibility from what it is in.
    item = Demo.fields[2].type.item
    assert item.codec_for(1, True).flexible and not item.codec_for(1, False).flexible
    assert item.codec_for(1, True) is item.codec_for(1, True)


def test_declarations_are_checked():
    with pytest.raises(ValueError, match="duplicate tags"):
        Struct("Bad", [Field("a", INT8, tag=1), Field("b", INT8, tag=1)])
    from trilog.protocol import message

    with pytest.raises(ValueError, match="N\\+"):
        message(0, "BadRequest", (0, 1), [], flexible="1-2")


# -- Header versions -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_key", "version", "request_header", "response_header"),
    [
        (ApiKey.PRODUCE, 7, 1, 0),
        (ApiKey.PRODUCE, 9, 2, 1),  # past what trilog speaks: Kafka's rule all the same
        (ApiKey.END_TXN, 2, 1, 0),
        (ApiKey.END_TXN, 3, 2, 1),
        (ApiKey.INIT_PRODUCER_ID, 2, 2, 1),
        (ApiKey.DESCRIBE_TRANSACTIONS, 0, 2, 1),
        (ApiKey.SASL_HANDSHAKE, 1, 1, 0),  # never flexible
        (ApiKey.API_VERSIONS, 2, 1, 0),
        (ApiKey.API_VERSIONS, 3, 2, 0),  # ApiVersions' response header is always v0
        (ApiKey.API_VERSIONS, 4, 2, 0),
        (9999, 0, 1, 0),  # an API trilog does not know
    ],
)
def test_header_versions_follow_from_the_api_and_version(api_key, version, request_header,
                                                        response_header):
    assert request_header_version(api_key, version) == request_header
    assert response_header_version(api_key, version) == response_header


def test_header_round_trips():
    header = RequestHeader(api_key=26, api_version=3, correlation_id=7, client_id="cli")
    v1 = i16(26) + i16(3) + i32(7) + kstr("cli")  # client_id stays a non-compact string
    assert header.encode(1) == v1
    assert header.encode(2) == v1 + NO_TAGS
    assert RequestHeader.read(Reader(v1 + NO_TAGS), 2) == header
    r = Reader(v1 + b"\x01\x05\x02ab" + b"body")  # a tagged field the reader skips
    assert RequestHeader.read(r, 2) == header and r.raw(4) == b"body"
    assert RequestHeader(26, 3, 7, None).encode(2) == i16(26) + i16(3) + i32(7) + i16(-1) + b"\0"

    assert ResponseHeader(7).encode() == ResponseHeader(7).encode(0) == i32(7)
    assert ResponseHeader(7).encode(1) == i32(7) + NO_TAGS
    assert ResponseHeader.read(Reader(i32(7) + b"\x01\x00\x00"), 1) == ResponseHeader(7)
    with pytest.raises(RemoteProtocolError):
        ResponseHeader.read(Reader(i32(7)), 1)  # the section is missing


def test_api_versions_response_header_stays_v0():
    resp = ApiVersionsResponse(error_code=0, api_keys=[], throttle_time_ms=0)
    for version in (0, 1, 2):
        data = encode_response(resp, version, 5)
        assert data[4:8] == i32(5) and data[8:10] == i16(0)  # the body right after
        assert decode_response(data[4:], ApiKey.API_VERSIONS, version)[1] == resp


# -- Hand-derived frames ---------------------------------------------------------------------


def test_end_txn_v3_request_frame_with_tagged_fields_to_skip():
    payload = (
        i16(26) + i16(3) + i32(7) + kstr("cli")
        + b"\x01" + b"\x03\x02ab"  # header: one tagged field (tag 3, 2 bytes), unknown
        + cstr("tx") + i64(42) + i16(5) + b"\x01"
        + b"\x02" + b"\x00\x01\x7f" + b"\xc8\x01\x00"  # body: tags 0 and 200, unknown
    )
    header, body = decode_request(payload)
    assert header == RequestHeader(26, 3, 7, "cli")
    expected = EndTxnRequest(transactional_id="tx", producer_id=42, producer_epoch=5,
                             committed=True)
    assert body == expected
    # Written back, both sections are empty.
    ours = (i16(26) + i16(3) + i32(7) + kstr("cli") + NO_TAGS
            + cstr("tx") + i64(42) + i16(5) + b"\x01" + NO_TAGS)
    assert encode_request(expected, 3, 7, client_id="cli") == i32(len(ours)) + ours
    # v2 of the same request: header v1, non-compact body, no sections.
    v2 = i16(26) + i16(2) + i32(7) + kstr("cli") + kstr("tx") + i64(42) + i16(5) + b"\x01"
    assert encode_request(expected, 2, 7, client_id="cli")[4:] == v2


def test_end_txn_v3_response_frame():
    resp = EndTxnResponse(throttle_time_ms=3, error_code=47)
    body = i32(3) + i16(47) + NO_TAGS
    assert encode_response(resp, 3, 9) == i32(4 + 1 + len(body)) + i32(9) + NO_TAGS + body
    header, back = decode_response(i32(9) + b"\x01\x00\x01x" + body, ApiKey.END_TXN, 3)
    assert header.correlation_id == 9 and back == resp


def test_txn_offset_commit_v3_with_null_compact_strings():
    T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    P = T.TxnOffsetCommitRequestPartition
    req = TxnOffsetCommitRequest(
        transactional_id="t", group_id="g", producer_id=1, producer_epoch=0,
        generation_id=4, member_id="m", group_instance_id=None,
        topics=[T(name="x", partitions=[P(partition_index=0, committed_offset=9,
                                          committed_metadata=None)])])
    body = (cstr("t") + cstr("g") + i64(1) + i16(0) + i32(4) + cstr("m")
            + b"\x00"  # group_instance_id: null
            + b"\x02" + cstr("x") + b"\x02"
            + i32(0) + i64(9) + i32(-1)  # committed_leader_epoch: its default
            + b"\x00"  # committed_metadata: null
            + NO_TAGS + NO_TAGS + NO_TAGS)  # partition, topic, request
    assert req.encode(3) == body
    assert TxnOffsetCommitRequest.decode(body, 3) == req
    # v2 has neither the member fields nor compact encodings; metadata null is int16 -1.
    v2 = (kstr("t") + kstr("g") + i64(1) + i16(0) + i32(1) + kstr("x") + i32(1)
          + i32(0) + i64(9) + i32(-1) + i16(-1))
    assert req.encode(2) == v2


def test_list_transactions_v1_and_a_null_where_no_array_may_be():
    req = ListTransactionsRequest(state_filters=["Ongoing"], producer_id_filters=[],
                                  duration_filter=1000)
    body = b"\x02" + cstr("Ongoing") + b"\x01" + i64(1000) + NO_TAGS
    assert req.encode(1) == body
    assert ListTransactionsRequest.decode(body, 1) == req
    assert req.encode(0) == b"\x02" + cstr("Ongoing") + b"\x01" + NO_TAGS
    assert ListTransactionsRequest.decode(b"\x01\x01\x00", 0).duration_filter == -1
    # DescribeTransactions' transactional_ids is not nullable: a null count is refused.
    with pytest.raises(RemoteProtocolError, match="transactional_ids"):
        DescribeTransactionsRequest.decode(b"\x00" + NO_TAGS, 0)
    with pytest.raises(LocalProtocolError, match="transactional_ids"):
        DescribeTransactionsRequest(transactional_ids=None).encode(0)


# -- Truncated and garbage input --------------------------------------------------------------


@pytest.mark.parametrize(("cls", "version"), FLEXIBLE_CASES, ids=FLEXIBLE_IDS)
def test_truncated_flexible_frames_raise_the_protocol_error(cls, version):
    msg = sample(cls, version)
    if cls.IS_REQUEST:
        payload = encode_request(msg, version, 1, client_id="c")[4:]

        def decode(data):
            return decode_request(data)
    else:
        payload = encode_response(msg, version, 1)[4:]

        def decode(data):
            return decode_response(data, cls.API_KEY, version)
    assert decode(payload)[1] == msg
    for cut in range(len(payload)):
        with pytest.raises(RemoteProtocolError):
            decode(payload[:cut])
    with pytest.raises(RemoteProtocolError, match="trailing"):
        decode(payload + b"\0")


_FLEXIBLE_FRAMES = [
    encode_request(sample(cls, v, seed=s), v, s, client_id="c")[4:]
    for cls, v in FLEXIBLE_CASES if cls.IS_REQUEST for s in range(2)
]


@given(st.sampled_from(_FLEXIBLE_FRAMES), st.data())
def test_damaged_flexible_requests_decode_or_raise_the_protocol_error(payload, data):
    """Any byte of a flexible request changed, or bytes inserted: a clean error or a value,
    never IndexError, struct.error, ValueError or MemoryError."""
    damaged = bytearray(payload)
    pos = data.draw(st.integers(0, len(damaged) - 1))
    if data.draw(st.booleans()):
        damaged[pos] = data.draw(st.integers(0, 255))
    else:
        damaged[pos:pos] = data.draw(st.binary(min_size=1, max_size=6))
    try:
        decode_request(bytes(damaged), max_length=1 << 16)
    except (RemoteProtocolError, UnsupportedVersionError):
        pass


@given(st.sampled_from([(cls, v) for cls, v in FLEXIBLE_CASES]), st.binary(max_size=64))
def test_garbage_flexible_bodies_raise_the_protocol_error(case, data):
    cls, version = case
    try:
        cls.decode(data, version, max_length=1 << 16)
    except RemoteProtocolError:
        pass


def test_non_flexible_hot_paths_are_compiled_without_flexible_code():
    """Produce and Fetch stay non-flexible: their compiled functions use nothing that only
    flexible codecs need (varint lengths, tagged sections)."""
    from trilog.protocol import FetchRequest, FetchResponse, ProduceResponse

    for cls, version in [(ProduceRequest, 7), (ProduceResponse, 7), (FetchRequest, 10),
                         (FetchResponse, 10)]:
        for struct_ in _structs(cls._struct):
            codec = struct_.codec_for(version, False)
            assert not codec.flexible and not codec.tagged
            names = set(codec.read.__code__.co_names) | set(codec.write.__code__.co_names)
            assert not names & {"UV", "UVB", "TAGS", "TAGW", "append"}, cls


def _structs(s):
    yield s
    for f in s.fields:
        t = f.type.item if isinstance(f.type, Array) else f.type
        if isinstance(t, Struct):
            yield from _structs(t)
