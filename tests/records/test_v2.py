import os
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from records_helpers import CODECS, RECORDS_SETTINGS, headers, maybe_bytes, timestamps

from trilog.errors import CorruptMessageError, LocalProtocolError
from trilog.records import (
    LOG_APPEND_TIME,
    LZ4,
    MIN_BATCH_LENGTH,
    NONE,
    BatchHeader,
    CorruptRecordsError,
    Header,
    Record,
    RecordBatch,
    RecordBatchBuilder,
    batch_crc,
    build_batch,
    check_batch_header,
    iter_batches,
    patch_base_offset,
    read_batch_header,
)

records_st = st.lists(st.tuples(timestamps, maybe_bytes, maybe_bytes, headers), max_size=40)


def _expected(recs, base_offset=0):
    return [
        Record(base_offset + i, ts, k, v, tuple(Header(hk, hv) for hk, hv in hs), 0)
        for i, (ts, k, v, hs) in enumerate(recs)
    ]


@RECORDS_SETTINGS
@given(records_st, st.sampled_from(CODECS), st.integers(0, 2**40))
def test_build_parse_round_trip(recs, codec, base_offset):
    buf = build_batch(recs, base_offset=base_offset, compression_type=codec)
    batch = RecordBatch(buf, 0)
    batch.validate()
    assert batch.size == len(buf)
    assert batch.record_count == len(recs)
    assert batch.compression_type == codec
    assert batch.base_offset == base_offset
    assert batch.last_offset == base_offset + max(len(recs) - 1, 0)
    assert list(batch) == _expected(recs, base_offset)
    if recs:
        assert batch.max_timestamp == max(r[0] for r in recs)
        assert batch.first_timestamp == recs[0][0]
    # The same bytes inside a bigger buffer, at a position, as bytearray and memoryview.
    padded = b"\x00" * 7 + buf + b"\x01" * 5
    for view in (padded, bytearray(padded), memoryview(padded)):
        assert list(RecordBatch(view, 7)) == _expected(recs, base_offset)


@RECORDS_SETTINGS
@given(st.lists(st.tuples(timestamps, maybe_bytes, maybe_bytes), min_size=1, max_size=30))
def test_fast_path_matches_general_encoder(recs):
    # append() has an inline fast path for header-less records; encode_record is the reference.
    from trilog.records._v2 import encode_record

    fast = RecordBatchBuilder()
    for ts, k, v in recs:
        fast.append(ts, k, v)
    first = recs[0][0]
    body = b"".join(encode_record(i, ts - first, k, v) for i, (ts, k, v) in enumerate(recs))
    assert fast.build()[61:] == body


def test_large_deltas_and_lengths_take_the_slow_path():
    big = os.urandom(20_000)
    recs = [(0, None, b"a"), (10**9, big, big), (-5, b"k", None)]
    b = RecordBatchBuilder()
    for ts, k, v in recs:
        b.append(ts, k, v)
    for i in range(10_000):
        b.append(1, None, b"")
    batch = RecordBatch(b.build())
    batch.validate()
    out = list(batch)
    assert [(r.timestamp, r.key, r.value) for r in out[:3]] == recs
    assert out[-1].offset == 10_002


def test_max_bytes():
    b = RecordBatchBuilder(max_bytes=1000)
    n = 0
    while b.append(1, None, b"x" * 100) is not None:
        n += 1
    assert 5 < n < 10
    assert b.size_in_bytes <= 1000
    assert len(b.build()) <= 1000
    # The first record is always taken.
    b = RecordBatchBuilder(max_bytes=10)
    assert b.append(1, None, b"x" * 100) == 0
    assert b.append(1, None, b"x") is None


def test_append_with_offset_keeps_gaps():
    b = RecordBatchBuilder(base_offset=100)
    b.append_with_offset(100, 5, None, b"a")
    b.append_with_offset(107, 6, None, b"b")
    with pytest.raises(LocalProtocolError):
        b.append_with_offset(107, 6, None, b"c")
    batch = RecordBatch(b.build())
    batch.validate()
    assert batch.last_offset == 107 and batch.record_count == 2
    assert [r.offset for r in batch] == [100, 107]


def test_log_append_time_and_producer_fields():
    b = RecordBatchBuilder(
        timestamp_type=LOG_APPEND_TIME,
        producer_id=42,
        producer_epoch=3,
        base_sequence=9,
        is_transactional=True,
        compression_type=LZ4,
    )
    b.append(10, b"k", b"v")
    b.append(20, b"k", b"v")
    batch = RecordBatch(b.build())
    batch.validate()
    assert batch.timestamp_type == LOG_APPEND_TIME
    assert batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (42, 3, 9)
    assert [r.timestamp for r in batch] == [20, 20]


def test_empty_batch():
    buf = RecordBatchBuilder().build()
    batch = RecordBatch(buf)
    batch.validate()
    assert list(batch) == [] and batch.record_count == 0


def test_patch_base_offset_keeps_crc_valid():
    buf = bytearray(build_batch([(1, None, b"a"), (2, None, b"b")]))
    patch_base_offset(buf, 0, 1000)
    batch = RecordBatch(buf)
    batch.validate()
    assert [r.offset for r in batch] == [1000, 1001]


# -- corruption ---------------------------------------------------------------------------------


