"""What a replicated partition needs of ``Log``: leader epochs stamped into batches and kept
in the leader-epoch cache, follower appends that keep offsets and epochs, truncation, the
high watermark and reads bounded by it, and a divergent follower converging on its leader."""

from __future__ import annotations

import os

import pytest
from storage_helpers import batches_in, make_batch, read_all

from trilog.errors import OffsetOutOfRangeError, TrilogError, UnknownTopicOrPartitionError
from trilog.records import RecordBatch, RecordBatchBuilder, iter_batches
from trilog.storage import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    LOG_APPEND_TIME,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    Log,
    LogConfig,
    LogManager,
    OffsetCheckpoint,
    parse_cleanup_policy,
)
from trilog.storage._epochs import read_checkpoint
from trilog.storage._local_log import LocalLog

CONFIG = LogConfig(segment_bytes=250, index_interval_bytes=64, retention_ms=-1)
UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def follower_batch(base_offset: int, count: int, epoch: int, tag: int = 0) -> bytes:
    """A batch as a leader stored it: its own offsets and leader epoch."""
    builder = RecordBatchBuilder(base_offset=base_offset, partition_leader_epoch=epoch)
    for i in range(count):
        builder.append(1_000 + i, b"k%d" % i, b"%d:%d" % (tag, i))
    return builder.build()


def on_disk(log: Log) -> list[RecordBatch]:
    return list(iter_batches(read_all(log)))


def epochs(log: Log) -> list[tuple[int, int]]:
    return [tuple(e) for e in log.leader_epoch_cache.entries]


def checkpoint_of(log: Log) -> list[tuple[int, int]] | None:
    found = read_checkpoint(os.path.join(log.directory, LEADER_EPOCH_CHECKPOINT_FILE))
    return None if found is None else [tuple(e) for e in found]


# -- a leader's appends --------------------------------------------------------------------------


@pytest.mark.parametrize("batches_per_append", [1, 3, 300])
def test_a_leader_stamps_its_epoch_and_the_crc_still_holds(open_log, batches_per_append):
    # 300 batches take the one-copy path of the append instead of writev.
    log = open_log(LogConfig(segment_bytes=1 << 20))
    buffer = b"".join(make_batch(2, tag=i) for i in range(batches_per_append))
    info = log.append(buffer, leader_epoch=7)
    assert info.first_offset == 0
    stored = on_disk(log)
    assert len(stored) == batches_per_append
    for i, batch in enumerate(stored):
        assert batch.partition_leader_epoch == 7
        assert batch.base_offset == 2 * i
        batch.validate()  # the CRC does not cover the epoch
    assert epochs(log) == [(7, 0)]
    assert checkpoint_of(log) == [(7, 0)]
    assert log.latest_epoch == 7


def test_a_leader_stamps_log_append_time_batches_too(open_log):
    log = open_log(LogConfig(message_timestamp_type=LOG_APPEND_TIME))
    log.append(make_batch(3), leader_epoch=2, now_ms=5_000)
    (batch,) = on_disk(log)
    assert batch.partition_leader_epoch == 2
    assert batch.max_timestamp == 5_000
    batch.validate()


def test_each_new_epoch_starts_where_its_first_append_does(open_log):
    log = open_log(CONFIG)
    log.append(make_batch(2), leader_epoch=0)
    log.append(make_batch(3), leader_epoch=0)
    log.append(make_batch(1), leader_epoch=2)
    log.append(make_batch(2), leader_epoch=5)
    assert epochs(log) == [(0, 0), (2, 5), (5, 6)]
    assert [b.partition_leader_epoch for b in on_disk(log)] == [0, 0, 2, 5]
    assert log.end_offset_for_epoch(0) == (0, 5)
    assert log.end_offset_for_epoch(1) == (0, 5)
    assert log.end_offset_for_epoch(2) == (2, 6)
    assert log.end_offset_for_epoch(5) == (5, 8)
    assert log.end_offset_for_epoch(6) == UNDEFINED
    assert log.end_offset_for_epoch(UNDEFINED_EPOCH) == UNDEFINED


