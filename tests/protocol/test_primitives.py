"""Primitive wire types: round trips, byte layouts, and the bounds checks on decoding."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trilog.errors import LocalProtocolError, RemoteProtocolError
from trilog.protocol import (
    BOOLEAN,
    BYTES,
    COMPACT_BYTES,
    COMPACT_NULLABLE_BYTES,
    COMPACT_NULLABLE_STRING,
    COMPACT_RECORDS,
    COMPACT_STRING,
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
    CompactArray,
    Reader,
    Writer,
)

INT_TYPES = [
    (INT8, -(2**7), 2**7 - 1, ">b"),
    (INT16, -(2**15), 2**15 - 1, ">h"),
    (INT32, -(2**31), 2**31 - 1, ">i"),
    (INT64, -(2**63), 2**63 - 1, ">q"),
    (UINT32, 0, 2**32 - 1, ">I"),
]


@pytest.mark.parametrize(("t", "lo", "hi", "fmt"), INT_TYPES, ids=lambda x: getattr(x, "name", ""))
def test_fixed_ints_round_trip_at_limits(t, lo, hi, fmt):
    for v in (lo, lo + 1, -1 if lo < 0 else 1, 0, hi - 1, hi):
        data = t.encode(v)
        assert data == struct.pack(fmt, v)
        assert t.decode(data) == v


@pytest.mark.parametrize(("t", "lo", "hi", "fmt"), INT_TYPES, ids=lambda x: getattr(x, "name", ""))
def test_fixed_ints_reject_out_of_range_and_non_ints(t, lo, hi, fmt):
    for bad in (lo - 1, hi + 1):
        with pytest.raises(LocalProtocolError, match="out of range"):
            t.encode(bad)
    with pytest.raises(LocalProtocolError, match="needs an int"):
        t.encode("1")


@pytest.mark.parametrize(("t", "lo", "hi", "fmt"), INT_TYPES, ids=lambda x: getattr(x, "name", ""))
def test_fixed_ints_truncated(t, lo, hi, fmt):
    data = t.encode(hi)
    with pytest.raises(RemoteProtocolError, match="truncated"):
        t.decode(data[:-1])


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trip(v):
    data = VARINT.encode(v)
    assert len(data) <= 5
    assert VARINT.decode(data) == v


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(v):
    data = VARLONG.encode(v)
    assert len(data) <= 10
    assert VARLONG.decode(data) == v


@given(st.integers(0, 2**32 - 1))
def test_unsigned_varint_round_trip(v):
    assert UNSIGNED_VARINT.decode(UNSIGNED_VARINT.encode(v)) == v


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        # Zig-zag: 0, -1, 1, -2, 2 ... map to 0, 1, 2, 3, 4 (protobuf's table).
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (-2, b"\x03"),
        (63, b"\x7e"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (300, b"\xd8\x04"),
        (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
        (-(2**31), b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_varint_known_bytes(value, encoded):
    assert VARINT.encode(value) == encoded
    assert VARINT.decode(encoded) == value


def test_varlong_limits_bytes():
    assert VARLONG.encode(2**63 - 1) == b"\xfe" + b"\xff" * 8 + b"\x01"
    assert VARLONG.encode(-(2**63)) == b"\xff" * 9 + b"\x01"


def test_varint_limits():
    for t, bits in ((VARINT, 32), (VARLONG, 64)):
        with pytest.raises(LocalProtocolError):
            t.encode(2 ** (bits - 1))
        with pytest.raises(LocalProtocolError):
            t.encode(-(2 ** (bits - 1)) - 1)
    with pytest.raises(LocalProtocolError):
        UNSIGNED_VARINT.encode(-1)


def test_varint_malformed():
    with pytest.raises(RemoteProtocolError, match="truncated"):
        VARINT.decode(b"\x80\x80")
    with pytest.raises(RemoteProtocolError, match="longer than 5"):
        VARINT.decode(b"\x80\x80\x80\x80\x80\x01")
    with pytest.raises(RemoteProtocolError, match="overflows"):
        VARINT.decode(b"\xff\xff\xff\xff\x7f")  # 35 bits
    with pytest.raises(RemoteProtocolError, match="longer than 10"):
        VARLONG.decode(b"\x80" * 10 + b"\x01")
    with pytest.raises(RemoteProtocolError, match="overflows"):
        VARLONG.decode(b"\xff" * 9 + b"\x7f")  # 70 bits


def test_boolean():
    assert BOOLEAN.encode(True) == b"\x01"
    assert BOOLEAN.encode(False) == b"\x00"
    assert BOOLEAN.decode(b"\x02") is True
    with pytest.raises(LocalProtocolError):
        BOOLEAN.encode(1)


@given(st.text(max_size=200))
def test_string_round_trip(s):
    data = STRING.encode(s)
    raw = s.encode()
    assert data == struct.pack(">h", len(raw)) + raw
    assert STRING.decode(data) == s
    assert NULLABLE_STRING.decode(NULLABLE_STRING.encode(s)) == s


def test_string_nulls_and_limits():
    assert NULLABLE_STRING.encode(None) == b"\xff\xff"
    assert NULLABLE_STRING.decode(b"\xff\xff") is None
    with pytest.raises(LocalProtocolError, match="null"):
        STRING.encode(None)
    with pytest.raises(RemoteProtocolError, match="invalid string length -1"):
        STRING.decode(b"\xff\xff")
    assert STRING.decode(STRING.encode("x" * 32767)) == "x" * 32767
    with pytest.raises(LocalProtocolError, match="exceeds 32767"):
        STRING.encode("x" * 32768)
    with pytest.raises(LocalProtocolError, match="exceeds 32767"):
        STRING.encode("\u00e9" * 16384)  # 32768 UTF-8 bytes
    with pytest.raises(RemoteProtocolError, match="not UTF-8"):
        STRING.decode(b"\x00\x02\xff\xfe")


@given(st.binary(max_size=300))
def test_bytes_round_trip(b):
    data = BYTES.encode(b)
    assert data == struct.pack(">i", len(b)) + b
    assert BYTES.decode(data) == b
    assert NULLABLE_BYTES.decode(NULLABLE_BYTES.encode(b)) == b
    assert bytes(RECORDS.decode(RECORDS.encode(b))) == b
    assert BYTES.encode(memoryview(b)) == data


def test_bytes_nulls():
    assert NULLABLE_BYTES.encode(None) == b"\xff\xff\xff\xff"
    assert NULLABLE_BYTES.decode(b"\xff\xff\xff\xff") is None
    assert RECORDS.decode(b"\xff\xff\xff\xff") is None
    with pytest.raises(LocalProtocolError):
        BYTES.encode(None)
    with pytest.raises(RemoteProtocolError, match="invalid bytes length -1"):
        BYTES.decode(b"\xff\xff\xff\xff")


def test_records_decode_is_zero_copy():
    data = bytearray(RECORDS.encode(b"abcdef"))
    view = RECORDS.decode(data)
    assert isinstance(view, memoryview)
    assert view == b"abcdef"


@given(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=50))
def test_int_array_round_trip(xs):
    t = Array(INT32)
    assert t.decode(t.encode(xs)) == xs


@given(st.one_of(st.none(), st.lists(st.one_of(st.none(), st.text(max_size=20)), max_size=20)))
def test_nullable_array_of_nullable_strings(xs):
    t = Array(NULLABLE_STRING, nullable=True)
    assert t.decode(t.encode(xs)) == xs


def test_array_nulls():
    assert Array(INT32, nullable=True).encode(None) == b"\xff\xff\xff\xff"
    with pytest.raises(LocalProtocolError):
        Array(INT32).encode(None)
    with pytest.raises(RemoteProtocolError, match="invalid array length -1"):
        Array(INT32).decode(b"\xff\xff\xff\xff")
    with pytest.raises(LocalProtocolError, match=r"\[1\]: .*out of range"):
        Array(INT8).encode([1, 1000])


# -- Bounds checks: nothing is allocated for a length the input cannot hold. -----------------


@pytest.mark.parametrize(
    ("t", "prefix"),
    [
        (STRING, ">h"),
        (NULLABLE_STRING, ">h"),
        (BYTES, ">i"),
        (NULLABLE_BYTES, ">i"),
        (RECORDS, ">i"),
    ],
    ids=lambda x: getattr(x, "name", x),
)
def test_length_checks(t, prefix):
    # Negative lengths other than -1.
    for n in (-2, -100):
        with pytest.raises(RemoteProtocolError, match="invalid"):
            t.decode(struct.pack(prefix, n))
    # Declared longer than what remains.
    with pytest.raises(RemoteProtocolError, match="truncated"):
        t.decode(struct.pack(prefix, 10) + b"abc")
    # Truncated inside the length prefix itself.
    with pytest.raises(RemoteProtocolError, match="truncated"):
        t.decode(b"\x00")
    # Over the cap, even when the bytes are there.
    with pytest.raises(RemoteProtocolError, match="exceeds the cap"):
        t.decode(struct.pack(prefix, 8) + b"x" * 8, max_length=4)


def test_huge_declared_lengths_fail_fast():
    with pytest.raises(RemoteProtocolError, match="exceeds the cap"):
        BYTES.decode(struct.pack(">i", 2**31 - 1))
    with pytest.raises(RemoteProtocolError, match="truncated"):
        BYTES.decode(struct.pack(">i", 1000))
    # An array count is checked against the minimum size of its items: 1000 int64s need 8000
    # bytes, so 4000 bytes of input are rejected before any list is built.
    with pytest.raises(RemoteProtocolError, match="needs at least 8000"):
        Array(INT64).decode(struct.pack(">i", 1000) + b"\0" * 4000)
    with pytest.raises(RemoteProtocolError, match="invalid array length -5"):
        Array(INT32, nullable=True).decode(struct.pack(">i", -5))
    with pytest.raises(RemoteProtocolError, match="exceeds the cap"):
        Array(INT8).decode(struct.pack(">i", 5) + b"\0" * 5, max_length=4)


def test_trailing_bytes_rejected():
    with pytest.raises(RemoteProtocolError, match="trailing"):
        INT32.decode(b"\0\0\0\0\0")


def test_reader_positions():
    r = Reader(b"\x00\x01\x00\x02hi\xff")
    assert r.int16() == 1
    assert r.string() == "hi"
    assert r.remaining == 1
    assert r.int8() == -1
    r.expect_end()
    with pytest.raises(RemoteProtocolError):
        r.int8()


# -- Flexible versions' encodings (KIP-482) ----------------------------------------------------


def test_compact_known_bytes():
    # Length + 1 as an unsigned varint; 0 is null.
    assert COMPACT_STRING.encode("") == b"\x01"
    assert COMPACT_STRING.encode("abc") == b"\x04abc"
    assert COMPACT_NULLABLE_STRING.encode(None) == b"\x00"
    assert COMPACT_BYTES.encode(b"\x07") == b"\x02\x07"
    assert COMPACT_NULLABLE_BYTES.encode(None) == b"\x00"
    assert COMPACT_RECORDS.encode(None) == b"\x00"
    assert CompactArray(INT32).encode([1]) == b"\x02\x00\x00\x00\x01"
    assert CompactArray(INT32, nullable=True).encode(None) == b"\x00"
    # 127 bytes: length + 1 = 128 takes two varint bytes.
    assert COMPACT_STRING.encode("x" * 127) == b"\x80\x01" + b"x" * 127
    # The compact variant of each type, as the schema layer asks for it.
    assert STRING.compact() is COMPACT_STRING
    assert NULLABLE_STRING.compact() is COMPACT_NULLABLE_STRING
    assert BYTES.compact() is COMPACT_BYTES and RECORDS.compact() is COMPACT_RECORDS
    assert INT32.compact() is INT32
    assert isinstance(Array(STRING).compact(), CompactArray)
    assert Array(STRING).compact().item is COMPACT_STRING


@given(st.one_of(st.none(), st.text(max_size=300)))
def test_compact_string_round_trip(s):
    data = COMPACT_NULLABLE_STRING.encode(s)
    assert COMPACT_NULLABLE_STRING.decode(data) == s
    if s is not None:
        assert COMPACT_STRING.decode(COMPACT_STRING.encode(s)) == s


@given(st.one_of(st.none(), st.binary(max_size=300)))
def test_compact_bytes_and_records_round_trip(b):
    assert COMPACT_NULLABLE_BYTES.decode(COMPACT_NULLABLE_BYTES.encode(b)) == b
    view = COMPACT_RECORDS.decode(COMPACT_RECORDS.encode(b))
    assert (view is None) if b is None else bytes(view) == b


@given(st.one_of(st.none(), st.lists(st.one_of(st.none(), st.text(max_size=20)), max_size=20)))
def test_compact_nullable_array_of_nullable_strings(xs):
    t = CompactArray(COMPACT_NULLABLE_STRING, nullable=True)
    assert t.decode(t.encode(xs)) == xs


def test_compact_nulls_where_none_is_allowed():
    for t in (COMPACT_STRING, COMPACT_BYTES, CompactArray(INT32)):
        with pytest.raises(LocalProtocolError, match="null"):
            t.encode(None)
        with pytest.raises(RemoteProtocolError, match="length -1"):
            t.decode(b"\x00")
    with pytest.raises(LocalProtocolError, match="exceeds 32767"):
        COMPACT_STRING.encode("x" * 32768)
    with pytest.raises(RemoteProtocolError, match="not UTF-8"):
        COMPACT_STRING.decode(b"\x03\xff\xfe")


@pytest.mark.parametrize(
    "t", [COMPACT_STRING, COMPACT_NULLABLE_STRING, COMPACT_BYTES, COMPACT_NULLABLE_BYTES,
          COMPACT_RECORDS, CompactArray(INT8)], ids=lambda t: t.name)
def test_compact_length_checks(t):
    # Declared longer than what remains.
    with pytest.raises(RemoteProtocolError, match="truncated"):
        t.decode(b"\x0babc")
    # Truncated inside the varint itself, and a varint past 5 bytes.
    with pytest.raises(RemoteProtocolError, match="truncated"):
        t.decode(b"\x80")
    with pytest.raises(RemoteProtocolError, match="longer than 5"):
        t.decode(b"\x80\x80\x80\x80\x80\x01")
    # Over the cap, even when the bytes are there.
    with pytest.raises(RemoteProtocolError, match="exceeds the cap"):
        t.decode(b"\x09" + b"x" * 8, max_length=4)
    # A huge announced length fails before anything is allocated.
    with pytest.raises(RemoteProtocolError):
        t.decode(b"\xff\xff\xff\xff\x0f")


def test_compact_string_over_32767_on_the_wire_is_refused():
    n = 32768
    data = bytes(UNSIGNED_VARINT.encode(n + 1)) + b"x" * n
    with pytest.raises(RemoteProtocolError, match="exceeds 32767"):
        COMPACT_STRING.decode(data)


def test_tagged_fields_section():
    from trilog.protocol._primitives import write_tagged_fields

    w = Writer()
    write_tagged_fields(w, [(5, b"\x01\x02"), (0, b"")])
    data = w.getvalue()
    assert data == b"\x02" + b"\x00\x00" + b"\x05\x02\x01\x02"  # ascending tags
    r = Reader(data + b"after")
    assert [(tag, bytes(v)) for tag, v in r.tagged_fields()] == [(0, b""), (5, b"\x01\x02")]
    assert r.raw(5) == b"after"
    r = Reader(b"\x00")
    r.skip_tagged_fields()
    r.expect_end()


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "truncated"),
        (b"\x01", "truncated"),  # one field announced, none there
        (b"\x01\x00", "truncated"),  # a tag without its size
        (b"\x01\x00\x05abc", "truncated"),  # a size past the end
        (b"\x80\x80\x80\x80\x10", "overflows|exceeds|truncated"),  # a count no input holds
        (b"\x02\x00\x00", "truncated"),
    ],
)
def test_malformed_tagged_fields(data, match):
    with pytest.raises(RemoteProtocolError, match=match):
        Reader(data).skip_tagged_fields()


@given(st.binary(max_size=40))
def test_any_tagged_section_reads_or_raises_the_protocol_error(data):
    try:
        Reader(data, max_length=1000).skip_tagged_fields()
    except RemoteProtocolError:
        pass
