"""Frames, headers, hand-built byte vectors, header peeking, ApiVersions fallback, zero-copy."""

import struct
import warnings
import zlib

import pytest

from trilog.errors import LocalProtocolError, RemoteProtocolError, UnsupportedVersionError
from trilog.protocol import (
    API_VERSIONS,
    ApiKey,
    ApiVersionsRequest,
    ApiVersionsResponse,
    FetchResponse,
    FrameSplitter,
    MetadataRequest,
    ProduceRequest,
    RequestHeader,
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


def i16(v):
    return struct.pack(">h", v)


def i32(v):
    return struct.pack(">i", v)


def i64(v):
    return struct.pack(">q", v)


def kstr(s):
    return i16(len(s)) + s.encode()


# -- Hand-checked vectors, from the guide's grammar (seed 003) ------------------------------


def test_request_header_v1_bytes():
    # RequestMessage => ApiKey ApiVersion CorrelationId ClientId
    #   ApiKey => int16, ApiVersion => int16, CorrelationId => int32, ClientId => string
    expected = b"\x00\x03" + b"\x00\x01" + b"\x00\x00\x30\x39" + b"\x00\x06" + b"client"
    header = RequestHeader(api_key=3, api_version=1, correlation_id=12345, client_id="client")
    assert header.encode() == expected
    assert header.encode(header_version=0) == expected[:8]
    # A null client id is a string of length -1.
    assert RequestHeader(3, 1, 12345, None).encode() == expected[:8] + b"\xff\xff"


def test_librdkafka_all_topics_metadata_v9_request_is_read_as_meant():
    # librdkafka 2.16's all-topics Metadata v9 request, as captured on the wire: header v2
    # (api 3, v9, correlation 4, "rdkafka", no tags), then the topic array's reserved 4-byte
    # count left at zero (a compact null is one 0 byte), allow_auto_topic_creation, the two
    # include_*_authorized_operations and no tags.
    payload = bytes.fromhex("0003000900000004000772646b61666b6100" "00000000" "01000000")
    header, body = decode_request(payload)
    assert (header.api_key, header.api_version, header.correlation_id) == (3, 9, 4)
    assert body.topics is None and body.allow_auto_topic_creation is True
    assert not body.include_cluster_authorized_operations
    # A well-formed one still reads as it says; a malformed one of another kind still fails.
    header, body = decode_request(encode_request(
        MetadataRequest(topics=None, allow_auto_topic_creation=False), 9, 5, framed=False))
    assert body.topics is None and body.allow_auto_topic_creation is False
    with pytest.raises(RemoteProtocolError, match="trailing"):
        decode_request(payload[:18] + b"\x01\x00\x00\x00\x00\x00")


def test_produce_v0_request_bytes():
    # ProduceRequest => RequiredAcks Timeout [TopicName [Partition MessageSetSize MessageSet]]
    #   RequiredAcks => int16, Timeout => int32, Partition => int32, MessageSetSize => int32
    # The records are opaque to this layer; use a real v0 message set anyway:
    # MessageSet => Offset:int64 MessageSize:int32 Message
    # Message (v0) => Crc:int32 MagicByte:int8 Attributes:int8 Key:bytes Value:bytes
    body = b"\x00" + b"\x00" + i32(-1) + i32(4) + b"abcd"  # magic 0, no codec, null key
    message = struct.pack(">I", zlib.crc32(body)) + body
    message_set = i64(0) + i32(len(message)) + message
    assert len(message) == 18
    expected = (
        i32(0)  # Size, patched below
        + i16(0)  # ApiKey: Produce
        + i16(0)  # ApiVersion
        + i32(7)  # CorrelationId
        + kstr("cli")  # ClientId
        + i16(1)  # RequiredAcks
        + i32(1500)  # Timeout
        + i32(1)  # [TopicName ...]: one topic
        + kstr("events")
        + i32(1)  # [Partition ...]: one partition
        + i32(2)  # Partition
        + i32(len(message_set))  # MessageSetSize
        + message_set
    )
    expected = i32(len(expected) - 4) + expected[4:]

    P = ProduceRequest
    request = P(
        acks=1,
        timeout_ms=1500,
        topic_data=[
            P.TopicProduceData(
                name="events",
                partition_data=[
                    P.TopicProduceData.PartitionProduceData(index=2, records=message_set)
                ],
            )
        ],
    )
    assert encode_request(request, 0, 7, client_id="cli") == expected
    header, decoded = decode_request(expected[4:])
    assert header == RequestHeader(0, 0, 7, "cli")
    assert decoded == request
    assert bytes(decoded.topic_data[0].partition_data[0].records) == message_set


def test_response_frame_bytes():
    from trilog.protocol import HeartbeatResponse

    data = encode_response(HeartbeatResponse(error_code=27, throttle_time_ms=5), 1, 99)
    assert data == i32(10) + i32(99) + i32(5) + i16(27)
    assert read_correlation_id(data[4:]) == 99
    header, body = decode_response(data[4:], ApiKey.HEARTBEAT, 1)
    assert header.correlation_id == 99
    assert (body.error_code, body.throttle_time_ms) == (27, 5)


def test_encoding_invalid_messages_is_a_local_error():
    with pytest.raises(LocalProtocolError, match="version 8 is not supported"):
        encode_request(ProduceRequest(), 8, 1)
    # Metadata v0 has no null topic list (null means "all topics" only from v1).
    with pytest.raises(LocalProtocolError, match="MetadataRequest.topics: null"):
        MetadataRequest(topics=None).encode(0)
    assert MetadataRequest(topics=None).encode(1) == i32(-1)
    with pytest.raises(LocalProtocolError, match=r"TopicProduceData.name: .*exceeds 32767"):
        ProduceRequest(topic_data=[ProduceRequest.TopicProduceData(name="x" * 40000)]).encode(0)
    with pytest.raises(LocalProtocolError, match="acks: 70000 is out of range for int16"):
        ProduceRequest(acks=70000).encode(0)
    with pytest.raises(TypeError, match="no field"):
        ProduceRequest(ack=1)


# -- Frame splitter -------------------------------------------------------------------------


def _frames(*payloads):
    return b"".join(frame(p) for p in payloads)


def test_splitter_one_byte_at_a_time():
    payloads = [b"first", b"", b"x" * 300]
    data = _frames(*payloads)
    s = FrameSplitter()
    out = []
    for i in range(len(data)):
        out.extend(s.feed(data[i : i + 1]))
        if i < 3:
            assert not s.at_frame_boundary
    assert out == payloads
    assert s.at_frame_boundary and s.buffered == 0


def test_splitter_many_frames_in_one_chunk_and_a_partial_tail():
    data = _frames(b"a", b"bb", b"ccc", b"dddd")
    s = FrameSplitter()
    assert s.feed(data[:-2]) == [b"a", b"bb", b"ccc"]
    assert s.buffered == 6
    assert s.feed(memoryview(data[-2:])) == [b"dddd"]
    assert s.feed(b"") == []


def test_splitter_oversize_frame_fails_before_the_body_arrives():
    s = FrameSplitter(max_frame_size=10)
    assert s.feed(frame(b"x" * 10)) == [b"x" * 10]
    with pytest.raises(RemoteProtocolError, match="frame size 11"):
        s.feed(i32(11))
    # The stream cannot be resynchronised: it stays broken.
    with pytest.raises(RemoteProtocolError):
        s.feed(b"x" * 11)


def test_splitter_negative_size():
    with pytest.raises(RemoteProtocolError, match="frame size -1"):
        FrameSplitter().feed(b"\xff\xff\xff\xff")


# -- Header peeking and errors the broker must answer ----------------------------------------


def test_peek_header_of_garbage_frame():
    payload = i16(1) + i16(10) + i32(4242) + kstr("cid") + b"\xde\xad\xbe\xef" * 3
    header = peek_request_header(payload)
    assert header == RequestHeader(api_key=1, api_version=10, correlation_id=4242, client_id="cid")
    with pytest.raises(RemoteProtocolError):
        decode_request(payload)


def test_peek_header_with_broken_client_id_and_unknown_api():
    payload = i16(999) + i16(-3) + i32(-1) + b"\x00\x50ab"  # client id claims 80 bytes
    assert peek_request_header(payload) == RequestHeader(999, -3, -1, None)
    with pytest.raises(RemoteProtocolError):
        decode_request(payload)
    with pytest.raises(RemoteProtocolError, match="unknown or unsupported api key 999"):
        decode_request(i16(999) + i16(0) + i32(1) + kstr("c"))
    with pytest.raises(RemoteProtocolError, match="too short"):
        peek_request_header(b"\x00\x01\x00")


def test_unsupported_version_raises_api_error_with_the_header_readable():
    # A flexible ApiVersions v3 request (header v2 ends with tagged fields).
    payload = i16(18) + i16(3) + i32(5) + kstr("new-client") + b"\x00" + b"\x07librdk\x02\x00"
    with pytest.raises(UnsupportedVersionError) as info:
        decode_request(payload)
    assert info.value.code == 35
    header = peek_request_header(payload)
    assert (header.api_key, header.api_version, header.correlation_id) == (18, 3, 5)


def test_api_versions_fallback_is_v0_with_error_35():
    data = encode_api_versions_fallback(correlation_id=5)
    payload = data[4:]
    expected_body = (
        i16(35)
        + i32(len(API_VERSIONS))
        + b"".join(i16(k) + i16(lo) + i16(hi) for k, (lo, hi) in sorted(API_VERSIONS.items()))
    )
    assert data == i32(4 + len(expected_body)) + i32(5) + expected_body
    # Our client, having asked for v2, still reads it (as Kafka's clients do).
    header, body = decode_response(payload, ApiKey.API_VERSIONS, 2)
    assert header.correlation_id == 5
    assert body.error_code == 35
    assert {k.api_key: (k.min_version, k.max_version) for k in body.api_keys} == API_VERSIONS

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kafka.protocol.metadata.api_versions import ApiVersionsResponse as KpResponse
    theirs = KpResponse.decode(payload[4:], version=3)  # they asked v3, we answer v0
    assert theirs.error_code == 35
    assert len(theirs.api_keys) == len(API_VERSIONS)


def test_api_versions_response_round_trip_and_a_normal_request():
    header, body = decode_request(encode_request(ApiVersionsRequest(), 2, 1)[4:])
    assert header.api_version == 2 and body == ApiVersionsRequest()
    resp = ApiVersionsResponse(error_code=0, api_keys=[], throttle_time_ms=3)
    _, back = decode_response(encode_response(resp, 2, 1)[4:], 18, 2)
    assert back == resp


# -- Zero-copy fetch -------------------------------------------------------------------------


class FileSlice:
    """Stands in for the storage layer's file slice: knows its size, not its bytes."""

    def __init__(self, data):
        self.data = data
        self.size = len(data)


class BrokerSlice:
    """The broker's file slice shape: ``position`` and ``length``."""

    def __init__(self, data):
        self.data = data
        self.position = 0
        self.length = len(data)


class LenOnly:
    def __init__(self, data):
        self.data = data

    def __len__(self):
        return len(self.data)


def _fetch_response(records):
    FR = FetchResponse
    T = FR.FetchableTopicResponse
    return FR(
        throttle_time_ms=1,
        session_id=9,
        responses=[
            T(
                topic="a",
                partitions=[
                    T.PartitionData(partition_index=i, high_watermark=100 + i, records=r)
                    for i, r in enumerate(records[:2])
                ],
            ),
            T(
                topic="b",
                partitions=[
                    T.PartitionData(partition_index=i, high_watermark=7, records=r)
                    for i, r in enumerate(records[2:])
                ],
            ),
        ],
    )


@pytest.mark.parametrize("version", range(11))
def test_fetch_response_parts_join_to_the_normal_encoding(version):
    blobs = [b"batch-one" * 3, b"", None, b"\x00" * 1000]
    refs = [FileSlice(blobs[0]), LenOnly(blobs[1]), None, BrokerSlice(blobs[3])]
    normal = encode_response(_fetch_response(blobs), version, correlation_id=77)

    parts = encode_fetch_response_parts(version, 77, _fetch_response(refs))
    # References come back as themselves, in order, between bytes pieces.
    assert [p for p in parts if not isinstance(p, bytes)] == [refs[0], refs[1], refs[3]]
    assert isinstance(parts[0], bytes) and parts[0][:4] == normal[:4]
    joined = b"".join(p if isinstance(p, bytes) else p.data for p in parts)
    assert joined == normal
    # The size prefix counted the referenced bytes.
    assert int.from_bytes(parts[0][:4], "big") == len(normal) - 4


def test_parts_with_plain_bytes_is_one_piece():
    normal = encode_response(_fetch_response([b"x", b"y", b"z"]), 4, 1)
    assert encode_response_parts(_fetch_response([b"x", b"y", b"z"]), 4, 1) == [normal]


def test_references_need_the_parts_encoder():
    with pytest.raises(LocalProtocolError, match="_parts"):
        encode_response(_fetch_response([FileSlice(b"abc")]), 4, 1)
    with pytest.raises(LocalProtocolError, match="records must be bytes-like or have a size"):
        encode_fetch_response_parts(4, 1, _fetch_response([object()]))
    with pytest.raises(TypeError):
        encode_fetch_response_parts(4, 1, ApiVersionsResponse())


def test_decode_request_applies_the_length_cap():
    P = ProduceRequest
    part = P.TopicProduceData.PartitionProduceData(index=0, records=b"r" * 100)
    data = encode_request(P(topic_data=[P.TopicProduceData(name="t", partition_data=[part])]), 3, 1)
    assert decode_request(data[4:], max_length=100)[1].topic_data[0].partition_data[0].records
    with pytest.raises(RemoteProtocolError, match="records length 100 .* exceeds the cap of 99"):
        decode_request(data[4:], max_length=99)


# -- recv_into-style framing: large frames land in their own buffer --------------------------


def _drive(splitter, stream: bytes, chunk: int):
    frames, pos = [], 0
    while pos < len(stream):
        target = splitter.read_buffer()
        n = min(chunk, len(target), len(stream) - pos)
        target[:n] = stream[pos : pos + n]
        del target  # a large frame's buffer cannot grow while a view of it is alive
        pos += n
        frames += splitter.advance(n)
    return frames


@pytest.mark.parametrize("chunk", [1, 7, 4096, 300_000])
def test_read_buffer_advance_matches_feed(chunk):
    from trilog.protocol import FrameSplitter, frame

    payloads = [b"a" * 10, bytes(range(256)) * 1000, b"", b"z" * 70_000, b"q" * 5]
    stream = b"".join(frame(p) for p in payloads)
    splitter = FrameSplitter()
    got = _drive(splitter, stream, chunk)
    assert [bytes(f) for f in got] == payloads
    assert splitter.at_frame_boundary


def test_large_frame_is_received_in_place_and_mixed_feed_works():
    from trilog.protocol import FrameSplitter, frame

    big = b"B" * (FrameSplitter.LARGE_FRAME * 2)
    splitter = FrameSplitter()
    data = frame(big) + frame(b"tail")
    assert splitter.feed(data[:100]) == []
    pos, frames = 100, []
    while not frames:
        target = splitter.read_buffer()
        assert 0 < len(target) <= 4 + len(big) - pos  # never past the big frame
        n = len(target)
        target[:n] = data[pos : pos + n]
        del target
        pos += n
        frames = splitter.advance(n)
    (frame_out,) = frames
    assert isinstance(frame_out, bytearray) and frame_out == big
    assert splitter.feed(data[4 + len(big) :]) == [b"tail"]


def test_a_frame_up_to_large_at_once_grows_to_its_size_in_one_step():
    """A produce request of a MiB gets a buffer of its size once its first 64 KiB are in
    (doubling wrote every byte twice more), so the rest can come in one read; a larger frame
    keeps doubling."""
    from trilog.protocol import FrameSplitter

    small = FrameSplitter.LARGE_FRAME
    # 64 KiB came with the prefix: the whole buffer at once (at most 17 times what arrived).
    splitter = FrameSplitter()
    need = FrameSplitter.LARGE_AT_ONCE
    assert splitter.feed(struct.pack(">i", need) + b"x" * small) == []
    target = splitter.read_buffer()
    assert len(target) == need - small
    del target
    # Less came: a first buffer of 64 KiB, then the frame's size in one step.
    for need, second in [(FrameSplitter.LARGE_AT_ONCE, FrameSplitter.LARGE_AT_ONCE - small),
                         (FrameSplitter.LARGE_AT_ONCE + 1, small)]:
        splitter = FrameSplitter()
        assert splitter.feed(struct.pack(">i", need) + b"x" * 1000) == []
        target = splitter.read_buffer()
        assert len(target) == small - 1000  # memory follows the bytes at first
        target[:] = b"y" * len(target)
        del target
        assert splitter.advance(small - 1000) == []
        target = splitter.read_buffer()
        assert len(target) == second
        del target
    splitter = FrameSplitter()
    need = FrameSplitter.LARGE_AT_ONCE
    body = bytes(range(256)) * (need // 256)
    data = struct.pack(">i", need) + body
    assert splitter.feed(data[:5000]) == []
    pos, frames = 5000, []
    while not frames:
        target = splitter.read_buffer()
        n = len(target)
        target[:] = data[pos:pos + n]
        del target
        pos += n
        frames = splitter.advance(n)
    assert frames == [body]


def test_fed_in_pieces_a_frame_up_to_large_at_once_grows_to_its_size_in_one_step():
    """The TLS readers feed decrypted pieces of 16 KiB: the same growth as in place."""
    from trilog.protocol import FrameSplitter

    need = FrameSplitter.LARGE_AT_ONCE
    body = bytes(range(256)) * (need // 256)
    data = struct.pack(">i", need) + body
    splitter = FrameSplitter()
    sizes, frames = set(), []
    for pos in range(0, len(data), 16384):
        frames += splitter.feed(data[pos:pos + 16384])
        if splitter._large is not None:
            sizes.add(len(splitter._large))
    assert frames == [body]
    assert sizes == {FrameSplitter.LARGE_FRAME, need}  # 64 KiB, then the whole frame


def test_a_large_frame_costs_memory_as_its_bytes_arrive_not_as_announced():
    from trilog.protocol import FrameSplitter

    splitter = FrameSplitter(max_frame_size=200 << 20)
    assert splitter.feed(struct.pack(">i", 100 << 20) + b"x") == []  # announces 100 MiB
    target = splitter.read_buffer()
    assert len(target) < 2 * FrameSplitter.LARGE_FRAME
    n = len(target)
    target[:] = b"y" * n
    del target
    assert splitter.advance(n) == []
    grown = splitter.read_buffer()
    # The buffer doubles as it fills: what is held stays within twice what arrived.
    assert 0 < len(grown) <= 1 + n
    del grown
    assert splitter.buffered == 4 + 1 + n


def test_read_buffer_uses_a_shared_scratch_when_given():
    from trilog.protocol import FrameSplitter, frame

    scratch = memoryview(bytearray(1024))
    a, b = FrameSplitter(), FrameSplitter()
    for splitter, payload in ((a, b"first"), (b, b"second")):
        target = splitter.read_buffer(scratch)
        assert target is scratch
        data = frame(payload)
        target[: len(data)] = data
        del target
        assert splitter.advance(len(data)) == [payload]