def test_appends_without_an_epoch_leave_the_cache_alone(open_log):
    log = open_log(CONFIG)
    log.append(make_batch(2))
    log.append(follower_batch(2, 2, -1), assign_offsets=False)
    assert epochs(log) == []
    assert log.latest_epoch is None
    assert not os.path.exists(os.path.join(log.directory, LEADER_EPOCH_CHECKPOINT_FILE))
    assert [b.partition_leader_epoch for b in on_disk(log)] == [-1, -1]


def test_a_new_leader_records_its_epoch_before_appending(open_log):
    log = open_log(CONFIG)
    log.append(make_batch(4), leader_epoch=1)
    assert log.assign_epoch_start_offset(3)
    assert not log.assign_epoch_start_offset(3)
    assert epochs(log) == [(1, 0), (3, 4)]
    assert log.end_offset_for_epoch(1) == (1, 4)
    assert log.end_offset_for_epoch(3) == (3, 4)
    log.append(make_batch(1), leader_epoch=3)
    assert epochs(log) == [(1, 0), (3, 4)]


def test_bad_epoch_arguments_are_refused(open_log):
    log = open_log(CONFIG)
    with pytest.raises(ValueError):
        log.append(follower_batch(0, 1, 1), assign_offsets=False, leader_epoch=1)
    with pytest.raises(ValueError):
        log.append(make_batch(1), leader_epoch=-1)
    with pytest.raises(ValueError):
        log.assign_epoch_start_offset(-1)
    assert log.log_end_offset == 0


def test_a_failed_append_leaves_no_epoch_behind(open_log):
    log = open_log(CONFIG)
    log.append(make_batch(2), leader_epoch=1)
    bad = bytearray(make_batch(2))
    bad[-1] ^= 0xFF  # fails its CRC
    with pytest.raises(Exception):
        log.append(bytes(bad), leader_epoch=2)
    assert epochs(log) == [(1, 0)]
    assert log.log_end_offset == 2


# -- a follower's appends --------------------------------------------------------------------------


def test_a_follower_keeps_offsets_and_epochs(open_log):
    log = open_log(CONFIG)
    log.append(follower_batch(0, 3, 1) + follower_batch(3, 2, 1), assign_offsets=False)
    log.append(follower_batch(5, 1, 4), assign_offsets=False)
    log.append(follower_batch(6, 2, 4) + follower_batch(8, 2, 6), assign_offsets=False)
    stored = on_disk(log)
    assert [(b.base_offset, b.partition_leader_epoch) for b in stored] == [
        (0, 1), (3, 1), (5, 4), (6, 4), (8, 6)]
    assert epochs(log) == [(1, 0), (4, 5), (6, 8)]
    assert checkpoint_of(log) == [(1, 0), (4, 5), (6, 8)]
    assert log.end_offset_for_epoch(4) == (4, 8)


def test_a_follower_copy_is_byte_identical(open_log, tmp_path):
    leader = open_log(CONFIG)
    for epoch in (0, 0, 1, 1, 1, 3):
        leader.append(make_batch(2, tag=epoch), leader_epoch=epoch)
    follower = Log(tmp_path / "copy-0", CONFIG)
    try:
        offset = 0
        while offset < leader.log_end_offset:
            with leader.read(offset, 150) as piece:
                data = piece.read()
            follower.append(data, assign_offsets=False)
            offset = follower.log_end_offset
        assert read_all(follower) == read_all(leader)
        assert epochs(follower) == epochs(leader) == [(0, 0), (1, 4), (3, 10)]
    finally:
        follower.close()


# -- truncation ------------------------------------------------------------------------------------


def fill_epochs(log: Log) -> None:
    """Epoch 1 at 0..5, epoch 2 at 6..11, epoch 4 at 12..17 (batches of three)."""
    for epoch in (1, 1, 2, 2, 4, 4):
        log.append(make_batch(3, tag=epoch), leader_epoch=epoch)


