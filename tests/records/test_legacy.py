import os
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from records_helpers import LEGACY_CODECS, RECORDS_SETTINGS, maybe_bytes, timestamps

from trilog.errors import CorruptMessageError, LocalProtocolError, UnsupportedCodecError
from trilog.records import (
    CREATE_TIME,
    GZIP,
    LOG_APPEND_TIME,
    LZ4,
    NO_TIMESTAMP_TYPE,
    NONE,
    ZSTD,
    CorruptRecordsError,
    LegacyMessageSetBuilder,
    LegacyRecordBatch,
    Record,
    build_message_set,
    compress,
    iter_legacy_batches,
)
from trilog.records._legacy import MAX_WRAPPER_DEPTH, encode_message

recs_st = st.lists(st.tuples(timestamps, maybe_bytes, maybe_bytes), max_size=30)


def _records(buf):
    return [r for entry in iter_legacy_batches(buf) for r in entry]


def _expected(recs, magic, base_offset):
    return [
        Record(
            base_offset + i,
            ts if magic else -1,
            k,
            v,
            (),
            CREATE_TIME if magic else NO_TIMESTAMP_TYPE,
        )
        for i, (ts, k, v) in enumerate(recs)
    ]


@RECORDS_SETTINGS
@given(recs_st, st.sampled_from([0, 1]), st.sampled_from(LEGACY_CODECS), st.integers(0, 2**40))
def test_round_trip(recs, magic, codec, base_offset):
    buf = build_message_set(recs, magic=magic, base_offset=base_offset, compression_type=codec)
    entries = list(iter_legacy_batches(buf))
    for entry in entries:
        entry.validate(deep=True)
        assert entry.magic == magic
        assert entry.compression_type == codec
    assert sum(e.size for e in entries) == len(buf)
    assert _records(buf) == _expected(recs, magic, base_offset)
    if recs:
        assert entries[0].base_offset == base_offset
        assert entries[-1].last_offset == base_offset + len(recs) - 1
        if codec != NONE:
            assert len(entries) == 1


def test_magic1_wrapper_layout():
    buf = build_message_set(
        [(10, b"a", b"1"), (30, b"b", b"2"), (20, b"c", b"3")],
        magic=1,
        base_offset=100,
        compression_type=GZIP,
    )
    (wrapper,) = iter_legacy_batches(buf)
    # The wrapper carries the last absolute offset and the max timestamp; inner offsets are
    # relative.
    assert wrapper.offset == 102
    assert wrapper.timestamp == 30
    inner = __import__("gzip").decompress(buf[34:])
    assert [e.offset for e in iter_legacy_batches(inner)] == [0, 1, 2]
    assert [r.offset for r in wrapper] == [100, 101, 102]


def test_magic0_wrapper_inner_offsets_are_absolute():
    buf = build_message_set(
        [(0, None, b"1"), (0, None, b"2")], magic=0, base_offset=7, compression_type=GZIP
    )
    (wrapper,) = iter_legacy_batches(buf)
    assert wrapper.offset == 8
    inner = __import__("gzip").decompress(buf[26:])
    assert [e.offset for e in iter_legacy_batches(inner)] == [7, 8]


def test_magic1_wrapper_with_zero_offset_keeps_inner_offsets():
    # Producers write 0 as the wrapper's offset; the base then comes out negative.
    inner = b"".join(encode_message(i, 1, 0, 5, None, b"v") for i in range(3))
    buf = encode_message(0, 1, GZIP, 5, None, compress(GZIP, inner))
    assert [r.offset for r in LegacyRecordBatch(buf)] == [0, 1, 2]


def test_log_append_time_wrapper_stamps_inner_messages():
    b = LegacyMessageSetBuilder(1, compression_type=LZ4, timestamp_type=LOG_APPEND_TIME)
    b.append(5, None, b"a")
    b.append(9, None, b"b")
    recs = list(LegacyRecordBatch(b.build()))
    assert [(r.timestamp, r.timestamp_type) for r in recs] == [(9, 1), (9, 1)]


