"""The log cleaner and transactions: aborted records go, markers and the aborted-transaction
index stay, committed records are cleaned like any other, and nothing at or above the last
stable offset is touched."""

from __future__ import annotations

import os

import pytest
from storage_helpers import marker, now_ms, read_all

from trilog.records import RecordBatchBuilder, iter_batches
from trilog.storage import (
    AbortedTxn,
    AppendOrigin,
    Log,
    LogConfig,
    LogManager,
    parse_cleanup_policy,
)
from trilog.storage._cleaner_manager import LogCleanerManager

COMPACTED = LogConfig(segment_bytes=600, index_interval_bytes=100, retention_ms=-1,
                      cleanup_policy=parse_cleanup_policy("compact"))
COORDINATOR = AppendOrigin.COORDINATOR


class Producer:
    """A transactional producer's batches of keyed records."""

    def __init__(self, pid: int) -> None:
        self.pid, self.seq = pid, 0

    def send(self, log: Log, *pairs: tuple[bytes, bytes | None]) -> None:
        builder = RecordBatchBuilder(producer_id=self.pid, producer_epoch=0,
                                     base_sequence=self.seq, is_transactional=True)
        for key, value in pairs:
            builder.append(now_ms(), key, value)
        self.seq += len(pairs)
        log.append(builder.build())

    def end(self, log: Log, commit: bool) -> int:
        return log.append(marker(self.pid, commit), origin=COORDINATOR).first_offset


def plain(log: Log, key: bytes, value: bytes | None) -> None:
    builder = RecordBatchBuilder()
    builder.append(now_ms(), key, value)
    log.append(builder.build())


def committed_view(log: Log) -> dict[bytes, bytes | None]:
    """What a read_committed consumer ends up with: the latest value of each key, aborted
    transactions skipped (from the log's aborted-transaction list), markers skipped."""
    data = read_all(log)
    aborted = sorted(log.aborted_transactions(log.log_start_offset, log.log_end_offset),
                     key=lambda t: t.first_offset)
    skipping: set[int] = set()
    view: dict[bytes, bytes | None] = {}
    for batch in iter_batches(data):
        while aborted and aborted[0].first_offset <= batch.last_offset:
            skipping.add(aborted.pop(0).producer_id)
        if batch.is_control_batch:
            if not batch.end_txn_marker().is_commit:
                skipping.discard(batch.producer_id)
            continue
        if batch.is_transactional and batch.producer_id in skipping:
            continue
        for record in batch:
            view[record.key] = record.value
    return view


def batches_of(log: Log) -> list:
    return list(iter_batches(read_all(log)))


@pytest.fixture
def manager(tmp_path):
    managers: list[LogManager] = []

    def factory() -> LogManager:
        m = LogManager(tmp_path / "d", COMPACTED)
        managers.append(m)
        return m

    yield factory
    for m in managers:
        m.shutdown()


def test_aborted_records_go_markers_and_the_index_stay(manager):
    m = manager()
    log = m.get_or_create_log("t", 0)
    good, bad = Producer(1), Producer(2)
    good.send(log, (b"a", b"committed"))
    bad.send(log, (b"a", b"aborted"), (b"b", b"aborted"))  # later than a's committed one
    plain(log, b"b", b"plain")
    good.send(log, (b"c", b"1"))
    bad.send(log, (b"c", b"aborted"))
    commit_at = good.end(log, commit=True)
    abort_at = bad.end(log, commit=False)
    for i in range(12):
        plain(log, b"x%d" % (i % 3), b"%d" % i)
    assert len(log.segments) > 2
    before = committed_view(log)
    aborted = log.aborted_transactions(0, log.log_end_offset)
    assert aborted == [AbortedTxn(2, 1)]
    result = m.cleaner.clean_log(log)
    assert result is not None and result.complete
    assert result.stats.aborted_records_removed == 3
    # The aborted records never hid the committed ones, and are gone.
    assert committed_view(log) == before == {b"a": b"committed", b"b": b"plain", b"c": b"1",
                                             b"x0": b"9", b"x1": b"10", b"x2": b"11"}
    values = [r.value for b in batches_of(log) if not b.is_control_batch for r in b]
    assert b"aborted" not in values
    # Both markers are kept where they were, and so is the index entry of the abort.
    controls = [b.base_offset for b in batches_of(log) if b.is_control_batch]
    assert controls == [commit_at, abort_at]
    assert log.aborted_transactions(0, log.log_end_offset) == aborted
    holding = [s for s in log.segments if len(s.txn_index)]
    assert len(holding) == 1 and holding[0].txn_index.entries()[0].last_offset == abort_at


