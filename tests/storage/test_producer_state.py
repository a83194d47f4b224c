"""Idempotent producers under the log: the state as a pure object (batches in, decisions
out), and the log that checks and records it on every append."""

import pytest

from trilog.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError
from trilog.records import RecordBatchBuilder, build_end_txn_marker
from trilog.storage import AppendOrigin, Log, LogConfig
from trilog.storage._append import check_batches, producer_batches
from trilog.storage._producer_state import ProducerStateManager


def batch(pid=7, epoch=0, seq=0, n=3):
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    for i in range(n):
        b.append(1000 + i, None, b"v%d" % i)
    return b.build()


def built() -> ProducerStateManager:
    """A partition's state, built (from an empty log)."""
    state = ProducerStateManager(load=lambda: ())
    state.check(batch(seq=0))  # the first check builds it
    return state


def test_in_order_batches_append_and_a_resent_one_is_a_duplicate():
    table = built()
    first = batch(seq=0)
    assert table.check(first) is None
    table.record(first, 100)
    second = batch(seq=3)
    assert table.check(second) is None
    table.record(second, 103)
    # The client resends the first batch after a lost acknowledgement.
    assert table.check(first) == 100
    assert table.check(second) == 103


def test_gap_is_out_of_order_and_old_epoch_is_fenced():
    table = built()
    table.record(batch(epoch=1, seq=0), 0)
    with pytest.raises(OutOfOrderSequenceNumberError):
        table.check(batch(epoch=1, seq=5))
    with pytest.raises(InvalidProducerEpochError):
        table.check(batch(epoch=0, seq=3))
    assert table.check(batch(epoch=2, seq=0)) is None  # a new epoch starts afresh


def test_non_idempotent_batches_and_other_partitions_are_unchecked():
    table = built()
    plain = batch(pid=-1, seq=-1)
    table.record(plain, 0)
    assert table.check(plain) is None
    table.record(batch(seq=0), 0)
    other_partition = built()
    assert other_partition.check(batch(seq=9)) is None
    table.clear()  # (a truncated log: built again from what is left, here nothing)
    table = ProducerStateManager()
    assert table.check(batch(seq=9)) is None


def test_a_partition_is_rebuilt_from_its_stored_batch_headers(tmp_path):
    """After a restart, the headers in the log say what each producer sent last."""
    log = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=300))  # several segments
    for seq in range(0, 30, 3):
        log.append(batch(seq=seq))
    log.append(batch(pid=-1, seq=-1))  # a non-idempotent producer in between
    loads = []

    def load():
        loads.append(1)
        return log.batch_headers()

    table = ProducerStateManager(load=load)
    last = batch(seq=27)
    assert table.check(last) == 27  # a resend of the last batch: its original offset
    assert table.check(batch(seq=30)) is None  # the next one is new
    with pytest.raises(OutOfOrderSequenceNumberError):
        table.check(batch(seq=33))
    assert loads == [1]  # rebuilt once, when the partition was first checked
    log.close()


def test_recording_before_the_state_is_built_costs_nothing_and_loses_nothing():
    """Appends before the first check (a follower's, say) are not recorded: the first check
    builds the state from the log, which holds them."""
    stored = []
    table = ProducerStateManager(load=lambda: iter(stored))
    first = batch(seq=0)
    table.record(first, 0)
    assert not table.loaded
    from trilog.records import read_batch_header
    stored.append(read_batch_header(first))
    assert table.check(batch(seq=0)) == 0  # the log's batch, now seen
    assert table.loaded


# -- under the log ------------------------------------------------------------------------------


def test_the_log_answers_a_resent_batch_with_its_first_offset_and_appends_nothing(tmp_path):
    log = Log(str(tmp_path / "t-0"))
    first = log.append(batch(seq=0))
    assert not first.duplicate and first.first_offset == 0
    log.append(batch(seq=3))
    again = log.append(batch(seq=0))
    assert again.duplicate and again.first_offset == 0 and again.record_count == 0
    assert log.log_end_offset == 6
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(batch(seq=9))
    assert log.log_end_offset == 6
    log.close()