@pytest.mark.parametrize("magic", [0, 1])
def test_nested_wrappers(magic):
    # A wrapper inside a wrapper (Kafka forbids it; old third-party producers wrote it).
    # magic 1: each level's inner offsets are relative to its wrapper's (absolute) offset;
    # magic 0: all offsets are absolute.
    level1 = build_message_set(
        [(1, b"k", b"a"), (2, None, b"b")],
        magic=magic,
        base_offset=0 if magic else 50,
        compression_type=GZIP,
    )
    outer = encode_message(51, magic, LZ4, 2, None, compress(LZ4, level1, magic=magic))
    entry = LegacyRecordBatch(outer)
    entry.validate(deep=True)
    assert [(r.offset, r.key, r.value) for r in entry] == [(50, b"k", b"a"), (51, None, b"b")]
    assert (entry.base_offset, entry.last_offset) == (50, 51)


def test_wrapper_depth_is_limited():
    data = encode_message(0, 1, 0, 1, None, b"v")
    for _ in range(MAX_WRAPPER_DEPTH + 1):
        data = encode_message(0, 1, GZIP, 1, None, compress(GZIP, data))
    with pytest.raises(CorruptRecordsError, match="nested"):
        list(LegacyRecordBatch(data))


def test_builder_rules():
    with pytest.raises(LocalProtocolError):
        LegacyMessageSetBuilder(2)
    with pytest.raises(LocalProtocolError):
        LegacyMessageSetBuilder(1, compression_type=ZSTD)
    b = LegacyMessageSetBuilder(1)
    with pytest.raises(LocalProtocolError):
        b.append(1, None, b"v", [("h", b"x")])
    b.append(1, None, b"v", offset=5)
    with pytest.raises(LocalProtocolError):
        b.append(1, None, b"v", offset=5)
    assert LegacyMessageSetBuilder(0).build() == b""
    b = LegacyMessageSetBuilder(1, max_bytes=200)
    n = 0
    while b.append(1, None, b"x" * 40) is not None:
        n += 1
    assert n == 2 and len(b.build()) <= 200


# -- corruption ---------------------------------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_flipped_bits_fail_crc(magic, codec):
    buf = build_message_set([(1, b"key", os.urandom(50))], magic=magic, compression_type=codec)
    for bit in range(12 * 8, len(buf) * 8, 7):  # everything from the CRC on is covered
        bad = bytearray(buf)
        bad[bit // 8] ^= 1 << (bit % 8)
        entry = LegacyRecordBatch(bytes(bad))
        assert not entry.is_valid()
        with pytest.raises(CorruptMessageError):
            entry.validate()


def test_corrupt_inner_message_caught_by_deep_validation():
    inner = bytearray(b"".join(encode_message(i, 1, 0, 5, None, b"value") for i in range(3)))
    inner[-1] ^= 0xFF  # breaks the last inner CRC, not the structure
    buf = encode_message(2, 1, GZIP, 5, None, compress(GZIP, bytes(inner)))
    entry = LegacyRecordBatch(buf)
    entry.validate()
    with pytest.raises(CorruptRecordsError, match="CRC"):
        entry.validate(deep=True)


@pytest.mark.parametrize("magic", [0, 1])
def test_partial_trailing_message_is_dropped(magic):
    buf = build_message_set([(1, b"k", b"v" * 30)] * 3, magic=magic)
    one = len(buf) // 3
    for cut in range(len(buf) - one, len(buf)):
        assert len(list(iter_legacy_batches(buf[:cut]))) == 2


@RECORDS_SETTINGS
@given(st.binary(max_size=200))
def test_garbage_never_crashes(garbage):
    try:
        for entry in iter_legacy_batches(garbage):
            entry.is_valid()
            list(entry)
    except (CorruptRecordsError, UnsupportedCodecError):  # snappy bits without the library
        pass


@RECORDS_SETTINGS
@given(st.binary(max_size=200), st.sampled_from([0, 1]), st.sampled_from(LEGACY_CODECS))
def test_garbage_inside_valid_wrapper_never_crashes(garbage, magic, codec):
    buf = encode_message(0, magic, codec, 1, None, compress(codec, garbage, magic=magic))
    entry = LegacyRecordBatch(buf)
    entry.validate()
    try:
        list(entry)
    except CorruptRecordsError:
        pass


def test_negative_size_raises():
    buf = bytearray(build_message_set([(1, None, b"v")], magic=1))
    struct.pack_into(">i", buf, 8, -5)
    with pytest.raises(CorruptRecordsError):
        list(iter_legacy_batches(bytes(buf)))
