"""LogManager: layout, topic-name safety, checkpoints, the clean-shutdown marker."""

from __future__ import annotations

import logging
import os

import pytest
from storage_helpers import make_batch, read_all

import trilog.storage
from trilog.errors import InvalidTopicError, TrilogError
from trilog.storage import (
    CLEAN_SHUTDOWN_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    LogConfig,
    LogManager,
    OffsetCheckpoint,
)


@pytest.fixture
def manager_factory(tmp_path):
    managers = []

    def factory(dirs=("d1",), config=None, **kwargs):
        manager = LogManager([tmp_path / d for d in dirs], config or LogConfig(), **kwargs)
        managers.append(manager)
        return manager

    yield factory
    for manager in managers:
        manager.shutdown()


def test_public_names():
    assert sorted(trilog.storage.__all__) == sorted(
        [
            "AbortedTxn",
            "AppendOrigin",
            "BatchHeader",
            "CHEAP_APPEND_BYTES",
            "CLEAN_SHUTDOWN_FILE",
            "COMPACT",
            "CREATE_TIME",
            "DELETE",
            "EARLIEST_TIMESTAMP",
            "FetchSlice",
            "INLINE_APPENDS",
            "LATEST_TIMESTAMP",
            "LEADER_EPOCH_CHECKPOINT_FILE",
            "REPLICATION_OFFSET_CHECKPOINT_FILE",
            "UNDEFINED_EPOCH",
            "UNDEFINED_EPOCH_OFFSET",
            "EpochEntry",
            "LeaderEpochCache",
            "LOG_APPEND_TIME",
            "LOG_START_OFFSET_CHECKPOINT_FILE",
            "Log",
            "LogAppendInfo",
            "LogConfig",
            "LogManager",
            "LogSegment",
            "OffsetCheckpoint",
            "OffsetIndex",
            "ProducerInfo",
            "RECOVERY_POINT_CHECKPOINT_FILE",
            "SEGMENT_FILES",
            "SegmentFiles",
            "TimeIndex",
            "TimestampOffset",
            "TransactionIndex",
            "TxnIndexEntry",
            "fsync_dir",
            "offsets_before",
            "parse_cleanup_policy",
            "segments_to_delete",
            "write_atomically",
        ]
    )
    for name in trilog.storage.__all__:
        assert hasattr(trilog.storage, name)


def test_create_reopen_and_layout(tmp_path, manager_factory):
    manager = manager_factory()
    log = manager.get_or_create_log("orders", 0)
    assert manager.get_or_create_log("orders", 0) is log
    assert manager.get_log("orders", 1) is None
    log.append(make_batch(3))
    manager.get_or_create_log("orders", 1).append(make_batch(1))
    assert os.path.isfile(tmp_path / "d1" / "orders-0" / f"{0:020d}.log")
    data = read_all(log)
    manager.shutdown()
    assert os.path.exists(tmp_path / "d1" / CLEAN_SHUTDOWN_FILE)
    # An index reaches its file when flushed with entries: these have none (a few bytes).
    assert not os.path.exists(tmp_path / "d1" / "orders-0" / f"{0:020d}.index")
    assert not os.path.exists(tmp_path / "d1" / "orders-0" / f"{0:020d}.timeindex")
    assert (tmp_path / "d1" / RECOVERY_POINT_CHECKPOINT_FILE).read_text() == (
        "0\n2\norders 0 3\norders 1 1\n"
    )
    again = manager_factory()
    assert not os.path.exists(tmp_path / "d1" / CLEAN_SHUTDOWN_FILE)  # a crash is detectable
    assert sorted((l.topic, l.partition) for l in again.logs()) == [("orders", 0), ("orders", 1)]
    assert read_all(again.get_log("orders", 0)) == data
    assert again.get_log("orders", 0).append(make_batch(1)).first_offset == 3


def test_partitions_spread_over_log_dirs(tmp_path, manager_factory):
    manager = manager_factory(dirs=("a", "b", "c"))
    for p in range(6):
        manager.get_or_create_log("t", p)
    counts = [len(os.listdir(tmp_path / d)) for d in ("a", "b", "c")]
    assert counts == [3, 3, 3]  # two partitions and the .lock file each


@pytest.mark.parametrize("name", ["..", ".", "../x", "a/b", "x" * 250, "", "a b", "/abs", "ü"])
def test_illegal_topic_names_create_nothing(tmp_path, manager_factory, name):
    manager = manager_factory()
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(InvalidTopicError):
        manager.get_or_create_log(name, 0)
    assert sorted(os.listdir(tmp_path)) == before
    assert os.listdir(tmp_path / "d1") == [".lock"]


