"""Retention (by time, by size, slices surviving deletion) and the flush policy."""

from __future__ import annotations

import os
from unittest import mock

from storage_helpers import batches_in, make_batch, read_all, segment_files

from trilog.storage import Log, LogConfig, offsets_before, segments_to_delete

DAY = 24 * 3600 * 1000


# -- the pure decisions -----------------------------------------------------------------


def test_segments_to_delete_by_time_stops_at_the_first_young_segment():
    inactive = [(100, 1000), (100, 5000), (100, 2000)]
    assert segments_to_delete(inactive, 0, 6000, 4500, -1) == 1
    assert segments_to_delete(inactive, 0, 10_000, 4500, -1) == 3
    assert segments_to_delete(inactive, 0, 10_000, -1, -1) == 0


def test_segments_to_delete_by_size_counts_the_active_segment():
    inactive = [(100, 0), (100, 0), (100, 0)]
    assert segments_to_delete(inactive, 50, 0, -1, 350) == 0
    assert segments_to_delete(inactive, 50, 0, -1, 250) == 1
    assert segments_to_delete(inactive, 50, 0, -1, 0) == 3
    assert segments_to_delete(inactive, 50, 0, -1, 150) == 2
    # Time first, then size on what is left.
    assert segments_to_delete([(100, 0), (100, 9999)], 0, 10_000, 5000, 100) == 1


def test_offsets_before_is_kafka_08():
    segments = [(0, 100), (10, 200), (20, 300)]
    assert offsets_before(segments, 25, False, 400, -1, 10) == [25, 20, 10, 0]
    assert offsets_before(segments, 20, True, 400, -1, 10) == [20, 10, 0]
    assert offsets_before(segments, 25, False, 400, -2, 10) == [0]
    assert offsets_before(segments, 25, False, 400, 250, 10) == [10, 0]
    assert offsets_before(segments, 25, False, 400, 250, 1) == [10]
    assert offsets_before(segments, 25, False, 400, 50, 10) == []


# -- retention on a log -----------------------------------------------------------------


def test_retention_by_time(tmp_path):
    log = Log(tmp_path / "t-0", LogConfig(segment_bytes=300, retention_ms=DAY))
    try:
        now = 1_700_000_000_000
        for i in range(9):  # three segments of three batches, a day apart
            log.append(make_batch(1, timestamp=now + (i // 3) * DAY, tag=i))
        assert [s.base_offset for s in log.segments] == [0, 3, 6]
        assert log.delete_old_segments(now + DAY) == []
        assert log.delete_old_segments(now + DAY + 1) == [0]
        assert (log.log_start_offset, log.log_end_offset) == (3, 9)
        assert segment_files(tmp_path / "t-0") == [f"{3:020d}.log", f"{6:020d}.log"]
        # The active segment is never deleted, however old.
        assert log.delete_old_segments(now + 100 * DAY) == [3]
        assert [s.base_offset for s in log.segments] == [6]
        assert log.recovery_point >= 6
    finally:
        log.close()


def test_retention_by_time_without_timestamps_uses_mtime(tmp_path):
    log = Log(tmp_path / "t-0", LogConfig(segment_bytes=300, retention_ms=DAY))
    try:
        for i in range(6):
            log.append(make_batch(1, timestamp=-1, tag=i))
        first = log.segments[0]
        assert first.max_timestamp == -1
        os.utime(first.log_path, ns=(0, 1_000 * 1_000_000))
        assert log.delete_old_segments(1_000 + DAY + 1) == [0]
    finally:
        log.close()


def test_retention_by_size(tmp_path):
    log = Log(tmp_path / "t-0", LogConfig(segment_bytes=300, retention_bytes=600))
    try:
        for i in range(20):
            log.append(make_batch(1, tag=i))
        assert log.size_in_bytes > 600
        deleted = log.delete_old_segments()
        assert deleted and deleted[0] == 0
        assert log.size_in_bytes <= 600
        assert log.size_in_bytes + log.segments[0].size > 600 or len(log.segments) == 1
        assert batches_in(read_all(log))[0][0] == log.log_start_offset
        assert log.delete_old_segments() == []
    finally:
        log.close()


def test_slice_survives_deletion_of_its_segment(tmp_path):
    log = Log(tmp_path / "t-0", LogConfig(segment_bytes=300, retention_bytes=0))
    try:
        for i in range(9):
            log.append(make_batch(1, tag=i))
        piece = log.read(0, 1000)
        expected = piece.read()
        assert batches_in(expected)[0][0] == 0
        assert log.delete_old_segments() == [0, 3]
        assert not os.path.exists(os.path.join(tmp_path, "t-0", f"{0:020d}.log"))
        assert piece.read() == expected  # the slice's own descriptor keeps the bytes
        out = os.open(tmp_path / "sent", os.O_WRONLY | os.O_CREAT)
        try:
            assert os.sendfile(out, piece.fd, piece.position, piece.length) == piece.length
        finally:
            os.close(out)
        piece.close()
        assert (tmp_path / "sent").read_bytes() == expected
    finally:
        log.close()


# -- the flush policy -------------------------------------------------------------------


def test_flush_every_message(tmp_path):
    log = Log(tmp_path / "t-0", LogConfig(flush_interval_messages=1))
    try:
        with mock.patch("os.fsync", wraps=os.fsync) as fsync:
            for i in range(5):
                info = log.append(make_batch(2))
                assert log.recovery_point == info.log_end_offset
                assert log.unflushed_messages == 0
            assert fsync.call_count >= 5
    finally:
        log.close()


def test_flush_every_n_messages(tmp_path):
    log = Log(tmp_path / "t-0", LogConfig(flush_interval_messages=5))
    try:
        log.append(make_batch(2))
        log.append(make_batch(2))
        assert log.recovery_point == 0 and log.unflushed_messages == 4
        log.append(make_batch(2))
        assert log.recovery_point == 6 and log.unflushed_messages == 0
    finally:
        log.close()


def test_flush_by_time_is_asked_for(tmp_path):
    log = Log(tmp_path / "t-0", LogConfig(flush_interval_ms=1000))
    try:
        assert not log.flush_due(10_000)
        log.append(make_batch(1), now_ms=10_000)
        assert not log.flush_due(10_999)
        assert log.flush_due(11_000)
        assert log.maybe_flush(11_000)
        assert log.recovery_point == 1 and not log.flush_due(99_000)
    finally:
        log.close()


def test_roll_asks_for_a_flush_of_the_old_segment(tmp_path):
    log = Log(tmp_path / "t-0", LogConfig(segment_bytes=300))  # never flush by policy
    try:
        for i in range(4):
            log.append(make_batch(1, tag=i))
        assert len(log.segments) == 2 and log.flush_due()
        assert log.maybe_flush()
        assert log.recovery_point == log.active_segment.base_offset == 3
        assert not log.flush_due()
    finally:
        log.close()