def test_truncation_in_the_middle_of_an_epoch(open_log):
    log = open_log(CONFIG)
    fill_epochs(log)
    log.truncate_to(9)
    assert log.log_end_offset == 9
    assert epochs(log) == [(1, 0), (2, 6)]
    assert log.end_offset_for_epoch(2) == (2, 9)
    assert log.end_offset_for_epoch(4) == UNDEFINED
    log.truncate_to(6)  # an epoch boundary: epoch 2 goes
    assert epochs(log) == [(1, 0)]
    assert checkpoint_of(log) == [(1, 0)]
    log.append(make_batch(1), leader_epoch=5)
    assert epochs(log) == [(1, 0), (5, 6)]


def test_truncation_inside_a_batch_keeps_whole_batches(open_log):
    log = open_log(CONFIG)
    fill_epochs(log)
    log.truncate_to(7)  # inside the batch 6..8 of epoch 2
    assert log.log_end_offset == 6
    assert epochs(log) == [(1, 0)]


def test_truncation_below_the_first_segment_restarts_without_epochs(open_log):
    log = open_log(CONFIG)
    fill_epochs(log)
    log.delete_records_before(7)
    first = log.segments[0].base_offset
    assert first > 0
    log.truncate_to(first - 1)
    assert (log.log_start_offset, log.log_end_offset) == (first - 1, first - 1)
    assert epochs(log) == []


def test_truncate_fully_and_start_at(open_log):
    log = open_log(CONFIG, replicated=True)
    fill_epochs(log)
    log.update_high_watermark(10)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (100, 100, 100)
    assert epochs(log) == []
    assert checkpoint_of(log) == []
    assert len(log.segments) == 1 and log.segments[0].base_offset == 100
    log.append(follower_batch(100, 2, 9), assign_offsets=False)
    assert epochs(log) == [(9, 100)]
    log.truncate_fully_and_start_at(3)  # back below: also fine
    assert (log.log_start_offset, log.log_end_offset) == (3, 3)


def test_the_log_start_moving_clamps_the_epochs(open_log):
    log = open_log(CONFIG)
    fill_epochs(log)
    log.delete_records_before(8)
    assert epochs(log) == [(2, 8), (4, 12)]
    assert checkpoint_of(log) == [(2, 8), (4, 12)]
    log.delete_records_before(12)
    assert epochs(log) == [(4, 12)]


def test_retention_clamps_the_epochs(open_log):
    log = open_log(LogConfig(segment_bytes=250, index_interval_bytes=64, retention_bytes=0))
    fill_epochs(log)
    assert len(log.segments) > 2
    log.delete_old_segments()
    start = log.log_start_offset
    assert start > 0
    assert epochs(log) == [(4, max(start, 12))]


# -- reopening -------------------------------------------------------------------------------------


def test_epochs_survive_a_restart(log_dir):
    log = Log(log_dir, CONFIG)
    fill_epochs(log)
    log.close()
    log = Log(log_dir, CONFIG)
    assert epochs(log) == [(1, 0), (2, 6), (4, 12)]
    log.close()


@pytest.mark.parametrize("damage", ["missing", "garbage", "wrong count", "not ascending"])
def test_a_lost_or_corrupt_checkpoint_is_rebuilt_from_the_headers(log_dir, damage):
    # A lost one, of a replicated log (a standalone log's missing file means no epoch:
    # test_a_standalone_log_without_a_checkpoint_walks_no_header).
    replicated = damage == "missing"
    log = Log(log_dir, CONFIG, replicated=replicated)
    log.append(make_batch(2))  # no epoch
    fill_epochs(log)
    log.append(follower_batch(20, 2, 4), assign_offsets=False)
    log.close()
    path = os.path.join(log_dir, LEADER_EPOCH_CHECKPOINT_FILE)
    if damage == "missing":
        os.unlink(path)
    else:
        text = {"garbage": "\x00\xff junk", "wrong count": "0\n5\n1 2\n",
                "not ascending": "0\n2\n3 5\n2 9\n"}[damage]
        with open(path, "w", encoding="latin-1") as f:
            f.write(text)
    log = Log(log_dir, CONFIG, replicated=replicated)
    assert epochs(log) == [(1, 2), (2, 8), (4, 14)]
    assert checkpoint_of(log) == [(1, 2), (2, 8), (4, 14)]
    log.close()


