"""Transactions in the log: the last stable offset, the aborted-transaction index, who may
append what, and the state surviving truncation, a crash and a clean restart."""

from __future__ import annotations

import os

import pytest
from storage_helpers import marker, now_ms, producer_batch, txn_batch, with_header

from trilog.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)
from trilog.records import iter_batches
from trilog.storage import AbortedTxn, AppendOrigin, Log, LogConfig

COORDINATOR = AppendOrigin.COORDINATOR
#: Small segments: every few batches roll.
SMALL = LogConfig(segment_bytes=400, index_interval_bytes=100)


def end_txn(log: Log, pid: int, commit: bool, **kwargs) -> int:
    """The coordinator's marker for ``pid``; its offset."""
    return log.append(marker(pid, commit, **kwargs), origin=COORDINATOR).first_offset


def test_begin_commit_and_abort_move_the_last_stable_offset(open_log):
    log = open_log()
    log.append(producer_batch(-1, -1))  # a plain producer: 0, 1
    assert log.last_stable_offset == log.log_end_offset == 2
    assert log.append(txn_batch(1, 0)).first_offset == 2  # producer 1 begins at 2
    assert log.last_stable_offset == 2
    log.append(txn_batch(2, 0))  # producer 2 begins at 4
    log.append(producer_batch(-1, -1))  # 6, 7: the LSO stays at the oldest open one
    assert (log.last_stable_offset, log.log_end_offset) == (2, 8)
    assert end_txn(log, 1, commit=True) == 8
    assert log.last_stable_offset == 4  # producer 2's is the oldest open now
    assert end_txn(log, 2, commit=False) == 9
    assert log.last_stable_offset == log.log_end_offset == 10
    assert log.aborted_transactions(0, 10) == [AbortedTxn(2, 4)]
    assert log.ongoing_transactions() == []
    # A read_committed fetch reads up to the last stable offset; the slice says it too.
    log.append(txn_batch(1, 2))
    with log.read(0, 1 << 20, max_offset=log.last_stable_offset) as piece:
        assert piece.last_stable_offset == 10 and piece.high_watermark == 12
        assert max(b.last_offset for b in iter_batches(piece.read())) == 9


def test_a_transaction_continues_over_appends_and_segments(open_log):
    log = open_log(SMALL)
    seq = 0
    for _ in range(10):
        log.append(txn_batch(5, seq, 3))
        seq += 3
    assert len(log.segments) > 2
    assert log.last_stable_offset == 0
    assert log.ongoing_transactions() == [(0, 5)]
    end_txn(log, 5, commit=False)
    assert log.last_stable_offset == log.log_end_offset
    # The entry is in the segment holding the marker, and found from any segment before.
    assert len(log.segments[-1].txn_index) == 1
    assert all(len(s.txn_index) == 0 for s in log.segments[:-1])
    for start in (0, 7, 29):
        assert log.aborted_transactions(start, 31) == [AbortedTxn(5, 0)]
    assert log.aborted_transactions(31, 40) == []


def test_aborted_transactions_over_many_segments(open_log):
    """Interleaved transactions, some aborted, across segments: each fetch range gets
    exactly the aborted transactions that overlap it."""
    log = open_log(SMALL)
    seqs: dict[int, int] = {}
    ranges: dict[int, list[int]] = {}  # pid -> [first, last] of its open transaction
    aborted: list[tuple[int, int, int]] = []  # (pid, first, marker offset)
    plan = [(1, "d"), (2, "d"), (1, "d"), (3, "d"), (2, "a"), (1, "d"), (3, "c"), (1, "a"),
            (2, "d"), (4, "d"), (2, "a"), (4, "a"), (1, "d"), (1, "c")]
    for pid, step in plan:
        if step == "d":
            info = log.append(txn_batch(pid, seqs.get(pid, 0), 4))
            seqs[pid] = seqs.get(pid, 0) + 4
            ranges.setdefault(pid, [info.first_offset, info.last_offset])[1] = info.last_offset
        else:
            offset = end_txn(log, pid, commit=step == "c")
            first, _last = ranges.pop(pid)
            if step == "a":
                aborted.append((pid, first, offset))
    assert len(log.segments) > 3
    end = log.log_end_offset
    for start in range(0, end, 3):
        for stop in range(start + 1, end + 1, 5):
            expected = [AbortedTxn(p, f) for p, f, m in aborted if m >= start and f < stop]
            assert log.aborted_transactions(start, stop) == expected, (start, stop)


def test_a_client_may_not_write_control_batches(open_log):
    log = open_log()
    with pytest.raises(InvalidRecordError, match="control records"):
        log.append(marker(1, commit=True))
    with pytest.raises(InvalidRecordError, match="sequence"):
        log.append(producer_batch(1, -1))  # a producer id without a sequence number
    assert log.log_end_offset == 0
    # The coordinator may, and a follower copies anything valid.
    assert end_txn(log, 1, commit=True) == 0
    follower = Log(str(os.path.join(log.directory, "..", "f-0")))
    try:
        with log.read(0, 1 << 20) as piece:
            follower.append(piece.read(), assign_offsets=False)
        assert follower.log_end_offset == 1
    finally:
        follower.close()
    with pytest.raises(ValueError, match="REPLICATION"):
        log.append(producer_batch(1, 0), origin=AppendOrigin.REPLICATION)


