"""Producer state across restarts: snapshots at each roll and at a clean close, an opening
that replays only what follows the newest usable one, recovery rebuilding the
aborted-transaction indexes, and a model of transactions checked before and after."""

from __future__ import annotations

import logging
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storage_helpers import marker, producer_batch, txn_batch

import trilog.storage._producer_load as producer_load
from trilog.storage import AbortedTxn, AppendOrigin, Log, LogConfig
from trilog.storage._producer_snapshot import ENTRY, decode, encode

CONFIG = LogConfig(segment_bytes=500, index_interval_bytes=100)
COORDINATOR = AppendOrigin.COORDINATOR


def snapshot_names(directory) -> list[int]:
    return sorted(int(n[:20]) for n in os.listdir(directory) if n.endswith(".snapshot"))


def state_of(log: Log):
    """Everything the producer state decides, as plain data."""
    return (log.last_stable_offset, log.ongoing_transactions(),
            sorted(log.producers()),
            [s.txn_index.entries() for s in log.segments],
            log.aborted_transactions(log.log_start_offset, log.log_end_offset))


def busy_log(directory, config=CONFIG) -> Log:
    """A log of several segments with two open transactions, an aborted and a committed
    one, an idempotent and a plain producer."""
    log = Log(directory, config)
    log.append(txn_batch(1, 0, 3))
    log.append(producer_batch(7, 0, 2))
    log.append(txn_batch(2, 0, 3))
    log.append(marker(1, commit=False), origin=COORDINATOR)
    for i in range(6):
        log.append(producer_batch(-1, -1, 3, tag=i))
        log.append(producer_batch(7, 2 + 2 * i, 2))
    log.append(marker(2, commit=True), origin=COORDINATOR)
    log.append(txn_batch(3, 0, 2))
    log.append(txn_batch(1, 3, 2))
    assert len(log.segments) >= 4
    return log


def test_the_snapshot_format_is_kafkas():
    entry = (4001, 2, 17, 300, 4, 1_700_000_000_000, 5, 290)
    data = encode([entry])
    # version 1 | crc | count | producerId epoch lastSequence lastOffset offsetDelta
    # timestamp coordinatorEpoch currentTxnFirstOffset
    assert data[:2] == b"\x00\x01" and data[6:10] == b"\x00\x00\x00\x01"
    assert data[10:] == ENTRY.pack(*entry) and len(data) == 10 + 46
    assert decode(data) == [entry]


def test_snapshots_at_each_roll_and_at_close(log_dir):
    log = busy_log(log_dir)
    bases = [s.base_offset for s in log.segments]
    # One at each roll (the new segment's base), the newest three kept.
    assert snapshot_names(log_dir) == bases[1:][-3:]
    end = log.log_end_offset
    before = state_of(log)
    log.close()
    assert snapshot_names(log_dir)[-1] == end
    again = Log(log_dir, CONFIG, needs_recovery=False)
    try:
        assert again._producer_load == (end, end, 0, 0)  # nothing replayed
        assert state_of(again) == before
    finally:
        again.close()


def test_a_crash_replays_only_the_segments_since_the_last_roll(log_dir, monkeypatch):
    log = busy_log(log_dir)
    before = state_of(log)
    active = log.segments[-1]
    log._close_handles()  # a crash: no snapshot at the log end
    walked = []
    real_walk = producer_load.walk_batches

    def walk(fd, start, end, **kwargs):
        walked.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_walk(fd, start, end, **kwargs)

    monkeypatch.setattr(producer_load, "walk_batches", walk)
    # Recovery from the active segment on (its recovery point); the older segments are
    # neither re-validated nor replayed.
    again = Log(log_dir, CONFIG, recovery_point=active.base_offset)
    try:
        assert walked == [active.log_path]
        assert again._producer_load.snapshot_offset == active.base_offset
        assert again._producer_load.segments_replayed == 1
        assert state_of(again) == before
    finally:
        again.close()


def test_a_crash_that_lost_the_tail_and_the_indexes(log_dir):
    """Recovery cuts a torn batch; the .txnindex files are gone: both are rebuilt, and the
    state is what it was before the lost batch."""
    log = busy_log(log_dir)
    before = state_of(log)
    info = log.append(marker(1, commit=False), origin=COORDINATOR)  # lost below
    assert state_of(log) != before
    path = log.segments[-1].log_path
    log._close_handles()
    os.truncate(path, os.path.getsize(path) - 10)
    for name in os.listdir(log_dir):
        if name.endswith(".txnindex"):
            os.unlink(os.path.join(log_dir, name))
    again = Log(log_dir, CONFIG, recovery_point=0)
    try:
        assert again.log_end_offset == info.first_offset
        assert state_of(again) == before
        assert again.aborted_transactions(0, 99) == [AbortedTxn(1, 0)]
    finally:
        again.close()