def test_a_replicated_log_gets_an_empty_checkpoint_once(log_dir):
    log = Log(log_dir, CONFIG, replicated=True)
    log.append(make_batch(2))
    log.close()
    assert checkpoint_of(log) is None
    log = Log(log_dir, CONFIG, replicated=True)  # scans its headers once, finds no epoch
    assert epochs(log) == []
    log.close()
    assert checkpoint_of(log) == []


@pytest.mark.parametrize("crash", [False, True])
def test_a_standalone_log_without_a_checkpoint_walks_no_header(tmp_path, monkeypatch, crash):
    # Each entry reaches the file, fsynced, when it is made, and the file is only ever
    # replaced by a rename: a missing one means none, after a crash too (no walk of every
    # header of a large log at each start, no file for 50,000 logs without epochs).
    manager = LogManager(tmp_path)
    manager.get_or_create_log("topic", 0).append(make_batch(2))
    if crash:
        for log in manager.logs():
            log._close_handles()
        manager._unlock_dirs()
    else:
        manager.shutdown()
    walked = []

    def batch_epochs(self):
        walked.append(self.directory)
        yield from ()

    monkeypatch.setattr(LocalLog, "batch_epochs", batch_epochs)
    manager = LogManager(tmp_path)
    log = manager.get_log("topic", 0)
    assert log.log_end_offset == 2 and epochs(log) == [] and walked == []
    assert checkpoint_of(log) is None
    log.append(make_batch(1), leader_epoch=3)  # a first entry is written at once
    assert checkpoint_of(log) == [(3, 2)]
    manager.shutdown()


def test_entries_past_the_log_end_or_before_its_start_are_cut_at_open(log_dir):
    log = Log(log_dir, CONFIG)
    fill_epochs(log)
    log.close()
    with open(os.path.join(log_dir, LEADER_EPOCH_CHECKPOINT_FILE), "w") as f:
        # What a crash can leave: an epoch written before its bytes were.
        f.write("0\n5\n0 0\n1 2\n2 6\n4 12\n7 18\n")
    log = Log(log_dir, CONFIG, log_start_offset=4)
    assert epochs(log) == [(1, 4), (2, 6), (4, 12)]
    assert checkpoint_of(log) == [(1, 4), (2, 6), (4, 12)]
    log.close()


# -- the high watermark -------------------------------------------------------------------------


def test_a_standalone_log_high_watermark_is_its_end(open_log):
    log = open_log(CONFIG)
    assert not log.replicated
    log.append(make_batch(3))
    assert log.high_watermark == log.log_end_offset == 3
    with log.read(0, 1000) as piece:
        assert piece.high_watermark == 3
    with pytest.raises(TrilogError):
        log.update_high_watermark(1)
    with pytest.raises(TrilogError):
        log.maybe_increment_high_watermark(1)
    log.truncate_to(0)
    assert log.high_watermark == 0


def test_a_replicated_log_high_watermark_is_set_and_clamped(open_log):
    log = open_log(CONFIG, replicated=True)
    assert log.replicated and log.high_watermark == 0
    fill_epochs(log)
    assert log.high_watermark == 0  # appends do not move it
    assert log.update_high_watermark(9) == 9
    assert log.update_high_watermark(100) == 18  # never past the log end
    assert log.update_high_watermark(4) == 4  # a follower's may move back
    assert log.maybe_increment_high_watermark(12)
    assert not log.maybe_increment_high_watermark(10)
    assert log.high_watermark == 12
    assert not log.maybe_increment_high_watermark(12)
    assert log.maybe_increment_high_watermark(50)
    assert log.high_watermark == 18
    log.truncate_to(9)
    assert log.high_watermark == 9  # truncation clamps it
    log.delete_records_before(6)
    assert log.update_high_watermark(2) == 6  # never below the log start


def test_a_high_watermark_given_at_open_is_clamped(log_dir):
    log = Log(log_dir, CONFIG)
    fill_epochs(log)
    log.close()
    for given, expected in ((None, 0), (7, 7), (18, 18), (99, 18), (-5, 0)):
        log = Log(log_dir, CONFIG, replicated=True, high_watermark=given)
        assert log.high_watermark == expected
        log.close()
    log = Log(log_dir, CONFIG, high_watermark=7)  # standalone: the log end
    assert log.high_watermark == 18
    log.close()


