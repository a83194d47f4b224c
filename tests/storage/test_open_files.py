"""The bounded cache of open segment files (``SEGMENT_FILES``), parallel opening, and a
shutdown that syncs each file system once: more partitions than the cache may hold open, and
every one still reads and writes."""

from __future__ import annotations

import os
import threading

import pytest
from storage_helpers import batches_in, make_batch, producer_batch

from trilog.storage import SEGMENT_FILES, LogConfig, LogManager, SegmentFiles
from trilog.storage import _manager as manager_module


def log_files_open(path) -> int:
    """This process's descriptors of ``.log`` files under ``path``."""
    base = str(path)
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target.startswith(base) and target.endswith(".log")
    return count


@pytest.fixture
def capacity():
    """Set the process's cache bound for one test; no file of earlier tests counts."""
    old = SEGMENT_FILES.capacity

    def set_capacity(n: int | None) -> SegmentFiles:
        SEGMENT_FILES.set_capacity(n)
        return SEGMENT_FILES

    yield set_capacity
    SEGMENT_FILES.set_capacity(old)


def test_more_partitions_than_the_cache_holds_all_read_and_write(tmp_path, capacity):
    cache = capacity(8)
    evicted = cache.evictions
    manager = LogManager(tmp_path / "logs", LogConfig(segment_bytes=400))
    try:
        manager.create_logs("many", range(40))
        for round_ in range(3):
            for p in range(40):
                manager.get_log("many", p).append(make_batch(2, value_size=100))
            assert log_files_open(tmp_path) <= 8 + 1
        for p in range(40):
            lg = manager.get_log("many", p)
            assert lg.log_end_offset == 6 and len(lg.segments) > 1
            with lg.read(0, 1 << 20) as piece:
                assert piece.length > 0  # a closed file is opened again to read
            offsets = []
            while len(offsets) < 6:
                with lg.read(len(offsets), 1 << 20) as piece:
                    offsets += [o for b, last, _ in batches_in(piece.read())
                                for o in range(b, last + 1)]
            assert offsets == list(range(6))
        assert cache.evictions > evicted
        assert manager.open_files() <= 8 + 1 + len(manager.log_dirs)
    finally:
        manager.shutdown()
    assert log_files_open(tmp_path) == 0
    reopened = LogManager(tmp_path / "logs", LogConfig(segment_bytes=400))
    try:
        assert log_files_open(tmp_path) <= 8 + 1
        assert all(reopened.get_log("many", p).log_end_offset == 6 for p in range(40))
    finally:
        reopened.shutdown()


def test_a_slice_being_sent_survives_its_file_leaving_the_cache(tmp_path, capacity):
    cache = capacity(2)
    manager = LogManager(tmp_path / "logs")
    try:
        manager.create_logs("t", range(6))
        first = manager.get_log("t", 0)
        first.append(make_batch(3, value_size=50))
        piece = first.read(0, 1 << 20)
        expected = piece.read()
        for p in range(1, 6):  # closes partition 0's file: the slice has its own descriptor
            manager.get_log("t", p).append(make_batch(1))
        assert first.active_segment._fd < 0
        out = tmp_path / "out"
        with piece, open(out, "wb") as sink:
            assert os.sendfile(sink.fileno(), piece.fd, piece.position,
                               piece.length) == piece.length
        assert out.read_bytes() == expected
        assert len(cache) <= 2
    finally:
        manager.shutdown()


def test_a_file_in_use_is_never_closed_by_the_cache(tmp_path, capacity):
    """A log's append holds its lock: another log's opening cannot close its file then."""
    capacity(1)
    manager = LogManager(tmp_path / "logs")
    try:
        manager.create_logs("t", range(3))
        busy, other, third = (manager.get_log("t", p) for p in range(3))
        busy.append(make_batch(1))
        with busy._lock:  # as during an append
            fd = busy.active_segment.fd
            other.append(make_batch(1))  # over capacity: only an unused file may go
            assert busy.active_segment._fd == fd
            os.fstat(fd)
        third.append(make_batch(1))  # the next opening may close it now
        assert busy.active_segment._fd < 0
        busy.append(make_batch(1))
        assert busy.log_end_offset == 2
    finally:
        manager.shutdown()