def test_nothing_at_or_above_the_last_stable_offset_is_cleaned(manager):
    m = manager()
    log = m.get_or_create_log("t", 0)
    for i in range(6):
        plain(log, b"k", b"early%d" % i)
    open_txn = Producer(3)
    open_txn.send(log, (b"t", b"pending"))
    first_unstable = log.last_stable_offset
    assert first_unstable == 6
    for i in range(20):
        plain(log, b"k", b"late%d" % i)
    holding = [s for s in log.segments if s.base_offset <= first_unstable][-1]
    untouched = [(b.base_offset, b.record_count) for b in batches_of(log)
                 if b.base_offset >= holding.base_offset]
    result = m.cleaner.clean_log(log)
    assert result is None or result.end_offset <= holding.base_offset
    assert [(b.base_offset, b.record_count) for b in batches_of(log)
            if b.base_offset >= holding.base_offset] == untouched
    # Once decided, it is cleaned like any other.
    open_txn.end(log, commit=True)
    plain(log, b"k", b"last")
    log.roll()
    result = m.cleaner.clean_log(log)
    assert result is not None and result.end_offset == log.active_segment.base_offset
    assert committed_view(log) == {b"k": b"last", b"t": b"pending"}
    assert [r.value for b in batches_of(log) for r in b if r.key == b"k"] == [b"last"]


class Crash(Exception):
    pass


@pytest.mark.parametrize("step", ["unlink", "rename", "publish"])
def test_a_crash_after_the_commit_point_keeps_the_index(manager, tmp_path, step):
    """The cleaned segment's .txnindex goes through the .cleaned and .swap names with it,
    and the start that finishes the swap finds it (the segment is below the recovery
    point: trusted, not rebuilt)."""
    m = manager()
    log = m.get_or_create_log("t", 0)
    bad = Producer(5)
    bad.send(log, (b"a", b"aborted"))
    bad.end(log, commit=False)
    for i in range(16):
        plain(log, b"k%d" % (i % 2), b"%d" % i)
    before = committed_view(log)
    log.flush()
    m.checkpoint_recovery_points()

    def crash(name: str) -> None:
        if name == step:
            raise Crash(step)

    assert LogCleanerManager(m, on_step=crash).clean_log(log) is None
    for lg in m.logs():
        lg._close_handles()
    m._unlock_dirs()
    m._closed = True
    m2 = LogManager(tmp_path / "d", COMPACTED)
    try:
        log = m2.get_log("t", 0)
        assert committed_view(log) == before
        assert log.aborted_transactions(0, log.log_end_offset) == [AbortedTxn(5, 0)]
        names = os.listdir(log.directory)
        assert not [n for n in names if n.endswith((".cleaned", ".swap"))]
        assert f"{log.segments[0].base_offset:020d}.txnindex" in names
    finally:
        m2.shutdown()


def test_a_producers_last_data_batch_stays_through_its_marker(manager, tmp_path):
    """The batch holding a transactional producer's last sequence number stays (emptied),
    even though its marker follows it: a log replayed from its start still knows the
    sequence the producer goes on from."""
    m = manager()
    log = m.get_or_create_log("t", 0)
    producer = Producer(6)
    producer.send(log, (b"k", b"1"), (b"k", b"2"))
    producer.end(log, commit=True)
    for i in range(12):
        plain(log, b"k", b"%d" % i)  # supersedes the producer's records
    result = m.cleaner.clean_log(log)
    assert result is not None and result.complete
    kept = [(b.producer_id, b.record_count, b.is_control_batch) for b in batches_of(log)
            if b.producer_id == 6]
    assert kept == [(6, 0, False), (6, 1, True)]
    m.shutdown()
    for name in os.listdir(log.directory):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(log.directory, name))
    again = Log(log.directory, COMPACTED, needs_recovery=False)
    try:
        assert again._producer_load.snapshot_offset is None  # replayed from the start
        (state,) = [p for p in again.producers() if p.producer_id == 6]
        assert state.last_sequence == 1
        producer.send(again, (b"k", b"3"))  # sequence 2 follows
    finally:
        again.close()
