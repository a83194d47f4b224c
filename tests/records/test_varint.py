import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.util import decode_varint as kp_decode
from kafka.record.util import encode_varint as kp_encode
from records_helpers import RECORDS_SETTINGS

from trilog.errors import RemoteProtocolError
from trilog.records._varint import decode_varint, encode_varint, size_of_varint

int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@RECORDS_SETTINGS
@given(int64)
def test_round_trip(value):
    data = encode_varint(value)
    assert len(data) == size_of_varint(value)
    assert decode_varint(data, 0) == (value, len(data))
    assert decode_varint(b"\xff" + data + b"\x00", 1) == (value, len(data) + 1)


@RECORDS_SETTINGS
@given(st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_matches_kafka_python(value):
    out = bytearray()
    kp_encode(value, out.append)
    assert encode_varint(value) == bytes(out)
    assert kp_decode(bytes(out), 0)[0] == value


def test_small_values():
    assert encode_varint(0) == b"\x00"
    assert encode_varint(-1) == b"\x01"
    assert encode_varint(1) == b"\x02"
    assert encode_varint(63) == b"\x7e"
    assert encode_varint(64) == b"\x80\x01"


@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff\xff", b"\xff" * 11])
def test_truncated_or_overlong(data):
    with pytest.raises(RemoteProtocolError):
        decode_varint(data, 0)