def read_offsets(log: Log, offset: int, max_bytes: int = 1 << 20,
                 max_offset: int | None = None) -> list[tuple[int, int]]:
    with log.read(offset, max_bytes, max_offset=max_offset) as piece:
        return [(b, last) for b, last, _pos in batches_in(piece.read())]


def test_reads_bounded_by_the_high_watermark(open_log):
    log = open_log(CONFIG, replicated=True)
    fill_epochs(log)  # batches 0-2, 3-5, ..., 15-17 over several segments
    assert len(log.segments) > 2
    log.update_high_watermark(9)
    hw = log.high_watermark
    consumer = []
    offset = 0
    while True:
        got = read_offsets(log, offset, max_offset=hw)
        if not got:
            break
        consumer += got
        offset = got[-1][1] + 1
    assert consumer == [(0, 2), (3, 5), (6, 8)]
    # Between the high watermark and the log end: nothing for a consumer, no error.
    for offset in (9, 10, 17):
        assert read_offsets(log, offset, max_offset=hw) == []
    with log.read(12, 1000, max_offset=hw) as piece:
        assert len(piece) == 0 and piece.high_watermark == 9 and piece.log_end_offset == 18
    # A follower reads to the log end.
    assert read_offsets(log, 9)[0] == (9, 11)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(19, 1000, max_offset=hw)


def test_a_bound_inside_a_batch_leaves_that_batch_out(open_log):
    log = open_log(CONFIG, replicated=True)
    fill_epochs(log)
    for bound, expected_last in ((7, 5), (8, 5), (6, 5), (3, 2), (1, None), (18, 17)):
        got = []
        offset = 0
        while True:
            part = read_offsets(log, offset, max_offset=bound)
            if not part:
                break
            got += part
            offset = part[-1][1] + 1
        assert (got[-1][1] if got else None) == expected_last, bound
        assert all(last < bound for _base, last in got)


def test_a_bounded_read_of_a_large_first_batch_is_still_bounded(open_log):
    log = open_log(LogConfig(segment_bytes=1 << 20), replicated=True)
    log.append(make_batch(5, value_size=500))
    log.append(make_batch(5, value_size=500))
    log.update_high_watermark(5)
    assert read_offsets(log, 0, max_bytes=10, max_offset=5) == [(0, 4)]
    assert read_offsets(log, 5, max_bytes=10, max_offset=5) == []
    assert read_offsets(log, 5, max_bytes=10) == [(5, 9)]


def test_retention_keeps_what_lies_above_the_high_watermark(open_log):
    config = LogConfig(segment_bytes=250, index_interval_bytes=64, retention_bytes=0)
    log = open_log(config, replicated=True)
    fill_epochs(log)
    assert [s.base_offset for s in log.segments] == [0, 6, 12]
    log.update_high_watermark(7)
    log.delete_old_segments()  # retention.bytes=0 would take all but the active one
    assert [s.base_offset for s in log.segments] == [6, 12]
    assert log.log_start_offset == 6
    log.update_high_watermark(18)
    log.delete_old_segments()
    assert [s.base_offset for s in log.segments] == [12]


def test_delete_records_stops_at_the_high_watermark(open_log):
    log = open_log(CONFIG, replicated=True)
    fill_epochs(log)
    log.update_high_watermark(9)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(10)
    assert log.delete_records_before(-1) == 9
    assert log.log_start_offset == 9


# -- divergence ----------------------------------------------------------------------------------


def replicate(source: Log, target: Log, max_bytes: int = 200) -> None:
    """A follower's fetch loop: read from the target's log end (no bound), append as is."""
    while target.log_end_offset < source.log_end_offset:
        with source.read(target.log_end_offset, max_bytes) as piece:
            data = piece.read()
        target.append(data, assign_offsets=False)
        target.update_high_watermark(min(source.high_watermark, target.log_end_offset))


