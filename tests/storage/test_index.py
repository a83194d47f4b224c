"""The sparse indexes: semantics, file round trips, and lookups that are binary searches."""

from __future__ import annotations

import math
import os

import pytest
from storage_helpers import batches_in, make_batch

from trilog.storage import Log, LogConfig, OffsetIndex, TimeIndex
from trilog.storage._index import IndexCorruptError


class CountingSequence:
    """Wraps an index array and counts element reads: a scan would read them all."""

    def __init__(self, values):
        self.values = values
        self.reads = 0

    def __len__(self):
        return len(self.values)

    def __getitem__(self, i):
        self.reads += 1
        return self.values[i]

    def __getattr__(self, name):
        return getattr(self.values, name)


def test_offset_index_lookup_and_round_trip(tmp_path):
    path = str(tmp_path / "00000000000000000100.index")
    index = OffsetIndex(path, 100, 1024)
    assert index.lookup(150) == (100, 0)
    for i in range(1, 50):
        index.append(100 + 3 * i, 40 * i)
    assert index.lookup(100) == (100, 0)
    assert index.lookup(103) == (103, 40)
    assert index.lookup(105) == (103, 40)
    assert index.lookup(10_000) == (247, 1960)
    assert index.lookup_position(85) == 80
    assert index.lookup_position(10) == 0
    index.flush()
    assert os.path.getsize(path) == 49 * 8
    loaded = OffsetIndex(path, 100, 1024)
    loaded.load(log_size=2000)
    assert loaded.entries() == index.entries()
    with pytest.raises(IndexCorruptError):
        OffsetIndex(path, 100, 1024).load(log_size=1960)  # an entry at the end of the file
    index.truncate_to_position(400)
    assert index.last_entry == (127, 360)
    index.flush()
    assert os.path.getsize(path) == 9 * 8


def test_time_index_lookup_and_round_trip(tmp_path):
    path = str(tmp_path / "00000000000000000000.timeindex")
    index = TimeIndex(path, 0, 1200)
    for i in range(1, 40):
        index.maybe_append(1_600_000_000_000 + 10 * i, 5 * i)
    index.maybe_append(1_600_000_000_000, 500)  # not newer: ignored
    assert len(index) == 39
    assert index.lookup(1_600_000_000_010) is None
    assert index.lookup(1_600_000_000_011) == 5
    assert index.lookup(1_600_000_000_025) == 10
    assert index.is_full is False and index.max_entries == 100
    index.flush()
    loaded = TimeIndex(path, 0, 1200)
    loaded.load()
    assert loaded.entries() == index.entries()
    with open(path, "r+b") as f:
        f.write(b"\x7f" * 8)  # first timestamp now larger than the rest
    with pytest.raises(IndexCorruptError):
        TimeIndex(path, 0, 1200).load()


def test_read_uses_binary_search_not_a_scan(tmp_path):
    n_batches = 6000
    log = Log(tmp_path / "t-0", LogConfig(index_interval_bytes=0))
    try:
        buffer = b"".join(make_batch(1, timestamp=1000 + i, tag=i) for i in range(n_batches))
        log.append(buffer)
        segment = log.active_segment
        entries = len(segment.offset_index)
        assert entries == n_batches - 1
        offsets = CountingSequence(segment.offset_index._offsets)
        positions = CountingSequence(segment.offset_index._positions)
        segment.offset_index._offsets = offsets
        segment.offset_index._positions = positions
        bound = 2 * (math.ceil(math.log2(entries)) + 2)
        for target in (n_batches - 1, n_batches - 2, 3000, 1):
            offsets.reads = positions.reads = 0
            with log.read(target, 500) as piece:
                assert batches_in(piece.read())[0][0] == target
            assert offsets.reads <= bound, (target, offsets.reads)
            assert positions.reads <= bound, (target, positions.reads)
        # The time index too.
        stamps = CountingSequence(segment.time_index._timestamps)
        segment.time_index._timestamps = stamps
        offsets.reads = 0
        assert log.offset_for_timestamp(1000 + n_batches - 10).offset == n_batches - 10
        assert stamps.reads <= bound and offsets.reads <= bound
    finally:
        log.close()


def test_index_full_is_reported(tmp_path):
    index = OffsetIndex(str(tmp_path / "x.index"), 0, 8 * 4 + 3)
    assert index.max_entries == 4
    for i in range(4):
        assert not index.is_full
        index.append(i + 1, 10 * (i + 1))
    assert index.is_full