def test_fencing(open_log):
    log = open_log()
    log.append(txn_batch(1, 0, epoch=3))
    end_txn(log, 1, commit=True, epoch=3, coordinator_epoch=7)
    log.append(txn_batch(1, 2, epoch=3))
    # A marker of an older coordinator, or of an older producer epoch: refused.
    with pytest.raises(TransactionCoordinatorFencedError):
        end_txn(log, 1, commit=False, epoch=3, coordinator_epoch=6)
    with pytest.raises(InvalidProducerEpochError):
        end_txn(log, 1, commit=False, epoch=2, coordinator_epoch=7)
    with pytest.raises(InvalidProducerEpochError):
        log.append(txn_batch(1, 4, epoch=2))
    # A non-transactional batch while its transaction is open.
    with pytest.raises(InvalidTxnStateError):
        log.append(producer_batch(1, 4, epoch=3))
    assert log.ongoing_transactions() == [(3, 1)]
    # The coordinator bumps the epoch and aborts the old transaction with the new epoch
    # (InitProducerId), and a newer coordinator may end it too.
    end_txn(log, 1, commit=False, epoch=4, coordinator_epoch=8)
    assert log.ongoing_transactions() == [] and log.aborted_transactions(0, 99)
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(producer_batch(1, 4, epoch=4))  # a new epoch starts at 0
    log.append(producer_batch(1, 0, epoch=4))
    (state,) = log.producers()
    assert (state.producer_epoch, state.coordinator_epoch, state.last_sequence) == (4, 8, 1)


def test_the_coordinators_transactional_offset_commits(open_log):
    """The group coordinator writes TxnOffsetCommit as transactional batches with the
    producer's id and epoch and sequence 0 each time: no sequence check, but they open and
    close the transaction like any transactional batch."""
    log = open_log()
    for _ in range(3):
        log.append(txn_batch(9, 0, 1, epoch=1), origin=COORDINATOR)
    assert log.last_stable_offset == 0
    with pytest.raises(InvalidProducerEpochError):  # a zombie producer's commit
        log.append(txn_batch(9, 0, 1, epoch=0), origin=COORDINATOR)
    end_txn(log, 9, commit=True, epoch=1)
    assert log.last_stable_offset == log.log_end_offset == 4


def test_a_resent_transactional_batch_is_a_duplicate(open_log):
    log = open_log()
    first = txn_batch(1, 0)
    log.append(first)
    log.append(txn_batch(1, 2))
    again = log.append(first)
    assert again.duplicate and again.first_offset == 0
    assert log.log_end_offset == 4 and log.ongoing_transactions() == [(0, 1)]


def test_an_emptied_control_batch_is_ignored(open_log):
    """The cleaner's empty control batch (no records), which a follower copies from its
    leader, neither ends nor fences anything."""
    log = open_log()
    log.append(txn_batch(1, 0))
    bare = marker(1, commit=False, coordinator_epoch=-5)
    empty = with_header(bare[:61], base_offset=2, batch_length=49, record_count=0)
    log.append(empty, assign_offsets=False)
    assert log.ongoing_transactions() == [(0, 1)] and log.log_end_offset == 3


# -- replication ------------------------------------------------------------------------------


def test_a_marker_above_the_high_watermark_keeps_its_transaction_unstable(open_log):
    log = open_log(replicated=True)
    log.append(txn_batch(1, 0))  # 0, 1
    log.append(producer_batch(-1, -1))  # 2, 3
    log.maybe_increment_high_watermark(4)
    assert log.last_stable_offset == 0
    end_txn(log, 1, commit=True)  # at 4, above the high watermark
    assert log.last_stable_offset == 0  # decided, but the marker is not replicated yet
    log.maybe_increment_high_watermark(4)
    assert log.last_stable_offset == 0
    log.maybe_increment_high_watermark(5)  # now the marker is below it
    assert log.last_stable_offset == 5
    log.append(producer_batch(-1, -1))
    assert log.last_stable_offset == 5  # the high watermark bounds it
    log.maybe_increment_high_watermark(7)
    assert log.last_stable_offset == 7


def test_after_a_crash_a_replayed_marker_above_the_high_watermark_is_still_unstable(log_dir):
    log = Log(log_dir, replicated=True)
    log.append(txn_batch(1, 0))
    log.append(producer_batch(-1, -1))
    log.maybe_increment_high_watermark(4)
    end_txn(log, 1, commit=False)  # at 4: not yet replicated
    log._close_handles()
    again = Log(log_dir, replicated=True, high_watermark=4, recovery_point=0)
    try:
        assert (again.high_watermark, again.last_stable_offset) == (4, 0)
        again.maybe_increment_high_watermark(5)
        assert again.last_stable_offset == 5
    finally:
        again.close()