def test_a_divergent_old_leader_truncates_to_the_new_leaders_epoch_end(tmp_path):
    """KIP-101's case: the old leader (epoch 1) has a tail no follower got; the follower
    becomes leader (epoch 2) and writes other records at those offsets; the old leader comes
    back, asks where its epoch 1 ends on the new leader, truncates there, and converges."""
    a = Log(tmp_path / "t-0-a", CONFIG, replicated=True)
    b = Log(tmp_path / "t-0-b", CONFIG, replicated=True)
    try:
        a.assign_epoch_start_offset(1)
        for i in range(3):
            a.append(make_batch(2, tag=i), leader_epoch=1)  # offsets 0..5
        replicate(a, b)
        a.maybe_increment_high_watermark(b.log_end_offset)
        a.append(make_batch(3, tag=10), leader_epoch=1)  # 6..8: only a has it
        a.append(make_batch(1, tag=11), leader_epoch=1)  # 9
        assert (a.log_end_offset, a.high_watermark, b.log_end_offset) == (10, 6, 6)

        # a dies; b leads in epoch 2 and takes writes at a's tail offsets.
        b.assign_epoch_start_offset(2)
        b.append(make_batch(1, tag=20), leader_epoch=2)  # 6
        b.append(make_batch(1, tag=21), leader_epoch=2)  # 7
        b.maybe_increment_high_watermark(b.log_end_offset)

        # a returns as a follower: OffsetForLeaderEpoch(its latest epoch) to b.
        asked = a.latest_epoch
        assert asked == 1
        epoch, end = b.end_offset_for_epoch(asked)
        assert (epoch, end) == (1, 6)
        a.truncate_to(min(end, a.log_end_offset))
        assert a.log_end_offset == 6
        assert epochs(a) == [(1, 0)]
        replicate(b, a)

        assert read_all(a) == read_all(b)
        assert epochs(a) == epochs(b) == [(1, 0), (2, 6)]
        assert (a.log_end_offset, a.high_watermark) == (8, 8)
        for segment_a, segment_b in zip(a.segments, b.segments):
            assert segment_a.base_offset == segment_b.base_offset
    finally:
        a.close()
        b.close()


def test_a_follower_asking_an_epoch_unknown_to_the_leader(tmp_path):
    """The follower's latest epoch is older than any the leader still has (the leader's
    log start moved past it): the answer is where the leader's history starts."""
    leader = Log(tmp_path / "t-0-a", CONFIG, replicated=True)
    try:
        for epoch in (3, 3, 5):
            leader.append(make_batch(2), leader_epoch=epoch)
        leader.update_high_watermark(6)
        leader.delete_records_before(4)
        assert epochs(leader) == [(5, 4)]
        assert leader.end_offset_for_epoch(1) == (1, 4)
    finally:
        leader.close()


# -- the log manager -------------------------------------------------------------------------------


@pytest.fixture
def managers(tmp_path):
    opened: list[LogManager] = []

    def factory(config=CONFIG, **kwargs) -> LogManager:
        manager = LogManager([tmp_path / "d1", tmp_path / "d2"], config, **kwargs)
        opened.append(manager)
        return manager

    yield factory
    for manager in opened:
        manager.shutdown()


def crash(manager: LogManager) -> None:
    """What SIGKILL leaves: descriptors gone, no checkpoint, no clean-shutdown marker."""
    for log in manager.logs():
        log._close_handles()
    manager._unlock_dirs()
    manager._closed = True


def test_high_watermarks_are_checkpointed_in_kafkas_file(managers, tmp_path):
    m = managers(replicated=True)
    a = m.get_or_create_log("t", 0)
    b = m.get_or_create_log("t", 1)
    assert a.replicated and b.replicated
    for log in (a, b):
        log.append(make_batch(3), leader_epoch=0)
    a.update_high_watermark(2)
    b.update_high_watermark(3)
    m.checkpoint_high_watermarks()
    texts = {}
    for d in ("d1", "d2"):
        with open(tmp_path / d / REPLICATION_OFFSET_CHECKPOINT_FILE) as f:
            texts[m.log_dir_of("t", 0) == str(tmp_path / d)] = f.read()
    assert texts == {True: "0\n1\nt 0 2\n", False: "0\n1\nt 1 3\n"}