def test_bad_partition_rejected(manager_factory):
    manager = manager_factory()
    with pytest.raises(ValueError):
        manager.get_or_create_log("t", -1)


def test_unparseable_directories_are_skipped(tmp_path, manager_factory, caplog):
    d1 = tmp_path / "d1"
    for name in ("no_partition", "t-x", "bad topic-0", "ok-0"):
        (d1 / name).mkdir(parents=True)
    (d1 / "gone-3.abc.deleted").mkdir()
    with caplog.at_level(logging.WARNING, logger="trilog.storage"):
        manager = manager_factory()
    assert [(l.topic, l.partition) for l in manager.logs()] == [("ok", 0)]
    assert "no_partition" in caplog.text and "bad topic-0" in caplog.text
    assert not (d1 / "gone-3.abc.deleted").exists()


def test_delete_log(tmp_path, manager_factory):
    manager = manager_factory()
    log = manager.get_or_create_log("t", 0)
    log.append(make_batch(2))
    piece = log.read(0, 100)
    assert manager.delete_log("t", 0)
    assert not manager.delete_log("t", 0)
    assert manager.get_log("t", 0) is None
    assert os.listdir(tmp_path / "d1") == [".lock"]
    with piece:
        assert len(piece.read()) == piece.length > 0
    assert manager.get_or_create_log("t", 0).log_end_offset == 0


def test_crash_is_recovered_from_the_checkpoint(tmp_path, manager_factory):
    manager = manager_factory(config=LogConfig(segment_bytes=300))
    log = manager.get_or_create_log("t", 0)
    for i in range(10):
        log.append(make_batch(1, tag=i))
    log.flush()
    manager.checkpoint_recovery_points()
    assert OffsetCheckpoint(tmp_path / "d1" / RECOVERY_POINT_CHECKPOINT_FILE).read() == {
        ("t", 0): 10
    }
    log.append(make_batch(1, tag=10))
    # Crash: no flush, no marker; then garbage where the unflushed tail was.
    for l in manager.logs():
        l._close_handles()
    manager._unlock_dirs()
    manager._closed = True
    with open(log.active_segment.log_path, "ab") as f:
        f.write(b"\x00" * 100)
    again = manager_factory(config=LogConfig(segment_bytes=300))
    recovered = again.get_log("t", 0)
    assert recovered.log_end_offset == 11
    assert recovered.recovery_point == 11


def test_log_dir_lock(tmp_path, manager_factory):
    manager_factory()
    with pytest.raises(TrilogError):
        LogManager([tmp_path / "d1"])


def test_flush_and_cleanup_timers(tmp_path, manager_factory):
    config = LogConfig(segment_bytes=300, flush_interval_ms=1000, retention_ms=1000)
    manager = manager_factory(config=config)
    log = manager.get_or_create_log("t", 0)
    for i in range(6):
        log.append(make_batch(1, timestamp=5000 + i, tag=i), now_ms=5000)
    assert manager.flush_due_logs(5500) == [("t", 0)]  # the roll asked for a flush
    assert manager.flush_due_logs(5500) == []
    assert manager.flush_due_logs(6000) == [("t", 0)]  # one second of unflushed data
    assert log.recovery_point == 6
    assert manager.cleanup_logs(6003) == {("t", 0): [0]}
    assert manager.cleanup_logs(6003) == {}


def test_topic_configs(tmp_path, manager_factory):
    special = LogConfig(segment_bytes=300)
    manager = manager_factory(topic_configs={"small": special})
    assert manager.get_or_create_log("small", 0).config is special
    assert manager.get_or_create_log("big", 0).config == LogConfig()
    other = LogConfig(segment_bytes=5000)
    manager.update_topic_config("small", other)
    assert manager.get_log("small", 0).config is other


def test_checkpoint_format_and_malformed_files(tmp_path, caplog):
    checkpoint = OffsetCheckpoint(tmp_path / "cp")
    checkpoint.write({("b", 1): 5, ("a", 0): 7})
    assert (tmp_path / "cp").read_text() == "0\n2\na 0 7\nb 1 5\n"
    assert checkpoint.read() == {("a", 0): 7, ("b", 1): 5}
    assert not (tmp_path / "cp.tmp").exists()
    (tmp_path / "cp").write_text("0\n3\na 0 7\n")
    with caplog.at_level(logging.WARNING, logger="trilog.storage"):
        assert checkpoint.read() == {}
    assert OffsetCheckpoint(tmp_path / "missing").read() == {}