def test_logs_open_in_parallel_and_all_or_nothing(tmp_path, capacity, monkeypatch):
    capacity(None)
    manager = LogManager(tmp_path / "logs")
    manager.create_logs("t", range(30))
    for p in range(30):
        manager.get_log("t", p).append(make_batch(p + 1))
    manager.shutdown()

    threads: set[str] = set()
    real_log = manager_module.Log

    def recording_log(*args, **kwargs):
        threads.add(threading.current_thread().name)
        return real_log(*args, **kwargs)

    monkeypatch.setattr(manager_module, "Log", recording_log)
    reopened = LogManager(tmp_path / "logs", load_threads=4)
    try:
        assert [reopened.get_log("t", p).log_end_offset for p in range(30)] == list(
            range(1, 31))
        assert len(threads) > 1 and all(t.startswith("log-load") for t in threads)
    finally:
        reopened.shutdown()

    def failing_log(path, *args, **kwargs):
        if path.endswith("t-17"):
            raise OSError(5, "Input/output error", path)
        return real_log(path, *args, **kwargs)

    monkeypatch.setattr(manager_module, "Log", failing_log)
    with pytest.raises(OSError, match="t-17"):
        LogManager(tmp_path / "logs", load_threads=4)
    assert log_files_open(tmp_path) == 0  # the others were closed again
    monkeypatch.undo()
    again = LogManager(tmp_path / "logs", load_threads=1)  # and the dir is not left locked
    again.shutdown()


def test_a_shutdown_syncs_each_file_system_once_not_each_log(tmp_path, capacity,
                                                            monkeypatch):
    capacity(None)
    manager = LogManager(tmp_path / "logs")
    manager.create_logs("t", range(50))
    for p in range(50):
        manager.get_log("t", p).append(make_batch(1))
    fsyncs = []
    syncs = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd)))
    real_sync = manager_module.sync_filesystem
    monkeypatch.setattr(manager_module, "sync_filesystem",
                        lambda path: (syncs.append(path), real_sync(path)))
    manager.shutdown()
    assert syncs == manager.log_dirs
    assert len(fsyncs) < 10  # checkpoints and the marker, not three a log
    monkeypatch.undo()
    reopened = LogManager(tmp_path / "logs")
    try:
        for p in range(50):
            lg = reopened.get_log("t", p)
            assert lg.recovery_point == lg.log_end_offset == 1
            assert lg._producer_load.batches_replayed == 0  # no producer, no replay
    finally:
        reopened.shutdown()


def test_a_failed_sync_at_shutdown_leaves_the_logs_to_recovery(tmp_path, capacity,
                                                               monkeypatch, caplog):
    capacity(None)
    manager = LogManager(tmp_path / "logs")
    manager.create_logs("t", range(3))
    manager.get_log("t", 0).append(make_batch(2))

    def failing(path):
        raise OSError(5, "Input/output error", path)

    monkeypatch.setattr(manager_module, "sync_filesystem", failing)
    manager.shutdown()
    assert "cannot sync its file system" in caplog.text
    assert not os.path.exists(tmp_path / "logs" / ".kafka_cleanshutdown")
    monkeypatch.undo()
    reopened = LogManager(tmp_path / "logs")
    try:
        assert reopened.get_log("t", 0).log_end_offset == 2
    finally:
        reopened.shutdown()


def test_a_producer_snapshot_is_still_written_where_there_are_producers(tmp_path, capacity):
    capacity(None)
    manager = LogManager(tmp_path / "logs")
    lg = manager.get_or_create_log("t", 0)
    lg.append(producer_batch(7, 0, 3))
    manager.shutdown()
    assert [n for n in os.listdir(tmp_path / "logs" / "t-0") if n.endswith(".snapshot")]
    reopened = LogManager(tmp_path / "logs")
    try:
        (producer,) = reopened.get_log("t", 0).producers()
        assert producer.producer_id == 7 and producer.last_sequence == 2
    finally:
        reopened.shutdown()


def test_an_index_has_a_file_once_it_has_entries(tmp_path, capacity):
    capacity(None)
    manager = LogManager(tmp_path / "logs", LogConfig(index_interval_bytes=100))
    small, large = manager.create_logs("t", range(2))
    small.append(make_batch(1))
    for _ in range(5):
        large.append(make_batch(2, value_size=100))
    manager.shutdown()
    names = {p: set(os.listdir(tmp_path / "logs" / f"t-{p}")) for p in range(2)}
    assert f"{0:020d}.index" not in names[0] and f"{0:020d}.timeindex" not in names[0]
    assert {f"{0:020d}.index", f"{0:020d}.timeindex"} <= names[1]
    reopened = LogManager(tmp_path / "logs", LogConfig(index_interval_bytes=100))
    try:  # a missing index is rebuilt from its few batches
        assert [lg.log_end_offset for lg in reopened.logs()] in ([1, 10], [10, 1])
        assert reopened.get_log("t", 0).active_segment.max_timestamp == 1_000
        assert len(reopened.get_log("t", 1).active_segment.offset_index) > 0
    finally:
        reopened.shutdown()


def test_logs_open_on_one_thread_by_default(tmp_path):
    # Kafka's default: opening from the page cache is CPU work under the GIL, and more
    # threads only contend for it (num.recovery.threads.per.data.dir documents why).
    manager = LogManager(tmp_path / "logs")
    try:
        assert manager.load_threads == 1
    finally:
        manager.shutdown()
