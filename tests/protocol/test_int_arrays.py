"""Arrays of fixed-width integers (``replica_nodes``, ``isr_nodes``, ``old_style_offsets``):
the compiled codecs read and write each with one ``struct`` call, and write a run of them
with the fixed-width fields around it in one; every version, classic and compact, null and
empty, long arrays and wrong values must come out as the field-by-field interpreter has
them (which the kafka-python round trips in ``test_messages`` check against Kafka's).
"""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trilog.errors import LocalProtocolError, RemoteProtocolError
from trilog.protocol import (
    INT8,
    INT16,
    INT32,
    INT64,
    UINT32,
    Array,
    Field,
    MetadataResponse,
    Reader,
    Struct,
    Writer,
)

# Version 0 is classic, 1+ flexible (compact arrays); "late" exists from version 2 on.
Ints = Struct("Ints", [
    Field("code", INT16),
    Field("ids", Array(INT32)),
    Field("maybe", Array(INT64), nullable="0+"),
    Field("small", Array(INT8)),
    Field("index", INT32),
    Field("wide", Array(UINT32)),
    Field("late", Array(INT16), "2+"),
    Field("tail", INT64),
], flexible="1+")
VERSIONS = [0, 1, 2]


def lists(item, lo, hi, max_size=80):  # past _IntArrayStructs.KEPT (64) now and then
    return st.lists(st.integers(lo, hi), max_size=max_size)


values = st.builds(
    Ints.cls,
    code=st.integers(-(1 << 15), (1 << 15) - 1),
    ids=lists(INT32, -(1 << 31), (1 << 31) - 1),
    maybe=st.none() | lists(INT64, -(1 << 63), (1 << 63) - 1),
    small=lists(INT8, -128, 127),
    index=st.integers(-(1 << 31), (1 << 31) - 1),
    wide=lists(UINT32, 0, (1 << 32) - 1),
    late=lists(INT16, -(1 << 15), (1 << 15) - 1),
    tail=st.integers(-(1 << 63), (1 << 63) - 1),
)


def compiled(value, version):
    w = Writer()
    Ints.codec(version).write(w, value)
    return w.getvalue()


def interpreted(value, version):
    w = Writer()
    Ints.codec(version).write_fields(w, value)
    return w.getvalue()


def decode(data, version, read=None):
    r = Reader(data)
    value = (read or Ints.codec(version).read)(r)
    r.expect_end()
    return value


@given(values)
def test_int_arrays_round_trip_as_the_interpreter_has_them(value):
    for version in VERSIONS:
        data = compiled(value, version)
        assert data == interpreted(value, version)
        expected = decode(data, version, Ints.codec(version).read_fields)
        assert decode(data, version) == expected
        if version < 2:
            value_then = Ints.cls(**{**value.to_dict(), "late": []})
            assert expected == value_then
        else:
            assert expected == value


def test_the_bytes_classic_and_compact_null_and_empty():
    i16, i32, i64 = (struct.Struct(f">{c}").pack for c in "hiq")
    value = Ints.cls(code=7, ids=[1, -2], maybe=None, small=[], index=3, wide=[0xFFFFFFFF],
                     late=[], tail=-1)
    assert compiled(value, 0) == (i16(7) + i32(2) + i32(1) + i32(-2) + i32(-1) + i32(0)
                                  + i32(3) + i32(1) + b"\xff" * 4 + i64(-1))
    assert compiled(value, 2) == (i16(7) + b"\x03" + i32(1) + i32(-2) + b"\x00" + b"\x01"
                                  + i32(3) + b"\x02" + b"\xff" * 4 + b"\x01" + i64(-1)
                                  + b"\x00")
    for version in VERSIONS:
        assert decode(compiled(value, version), version).maybe is None
    # Tuples and other sequences are written as lists are.
    as_tuples = Ints.cls(**{**value.to_dict(), "ids": (1, -2), "wide": range(0xFFFFFFFF, 1 << 32)})
    assert compiled(as_tuples, 0) == compiled(value, 0)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("field", "wrong"), [
    ("ids", [1 << 31]), ("ids", ["1"]), ("ids", None), ("small", [128]), ("wide", [-1]),
    ("maybe", [1.5]), ("ids", 5),
])
def test_a_wrong_value_raises_with_its_path(version, field, wrong):
    value = Ints.cls(**{"ids": [1], "small": [2], "wide": [3], field: wrong})
    with pytest.raises(LocalProtocolError, match=f"Ints.{field}"):
        compiled(value, version)


@pytest.mark.parametrize("version", VERSIONS)
def test_short_or_lying_input_raises_the_protocol_error(version):
    data = compiled(Ints.cls(ids=list(range(100)), maybe=[1, 2], small=[1], wide=[2]),
                    version)
    for cut in range(len(data)):
        with pytest.raises(RemoteProtocolError):
            decode(data[:cut], version)
    if version == 0:  # a count larger than the bytes left; a negative one other than -1
        with pytest.raises(RemoteProtocolError, match="Ints.ids"):
            decode(data[:2] + struct.pack(">i", 1 << 30) + data[6:], 0)
        with pytest.raises(RemoteProtocolError, match="Ints.ids"):
            decode(data[:2] + struct.pack(">i", -1) + data[6:], 0)  # not nullable
        with pytest.raises(RemoteProtocolError, match="Ints.maybe"):
            decode(data[:406] + struct.pack(">i", -2) + data[410:], 0)


@pytest.mark.parametrize("version", range(MetadataResponse.MIN_VERSION,
                                          MetadataResponse.MAX_VERSION + 1))
def test_a_metadata_partition_is_one_struct_call_and_its_bytes_are_the_interpreters(version):
    R = MetadataResponse.MetadataResponseTopic.MetadataResponsePartition
    codec = R._struct.codec_for(version, False)
    source = codec.write.__code__
    assert "P0" in source.co_names and "slow" in source.co_names
    for replicas, isr, offline in [([], [], []), ([1], [1], []), ([3, 1, 2], [1], [3, 2]),
                                   (list(range(70)), list(range(65)), [])]:
        value = R(error_code=5, partition_index=9, leader_id=1, leader_epoch=4,
                  replica_nodes=replicas, isr_nodes=isr, offline_replicas=offline)
        w, slow = Writer(), Writer()
        codec.write(w, value)
        codec.write_fields(slow, value)
        assert w.getvalue() == slow.getvalue()
        r = Reader(w.getvalue())
        assert codec.read(r) == codec.read_fields(Reader(w.getvalue()))
