"""``message.timestamp.type=LogAppendTime``: the log stamps each batch as Kafka does."""

from __future__ import annotations

import pytest
from storage_helpers import make_batch, read_all

from trilog.errors import CorruptMessageError
from trilog.records import GZIP, LOG_APPEND_TIME, RecordBatch, iter_batches, stamp_log_append_time
from trilog.storage import LogConfig

NOW = 1_700_000_123_456
STAMPED = LogConfig(message_timestamp_type="LogAppendTime")


@pytest.mark.parametrize("codec", [0, GZIP])
def test_batches_are_stamped_with_the_append_time(open_log, codec):
    log = open_log(STAMPED)
    produced = make_batch(3, timestamp=5_000, compression_type=codec) + make_batch(
        2, timestamp=6_000, tag=1, compression_type=codec)
    info = log.append(produced, now_ms=NOW)
    assert (info.log_append_time, info.max_timestamp) == (NOW, NOW)
    assert info.offset_of_max_timestamp == 2  # the first batch reaching it
    stored = read_all(log)
    assert len(stored) == len(produced)
    batches = list(iter_batches(stored))
    for batch, first_ts in zip(batches, (5_000, 6_000)):
        batch.validate()  # a fresh, correct CRC-32C
        assert batch.timestamp_type == LOG_APPEND_TIME
        assert batch.max_timestamp == NOW
        assert batch.first_timestamp == first_ts  # Kafka leaves it as produced
        assert batch.compression_type == codec
        assert [r.timestamp for r in batch] == [NOW] * batch.record_count
    assert [r.offset for b in batches for r in b] == [0, 1, 2, 3, 4]
    assert [r.value for b in batches for r in b] == [
        r.value for b in iter_batches(produced) for r in b]
    assert log.active_segment.max_timestamp == NOW
    assert log.offset_for_timestamp(NOW).offset == 0
    assert log.offset_for_timestamp(NOW + 1) is None


def test_create_time_stores_the_bytes_as_produced(open_log):
    log = open_log()
    produced = make_batch(3, timestamp=5_000)
    info = log.append(produced, now_ms=NOW)
    assert info.log_append_time == -1
    assert info.max_timestamp == 5_002
    assert read_all(log)[8:] == produced[8:]  # only the base offset is the log's


def test_kept_offsets_are_not_stamped(open_log):
    log = open_log(STAMPED)
    produced = make_batch(2, timestamp=5_000)
    info = log.append(produced, assign_offsets=False, now_ms=NOW)
    assert info.log_append_time == -1
    assert read_all(log) == produced


def test_a_bad_crc_is_refused_not_restamped(open_log):
    log = open_log(STAMPED)
    bad = bytearray(make_batch(2, value_size=300_000))  # large: the overlapped-CRC size
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptMessageError):
        log.append(bytes(bad), now_ms=NOW)
    assert log.log_end_offset == 0


def test_the_stamp_is_idempotent_and_pure():
    batch = bytearray(make_batch(2, timestamp=5_000))
    stamp_log_append_time(batch, 0, len(batch), NOW)
    once = bytes(batch)
    stamp_log_append_time(batch, 0, len(batch), NOW)
    assert bytes(batch) == once
    RecordBatch(once).validate()
