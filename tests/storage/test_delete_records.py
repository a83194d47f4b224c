"""DeleteRecords' storage part: ``Log.delete_records_before`` and the log start offset that
may lie inside a segment, persisted in ``log-start-offset-checkpoint``."""

from __future__ import annotations

import os

import pytest
from storage_helpers import batches_in, make_batch, read_all

from trilog.errors import OffsetOutOfRangeError, PolicyViolationError
from trilog.storage import (
    EARLIEST_TIMESTAMP,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    Log,
    LogConfig,
    LogManager,
    OffsetCheckpoint,
    parse_cleanup_policy,
)

CONFIG = LogConfig(segment_bytes=400, index_interval_bytes=64, retention_ms=-1)


def fill(log: Log, batches: int = 10, per_batch: int = 3) -> None:
    for i in range(batches):
        log.append(make_batch(per_batch, tag=i, timestamp=1_000 + 10 * i))


def test_the_log_start_moves_into_a_segment(open_log):
    log = open_log(CONFIG)
    fill(log)
    assert len(log.segments) > 3
    second = log.segments[1].base_offset
    target = second + 1  # inside a batch of the second segment
    assert log.delete_records_before(target) == target
    assert log.log_start_offset == target
    assert log.segments[0].base_offset == second  # the first segment went at once
    with pytest.raises(OffsetOutOfRangeError) as exc:
        log.read(target - 1, 1000)
    assert (exc.value.log_start_offset, exc.value.log_end_offset) == (target, 30)
    with log.read(target, 1000) as piece:
        assert piece.log_start_offset == target
        first = batches_in(piece.read())[0]
    assert first[0] <= target <= first[1]  # the whole batch holding it, as Kafka serves it
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP).offset == target
    assert min(log.offsets_before(EARLIEST_TIMESTAMP, 10)) == target
    # A timestamp older than everything finds the first record at or after the start.
    assert log.offset_for_timestamp(0).offset == target
    assert read_all(log)  # from the log start to the end


def test_rules_of_the_offset(open_log):
    log = open_log(CONFIG)
    fill(log, 2)
    assert log.delete_records_before(0) == 0  # at the start: nothing changes
    assert log.delete_records_before(2) == 2
    assert log.delete_records_before(1) == 2  # never backwards
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(7)  # above the high watermark
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(-2)
    assert log.delete_records_before(-1) == 6  # -1: the high watermark
    assert log.log_start_offset == log.log_end_offset == 6
    with log.read(6, 100) as piece:
        assert piece.read() == b""
    log.append(make_batch(1))
    assert batches_in(read_all(log)) == [(6, 6, 0)]


def test_compact_only_logs_refuse(open_log):
    log = open_log(CONFIG.replace(cleanup_policy=parse_cleanup_policy("compact")))
    fill(log, 2)
    with pytest.raises(PolicyViolationError):
        log.delete_records_before(2)
    log.config = CONFIG.replace(cleanup_policy=parse_cleanup_policy("compact,delete"))
    assert log.delete_records_before(2) == 2


def test_retention_deletes_what_a_reopened_start_leaves(tmp_path):
    directory = tmp_path / "t-0"
    log = Log(directory, CONFIG)
    fill(log)
    bases = [s.base_offset for s in log.segments]
    log.close()
    # A log start offset past two segments whose deletion did not happen (a crash).
    log = Log(directory, CONFIG, log_start_offset=bases[2] + 1, needs_recovery=False)
    try:
        assert log.log_start_offset == bases[2] + 1
        assert log.segments[0].base_offset == bases[0]
        assert log.delete_old_segments() == bases[:2]
        assert log.log_start_offset == bases[2] + 1
    finally:
        log.close()


def test_a_start_past_the_end_restarts_the_log(tmp_path):
    directory = tmp_path / "t-0"
    log = Log(directory, CONFIG)
    fill(log, 2)
    log.close()
    log = Log(directory, CONFIG, log_start_offset=100)
    try:
        assert (log.log_start_offset, log.log_end_offset) == (100, 100)
        assert log.append(make_batch(1)).first_offset == 100
    finally:
        log.close()


def test_truncation_below_the_start(open_log):
    log = open_log(CONFIG)
    fill(log)
    base = log.segments[1].base_offset
    log.delete_records_before(base + 2)
    log.truncate_to(base + 1)
    assert log.log_start_offset <= log.log_end_offset
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)


@pytest.mark.parametrize("clean", [True, False])
def test_the_manager_persists_the_log_start(tmp_path, clean):
    manager = LogManager(tmp_path / "d", CONFIG)
    log = manager.get_or_create_log("t", 0)
    fill(log)
    manager.get_or_create_log("t", 1).append(make_batch(2))
    target = log.segments[2].base_offset + 1
    assert manager.delete_records_before("t", 0, target) == target
    path = tmp_path / "d" / LOG_START_OFFSET_CHECKPOINT_FILE
    # Only the logs whose start lies past their first segment are written (as Kafka).
    assert OffsetCheckpoint(path).read() == {("t", 0): target}
    with pytest.raises(Exception, match="no log here"):
        manager.delete_records_before("t", 7, 0)
    if clean:
        manager.shutdown()
    else:
        for lg in manager.logs():
            lg._close_handles()
        manager._unlock_dirs()
    manager = LogManager(tmp_path / "d", CONFIG)
    try:
        log = manager.get_log("t", 0)
        assert log.log_start_offset == target
        with pytest.raises(OffsetOutOfRangeError):
            log.read(target - 1, 100)
        manager.checkpoint_recovery_points()
        assert OffsetCheckpoint(path).read() == {("t", 0): target}
        assert os.path.exists(path)
    finally:
        manager.shutdown()