def test_the_high_watermark_survives_a_restart(managers):
    m = managers(replicated=True)
    log = m.get_or_create_log("t", 0)
    fill_epochs(log)
    log.update_high_watermark(9)
    m.shutdown()  # checkpoints the high watermarks too
    m = managers(replicated=True)
    log = m.get_log("t", 0)
    assert (log.high_watermark, log.log_end_offset) == (9, 18)
    assert epochs(log) == [(1, 0), (2, 6), (4, 12)]
    with log.read(6, 1 << 20, max_offset=log.high_watermark) as piece:
        assert [b for b, _l, _p in batches_in(piece.read())] == [6]


def test_a_high_watermark_past_the_recovered_log_is_clamped(managers):
    m = managers(replicated=True)
    log = m.get_or_create_log("t", 0)
    fill_epochs(log)
    log.update_high_watermark(18)
    m.checkpoint_high_watermarks()
    m.checkpoint_recovery_points()
    path = log.active_segment.log_path
    crash(m)
    os.truncate(path, os.path.getsize(path) - 10)  # the last batch is torn
    m = managers(replicated=True)
    log = m.get_log("t", 0)
    assert log.log_end_offset == 15
    assert log.high_watermark == 15
    assert epochs(log) == [(1, 0), (2, 6), (4, 12)]


def test_a_log_without_a_checkpointed_high_watermark_starts_at_its_log_start(managers):
    m = managers(replicated=True)
    log = m.get_or_create_log("t", 0)
    fill_epochs(log)
    crash(m)
    m = managers(replicated=True)
    assert m.get_log("t", 0).high_watermark == 0


def test_a_standalone_manager_is_as_before(managers, tmp_path):
    m = managers()
    log = m.get_or_create_log("t", 0)
    log.append(make_batch(3))
    assert not log.replicated and log.high_watermark == 3
    m.shutdown()
    for d in ("d1", "d2"):
        assert not os.path.exists(tmp_path / d / REPLICATION_OFFSET_CHECKPOINT_FILE)
    m = managers()
    assert m.get_log("t", 0).high_watermark == 3


def test_truncation_through_the_manager_writes_the_checkpoints(managers, tmp_path):
    m = managers(replicated=True)
    log = m.get_or_create_log("t", 0)
    fill_epochs(log)
    log.flush()
    log.update_high_watermark(15)
    m.checkpoint_recovery_points()
    m.checkpoint_high_watermarks()
    m.truncate_to("t", 0, 9)
    d = m.log_dir_of("t", 0)
    assert OffsetCheckpoint(os.path.join(d, RECOVERY_POINT_CHECKPOINT_FILE)).read() == {
        ("t", 0): 9}
    assert OffsetCheckpoint(os.path.join(d, REPLICATION_OFFSET_CHECKPOINT_FILE)).read() == {
        ("t", 0): 9}
    log.delete_records_before(7)
    m.truncate_fully_and_start_at("t", 0, 30)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (30, 30, 30)
    assert OffsetCheckpoint(os.path.join(d, LOG_START_OFFSET_CHECKPOINT_FILE)).read() == {}
    with pytest.raises(UnknownTopicOrPartitionError):
        m.truncate_to("nope", 0, 0)
    crash(m)
    m = managers(replicated=True)
    log = m.get_log("t", 0)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (30, 30, 30)
    assert epochs(log) == []


def test_the_cleaner_stays_below_the_high_watermark(managers):
    compacted = LogConfig(segment_bytes=250, index_interval_bytes=64,
                          cleanup_policy=parse_cleanup_policy("compact"))
    m = managers(compacted, replicated=True)
    log = m.get_or_create_log("t", 0)
    for _ in range(6):
        log.append(make_batch(3), leader_epoch=1)  # the same three keys again and again
    assert [s.base_offset for s in log.segments] == [0, 6, 12]
    log.update_high_watermark(8)  # inside the second segment: only the first is cleanable
    result = m.cleaner.clean_log(log)
    assert result is not None and result.end_offset <= 6
    kept = {b.base_offset for b in on_disk(log)}
    assert {6, 9, 12, 15} <= kept  # nothing at or past the high watermark's segment
    log.update_high_watermark(18)
    result = m.cleaner.clean_log(log)
    assert result is not None and result.end_offset == 12
