"""The log cleaner's pure decisions and its offset map, without files."""

from __future__ import annotations

import pytest

from trilog.storage._compaction import (
    CleanableRange,
    SegmentFacts,
    choose_filthiest,
    cleanable_range,
    delete_horizon_ms,
    first_dirty_offset,
    group_segments_by_size,
)
from trilog.storage._offset_map import ENTRY_BYTES, OffsetMap


def facts(*specs: tuple[int, int]) -> list[SegmentFacts]:
    """``(base_offset, size)`` pairs; the last is the active segment."""
    return [SegmentFacts(base, size, 1_000) for base, size in specs]


def test_first_dirty_offset():
    assert first_dirty_offset(None, 5, 100) == 5
    assert first_dirty_offset(40, 5, 100) == 40
    assert first_dirty_offset(3, 5, 100) == 5  # retention or DeleteRecords passed it
    assert first_dirty_offset(120, 5, 100) == 5  # truncation: all dirty again (Kafka)


def test_cleanable_range_counts_whole_segments():
    segments = facts((0, 100), (10, 100), (20, 100), (30, 50))
    rng = cleanable_range(segments, 15, now_ms=10_000, min_compaction_lag_ms=0)
    # The segment holding the first dirty offset counts as both (Kafka's sums).
    assert rng == CleanableRange(15, 30, 200, 200)
    assert rng.dirty_ratio == 0.5
    assert cleanable_range(segments, 0, 10_000, 0).dirty_ratio == 1.0
    assert cleanable_range(segments, 30, 10_000, 0) == CleanableRange(30, 30, 300, 0)
    assert cleanable_range(facts((0, 0)), 0, 0, 0).dirty_ratio == 0.0


def test_the_compaction_lag_holds_young_segments_back():
    segments = [SegmentFacts(0, 100, 1_000), SegmentFacts(10, 100, 9_500),
                SegmentFacts(20, 100, 9_900), SegmentFacts(30, 10, 9_990)]
    rng = cleanable_range(segments, 0, now_ms=10_000, min_compaction_lag_ms=1_000)
    assert (rng.first_uncleanable_offset, rng.cleanable_bytes) == (10, 100)
    rng = cleanable_range(segments, 12, now_ms=10_000, min_compaction_lag_ms=1_000)
    assert rng.first_uncleanable_offset == 12  # never below the first dirty offset
    assert rng.cleanable_bytes == 0


def test_nothing_at_or_above_the_last_stable_offset_is_cleanable():
    """The segment holding the last stable offset (an undecided transaction's first
    offset, at most the high watermark) stands in for the active one."""
    segments = facts((0, 100), (10, 100), (20, 100), (30, 50))
    assert cleanable_range(segments, 0, 10_000, 0, stable_offset=25) == CleanableRange(
        0, 20, 0, 200)
    held_at_20 = cleanable_range(segments, 0, 10_000, 0, stable_offset=20)
    assert held_at_20.first_uncleanable_offset == 20
    assert cleanable_range(segments, 0, 10_000, 0, stable_offset=5) == CleanableRange(0, 0, 0, 0)
    assert cleanable_range(segments, 0, 10_000, 0, stable_offset=35) == cleanable_range(
        segments, 0, 10_000, 0)
    # With the compaction lag too: whichever holds back more.
    young = [SegmentFacts(0, 100, 1_000), SegmentFacts(10, 100, 9_500),
             SegmentFacts(20, 100, 1_000), SegmentFacts(30, 10, 9_990)]
    for stable, held_at in ((25, 10), (5, 0)):
        rng = cleanable_range(young, 0, 10_000, 1_000, stable_offset=stable)
        assert rng.first_uncleanable_offset == held_at


def test_choose_the_filthiest_above_its_own_ratio():
    dirty = CleanableRange(0, 10, 100, 300)  # 0.75
    dirtier = CleanableRange(0, 10, 10, 90)  # 0.9
    assert choose_filthiest([("a", dirty, 0.5), ("b", dirtier, 0.5)]) == "b"
    assert choose_filthiest([("a", dirty, 0.5), ("b", dirtier, 0.95)]) == "a"
    assert choose_filthiest([("a", dirty, 0.75)]) is None  # strictly above, as Kafka
    assert choose_filthiest([("a", CleanableRange(5, 5, 10, 0), 0.0)]) is None
    assert choose_filthiest([]) is None


def test_group_segments_by_size():
    segs = [SegmentFacts(b, s, 0, 8, 12) for b, s in [(0, 40), (10, 40), (20, 30), (30, 90),
                                                       (40, 10)]]
    assert group_segments_by_size(segs, 100, 1000, 50) == [[0, 1], [2], [3, 4]]
    assert group_segments_by_size(segs, 1000, 1000, 50) == [[0, 1, 2, 3, 4]]
    # The indexes bound a group too.
    assert group_segments_by_size(segs, 1000, 24, 50) == [[0, 1], [2, 3], [4]]
    # One segment alone may be larger than the limit.
    assert group_segments_by_size([SegmentFacts(0, 500)], 100, 100, 9) == [[0]]


def test_a_group_fits_the_relative_offset_index():
    big = 2**31
    segs = [SegmentFacts(0, 10), SegmentFacts(10, 10), SegmentFacts(big - 5, 10)]
    # The second segment may hold offsets up to big - 6; the third's bound is the end.
    assert group_segments_by_size(segs, 1000, 1000, big + 20) == [[0, 1], [2]]
    assert group_segments_by_size(segs, 1000, 1000, big - 1) == [[0, 1, 2]]


def test_empty_segments_do_not_end_a_group():
    segs = [SegmentFacts(0, 10), SegmentFacts(5, 0), SegmentFacts(5, 10), SegmentFacts(9, 0)]
    assert group_segments_by_size(segs, 1000, 1000, 12) == [[0, 1, 2]]
    assert group_segments_by_size([SegmentFacts(0, 0)], 1000, 1000, 1) == []


def test_delete_horizon():
    assert delete_horizon_ms(None, 1000) < -(2**62)  # no clean section: keep every tombstone
    assert delete_horizon_ms(50_000, 1000) == 49_000


def test_offset_map_is_bounded():
    m = OffsetMap(3 * ENTRY_BYTES + 5)
    assert m.slots == 3
    assert m.get(b"a") == -1
    assert m.put(b"a", 1) and m.put(b"b", 2) and m.put(b"a", 3) and m.put(b"c", 4)
    assert (len(m), m.full, m.latest_offset) == (3, True, 4)
    assert not m.put(b"d", 5)  # full: a new key is refused
    assert m.put(b"b", 6)  # a known one still moves
    assert (m.get(b"a"), m.get(b"b"), m.get(b"d"), m.latest_offset) == (3, 6, -1, 6)
    m.update_latest_offset(4)
    assert m.latest_offset == 6
    assert m.utilization == 1.0
    m.clear()
    assert (len(m), m.latest_offset) == (0, -1)
    with pytest.raises(ValueError, match="dedupe.buffer.size"):
        OffsetMap(ENTRY_BYTES - 1)
