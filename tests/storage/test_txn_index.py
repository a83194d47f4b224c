"""A segment's aborted-transaction index (``.txnindex``): Kafka's file layout, the search a
read_committed fetch makes, truncation, and a file that lost writes."""

import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trilog.storage import AbortedTxn, TransactionIndex, TxnIndexEntry


def test_the_file_is_kafkas_layout(tmp_path):
    path = str(tmp_path / "00000000000000000000.txnindex")
    index = TransactionIndex(path)
    assert not os.path.exists(path)  # made on the first abort only
    index.append(TxnIndexEntry(producer_id=7, first_offset=3, last_offset=9,
                               last_stable_offset=10))
    index.append(TxnIndexEntry(8, 5, 12, 13))
    with open(path, "rb") as f:
        data = f.read()
    # Kafka's AbortedTxn: version int16 0, producer id, first, last, last stable (int64s).
    assert data == (bytes.fromhex("0000") + (7).to_bytes(8, "big") + (3).to_bytes(8, "big")
                    + (9).to_bytes(8, "big") + (10).to_bytes(8, "big")
                    + struct.pack(">hqqqq", 0, 8, 5, 12, 13))
    assert len(data) == 2 * 34
    again = TransactionIndex(path)
    assert again.entries() == [(7, 3, 9, 10), (8, 5, 12, 13)]
    assert again.last_offset == 12 and len(again) == 2


def test_markers_must_come_in_order(tmp_path):
    index = TransactionIndex(str(tmp_path / "x.txnindex"))
    index.append(TxnIndexEntry(1, 0, 10, 11))
    with pytest.raises(ValueError):
        index.append(TxnIndexEntry(2, 4, 10, 11))
    assert len(index) == 1


def test_collect_as_kafka_does(tmp_path):
    """Entries overlapping [start, end): marker at or after start, first offset below end;
    complete once an entry's last stable offset reaches end."""
    index = TransactionIndex(str(tmp_path / "x.txnindex"))
    index.append(TxnIndexEntry(1, 0, 10, 5))  # producer 2's transaction was open from 5
    index.append(TxnIndexEntry(2, 5, 20, 15))  # producer 3's from 15
    index.append(TxnIndexEntry(3, 15, 30, 31))  # none
    assert index.collect(11, 12) == ([AbortedTxn(2, 5)], True)
    assert index.collect(0, 12) == ([AbortedTxn(1, 0), AbortedTxn(2, 5)], True)
    assert index.collect(0, 6) == ([AbortedTxn(1, 0), AbortedTxn(2, 5)], True)
    assert index.collect(0, 5) == ([AbortedTxn(1, 0)], True)  # 2's starts at 5
    assert index.collect(21, 40) == ([AbortedTxn(3, 15)], False)
    assert index.collect(31, 40) == ([], False)  # later segments may hold more


def test_truncation_drops_markers_at_or_above(tmp_path):
    path = str(tmp_path / "x.txnindex")
    index = TransactionIndex(path)
    for i in range(4):
        index.append(TxnIndexEntry(i, 10 * i, 10 * i + 5, 10 * i + 6))
    index.truncate_to(25)  # the marker at 25 goes, the one at 15 stays
    assert [e.last_offset for e in index.entries()] == [5, 15]
    assert os.path.getsize(path) == 2 * 34
    index.truncate_to(0)
    assert index.entries() == [] and not os.path.exists(path)


def test_a_torn_or_bad_file_is_cut_and_rewritten(tmp_path):
    path = str(tmp_path / "x.txnindex")
    index = TransactionIndex(path)
    index.append(TxnIndexEntry(1, 0, 5, 6))
    index.append(TxnIndexEntry(2, 6, 9, 10))
    with open(path, "ab") as f:
        f.write(b"\x00" * 20)  # a torn third entry
    again = TransactionIndex(path)
    assert len(again) == 2
    again.flush()
    assert os.path.getsize(path) == 2 * 34
    with open(path, "r+b") as f:
        f.seek(34)
        f.write(b"\x00\x05")  # an unknown version
    assert TransactionIndex(path).entries() == [(1, 0, 5, 6)]


def test_a_failed_write_is_redone_by_flush(tmp_path, monkeypatch):
    path = str(tmp_path / "x.txnindex")
    index = TransactionIndex(path)
    index.append(TxnIndexEntry(1, 0, 5, 6))
    real_open = os.open

    def failing_open(p, *args, **kwargs):
        if p == path:
            raise OSError(28, "No space left on device")
        return real_open(p, *args, **kwargs)

    monkeypatch.setattr(os, "open", failing_open)
    index.append(TxnIndexEntry(2, 6, 9, 10))  # logged, kept in memory
    monkeypatch.undo()
    assert index.collect(0, 100)[0] == [AbortedTxn(1, 0), AbortedTxn(2, 6)]
    index.append(TxnIndexEntry(3, 10, 12, 13))  # (the file is stale: not appended to)
    assert os.path.getsize(path) == 34
    index.flush()
    assert TransactionIndex(path).entries() == index.entries()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 30), st.integers(1, 30)),
                max_size=12),
       st.integers(0, 400), st.integers(0, 400))
def test_collect_matches_a_scan(txns, start, length):
    """Against the definition, for entries whose last stable offsets obey Kafka's rule
    (each at most its marker + 1, never below the previous one's first offset)."""
    entries, offset = [], 0
    for pid, first_gap, span in txns:
        first = offset + first_gap
        last = first + span
        entries.append(TxnIndexEntry(pid, first, last, last + 1))
        offset = last + 1
    index = TransactionIndex("/nonexistent/x.txnindex", load=False)
    index._slots.extend(v for e in entries for v in e)  # (no file: memory only)
    end = start + length + 1
    found, _complete = index.collect(start, end)
    assert found == [AbortedTxn(e.producer_id, e.first_offset) for e in entries
                     if e.last_offset >= start and e.first_offset < end]