def test_a_corrupt_snapshot_is_ignored(log_dir, caplog):
    log = busy_log(log_dir)
    before = state_of(log)
    end = log.log_end_offset
    log.close()
    newest = os.path.join(log_dir, f"{end:020d}.snapshot")
    with open(newest, "r+b") as f:
        f.seek(12)
        f.write(b"\xff")
    with caplog.at_level(logging.WARNING, logger="trilog.storage"):
        again = Log(log_dir, CONFIG, needs_recovery=False)
    try:
        assert "ignoring producer snapshot" in caplog.text
        assert not os.path.exists(newest)
        assert again._producer_load.snapshot_offset < end  # an older one, and a replay
        assert again._producer_load.batches_replayed > 0
        assert state_of(again) == before
    finally:
        again.close()


def test_without_any_snapshot_the_whole_log_is_replayed(log_dir):
    log = busy_log(log_dir)
    before = state_of(log)
    log.close()
    for offset in snapshot_names(log_dir):
        os.unlink(os.path.join(log_dir, f"{offset:020d}.snapshot"))
    again = Log(log_dir, CONFIG, needs_recovery=False)
    try:
        assert again._producer_load.snapshot_offset is None
        assert again._producer_load.segments_replayed == len(again.segments)
        assert state_of(again) == before
    finally:
        again.close()


def test_snapshots_above_a_truncation_go(log_dir):
    log = busy_log(log_dir)
    cut = log.segments[-2].base_offset + 1
    log.truncate_to(cut)
    try:
        assert all(o <= log.log_end_offset for o in snapshot_names(log_dir))
    finally:
        log.close()
    again = Log(log_dir, CONFIG, needs_recovery=False)
    try:
        assert again._producer_load.batches_replayed == 0
    finally:
        again.close()


# -- a model ----------------------------------------------------------------------------------

#: (producer, action): "d" data in its transaction (opening one if none is), "c" commit,
#: "a" abort, "p" a plain batch, "r" a roll.
steps = st.lists(st.tuples(st.integers(1, 3), st.sampled_from("dddcapr")), max_size=40)


class Model:
    def __init__(self) -> None:
        self.open: dict[int, int] = {}  # producer -> first offset
        self.aborted: list[tuple[int, int, int]] = []  # producer, first, marker offset
        self.seq: dict[int, int] = {}

    def apply(self, log: Log, pid: int, action: str) -> None:
        if action == "r":
            log.roll()
        elif action == "p":
            log.append(producer_batch(-1, -1))
        elif action == "d":
            info = log.append(txn_batch(pid, self.seq.get(pid, 0), 2))
            self.seq[pid] = self.seq.get(pid, 0) + 2
            self.open.setdefault(pid, info.first_offset)
        elif pid in self.open:
            info = log.append(marker(pid, commit=action == "c"), origin=COORDINATOR)
            first = self.open.pop(pid)
            if action == "a":
                self.aborted.append((pid, first, info.first_offset))

    def check(self, log: Log) -> None:
        end = log.log_end_offset
        assert log.last_stable_offset == min(self.open.values(), default=end)
        assert log.ongoing_transactions() == sorted((f, p) for p, f in self.open.items())
        for start in range(0, end + 1, 4):
            for stop in (start + 1, start + 7, end + 1):
                assert log.aborted_transactions(start, stop) == [
                    AbortedTxn(p, f) for p, f, m in self.aborted if m >= start and f < stop]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(steps=steps, crash=st.booleans(), data=st.data())
def test_transactions_against_a_model(tmp_path_factory, steps, crash, data):
    directory = str(tmp_path_factory.mktemp("model") / "t-0")
    config = LogConfig(segment_bytes=400, index_interval_bytes=64)
    model = Model()
    log = Log(directory, config)
    try:
        for pid, action in steps:
            model.apply(log, pid, action)
        model.check(log)
        bases = [s.base_offset for s in log.segments]
    finally:
        if crash:
            log._close_handles()
        else:
            log.close()
    recovery_point = data.draw(st.sampled_from(bases)) if crash else 0
    again = Log(directory, config, recovery_point=recovery_point, needs_recovery=crash)
    try:
        model.check(again)
        model.apply(again, 1, "d")  # and it goes on
        model.apply(again, 1, "a")
        model.check(again)
    finally:
        again.close()
