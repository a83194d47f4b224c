"""The read_committed filter over hand-built batches (no broker): transactional batches of
several producers, commit and abort markers (``trilog.records.build_end_txn_marker``), and
the aborted-transaction list a broker would answer with; what ``FetchedRecords`` hands out
and where the position goes next."""

from __future__ import annotations

import pytest

from trilog.client import FetchedRecords
from trilog.client._isolation import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    aborted_batches,
    isolation_level_id,
)
from trilog.client._simple_consumer import FetchStatistics
from trilog.records import (
    GZIP,
    RecordBatchBuilder,
    build_end_txn_marker,
    patch_base_offset,
)


class Log:
    """A partition's bytes as a fetch returns them: batches at consecutive offsets."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.next_offset = 0

    def _add(self, batch: bytes, count: int) -> int:
        position = len(self.data)
        self.data += batch
        patch_base_offset(self.data, position, self.next_offset)
        first = self.next_offset
        self.next_offset += count
        return first

    def records(self, values: list[bytes], producer_id: int = -1,
                transactional: bool = False, compression: int = 0) -> int:
        """A data batch; returns its base offset."""
        builder = RecordBatchBuilder(producer_id=producer_id,
                                     producer_epoch=0 if producer_id >= 0 else -1,
                                     base_sequence=0 if producer_id >= 0 else -1,
                                     is_transactional=transactional,
                                     compression_type=compression)
        for v in values:
            builder.append(1_700_000_000_000, None, v)
        return self._add(builder.build(), len(values))

    def marker(self, producer_id: int, commit: bool) -> int:
        return self._add(build_end_txn_marker(producer_id=producer_id, producer_epoch=0,
                                              coordinator_epoch=3, commit=commit,
                                              timestamp_ms=1_700_000_000_000), 1)

    def fetched(self, offset: int = 0, aborted=None) -> FetchedRecords:
        return FetchedRecords("t", 0, offset, bytes(self.data), self.next_offset, 0,
                              aborted=aborted, last_stable_offset=self.next_offset)


def values(fetched: FetchedRecords) -> list[bytes]:
    return [r.value for r in fetched]


def test_isolation_level_names_are_kafkas():
    assert isolation_level_id("read_uncommitted") == READ_UNCOMMITTED == 0
    assert isolation_level_id("read_committed") == READ_COMMITTED == 1
    for bad in ("READ_COMMITTED", "committed", 1, None):
        with pytest.raises(ValueError, match="isolation_level"):
            isolation_level_id(bad)


def test_committed_and_aborted_transactions_of_one_producer():
    log = Log()
    log.records([b"c1", b"c2"], producer_id=7, transactional=True)
    log.marker(7, commit=True)
    aborted_at = log.records([b"a1"], producer_id=7, transactional=True)
    log.records([b"a2", b"a3"], producer_id=7, transactional=True)
    log.marker(7, commit=False)
    log.records([b"plain"])
    committed = log.fetched(aborted=[(7, aborted_at)])
    assert values(committed) == [b"c1", b"c2", b"plain"]
    assert committed.record_count == 3
    assert committed.next_offset == log.next_offset == 8  # past the markers and the aborted
    # read_uncommitted: every data record, never a marker
    uncommitted = log.fetched()
    assert values(uncommitted) == [b"c1", b"c2", b"a1", b"a2", b"a3", b"plain"]
    assert uncommitted.record_count == 6
    assert uncommitted.next_offset == 8


def test_interleaved_producers_only_the_aborted_ones_are_skipped():
    log = Log()
    a_start = log.records([b"a1"], producer_id=1, transactional=True)
    log.records([b"b1"], producer_id=2, transactional=True)
    log.records([b"idempotent"], producer_id=3)  # not transactional: always read
    log.records([b"a2"], producer_id=1, transactional=True)
    log.marker(2, commit=True)
    log.records([b"b2"], producer_id=2, transactional=True)  # b's next transaction
    log.marker(1, commit=False)
    log.records([b"a3"], producer_id=1, transactional=True)  # a's next one, committed
    log.marker(1, commit=True)
    log.marker(2, commit=True)
    fetched = log.fetched(aborted=[(1, a_start)])
    assert values(fetched) == [b"b1", b"idempotent", b"b2", b"a3"]
    assert fetched.next_offset == log.next_offset


def test_an_aborted_transaction_that_started_before_the_fetch_offset():
    """The broker lists a transaction that began below the fetch offset: its batches from
    the fetch offset on are skipped too (the producer joins the aborted set at once)."""
    log = Log()
    start = log.records([b"x1"], producer_id=5, transactional=True)
    second = log.records([b"x2", b"x3"], producer_id=5, transactional=True)
    log.marker(5, commit=False)
    log.records([b"after"])
    fetched = log.fetched(offset=second, aborted=[(5, start)])
    assert values(fetched) == [b"after"]
    assert fetched.record_count == 1


def test_two_aborted_transactions_of_one_producer_in_one_fetch():
    log = Log()
    first = log.records([b"a"], producer_id=9, transactional=True)
    log.marker(9, commit=False)
    log.records([b"kept"], producer_id=9, transactional=True)
    log.marker(9, commit=True)
    second = log.records([b"b"], producer_id=9, transactional=True, compression=GZIP)
    log.marker(9, commit=False)
    fetched = log.fetched(aborted=[(9, second), (9, first)])  # any order
    assert values(fetched) == [b"kept"]
    assert aborted_batches(bytes(log.data), [(9, first), (9, second)]) == \
        aborted_batches(bytes(log.data), [(9, second), (9, first)])


def test_a_fetch_of_markers_and_aborted_batches_only_moves_the_position():
    log = Log()
    start = log.records([b"gone"], producer_id=4, transactional=True)
    log.marker(4, commit=False)
    log.marker(8, commit=True)
    fetched = log.fetched(aborted=[(4, start)])
    assert values(fetched) == []
    assert fetched.record_count == 0
    assert fetched.next_offset == 3


def test_a_transaction_listed_as_aborted_but_not_in_this_fetch_skips_nothing_else():
    log = Log()
    log.records([b"mine"], producer_id=6, transactional=True)
    log.records([b"other"], producer_id=2, transactional=True)
    fetched = log.fetched(aborted=[(2, 1000)])  # begins beyond what was fetched
    assert values(fetched) == [b"mine", b"other"]


def test_a_partial_trailing_batch_is_left_for_the_next_fetch():
    log = Log()
    start = log.records([b"a"], producer_id=1, transactional=True)
    log.records([b"b"])
    cut = bytes(log.data[:-5])  # the fetch stopped inside the last batch
    fetched = FetchedRecords("t", 0, 0, cut, 2, 0, aborted=[(1, start)])
    assert values(fetched) == []
    assert fetched.next_offset == 1


def test_deserializers_see_only_committed_records():
    log = Log()
    start = log.records([b"1", b"2"], producer_id=3, transactional=True)
    log.marker(3, commit=False)
    log.records([b"3"])
    fetched = FetchedRecords("t", 0, 0, bytes(log.data), 4, 0,
                             value_deserializer=lambda b: int(b) * 10,
                             aborted=[(3, start)])
    assert [r.value for r in fetched] == [30]


def test_lag_reads_the_last_stable_offset_under_read_committed():
    log = Log()
    log.records([b"a", b"b"])
    fetched = FetchedRecords("t", 0, 0, bytes(log.data), 10, 0, aborted=[],
                             last_stable_offset=6)
    stats = FetchStatistics()
    stats.fetched(0.001, [fetched], read_committed=True)
    assert stats.as_dict()["lag"] == {"t": {0: 4}}  # 6 - 2
    stats.fetched(0.001, [fetched])
    assert stats.as_dict()["lag"] == {"t": {0: 8}}  # 10 - 2: read_uncommitted


def test_records_end_is_where_the_last_record_s_batch_ends():
    log = Log()
    log.records([b"a", b"b"], producer_id=1, transactional=True)
    log.marker(1, commit=True)
    fetched = log.fetched(aborted=[])
    assert (fetched.records_end, fetched.next_offset) == (2, 3)
    assert log.fetched(offset=2).records_end == 2  # nothing but the marker: its start


def test_a_position_settles_past_the_markers_once_the_fetch_is_handed_out():
    from trilog.client.consumer import PartitionState, TopicPartition

    log = Log()
    log.records([b"a", b"b"], producer_id=1, transactional=True)
    log.marker(1, commit=True)
    fetched = log.fetched(aborted=[])
    st = PartitionState(TopicPartition("t", 0))
    st.seek(0)
    st.current, st.current_end, st.current_records_end = (
        iter(fetched), fetched.next_offset, fetched.records_end)
    for record in st.current:
        st.position = record.offset + 1  # as the consumer hands each record out
        if record.offset == 0:
            assert st.settled_position() == 1  # records still to come: as it is
    assert st.position == 2
    assert st.settled_position() == 3  # past the COMMIT marker
