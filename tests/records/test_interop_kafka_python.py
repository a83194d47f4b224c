"""Interoperability with kafka-python's record code, an independent implementation."""

import kafka.codec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatch as KPLegacyBatch
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords as KPMemoryRecords
from records_helpers import (
    CODECS,
    LEGACY_CODECS,
    RECORDS_SETTINGS,
    headers,
    maybe_bytes,
    timestamps,
)

from trilog.records import (
    LZ4,
    ZSTD,
    LegacyMessageSetBuilder,
    MemoryRecords,
    RecordBatch,
    RecordBatchBuilder,
    build_batch,
    iter_legacy_batches,
)

# Every codec available here; the kafka_codecs fixture lends kafka-python what it lacks
# (xxhash, snappy), except zstd, for which it needs the zstandard package itself.
KP_CODECS = tuple(c for c in CODECS if c != ZSTD or kafka.codec.has_zstd())
v2_recs = st.lists(st.tuples(timestamps, maybe_bytes, maybe_bytes, headers), max_size=25)
legacy_recs = st.lists(st.tuples(timestamps, maybe_bytes, maybe_bytes), max_size=25)


def _kp_headers(hs):
    return [(k, v) for k, v in hs]


@pytest.mark.usefixtures("kafka_codecs")
@RECORDS_SETTINGS
@given(v2_recs, st.sampled_from(KP_CODECS), st.integers(0, 2**40))
def test_our_v2_read_by_kafka_python(recs, codec, base_offset):
    buf = build_batch(recs, base_offset=base_offset, compression_type=codec)
    kp = DefaultRecordBatch(buf)
    assert kp.validate_crc()
    assert kp.compression_type == codec
    assert kp.base_offset == base_offset
    assert kp.next_offset == base_offset + max(len(recs), 1)
    out = list(kp)
    assert [
        (r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in out
    ] == [(base_offset + i, ts, k, v, _kp_headers(hs)) for i, (ts, k, v, hs) in enumerate(recs)]


@pytest.mark.usefixtures("kafka_codecs")
@RECORDS_SETTINGS
@given(v2_recs, st.sampled_from(KP_CODECS))
def test_kafka_python_v2_read_by_us(recs, codec):
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for i, (ts, k, v, hs) in enumerate(recs):
        builder.append(i, timestamp=ts, key=k, value=v, headers=_kp_headers(hs))
    buf = bytes(builder.build())
    batch = RecordBatch(buf)
    batch.validate()
    # kafka-python sends uncompressed when compression does not shrink the records.
    assert batch.compression_type in (codec, 0)
    out = list(batch)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in out] == [
        (i, ts, k, v, tuple(hs)) for i, (ts, k, v, hs) in enumerate(recs)
    ]


def test_byte_identical_to_kafka_python_uncompressed():
    recs = [(1000 + i, b"k%d" % i, b"v" * i, [("h", b"x")] if i % 2 else []) for i in range(50)]
    ours = RecordBatchBuilder()
    theirs = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 30)
    for i, (ts, k, v, hs) in enumerate(recs):
        ours.append(ts, k, v, hs)
        theirs.append(i, timestamp=ts, key=k, value=v, headers=hs)
    # kafka-python writes partition_leader_epoch 0, we write -1 (as the Java producer does).
    a, b = ours.build(), bytes(theirs.build())
    assert a[:12] == b[:12] and a[16:] == b[16:]


@pytest.mark.usefixtures("kafka_codecs")
@RECORDS_SETTINGS
@given(legacy_recs, st.sampled_from([0, 1]), st.sampled_from(LEGACY_CODECS), st.integers(0, 2**40))
def test_our_legacy_read_by_kafka_python(recs, magic, codec, base_offset):
    b = LegacyMessageSetBuilder(magic, compression_type=codec, base_offset=base_offset)
    for ts, k, v in recs:
        b.append(ts, k, v)
    buf = b.build()
    out = []
    for entry in iter_legacy_batches(buf):
        kp = KPLegacyBatch(buf[entry.position : entry.position + entry.size], magic)
        assert kp.validate_crc()
        assert kp.compression_type == codec
        for rec in kp:
            assert rec.validate_crc()
            out.append((rec.offset, rec.timestamp, rec.key, rec.value))
    assert out == [
        (base_offset + i, ts if magic else None, k, v) for i, (ts, k, v) in enumerate(recs)
    ]
    # kafka-python's MemoryRecords walks the same entries.
    if buf:
        kp_entries = []
        mr = KPMemoryRecords(buf)
        while mr.has_next():
            kp_entries.append(mr.next_batch())
        assert len(kp_entries) == len(list(iter_legacy_batches(buf)))


@pytest.mark.usefixtures("kafka_codecs")
@RECORDS_SETTINGS
@given(legacy_recs, st.sampled_from([0, 1]), st.sampled_from(LEGACY_CODECS))
def test_kafka_python_legacy_read_by_us(recs, magic, codec):
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 30)
    for i, (ts, k, v) in enumerate(recs):
        builder.append(i, timestamp=ts, key=k, value=v)
    buf = bytes(builder.build())
    mr = MemoryRecords(buf)
    for entry in mr.batches():
        entry.validate(deep=True)
        assert entry.compression_type == codec
    out = [(r.offset, r.timestamp, r.key, r.value) for r in mr.records()]
    assert out == [(i, ts if magic else -1, k, v) for i, (ts, k, v) in enumerate(recs)]


@pytest.mark.usefixtures("kafka_codecs")
def test_lz4_magic0_broken_framing_both_ways():
    import kafka.codec

    data = b"an 0.8-era payload " * 200
    from trilog.records import compress, decompress

    ours = compress(LZ4, data, magic=0)
    assert kafka.codec.lz4_decode_old_kafka(ours) == data
    assert ours == kafka.codec.lz4_encode_old_kafka(data)  # same frame, same broken checksum
    assert decompress(LZ4, kafka.codec.lz4_encode_old_kafka(data), magic=0) == data
    # Magic 1 uses the standard framing, readable by the plain decoder.
    assert kafka.codec.lz4_decode(compress(LZ4, data, magic=1)) == data
