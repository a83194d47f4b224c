"""Idempotent producers under the log: the state as a pure object (batches in, decisions
out), and the log that checks and records it on every append."""

import pytest

from trilog.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError
from trilog.records import RecordBatchBuilder
from trilog.storage import Log, LogConfig
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