@RECORDS_SETTINGS
@given(st.data())
def test_flipped_bit_fails_crc(data):
    buf = bytearray(build_batch([(1, b"key", b"value" * 20), (2, None, b"v")]))
    # Any bit from the attributes on is covered by the CRC; so is the CRC itself.
    bit = data.draw(st.integers(17 * 8, len(buf) * 8 - 1))
    buf[bit // 8] ^= 1 << (bit % 8)
    batch = RecordBatch(bytes(buf))
    assert not batch.is_valid()
    with pytest.raises(CorruptMessageError):
        batch.validate()


@pytest.mark.parametrize("codec", CODECS)
def test_truncated_batch_is_partial(codec):
    buf = build_batch([(1, None, os.urandom(300)) for _ in range(5)], compression_type=codec)
    two = buf + buf
    for cut in range(len(buf), len(two)):
        batches = list(iter_batches(two[:cut]))
        assert len(batches) == 1
        batches[0].validate()
    assert list(iter_batches(buf[:60])) == []


def test_truncated_batch_fails_validation_when_viewed_directly():
    buf = build_batch([(1, None, b"x" * 100)])
    batch = RecordBatch(buf[:-1])
    assert not batch.is_valid()
    with pytest.raises(CorruptRecordsError):
        list(batch)


def test_too_small_length_raises():
    buf = bytearray(build_batch([(1, None, b"x")]))
    struct.pack_into(">i", buf, 8, 10)
    with pytest.raises(CorruptRecordsError):
        list(iter_batches(buf))
    with pytest.raises(CorruptRecordsError):
        RecordBatch(bytes(buf[:30]))


@RECORDS_SETTINGS
@given(st.binary(max_size=300), st.sampled_from(CODECS))
def test_garbage_records_never_crash(garbage, codec):
    # A valid header (CRC fixed up) in front of arbitrary record bytes: decoding either works
    # or raises CorruptRecordsError, never IndexError/struct.error/MemoryError.
    from trilog.records._crc import crc32c

    buf = bytearray(build_batch([(1, None, b"x")] * 3, compression_type=codec)[:61] + garbage)
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    batch = RecordBatch(bytes(buf))
    batch.validate()
    try:
        list(batch)
    except CorruptRecordsError:
        pass


def test_control_batch_has_no_records_for_the_caller():
    buf = bytearray(build_batch([(1, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")]))
    buf[22] |= 0x20  # control bit (low byte of attributes)
    batch = RecordBatch(bytes(buf))
    assert batch.is_control_batch
    assert list(batch) == []


def test_none_codec_attribute_is_default():
    assert RecordBatch(build_batch([(1, None, None)])).compression_type == NONE


# -- the one header check ---------------------------------------------------------------------


def _with_header(buf: bytes, **fields) -> bytes:
    """``buf`` with header fields replaced and the CRC recomputed (so only the header is off)."""
    header = read_batch_header(buf)._replace(**fields)
    out = bytearray(buf)
    struct.pack_into(">qiibIhiqqqhii", out, 0, *header)
    struct.pack_into(">I", out, 17, batch_crc(out, 0, len(out)))
    return bytes(out)


def test_read_batch_header_gives_the_fields_and_derived_facts():
    buf = build_batch([(5, None, b"a"), (7, b"k", b"b")], base_offset=40, compression_type=LZ4)
    header = read_batch_header(buf)
    batch = RecordBatch(buf)
    assert isinstance(header, BatchHeader)
    assert header == batch.header
    assert (header.base_offset, header.last_offset, header.next_offset) == (40, 41, 42)
    assert (header.size, header.compression_type, header.record_count) == (len(buf), LZ4, 2)
    assert (header.first_timestamp, header.max_timestamp) == (5, 7)
    assert header.crc == batch_crc(buf, 0, len(buf)) == batch.compute_crc()
    assert check_batch_header(buf) == check_batch_header(b"xx" + buf, 2, True) == header
    for read in (read_batch_header, check_batch_header):
        with pytest.raises(CorruptRecordsError):
            read(buf[:60])


@pytest.mark.parametrize(
    "fields",
    [
        {"magic": 1},
        {"batch_length": MIN_BATCH_LENGTH - 1},
        {"attributes": 5},
        {"attributes": 7 | 0x08},
        {"record_count": -1},
        {"last_offset_delta": -1},
        {"record_count": 3, "last_offset_delta": 1},
    ],
)
def test_a_bad_header_is_refused_with_or_without_the_producer_rule(fields):
    buf = _with_header(build_batch([(1, None, b"a"), (2, None, b"b")]), **fields)
    for from_producer in (False, True):
        with pytest.raises(CorruptRecordsError):
            check_batch_header(buf, 0, from_producer)
    with pytest.raises(CorruptRecordsError):
        RecordBatch(buf).validate()


@pytest.mark.parametrize(
    "fields", [{"record_count": 0, "last_offset_delta": 0}, {"last_offset_delta": 5}]
)
def test_the_producer_rule_wants_one_offset_per_record(fields):
    # A batch that compaction thinned (fewer records than offsets, or none) is well formed,
    # but a producer never sends one (Kafka's LogValidator refuses it).
    buf = _with_header(build_batch([(1, None, b"a"), (2, None, b"b")]), **fields)
    assert check_batch_header(buf) == read_batch_header(buf)
    RecordBatch(buf).validate()
    with pytest.raises(CorruptRecordsError, match="counts"):
        check_batch_header(buf, from_producer=True)
