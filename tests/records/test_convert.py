import os

import pytest
from hypothesis import given
from hypothesis import strategies as st
from records_helpers import (
    CODECS,
    LEGACY_CODECS,
    RECORDS_SETTINGS,
    headers,
    maybe_bytes,
    timestamps,
)

from trilog.errors import LocalProtocolError
from trilog.records import (
    GZIP,
    LOG_APPEND_TIME,
    LZ4,
    NONE,
    ZSTD,
    CorruptRecordsError,
    MemoryRecords,
    RecordBatch,
    RecordBatchBuilder,
    build_batch,
    build_message_set,
    legacy_to_v2,
    v2_to_legacy,
)
from trilog.records._legacy import encode_message

recs_st = st.lists(st.tuples(timestamps, maybe_bytes, maybe_bytes), min_size=1, max_size=30)


def _kv(records):
    return [(r.key, r.value) for r in records]


@RECORDS_SETTINGS
@given(recs_st, st.sampled_from([0, 1]), st.sampled_from(LEGACY_CODECS), st.integers(0, 2**40))
def test_legacy_to_v2_round_trip(recs, magic, codec, base_offset):
    legacy = build_message_set(recs, magic=magic, base_offset=base_offset, compression_type=codec)
    batches = legacy_to_v2(legacy)
    assert len(batches) == 1  # one codec, one timestamp type: one batch
    batch = RecordBatch(batches[0])
    batch.validate()
    assert batch.compression_type == codec
    assert batch.base_offset == 0  # relative: the broker assigns offsets
    out = list(batch)
    assert [r.offset for r in out] == list(range(len(recs)))
    assert _kv(out) == [(k, v) for _, k, v in recs]
    assert [r.timestamp for r in out] == [ts if magic else -1 for ts, _, _ in recs]
    # preserve_offsets keeps the source's offsets, and v2 -> legacy gets the original back.
    kept = legacy_to_v2(legacy, preserve_offsets=True)
    assert [r.offset for r in RecordBatch(kept[0])] == [base_offset + i for i in range(len(recs))]
    back = v2_to_legacy(b"".join(kept), magic)
    assert list(MemoryRecords(back).records()) == list(MemoryRecords(legacy).records())


@RECORDS_SETTINGS
@given(
    st.lists(st.tuples(timestamps, maybe_bytes, maybe_bytes, headers), min_size=1, max_size=30),
    st.sampled_from(CODECS),
    st.sampled_from([0, 1]),
    st.integers(0, 2**40),
)
def test_v2_to_legacy_round_trip(recs, codec, magic, base_offset):
    v2 = build_batch(recs, base_offset=base_offset, compression_type=codec)
    legacy = v2_to_legacy(v2, magic)
    mr = MemoryRecords(legacy)
    for entry in mr.batches():
        entry.validate(deep=True)
        assert entry.magic == magic
        assert entry.compression_type == (NONE if codec == ZSTD else codec)
    out = list(mr.records())
    assert [r.offset for r in out] == [base_offset + i for i in range(len(recs))]
    assert _kv(out) == [(k, v) for _, k, v, _ in recs]
    assert [r.timestamp for r in out] == [ts if magic else -1 for ts, *_ in recs]
    assert all(r.headers == () for r in out)  # legacy messages cannot carry headers
    # ... and back up again: the same records (headers aside), offsets preserved.
    up = legacy_to_v2(legacy, preserve_offsets=True)
    again = [r for b in up for r in RecordBatch(b)]
    assert _kv(again) == _kv(out) and [r.offset for r in again] == [r.offset for r in out]


def test_compacted_offsets_survive_down_conversion():
    b = RecordBatchBuilder(base_offset=10, compression_type=GZIP)
    for off in (10, 13, 20):
        b.append_with_offset(off, off, None, str(off).encode())
    for magic in (0, 1):
        legacy = v2_to_legacy(b.build(), magic)
        assert [r.offset for r in MemoryRecords(legacy).records()] == [10, 13, 20]


