"""The rebalance arithmetic, as pure functions (property tests)."""

from hypothesis import given, strategies as st

from trilog.client import Blacklist, Whitelist, assign_ranges
from trilog.client._assignment import assign_group

partitions = st.lists(st.integers(0, 200), max_size=60, unique=True)
threads = st.lists(st.text("abcdef-0123456789", min_size=1, max_size=12), max_size=20,
                   unique=True)


@given(partitions, threads)
def test_every_partition_once_and_sizes_differ_by_at_most_one(parts, ids):
    result = assign_ranges(parts, ids)
    assigned = [p for ps in result.values() for p in ps]
    if ids:
        assert sorted(assigned) == sorted(parts)
        sizes = [len(ps) for ps in result.values()]
        assert max(sizes) - min(sizes) <= 1
    else:
        assert assigned == []


@given(partitions, threads, st.randoms())
def test_result_depends_only_on_the_sorted_inputs(parts, ids, rng):
    shuffled_parts, shuffled_ids = list(parts), list(ids)
    rng.shuffle(shuffled_parts)
    rng.shuffle(shuffled_ids)
    assert assign_ranges(parts, ids) == assign_ranges(shuffled_parts, shuffled_ids)


def test_ranges_are_contiguous_and_the_first_threads_get_the_extra():
    assert assign_ranges(range(8), ["c-0", "a-0", "b-0"]) == {
        "a-0": [0, 1, 2], "b-0": [3, 4, 5], "c-0": [6, 7]}


def test_group_assignment_per_topic():
    subs = {"c1": {"t": 2, "u": 1}, "c2": {"t": 1}}
    result = assign_group(subs, {"t": range(5), "u": range(2)})
    assert result == {"c1-0": {"t": [0, 1], "u": [0, 1]}, "c1-1": {"t": [2, 3]},
                      "c2-0": {"t": [4]}}


def test_filters():
    topics = ["logs.a", "logs.b", "metrics", "__consumer_offsets"]
    assert Whitelist(r"logs\..*").select(topics) == ["logs.a", "logs.b"]
    assert Blacklist(r"logs\..*").select(topics) == ["metrics"]
