"""Kafka's ConsumerProtocol codec (pure): byte layouts, round trips, malformed input."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trilog.errors import LocalProtocolError, RemoteProtocolError
from trilog.protocol import (
    ConsumerAssignment,
    ConsumerSubscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

topics = st.text(min_size=0, max_size=20)
user_data = st.none() | st.binary(max_size=40)


def i16(n: int) -> bytes:
    return struct.pack(">h", n)


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def string(s: str) -> bytes:
    return i16(len(s.encode())) + s.encode()


# -- byte layouts -------------------------------------------------------------------------------


def test_subscription_layout():
    data = encode_subscription(["b", "a", "b"], b"x")
    assert data == i16(0) + i32(2) + string("a") + string("b") + i32(1) + b"x"
    assert encode_subscription([]) == i16(0) + i32(0) + i32(-1)


def test_assignment_layout():
    data = encode_assignment({"t": [2, 0], "a": [5]})
    assert data == (i16(0) + i32(2) + string("a") + i32(1) + i32(5)
                    + string("t") + i32(2) + i32(0) + i32(2) + i32(-1))


# -- round trips --------------------------------------------------------------------------------


@given(st.lists(topics, max_size=10), user_data)
def test_subscription_round_trip(names, data):
    decoded = decode_subscription(encode_subscription(names, data))
    assert decoded == ConsumerSubscription(tuple(sorted(set(names))), data, 0)


@given(st.dictionaries(topics, st.lists(st.integers(0, 2**31 - 1), max_size=10), max_size=8),
       user_data)
def test_assignment_round_trip(partitions, data):
    decoded = decode_assignment(encode_assignment(partitions, data))
    expected = {t: tuple(sorted(set(ps))) for t, ps in partitions.items()}
    assert decoded == ConsumerAssignment(expected, data, 0)
    assert decoded.topic_partitions() == sorted((t, p) for t, ps in expected.items()
                                                for p in ps)


def test_any_bytes_like_input():
    data = encode_assignment({"t": [1]})
    for form in (bytearray(data), memoryview(data), memoryview(b"..." + data)[3:]):
        assert decode_assignment(form).partitions == {"t": (1,)}
    assert decode_subscription(memoryview(encode_subscription(["t"]))).topics == ("t",)


# -- what other writers send ---------------------------------------------------------------------


def test_empty_assignment_null_arrays_and_absent_user_data():
    assert decode_assignment(b"") == ConsumerAssignment({})
    assert decode_subscription(i16(0) + i32(-1)) == ConsumerSubscription((), None, 0)
    assert decode_assignment(i16(0) + i32(-1)) == ConsumerAssignment({})
    assert decode_assignment(i16(0) + i32(1) + string("t") + i32(-1)).partitions == {"t": ()}


def test_newer_versions_are_read_by_their_v0_prefix():
    newer = i16(3) + i32(1) + string("t") + i32(-1) + b"owned partitions, rack..."
    assert decode_subscription(newer) == ConsumerSubscription(("t",), None, 3)
    # v1's owned partitions are read (sticky assignors keep them in place), later fields not
    newer = (i16(2) + i32(1) + string("t") + i32(-1) + i32(1) + string("t") + i32(2) + i32(5)
             + i32(1) + i32(7))  # ... generation 7
    assert decode_subscription(newer) == ConsumerSubscription(("t",), None, 2,
                                                              (("t", 1), ("t", 5)))
    assert decode_subscription(encode_subscription(["t"], owned=[("t", 2)])).owned == \
        (("t", 2),)
    newer = i16(1) + i32(1) + string("t") + i32(1) + i32(4) + i32(0) + b"" + b"later"
    assert decode_assignment(newer) == ConsumerAssignment({"t": (4,)}, b"", 1)


def test_a_topic_listed_twice_is_merged():
    data = (i16(0) + i32(2) + string("t") + i32(2) + i32(3) + i32(1)
            + string("t") + i32(2) + i32(1) + i32(0))
    assert decode_assignment(data).partitions == {"t": (0, 1, 3)}


# -- malformed input ------------------------------------------------------------------------------


def test_every_truncation_is_refused_or_read_as_no_user_data():
    for full, decode in ((encode_subscription(["a", "bc"], b"data"), decode_subscription),
                         (encode_assignment({"a": [1, 2], "bc": [0]}, b"data"),
                          decode_assignment)):
        without_user_data = full[:-8]
        for cut in range(1, len(full)):
            prefix = full[:cut]
            if prefix == without_user_data:
                assert decode(prefix).user_data is None
                continue
            with pytest.raises(RemoteProtocolError):
                decode(prefix)


@pytest.mark.parametrize("data", [
    i16(0) + i32(0x7FFFFFFF),                                 # a count the bytes cannot hold
    i16(0) + i32(1) + string("t") + i32(0x7FFFFFFF),
    i16(0) + i32(-2),                                         # negative, not null
    i16(-1) + i32(0),                                         # negative version
    i16(0) + i32(1) + i16(-1),                                # a null topic name
    i16(0) + i32(1) + i16(2) + b"\xff\xfe" + i32(0),          # a name that is not UTF-8
    i16(0) + i32(0) + i32(5) + b"abc",                        # user data cut short
])
def test_malformed_is_refused_before_allocating(data):
    """The same bytes are malformed for both readers."""
    for decode in (decode_subscription, decode_assignment):
        with pytest.raises(RemoteProtocolError, match="consumer (subscription|assignment)"):
            decode(data)


def test_what_cannot_be_encoded_is_a_local_error():
    with pytest.raises(LocalProtocolError):
        encode_subscription(["x" * 40_000])
    with pytest.raises(LocalProtocolError):
        encode_assignment({"t": [2**31]})