def test_control_batches_skipped_and_log_append_time_kept():
    control = bytearray(build_batch([(1, b"\x00\x00\x00\x00", b"\x00" * 6)], base_offset=0))
    control[22] |= 0x20
    from trilog.records._crc import crc32c

    control[17:21] = crc32c(bytes(control[21:])).to_bytes(4, "big")
    b = RecordBatchBuilder(base_offset=1, timestamp_type=LOG_APPEND_TIME)
    b.append(5, None, b"x")
    b.append(9, None, b"y")
    legacy = v2_to_legacy(bytes(control) + b.build(), 1)
    out = list(MemoryRecords(legacy).records())
    assert [(r.offset, r.timestamp, r.timestamp_type) for r in out] == [(1, 9, 1), (2, 9, 1)]


def test_down_conversion_respects_max_bytes():
    v2 = b"".join(build_batch([(1, None, os.urandom(100))], base_offset=i) for i in range(10))
    full = v2_to_legacy(v2, 1)
    one = len(full) // 10
    limited = v2_to_legacy(v2, 1, max_bytes=one * 3 + one // 2)
    assert len(limited) == one * 3
    assert [r.offset for r in MemoryRecords(limited).records()] == [0, 1, 2]
    # Not even one fits: a partial message, which tells an old consumer its fetch is too small.
    tiny = v2_to_legacy(v2, 1, max_bytes=50)
    assert len(tiny) == 50
    assert list(MemoryRecords(tiny).batches()) == []


def test_lower_magic_entries_pass_through():
    legacy0 = build_message_set([(1, None, b"a")], magic=0)
    assert v2_to_legacy(legacy0, 1) == legacy0
    legacy1 = build_message_set([(1, None, b"a")], magic=1, compression_type=LZ4)
    down = v2_to_legacy(legacy1, 0)
    assert [e.magic for e in MemoryRecords(down).batches()] == [0]
    assert _kv(MemoryRecords(down).records()) == [(None, b"a")]


def test_up_conversion_groups_by_codec_and_splits_by_size():
    legacy = (
        build_message_set([(1, None, b"a"), (2, None, b"b")], magic=1)
        + build_message_set([(3, None, b"c")], magic=1, compression_type=GZIP)
        + build_message_set([(4, None, b"d")], magic=1, compression_type=GZIP)
    )
    batches = [RecordBatch(b) for b in legacy_to_v2(legacy)]
    assert [b.compression_type for b in batches] == [NONE, GZIP]
    assert [b.base_offset for b in batches] == [0, 2]
    assert [r.value for b in batches for r in b] == [b"a", b"b", b"c", b"d"]
    one = legacy_to_v2(legacy, compression_type=LZ4)
    assert len(one) == 1 and RecordBatch(one[0]).record_count == 4
    split = legacy_to_v2(legacy, max_batch_bytes=61 + 10)  # one record each
    assert sum(RecordBatch(b).record_count for b in split) == 4 and len(split) == 4
    assert [RecordBatch(b).base_offset for b in split] == [0, 1, 2, 3]


def test_up_conversion_append_time():
    legacy = build_message_set([(1, None, b"a"), (2, None, b"b")], magic=0, compression_type=GZIP)
    (batch,) = legacy_to_v2(legacy, append_time=1234)
    batch = RecordBatch(batch)
    assert batch.timestamp_type == LOG_APPEND_TIME
    assert [r.timestamp for r in batch] == [1234, 1234]


def test_up_conversion_validates():
    legacy = bytearray(build_message_set([(1, None, b"abc")], magic=1))
    legacy[-1] ^= 1
    with pytest.raises(CorruptRecordsError):
        legacy_to_v2(bytes(legacy))
    assert len(legacy_to_v2(bytes(legacy), validate=False)) == 1
    with pytest.raises(CorruptRecordsError):
        legacy_to_v2(build_batch([(1, None, b"v")]))
    with pytest.raises(LocalProtocolError):
        v2_to_legacy(b"", 2)


def test_up_conversion_of_producer_style_wrapper():
    # kafka-python and the Java producer write 0 as a magic 1 wrapper's offset.
    inner = b"".join(encode_message(i, 1, 0, 100 + i, None, b"v%d" % i) for i in range(3))
    from trilog.records import compress

    wrapper = encode_message(0, 1, GZIP, 102, None, compress(GZIP, inner))
    (batch,) = legacy_to_v2(wrapper)
    assert [(r.offset, r.timestamp) for r in RecordBatch(batch)] == [(0, 100), (1, 101), (2, 102)]
