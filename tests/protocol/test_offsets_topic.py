"""The records of ``__consumer_offsets``: Kafka's bytes, round trips, malformed input."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trilog.errors import RemoteProtocolError
from trilog.protocol import (
    OffsetAndMetadata,
    OffsetKey,
    OffsetsRecordError,
    decode_offset_value,
    decode_offsets_key,
    encode_offset_key,
    encode_offset_value,
)

# Records a Kafka 3.x broker wrote to __consumer_offsets (published as test fixtures of
# kafkesc/konsumer_offsets, offset_commit/03): key v1, value v3.
KAFKA_KEY = bytes.fromhex(
    "0001" "001b" + b"kafkesc-devcluster-group-id".hex() + "0003" + b"t01".hex() + "00000000"
)
KAFKA_VALUE = bytes.fromhex(
    "0003" "000000000000006a" "ffffffff" "0000" "0000018579eff58c"
)
# Its group-metadata key (group_metadata/02).
KAFKA_GROUP_KEY = bytes.fromhex("0002" "001b" + b"kafkesc-devcluster-group-id".hex())

_i16, _i32, _i64 = (struct.Struct(f">{c}").pack for c in "hiq")


def _string(text: str) -> bytes:
    return _i16(len(text.encode())) + text.encode()


def test_kafkas_records_decode():
    assert decode_offsets_key(KAFKA_KEY) == OffsetKey("kafkesc-devcluster-group-id", "t01", 0)
    assert decode_offset_value(KAFKA_VALUE) == OffsetAndMetadata(
        offset=106, leader_epoch=-1, metadata="", commit_timestamp=1672788047244
    )
    assert decode_offsets_key(KAFKA_GROUP_KEY) == "kafkesc-devcluster-group-id"


def test_encoding_gives_kafkas_bytes():
    assert encode_offset_key("kafkesc-devcluster-group-id", "t01", 0) == KAFKA_KEY
    assert encode_offset_value(OffsetAndMetadata(106, -1, "", 1672788047244)) == KAFKA_VALUE


def test_every_value_version_decodes():
    """v0-v3 by the layout; fields a version lacks take Kafka's defaults (-1)."""
    body = _i64(5) + _string("m") + _i64(9)
    assert decode_offset_value(_i16(0) + body) == OffsetAndMetadata(5, -1, "m", 9)
    assert decode_offset_value(_i16(1) + body + _i64(99)) == OffsetAndMetadata(5, -1, "m", 9, 99)
    assert decode_offset_value(_i16(2) + body) == OffsetAndMetadata(5, -1, "m", 9)
    v3 = _i16(3) + _i64(5) + _i32(4) + _string("m") + _i64(9)
    assert decode_offset_value(v3) == OffsetAndMetadata(5, 4, "m", 9)


def test_key_versions():
    v0 = _i16(0) + _string("g") + _string("t") + _i32(7)
    assert decode_offsets_key(v0) == OffsetKey("g", "t", 7)
    assert decode_offsets_key(_i16(3) + b"a newer group type") is None


def test_a_commit_with_its_own_retention_is_written_as_v1():
    value = encode_offset_value(OffsetAndMetadata(42, 7, "x", 1000, 5000))
    assert value == _i16(1) + _i64(42) + _string("x") + _i64(1000) + _i64(5000)


names = st.text(max_size=40)
offsets = st.builds(
    OffsetAndMetadata,
    offset=st.integers(-1, 2**63 - 1),
    leader_epoch=st.integers(-1, 2**31 - 1),
    metadata=st.text(max_size=100),
    commit_timestamp=st.integers(-1, 2**63 - 1),
    expire_timestamp=st.just(-1),
)


@given(names, names, st.integers(-(2**31), 2**31 - 1))
def test_key_round_trip(group, topic, partition):
    assert decode_offsets_key(encode_offset_key(group, topic, partition)) == OffsetKey(
        group, topic, partition
    )


@given(offsets, st.integers(-1, 2**63 - 1))
def test_value_round_trip(om, expire):
    assert decode_offset_value(encode_offset_value(om)) == om
    # v1 carries no leader epoch: it decodes as -1.
    with_expiry = om._replace(expire_timestamp=expire)
    expected = with_expiry if expire < 0 else with_expiry._replace(leader_epoch=-1)
    assert decode_offset_value(encode_offset_value(with_expiry)) == expected


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        b"\x00\x03\x00",
        b"\x00\x09" + bytes(30),  # a value version this codec does not know
        b"\x00\x04" + bytes(30),  # v4 is flexible (tagged fields): not read here
        b"\xff\xff" + bytes(30),
        _i16(3) + _i64(1) + _i32(0) + _i16(-1) + _i64(0),  # a null where a string must be
        _i16(3) + _i64(1) + _i32(0) + _i16(0x7FFF) + b"short",  # length past the end
        _i16(0) + _i64(1) + _i16(2) + b"\xff\xfe" + _i64(0),  # not UTF-8
    ],
)
def test_malformed_values_raise_the_documented_error(data):
    with pytest.raises(OffsetsRecordError) as info:
        decode_offset_value(data)
    assert isinstance(info.value, RemoteProtocolError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00\x01",
        b"\x00\x01\x00\x05ab",
        _i16(1) + _string("g") + _string("t") + b"\x00\x00",  # partition cut short
        _i16(2) + _i16(-3),
        _i16(1) + _i16(0x7FFF),  # a length the bytes cannot hold: refused before allocating
    ],
)
def test_malformed_keys_raise_the_documented_error(data):
    with pytest.raises(OffsetsRecordError):
        decode_offsets_key(data)


@given(st.binary(max_size=64))
def test_any_bytes_decode_or_raise_the_documented_error(data):
    for decode in (decode_offsets_key, decode_offset_value):
        try:
            decode(data)
        except OffsetsRecordError:
            pass


def test_a_memoryview_decodes_like_bytes():
    assert decode_offset_value(memoryview(KAFKA_VALUE)) == decode_offset_value(KAFKA_VALUE)


def test_bytes_after_the_fields_are_ignored_as_by_kafka():
    assert decode_offset_value(KAFKA_VALUE + b"later") == decode_offset_value(KAFKA_VALUE)
    assert decode_offsets_key(KAFKA_KEY + b"later") == decode_offsets_key(KAFKA_KEY)
