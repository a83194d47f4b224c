"""``LeaderEpochCache``: Kafka's ``LeaderEpochFileCache`` semantics case by case (after its
``LeaderEpochFileCacheTest``), and the ``leader-epoch-checkpoint`` file."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trilog.storage._epochs import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
    epochs_from_batches,
    format_checkpoint,
    parse_checkpoint,
    read_checkpoint,
)

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


@pytest.fixture
def cache(tmp_path):
    return LeaderEpochCache(str(tmp_path / LEADER_EPOCH_CHECKPOINT_FILE))


def entries(cache):
    return [tuple(e) for e in cache.entries]


# -- assign ----------------------------------------------------------------------------------


def test_an_epoch_and_its_start_offset_are_recorded(cache):
    assert cache.assign(2, 10)
    assert cache.latest_epoch == 2
    assert entries(cache) == [(2, 10)]
    assert cache.end_offset_for(2, 11) == (2, 11)


def test_the_latest_epoch_at_a_later_offset_changes_nothing(cache):
    cache.assign(2, 6)
    assert not cache.assign(2, 7)
    assert not cache.assign(2, 6)
    assert entries(cache) == [(2, 6)]


def test_a_new_epoch_at_the_same_offset_replaces_the_empty_one(cache):
    cache.assign(2, 9)
    cache.assign(3, 9)
    assert entries(cache) == [(3, 9)]


def test_a_new_epoch_below_the_latest_start_removes_the_later_entries(cache):
    cache.assign(2, 6)
    cache.assign(3, 5)
    assert entries(cache) == [(3, 5)]


def test_an_older_epoch_after_a_newer_one_truncates_the_conflict(cache):
    # Kafka's shouldEnforceMonotonicallyIncreasingEpochs: the later epochs go.
    cache.assign(1, 5)
    cache.assign(2, 6)
    cache.assign(1, 7)
    assert cache.latest_epoch == 1
    assert entries(cache) == [(1, 7)]
    assert cache.end_offset_for(1, 8) == (1, 8)
    assert cache.end_offset_for(2, 8) == UNDEFINED


def test_the_same_epoch_at_an_earlier_offset_truncates(cache):
    for epoch, start in ((5, 11), (6, 12), (7, 13)):
        cache.assign(epoch, start)
    cache.assign(7, 12)
    assert entries(cache) == [(5, 11), (7, 12)]
    assert cache.end_offset_for(5, 0) == (5, 12)
    assert cache.end_offset_for(6, 0) == (5, 12)


def test_negative_epochs_and_offsets_are_refused(cache):
    with pytest.raises(ValueError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -1)
    assert entries(cache) == []


def test_epochs_as_a_follower_receives_many_batches(cache):
    leo = 0
    for epoch in range(3):
        for _ in range(3):
            cache.assign(epoch, leo)
            leo += 1
    assert entries(cache) == [(0, 0), (1, 3), (2, 6)]
    assert cache.end_offset_for(2, leo) == (2, 9)
    assert cache.end_offset_for(0, leo) == (0, 3)
    assert cache.end_offset_for(1, leo) == (1, 6)


def test_epochs_as_leaders_change_many_times(cache):
    cache.assign(0, 0)
    cache.assign(1, 0)
    assert entries(cache) == [(1, 0)]
    assert cache.end_offset_for(1, 0) == (1, 0)
    assert cache.end_offset_for(0, 0) == (0, 0)  # below the first: its start
    assert cache.end_offset_for(1, 5) == (1, 5)
    cache.assign(2, 5)
    assert cache.end_offset_for(2, 10) == (2, 10)
    assert cache.end_offset_for(1, 10) == (1, 5)
    assert cache.end_offset_for(0, 10) == (0, 0)


# -- end_offset_for ----------------------------------------------------------------------------


def test_the_latest_epoch_ends_at_the_log_end(cache):
    cache.assign(2, 11)
    cache.assign(2, 12)
    assert cache.end_offset_for(2, 14) == (2, 14)


def test_undefined_epoch_gives_undefined(cache):
    assert cache.end_offset_for(UNDEFINED_EPOCH, 73) == UNDEFINED
    cache.assign(2, 11)
    cache.assign(3, 12)
    assert cache.end_offset_for(UNDEFINED_EPOCH, 0) == UNDEFINED


def test_an_empty_cache_gives_undefined(cache):
    assert cache.end_offset_for(0, 0) == UNDEFINED
    assert cache.end_offset_for(7, 0) == UNDEFINED
    assert cache.latest_epoch is None
    assert cache.latest_entry is None


def test_an_epoch_below_the_first_ends_where_the_first_starts(cache):
    for epoch, start in ((5, 11), (6, 12), (7, 13)):
        cache.assign(epoch, start)
    assert cache.end_offset_for(4, 0) == (4, 11)


def test_an_epoch_above_the_latest_is_undefined(cache):
    cache.assign(2, 100)
    assert cache.end_offset_for(3, 100) == UNDEFINED


def test_a_previous_epoch_ends_where_the_next_starts(cache):
    for epoch, start in ((1, 11), (1, 12), (2, 13), (2, 14), (3, 15), (3, 16)):
        cache.assign(epoch, start)
    assert cache.end_offset_for(2, 17) == (2, 15)


def test_an_unknown_epoch_answers_the_largest_below_it(cache):
    for epoch, start in ((0, 10), (2, 13), (4, 17)):
        cache.assign(epoch, start)
    assert cache.end_offset_for(1, 0) == (0, 13)
    assert cache.end_offset_for(2, 0) == (2, 17)
    assert cache.end_offset_for(3, 0) == (2, 17)
    assert cache.end_offset_for(4, 20) == (4, 20)


def test_epoch_for_offset(cache):
    for epoch, start in ((0, 10), (2, 13), (4, 17)):
        cache.assign(epoch, start)
    assert cache.epoch_for_offset(9) is None
    assert cache.epoch_for_offset(10) == 0
    assert cache.epoch_for_offset(12) == 0
    assert cache.epoch_for_offset(13) == 2
    assert cache.epoch_for_offset(1000) == 4


# -- truncation ----------------------------------------------------------------------------------


@pytest.fixture
def three(cache):
    for epoch, start in ((2, 6), (3, 8), (4, 11)):
        cache.assign(epoch, start)
    return cache


def test_truncate_from_end_on_an_epoch_boundary(three):
    assert three.truncate_from_end(8)
    assert entries(three) == [(2, 6)]


def test_truncate_from_end_between_boundaries(three):
    assert three.truncate_from_end(9)
    assert three.latest_epoch == 3
    assert entries(three) == [(2, 6), (3, 8)]


def test_truncate_from_end_with_undefined_or_late_offsets_changes_nothing(three):
    assert not three.truncate_from_end(UNDEFINED_EPOCH_OFFSET)
    assert not three.truncate_from_end(12)
    assert len(three) == 3


def test_truncate_from_start_at_a_boundary_keeps_that_entry(three):
    assert three.truncate_from_start(8)
    assert entries(three) == [(3, 8), (4, 11)]


def test_truncate_from_start_too_early_or_at_the_first_changes_nothing(three):
    assert not three.truncate_from_start(1)
    assert not three.truncate_from_start(6)
    assert not three.truncate_from_start(UNDEFINED_EPOCH_OFFSET)
    assert entries(three) == [(2, 6), (3, 8), (4, 11)]


def test_truncate_from_start_clamps_the_first_kept_entry(three):
    assert three.truncate_from_start(9)
    assert entries(three) == [(3, 9), (4, 11)]


def test_truncate_from_start_inside_the_first_epoch(cache):
    for epoch, start in ((0, 0), (1, 7), (2, 10)):
        cache.assign(epoch, start)
    cache.truncate_from_start(5)
    assert entries(cache) == [(0, 5), (1, 7), (2, 10)]


def test_truncate_from_start_past_every_entry_keeps_the_latest(three):
    three.truncate_from_start(11)
    assert entries(three) == [(4, 11)]
    three.truncate_from_start(15)
    assert entries(three) == [(4, 15)]


def test_truncations_of_an_empty_cache(cache):
    assert not cache.truncate_from_start(7)
    assert not cache.truncate_from_end(7)


def test_clear(three):
    three.clear()
    assert entries(three) == []
    assert read_checkpoint(three.path) == []


# -- the checkpoint file ---------------------------------------------------------------------------


def test_the_checkpoint_is_kafkas_format(three):
    with open(three.path) as f:
        assert f.read() == "0\n3\n2 6\n3 8\n4 11\n"
    assert format_checkpoint([]) == b"0\n0\n"


def test_entries_persist_between_instances(three):
    again = LeaderEpochCache(three.path, read_checkpoint(three.path))
    assert entries(again) == [(2, 6), (3, 8), (4, 11)]


def test_every_change_is_written(three):
    three.truncate_from_end(9)
    assert read_checkpoint(three.path) == [(2, 6), (3, 8)]
    three.truncate_from_start(7)
    assert read_checkpoint(three.path) == [(2, 7), (3, 8)]
    three.assign(5, 20)
    assert read_checkpoint(three.path) == [(2, 7), (3, 8), (5, 20)]


def test_a_missing_file_reads_as_none(tmp_path):
    assert read_checkpoint(tmp_path / "nothing") is None


@pytest.mark.parametrize("text", [
    "",
    "0\n",
    "1\n0\n",
    "0\n2\n1 0\n",
    "0\n1\n1\n",
    "0\n1\nx 3\n",
    "0\n2\n3 0\n2 5\n",
    "0\n2\n1 5\n2 5\n",
    "0\n1\n-1 0\n",
])
def test_a_malformed_file_reads_as_none(tmp_path, text):
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILE
    path.write_text(text)
    with pytest.raises(ValueError):
        parse_checkpoint(text)
    assert read_checkpoint(path) is None


def test_a_failed_write_changes_nothing(three, monkeypatch):
    def fail(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("trilog.storage._epochs.write_atomically", fail)
    with pytest.raises(OSError):
        three.assign(5, 20)
    with pytest.raises(OSError):
        three.truncate_from_end(7)
    assert entries(three) == [(2, 6), (3, 8), (4, 11)]
    assert not os.path.exists(three.path + ".tmp")


def test_a_memory_only_cache_writes_nothing(tmp_path):
    cache = LeaderEpochCache(None, [(1, 0), (3, 10)])
    cache.assign(4, 12)
    assert entries(cache) == [(1, 0), (3, 10), (4, 12)]
    assert os.listdir(tmp_path) == []


def test_epochs_from_batches():
    batches = [(-1, 0), (-1, 3), (0, 5), (0, 6), (2, 9), (1, 12), (2, 14), (5, 20)]
    assert epochs_from_batches(batches) == [(0, 5), (2, 9), (5, 20)]
    assert epochs_from_batches([(-1, 0)]) == []


# -- a model -----------------------------------------------------------------------------------------


@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 40)), max_size=30))
def test_entries_always_increase(assigns):
    cache = LeaderEpochCache(None)
    for epoch, start in assigns:
        cache.assign(epoch, start)
        es = cache.entries
        assert all(a.epoch < b.epoch and a.start_offset < b.start_offset
                   for a, b in zip(es, es[1:]))
        assert es[-1] == EpochEntry(epoch, start) or (
            es[-1].epoch == epoch and es[-1].start_offset <= start)