def test_a_followers_markers_are_recorded(tmp_path):
    """A follower copies the leader's batches, markers included: the same transactions,
    the same index, the same last stable offset, and it can lead from there."""
    leader = Log(str(tmp_path / "leader" / "t-0"), SMALL)
    follower = Log(str(tmp_path / "follower" / "t-0"), SMALL, replicated=True)
    try:
        steps = [txn_batch(1, 0), txn_batch(2, 0), marker(1, False), txn_batch(2, 2),
                 producer_batch(-1, -1), marker(2, True), txn_batch(1, 2), txn_batch(3, 0),
                 marker(3, False)]
        for step in steps:
            origin = COORDINATOR if step[22] & 0x20 else AppendOrigin.CLIENT
            info = leader.append(step, origin=origin)
            with leader.read(info.first_offset, 1 << 20) as piece:
                follower.append(piece.read(), assign_offsets=False)
        assert follower.log_end_offset == leader.log_end_offset
        follower.update_high_watermark(follower.log_end_offset)
        assert follower.last_stable_offset == leader.last_stable_offset == 10
        assert follower.ongoing_transactions() == leader.ongoing_transactions() == [(10, 1)]
        assert follower.aborted_transactions(0, 99) == leader.aborted_transactions(0, 99)
        assert [s.txn_index.entries() for s in follower.segments] == [
            s.txn_index.entries() for s in leader.segments]
        # Leading now, it fences and ends transactions as the leader would.
        with pytest.raises(InvalidTxnStateError):
            follower.append(producer_batch(1, 4))
        assert end_txn(follower, 1, commit=True) == follower.log_end_offset - 1
    finally:
        leader.close()
        follower.close()


# -- truncation, retention ----------------------------------------------------------------


def test_truncation_below_a_marker_reopens_the_transaction(open_log):
    log = open_log(SMALL)
    log.append(txn_batch(1, 0))
    for i in range(8):
        log.append(producer_batch(-1, -1, tag=i))
    abort_at = end_txn(log, 1, commit=False)
    assert log.aborted_transactions(0, 99) == [AbortedTxn(1, 0)]
    log.append(txn_batch(2, 0))
    log.close()
    log = open_log(SMALL, needs_recovery=False)  # a snapshot at the log end
    assert log.last_stable_offset == abort_at + 1
    log.truncate_to(abort_at)
    assert log.last_stable_offset == 0
    assert log.ongoing_transactions() == [(0, 1)]
    assert log.aborted_transactions(0, 99) == []
    names = sorted(os.listdir(log.directory))
    assert not [n for n in names if n.endswith(".snapshot") and int(n[:20]) > abort_at]
    # The transaction can end again, differently.
    end_txn(log, 1, commit=True)
    assert log.last_stable_offset == log.log_end_offset
    assert log.aborted_transactions(0, 99) == []


def test_retention_keeps_the_newest_snapshot_and_the_stable_offset_follows_the_start(tmp_path):
    config = SMALL.replace(retention_bytes=700)
    log = Log(str(tmp_path / "t-0"), config)
    try:
        log.append(txn_batch(1, 0))
        for i in range(12):
            log.append(producer_batch(-1, -1, tag=i))
        assert log.last_stable_offset == 0
        log.delete_old_segments()
        assert log.log_start_offset > 0
        # The open transaction's first records are gone: the LSO is the log start offset.
        assert log.last_stable_offset == log.log_start_offset
        snapshots = [int(n[:20]) for n in os.listdir(log.directory) if n.endswith(".snapshot")]
        assert snapshots and all(o >= log.log_start_offset for o in snapshots[:-1])
        assert len(snapshots) <= 3
    finally:
        log.close()


def test_producers_expire_unless_a_transaction_is_open(open_log):
    log = open_log(LogConfig(producer_id_expiration_ms=1000))
    t = now_ms()
    log.append(producer_batch(1, 0, timestamp=t - 5000))
    log.append(txn_batch(2, 0, timestamp=t - 5000))
    log.append(producer_batch(3, 0, timestamp=t))
    assert log.remove_expired_producers(t) == 1
    assert sorted(p.producer_id for p in log.producers()) == [2, 3]
    with pytest.raises(ValueError):
        LogConfig(producer_id_expiration_ms=0)


def test_the_manager_expires_producers_of_every_log(tmp_path):
    from trilog.storage import LogManager

    manager = LogManager(tmp_path / "d", LogConfig(producer_id_expiration_ms=1000))
    try:
        t = now_ms()
        for p in range(3):
            manager.get_or_create_log("t", p).append(producer_batch(p + 1, 0, timestamp=t - 5000))
        manager.get_or_create_log("t", 0).append(txn_batch(9, 0, timestamp=t - 5000))
        assert manager.remove_expired_producers(t) == 3
        assert [p.producer_id for p in manager.get_log("t", 0).producers()] == [9]
    finally:
        manager.shutdown()
