"""The controller's view of the cluster (``controller/_view.py``): its queries, without
ZooKeeper or brokers."""

from __future__ import annotations

from trilog.broker.controller._view import ClusterView
from trilog.zk import BrokerRegistration, PartitionState

S = PartitionState


def view(live=(1, 2, 3), shutting_down=(), assignments=None, states=None) -> ClusterView:
    v = ClusterView()
    v.live = {b: BrokerRegistration(b, "127.0.0.1", 9000 + b) for b in live}
    v.shutting_down = set(shutting_down)
    v.assignments = assignments if assignments is not None else {
        "t": {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}, "a": {0: [2]}}
    for version, (tp, state) in enumerate(sorted((states or {}).items())):
        v.set_state(tp, state, version)
    return v


def test_partitions_are_listed_in_order_whatever_the_dict_order():
    v = view(assignments={"z": {1: [1], 0: [1]}, "b": {0: [2]}})
    assert list(v.partitions()) == [("b", 0), ("z", 0), ("z", 1)]


def test_replicas_keep_their_preference_order_and_an_unknown_partition_has_none():
    v = view()
    assert v.replicas(("t", 1)) == [2, 3, 1]
    assert v.replicas(("t", 7)) == [] and v.replicas(("nope", 0)) == []
    assert v.has_partition(("t", 2)) and not v.has_partition(("t", 3))
    assert not v.has_partition(("nope", 0))


def test_brokers_shutting_down_may_neither_lead_nor_be_told_leader_and_isr():
    v = view(live=(1, 2, 3, 4), shutting_down=(2,))
    assert v.eligible() == {1, 3, 4}
    # Live replicas only, in assignment order, and not the one shutting down.
    assert v.recipients(("t", 1)) == [3, 1]
    v.live.pop(3)
    assert v.recipients(("t", 1)) == [1]
    assert v.offline_replicas(("t", 1)) == [3]


def test_led_and_followed_by_a_set_of_brokers():
    states = {("t", 0): S(1, 0, (1, 2, 3)), ("t", 1): S(2, 0, (2, 3)),
              ("t", 2): S(3, 0, (3, 1)), ("a", 0): S(-1, 4, (2,))}
    v = view(states=states)
    assert v.led_by({2}) == [("t", 1)]
    assert v.led_by({1, 3}) == [("t", 0), ("t", 2)]
    # In the ISR, not leading: an offline partition whose last ISR holds 2 is one.
    assert v.followed_by({2}) == [("a", 0), ("t", 0)]
    assert v.followed_by({1}) == [("t", 2)]
    assert v.leaders() == {("t", 0): 1, ("t", 1): 2, ("t", 2): 3, ("a", 0): -1}


def test_partitions_without_an_eligible_leader():
    states = {("t", 0): S(1, 0, (1, 2, 3)), ("t", 1): S(2, 0, (2, 3)),
              ("a", 0): S(-1, 4, (2,))}
    v = view(shutting_down=(1,), states=states)
    # t-0's leader is shutting down, t-2 has no state yet, a-0 is offline.
    assert v.without_eligible_leader() == [("a", 0), ("t", 0), ("t", 2)]


def test_partitions_a_broker_replicates_are_those_with_a_state():
    v = view(states={("t", 0): S(1), ("t", 2): S(3), ("a", 0): S(2)})
    assert v.replicated_by(2) == [("a", 0), ("t", 0), ("t", 2)]  # not t-1: no state
    assert v.replicated_by(1) == [("t", 0), ("t", 2)]
    assert v.replicated_by(9) == []


def test_a_state_comes_with_its_version_and_goes_with_its_topic():
    v = view(states={("t", 0): S(1), ("t", 1): S(2), ("a", 0): S(2)})
    v.set_state(("t", 0), S(2, 1), 7)
    assert v.states[("t", 0)] == S(2, 1) and v.version(("t", 0)) == 7
    assert v.version(("t", 2)) == 0  # none yet: brokers are told 0
    assert v.remove_topic("t") == {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
    assert set(v.states) == set(v.versions) == {("a", 0)}
    assert v.remove_topic("t") == {}
    v.forget_state(("a", 0))
    assert v.states == {} and v.versions == {}


def test_brokers_that_leave_stop_shutting_down():
    v = view(live=(1, 2, 3), shutting_down=(2, 3))
    v.remove_brokers({2})
    assert set(v.live) == {1, 3} and v.shutting_down == {3}
    assert v.eligible() == {1}