def test_create_logs_is_all_or_nothing(tmp_path, manager_factory, monkeypatch):
    manager = manager_factory(dirs=("d1", "d2"))
    real_log = trilog.storage._manager.Log
    made = []

    def failing_log(path, *args, **kwargs):  # the 5th partition finds the disk full
        if len(made) == 4:
            raise OSError(28, "No space left on device")
        made.append(path)
        return real_log(path, *args, **kwargs)

    monkeypatch.setattr(trilog.storage._manager, "Log", failing_log)
    with pytest.raises(OSError):
        manager.create_logs("t", range(8))
    monkeypatch.undo()
    assert len(made) == 4 and len(manager) == 0
    for d in ("d1", "d2"):
        assert [n for n in os.listdir(tmp_path / d) if n.startswith(("t-", ".creating"))] == []
    assert [lg.partition for lg in manager.create_logs("t", range(3))] == [0, 1, 2]
    assert manager.create_logs("t", range(4))[0].partition == 3  # only the missing one


def test_a_creation_cut_short_by_a_crash_is_undone_at_start(tmp_path, manager_factory):
    manager = manager_factory(dirs=("d1", "d2"))
    manager.create_logs("kept", [0])
    manager.get_log("kept", 0).append(make_batch(3))
    manager.shutdown()
    # What a crash in the middle of creating "half" (and a new partition of "kept") leaves.
    (tmp_path / "d1" / ".creating-0123").write_text("half 0 1 2\n")
    (tmp_path / "d1" / ".creating-4567").write_text("kept 1\n")
    for d, name in (("d1", "half-0"), ("d2", "half-1"), ("d2", "kept-1")):
        (tmp_path / d / name).mkdir()
    manager = manager_factory(dirs=("d1", "d2"))
    assert sorted(manager._logs) == [("kept", 0)]
    assert manager.get_log("kept", 0).log_end_offset == 3
    left = [n for d in ("d1", "d2") for n in os.listdir(tmp_path / d)
            if n.startswith(("half", "kept", ".creating"))]
    assert left == ["kept-0"]


def test_open_files_counts_the_open_segment_files_and_locks(tmp_path, manager_factory):
    from trilog.storage import SEGMENT_FILES

    manager = manager_factory(dirs=("d1", "d2"), config=LogConfig(segment_bytes=1024))
    before = len(SEGMENT_FILES)  # (the process's: other tests' logs may be open)
    assert manager.open_files() == 2 + before  # the log dirs' locks
    lg = manager.get_or_create_log("t", 0)
    for _ in range(5):
        lg.append(make_batch(3, value_size=200))
    assert manager.open_files() == 2 + before + len(lg.segments) and len(lg.segments) > 1


def _crash(manager):
    """What a SIGKILL leaves: no flush, no marker, the dir unlocked."""
    for log in manager.logs():
        log._close_handles()
    manager._unlock_dirs()
    manager._closed = True


@pytest.mark.parametrize("appended_after_flush", [False, True])
def test_recovery_fsyncs_only_a_segment_reaching_past_the_recovery_point(
        tmp_path, manager_factory, monkeypatch, appended_after_flush):
    manager = manager_factory()
    log = manager.get_or_create_log("t", 0)
    log.append(make_batch(2))
    log.flush()
    manager.checkpoint_recovery_points()
    if appended_after_flush:
        log.append(make_batch(1))  # in the page cache only
    _crash(manager)
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    recovered = manager_factory().get_log("t", 0)
    assert recovered.log_end_offset == recovered.recovery_point == (3 if appended_after_flush
                                                                    else 2)
    # The segment holding the recovery point was re-validated either way; a segment that
    # ends at it was fsynced whole before the crash, one with bytes past it is fsynced now.
    assert len(synced) == (1 if appended_after_flush else 0)


def test_the_collector_is_paused_while_the_logs_open(tmp_path, manager_factory, monkeypatch):
    import gc

    import trilog.storage._manager as manager_module

    manager = manager_factory()
    manager.get_or_create_log("t", 0).append(make_batch(1))
    manager.get_or_create_log("t", 1).append(make_batch(1))
    manager.shutdown()
    seen = []
    real_log = manager_module.Log

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return real_log(*args, **kwargs)

    monkeypatch.setattr(manager_module, "Log", spy)
    assert gc.isenabled()
    again = manager_factory()
    assert len(again) == 2 and seen == [False, False]
    assert gc.isenabled()  # and on again afterwards
