"""The controller's election and ISR rules (``broker/_election.py``), without a cluster."""

from __future__ import annotations

from trilog.broker.controller._decisions import (
    NO_LEADER,
    elect_for_reassignment,
    elect_for_shutdown,
    elect_offline,
    elect_preferred,
    expand_isr,
    imbalanced_brokers,
    shrink_isr,
)
from trilog.zk import PartitionState

S = PartitionState


def test_a_new_partition_is_led_by_its_first_live_replica():
    assert elect_offline([2, 3, 1], None, {1, 2, 3}, 4) == S(2, 0, (2, 3, 1), 4)
    assert elect_offline([2, 3, 1], None, {1, 3}, 4) == S(3, 0, (3, 1), 4)
    assert elect_offline([2], None, set(), 4) == S(NO_LEADER, 0, (), 4)


def test_a_dead_leader_is_replaced_by_the_first_live_isr_member_in_assignment_order():
    state = S(1, 7, (1, 3, 2), 2)
    # Assignment order decides among the live ISR, not the ISR's own order.
    assert elect_offline([1, 2, 3], state, {2, 3}, 5) == S(2, 8, (3, 2), 5)
    # A live replica out of the ISR never leads a clean election.
    assert elect_offline([1, 2, 3], S(1, 7, (1, 3), 2), {2}, 5) == S(NO_LEADER, 8, (1, 3), 5)


def test_without_a_live_isr_member_the_partition_stays_offline_unless_unclean():
    state = S(1, 3, (1,), 1)
    offline = elect_offline([1, 2], state, {2}, 2)
    assert offline == S(NO_LEADER, 4, (1,), 2)
    assert elect_offline([1, 2], offline, {2}, 2) is offline  # nothing new to write
    # The ISR's last member returns: it leads again.
    assert elect_offline([1, 2], offline, {1, 2}, 3) == S(1, 5, (1,), 3)
    # Unclean: the first live replica leads alone.
    assert elect_offline([1, 2], state, {2}, 2, unclean=True) == S(2, 4, (2,), 2)


def test_controlled_shutdown_moves_leadership_and_isr_membership():
    state = S(1, 2, (1, 2, 3), 1)
    assert elect_for_shutdown([1, 2, 3], state, {1, 2, 3}, {1}, 3) == S(2, 3, (2, 3), 3)
    # A follower stopping only leaves the ISR; the leader keeps its epoch.
    assert elect_for_shutdown([1, 2, 3], state, {1, 2, 3}, {3}, 3) == S(1, 2, (1, 2), 3)
    # Not in the ISR at all: nothing changes.
    assert elect_for_shutdown([1, 2, 3], S(1, 2, (1, 2), 1), {1, 2, 3}, {3}, 3) == \
        S(1, 2, (1, 2), 1)
    # No other ISR member: no election (the partition goes offline with the broker).
    assert elect_for_shutdown([1, 2], S(1, 2, (1,), 1), {1, 2}, {1}, 3) is None


def test_preferred_and_reassignment_elections():
    state = S(2, 4, (2, 1, 3), 1)
    assert elect_preferred([1, 2, 3], state, {1, 2, 3}, 2) == S(1, 5, (2, 1, 3), 2)
    assert elect_preferred([2, 1, 3], state, {1, 2, 3}, 2) is None  # leads already
    assert elect_preferred([1, 2, 3], state, {2, 3}, 2) is None  # not live
    assert elect_preferred([1, 2, 3], S(2, 4, (2, 3), 1), {1, 2, 3}, 2) is None  # not in ISR
    assert elect_for_reassignment([3, 4], state, {1, 2, 3, 4}, 2) == S(3, 5, (2, 1, 3), 2)
    assert elect_for_reassignment([2, 4], state, {1, 2, 3, 4}, 2) is None
    assert elect_for_reassignment([4, 5], state, {1, 2, 3, 4}, 2) is None


def test_isr_shrinks_and_expands_without_a_new_epoch():
    state = S(1, 4, (1, 2, 3), 2)
    assert shrink_isr(state, {3, 1}, 2) == S(1, 4, (1, 2), 2)  # never the leader
    assert shrink_isr(state, set(), 2) is state
    assert expand_isr(S(1, 4, (1,), 2), 3, [3, 1, 2], 2) == S(1, 4, (3, 1), 2)
    assert expand_isr(state, 2, [1, 2, 3], 2) is state
    assert expand_isr(state, 9, [1, 2, 3], 2) is state  # not a replica


def test_leader_imbalance_per_broker():
    assignments = {("t", 0): [1, 2], ("t", 1): [2, 1], ("t", 2): [1, 2], ("t", 3): [1, 2]}
    leaders = {("t", 0): 2, ("t", 1): 2, ("t", 2): 1, ("t", 3): 1}
    # Broker 1 leads 2 of its 3 preferred partitions: 33% imbalance.
    assert imbalanced_brokers(assignments, leaders, 10) == {1: [("t", 0)]}
    assert imbalanced_brokers(assignments, leaders, 34) == {}
