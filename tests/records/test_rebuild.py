"""``rebuild_batch``: the log cleaner's thinned batches keep what Kafka's keep."""

from __future__ import annotations

import pytest

from trilog.records import (
    GZIP,
    LOG_APPEND_TIME,
    NONE,
    RecordBatch,
    RecordBatchBuilder,
    check_batch_header,
    rebuild_batch,
    stamp_log_append_time,
)


def produced(codec: int = NONE) -> RecordBatch:
    builder = RecordBatchBuilder(compression_type=codec, base_offset=100, producer_id=7,
                                 producer_epoch=2, base_sequence=40, partition_leader_epoch=3)
    for i in range(5):
        builder.append(1_000 + i, b"k%d" % i, None if i == 3 else b"v%d" % i,
                       [("h", b"x")] if i == 1 else ())
    return RecordBatch(builder.build())


@pytest.mark.parametrize("codec", [NONE, GZIP])
def test_a_thinned_batch_keeps_its_header_facts(codec):
    batch = produced(codec)
    records = list(batch)
    out = RecordBatch(rebuild_batch(batch, [records[1], records[3]]))
    out.validate()
    assert (out.base_offset, out.last_offset) == (100, 104)  # the last sequence survives
    assert (out.producer_id, out.producer_epoch, out.base_sequence) == (7, 2, 40)
    assert out.partition_leader_epoch == 3
    assert out.compression_type == codec
    assert out.record_count == 2
    assert (out.first_timestamp, out.max_timestamp) == (1_001, 1_003)
    assert list(out) == [records[1], records[3]]  # offsets, keys, values, headers


def test_an_emptied_batch_is_kafkas_empty_header():
    batch = produced(GZIP)
    data = rebuild_batch(batch, [])
    check_batch_header(data)
    out = RecordBatch(data)
    out.validate()
    assert (out.size, out.record_count, list(out)) == (61, 0, [])
    assert (out.base_offset, out.last_offset, out.compression_type) == (100, 104, NONE)
    assert out.first_timestamp == out.max_timestamp == 1_004
    assert (out.producer_id, out.base_sequence) == (7, 40)


def test_log_append_time_batches_stay_stamped():
    batch = bytearray(produced().buffer)
    stamp_log_append_time(batch, 0, len(batch), 9_999)
    stamped = RecordBatch(bytes(batch))
    out = RecordBatch(rebuild_batch(stamped, list(stamped)[:2]))
    out.validate()
    assert out.timestamp_type == LOG_APPEND_TIME
    assert out.max_timestamp == 9_999
    assert [r.timestamp for r in out] == [9_999, 9_999]