def test_a_followers_appends_are_remembered_when_it_leads(tmp_path):
    """Batches a follower copied (offsets kept, never checked) are its producers' state once
    it leads: a resend of the last one is a duplicate."""
    leader = Log(str(tmp_path / "leader" / "t-0"))
    follower = Log(str(tmp_path / "follower" / "t-0"))
    for seq in (0, 3):
        info = leader.append(batch(seq=seq))
        with leader.read(info.first_offset, 1 << 20) as slc:
            follower.append(slc.read(), assign_offsets=False)
    assert follower.append(batch(seq=3)).duplicate  # built from the copied batches
    follower.append(batch(seq=6))
    assert follower.append(batch(seq=6)).duplicate  # and kept current since
    leader.close()
    follower.close()


def test_truncation_forgets_what_was_cut(tmp_path):
    log = Log(str(tmp_path / "t-0"))
    log.append(batch(seq=0))
    log.append(batch(seq=3))
    assert log.append(batch(seq=3)).duplicate
    log.truncate_to(3)  # the second batch is gone
    assert not log.append(batch(seq=3)).duplicate  # so it is appended again
    assert log.log_end_offset == 6
    log.close()


# -- transactions, as a pure object -------------------------------------------------------------


def txn(pid=7, epoch=0, seq=0, n=2):
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                           is_transactional=True)
    for i in range(n):
        b.append(1000 + i, None, b"v%d" % i)
    return b.build()


def end(pid=7, commit=True, epoch=0, coordinator_epoch=0):
    return build_end_txn_marker(producer_id=pid, producer_epoch=epoch,
                                coordinator_epoch=coordinator_epoch, commit=commit,
                                timestamp_ms=2000)


def test_batches_of_one_append_are_checked_in_order():
    """Several batches of one producer in one append: each follows the one before it."""
    table = built()
    assert table.check(batch(seq=0) + batch(seq=3) + batch(seq=6)) is None
    with pytest.raises(OutOfOrderSequenceNumberError):
        table.check(batch(seq=0) + batch(seq=4))
    table.record(batch(seq=0) + batch(seq=3), 0)
    assert table.entry(7).last_sequence == 5
    # A new epoch then its continuation, in one append.
    assert table.check(batch(epoch=1, seq=0) + batch(epoch=1, seq=3)) is None


def replicated(data: bytes):
    """The producer batches of an append that keeps its offsets (all 0 here)."""
    mv = memoryview(data)
    return producer_batches(mv, check_batches(mv, 1 << 20, False, True), False,
                            AppendOrigin.REPLICATION)


def test_a_transaction_opens_closes_and_is_indexed_when_aborted():
    table = built()
    table.record(txn(pid=1), 10)
    table.record(txn(pid=2), 12)
    assert table.first_unstable_offset == 10
    assert table.ongoing_transactions() == [(10, 1), (12, 2)]
    # Producer 1 aborts at 14: the last stable offset of the moment is 2's first offset.
    abort = replicated(end(pid=1, commit=False))
    assert table.check_batches(abort, AppendOrigin.COORDINATOR) is None
    assert table.apply(abort, 14, None) == [(1, 10, 14, 12)]
    assert table.first_unstable_offset == 12
    # A replicated log: 2's commit at 15 is not yet below the high watermark of 15.
    assert table.apply(replicated(end(pid=2, commit=True)), 15, 15) == []
    assert table.first_unstable_offset == 12
    table.on_high_watermark(16)
    assert table.first_unstable_offset is None


def test_a_snapshot_round_trip_keeps_transactions_and_the_last_batch():
    table = built()
    table.record(batch(pid=3, seq=0), 0)
    table.record(batch(pid=3, seq=3), 3)
    table.record(txn(pid=4), 6)
    entries = list(table.snapshot_entries())
    other = ProducerStateManager(load=lambda: ())
    other.load_snapshot(entries, now_ms=2000, expiration_ms=10_000)
    assert other.ongoing_transactions() == [(6, 4)] and other.first_unstable_offset == 6
    assert other.check(batch(pid=3, seq=3)) == 3  # the last batch is known
    assert other.check(batch(pid=3, seq=6)) is None
    # Expired producers are left out, unless a transaction of theirs is open.
    other.load_snapshot(entries, now_ms=1_000_000, expiration_ms=10_000)
    assert [e.producer_id for e in other.entries()] == [4]
