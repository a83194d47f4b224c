"""Producer ids (InitProducerId): unique across brokers and restarts, never handed out
before the file covers them."""

import pytest


def test_producer_ids_stay_above_the_last_one_handed_out_even_if_the_clock_goes_back(
        tmp_path, monkeypatch):
    from trilog.broker.transactions import _producer_ids

    first = _producer_ids.ProducerIds(3, str(tmp_path))
    ids = [first.allocate() for _ in range(5000)]  # past one millisecond's 4096
    assert len(set(ids)) == 5000 and ids == sorted(ids)
    assert all((i >> 12) & 0xFF == 3 for i in ids)  # the broker id bits
    # A restart with the clock an hour back still starts above the recorded last id.
    monkeypatch.setattr(_producer_ids, "now_ms", lambda: (ids[-1] >> 20) - 3_600_000)
    again = _producer_ids.ProducerIds(3, str(tmp_path))
    assert again.allocate() > ids[-1]
    (tmp_path / _producer_ids.ProducerIds.FILE).write_text("garbage")
    assert _producer_ids.ProducerIds(3, str(tmp_path)).allocate() > 0  # unreadable: ignored


def test_a_failed_reservation_hands_out_no_id_until_one_is_recorded(tmp_path, monkeypatch):
    from trilog.broker.transactions import _producer_ids

    ids = _producer_ids.ProducerIds(1, str(tmp_path))
    real_fsync = _producer_ids.os.fsync

    def failing_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_producer_ids.os, "fsync", failing_fsync)
    for _ in range(3):
        with pytest.raises(OSError):
            ids.allocate()
    monkeypatch.setattr(_producer_ids.os, "fsync", real_fsync)
    handed = ids.allocate()
    recorded = int((tmp_path / _producer_ids.ProducerIds.FILE).read_text())
    assert handed <= recorded  # never an id the file does not cover
