"""The idempotent-producer table, as a pure object: batches in, decisions out."""

import pytest

from trilog.broker._producer_state import ProducerStateTable
from trilog.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError
from trilog.records import RecordBatchBuilder

TP = ("t", 0)


def batch(pid=7, epoch=0, seq=0, n=3):
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    for i in range(n):
        b.append(1000 + i, None, b"v%d" % i)
    return b.build()


def test_in_order_batches_append_and_a_resent_one_is_a_duplicate():
    table = ProducerStateTable()
    first = batch(seq=0)
    assert table.check(TP, first) is None
    table.record(TP, first, 100)
    second = batch(seq=3)
    assert table.check(TP, second) is None
    table.record(TP, second, 103)
    # The client resends the first batch after a lost acknowledgement.
    assert table.check(TP, first) == 100
    assert table.check(TP, second) == 103


def test_gap_is_out_of_order_and_old_epoch_is_fenced():
    table = ProducerStateTable()
    table.record(TP, batch(epoch=1, seq=0), 0)
    with pytest.raises(OutOfOrderSequenceNumberError):
        table.check(TP, batch(epoch=1, seq=5))
    with pytest.raises(InvalidProducerEpochError):
        table.check(TP, batch(epoch=0, seq=3))
    assert table.check(TP, batch(epoch=2, seq=0)) is None  # a new epoch starts afresh


def test_non_idempotent_batches_and_other_partitions_are_unchecked():
    table = ProducerStateTable()
    plain = batch(pid=-1, seq=-1)
    table.record(TP, plain, 0)
    assert table.check(TP, plain) is None
    table.record(TP, batch(seq=0), 0)
    assert table.check(("t", 1), batch(seq=9)) is None
    table.forget_topic("t")
    assert table.check(TP, batch(seq=9)) is None


def test_a_partition_is_rebuilt_from_its_stored_batch_headers(tmp_path):
    """After a restart, the headers in the log say what each producer sent last."""
    from trilog.storage import Log, LogConfig

    log = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=300))  # several segments
    for seq in range(0, 30, 3):
        log.append(batch(seq=seq))
    log.append(batch(pid=-1, seq=-1))  # a non-idempotent producer in between
    loads = []

    def load(tp):
        loads.append(tp)
        return log.batch_headers()

    table = ProducerStateTable(load=load)
    last = batch(seq=27)
    assert table.check(TP, last) == 27  # a resend of the last batch: its original offset
    assert table.check(TP, batch(seq=30)) is None  # the next one is new
    with pytest.raises(OutOfOrderSequenceNumberError):
        table.check(TP, batch(seq=33))
    assert loads == [TP]  # rebuilt once, when the partition was first checked
    log.close()


def test_producer_ids_stay_above_the_last_one_handed_out_even_if_the_clock_goes_back(
        tmp_path, monkeypatch):
    from trilog.broker.apis import _handlers

    first = _handlers._ProducerIds(3, str(tmp_path))
    ids = [first.allocate() for _ in range(5000)]  # past one millisecond's 4096
    assert len(set(ids)) == 5000 and ids == sorted(ids)
    assert all((i >> 12) & 0xFF == 3 for i in ids)  # the broker id bits
    # A restart with the clock an hour back still starts above the recorded last id.
    monkeypatch.setattr(_handlers, "now_ms", lambda: (ids[-1] >> 20) - 3_600_000)
    again = _handlers._ProducerIds(3, str(tmp_path))
    assert again.allocate() > ids[-1]
    (tmp_path / _handlers._ProducerIds.FILE).write_text("garbage")
    assert _handlers._ProducerIds(3, str(tmp_path)).allocate() > 0  # unreadable: ignored


def test_a_failed_reservation_hands_out_no_id_until_one_is_recorded(tmp_path, monkeypatch):
    from trilog.broker.apis import _handlers

    ids = _handlers._ProducerIds(1, str(tmp_path))
    real_fsync = _handlers.os.fsync

    def failing_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_handlers.os, "fsync", failing_fsync)
    for _ in range(3):
        with pytest.raises(OSError):
            ids.allocate()
    monkeypatch.setattr(_handlers.os, "fsync", real_fsync)
    handed = ids.allocate()
    recorded = int((tmp_path / _handlers._ProducerIds.FILE).read_text())
    assert handed <= recorded  # never an id the file does not cover
