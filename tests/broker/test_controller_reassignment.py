"""The controller's reassignment (``controller/_reassignment.py``) without a ZooKeeper
server: its step decisions as pure functions, then its driver over an in-memory ZooKeeper
(``controller_helpers``; ``test_reassign`` runs it against the real one with brokers)."""

from __future__ import annotations

from controller_helpers import Parts, zookeeper_with

from trilog.broker.controller._reassignment import (
    Plan,
    Reassignments,
    Step,
    adding_replicas,
    check_plan,
    next_step,
)
from trilog.zk import REASSIGN_PARTITIONS, PartitionState, encode_reassignment

S = PartitionState


# -- the step decisions -----------------------------------------------------------------------


def test_a_plan_starts_only_for_a_known_partition_moving_to_live_brokers():
    live = {1, 2, 3}
    assert check_plan([2, 3], [1, 2], True, live) is Plan.START
    assert check_plan([2, 1], [1, 2], True, live) is Plan.START  # a reorder moves too
    assert check_plan([2, 3], [], True, live) is Plan.UNKNOWN_PARTITION
    assert check_plan([2, 3], [1, 2], False, live) is Plan.UNKNOWN_PARTITION
    assert check_plan([2, 7], [1, 2], True, live) is Plan.TARGET_NOT_LIVE
    assert check_plan([1, 2], [1, 2], True, live) is Plan.ASSIGNED_ALREADY


def test_the_replicas_during_a_move_are_the_target_then_the_old_ones():
    assert adding_replicas([2, 3], [1, 2]) == [2, 3, 1]
    assert adding_replicas([4], [1, 2, 3]) == [4, 1, 2, 3]
    assert adding_replicas([3, 1], [1, 2, 3]) == [3, 1, 2]


def test_each_step_follows_from_what_zookeeper_holds():
    eligible = {1, 2, 3}
    target = [2, 3]
    assert next_step(target, [1, 2], S(1, 0, (1, 2)), eligible) is Step.ADD_REPLICAS
    assert next_step(target, [2, 3, 1], S(1, 1, (1, 2)), eligible) is Step.WAIT_FOR_ISR
    assert next_step(target, [2, 3, 1], S(1, 1, (1, 2, 3)), eligible) is Step.ELECT_LEADER
    # A target replica leads, but it is shutting down (not eligible): elected again.
    assert next_step(target, [2, 3, 1], S(2, 2, (1, 2, 3)), {1, 3}) is Step.ELECT_LEADER
    assert next_step(target, [2, 3, 1], S(2, 2, (1, 2, 3)), eligible) is Step.RETIRE_OLD
    # Shrinking to a subset: nothing to add, nobody to wait for.
    assert next_step([3, 1], [1, 2, 3], S(1, 0, (1, 2, 3)), eligible) is Step.RETIRE_OLD
    assert next_step(target, [], S(1), eligible) is Step.GONE
    assert next_step(target, [1, 2], None, eligible) is Step.GONE


# -- the driver -------------------------------------------------------------------------------


class Cluster(Parts):
    """The parts and a term's ``Reassignments``; ``batches`` are the requests it sent."""

    def __init__(self, zk, **kw) -> None:
        super().__init__(zk, **kw)
        self.batches: list = []
        self.reassignments = Reassignments(zk, self.view, self.store, self.machine,
                                           self.batches.append)

    def told(self):
        """(broker, partition, is_new) of every LeaderAndIsr, and the StopReplicas, since
        the last call."""
        leader_and_isr = sorted((b, tp, new) for batch in self.batches
                                for b, tps in batch.leader_and_isr.items()
                                for tp, new in tps.items())
        stop = sorted((b, delete, sorted(tps)) for batch in self.batches
                      for (b, delete), tps in batch.stop_replica.items())
        self.batches.clear()
        return leader_and_isr, stop


async def test_a_reassignment_goes_step_by_step_and_leaves_the_node():
    zk = await zookeeper_with("t", {0: [1, 2], 1: [3, 4]},
                              {0: S(1, 0, (1, 2), 1), 1: S(3, 0, (3, 4), 1)})
    await zk.create(REASSIGN_PARTITIONS, encode_reassignment(
        {("t", 0): [2, 3], ("t", 1): [3, 4], ("gone", 0): [1]}), makepath=True)
    c = Cluster(zk)
    await c.load("t")

    await c.reassignments.on_node_changed()
    # Step 1, then it waits for 3; t-1 and gone-0 were dropped.
    assert c.reassignments.under_way == {("t", 0): [2, 3]}
    assert zk.pending() == {("t", 0): [2, 3]}
    assert zk.assignment("t") == {0: [2, 3, 1], 1: [3, 4]}
    assert zk.state("t", 0) == S(1, 1, (1, 2), 1)
    assert c.told() == ([(1, ("t", 0), False), (2, ("t", 0), False), (3, ("t", 0), True)], [])

    await c.reassignments.advance({("t", 0)})  # nothing changed: it still waits
    assert c.told() == ([], []) and zk.state("t", 0) == S(1, 1, (1, 2), 1)

    await c.join_isr("t", 0, (1, 2, 3))
    await c.reassignments.advance({("t", 0)})
    # Step 3 (2 leads, told to every replica), step 4 (1 leaves), step 5.
    assert zk.state("t", 0) == S(2, 3, (2, 3), 1)
    assert zk.assignment("t") == {0: [2, 3], 1: [3, 4]}
    assert c.told() == ([(1, ("t", 0), False), (2, ("t", 0), False), (2, ("t", 0), False),
                         (3, ("t", 0), False), (3, ("t", 0), False)],
                        [(1, True, [("t", 0)])])
    assert c.reassignments.under_way == {} and zk.pending() is None


async def test_a_new_term_resumes_a_reassignment_from_zookeeper():
    # The last controller did step 1 of t-0's move to [4] and died.
    zk = await zookeeper_with("t", {0: [4, 1, 2]}, {0: S(1, 6, (1, 2), 1)})
    await zk.create(REASSIGN_PARTITIONS, encode_reassignment({("t", 0): [4]}), makepath=True)
    c = Cluster(zk, epoch=2)
    await c.load("t")
    await c.reassignments.on_node_changed()
    assert zk.assignment("t") == {0: [4, 1, 2]}  # not added again
    assert c.told() == ([], []) and c.reassignments.under_way == {("t", 0): [4]}
    await c.join_isr("t", 0, (1, 2, 4))
    await c.reassignments.advance({("t", 0)})
    assert zk.state("t", 0) == S(4, 8, (4,), 2)
    assert zk.assignment("t") == {0: [4]} and zk.pending() is None
    assert c.told()[1] == [(1, True, [("t", 0)]), (2, True, [("t", 0)])]


async def test_a_reassignment_of_a_deleted_topic_ends():
    zk = await zookeeper_with("t", {0: [1]}, {0: S(1, 0, (1,), 1)})
    await zk.create(REASSIGN_PARTITIONS, encode_reassignment({("t", 0): [2]}), makepath=True)
    c = Cluster(zk)
    await c.load("t")
    await c.reassignments.on_node_changed()
    assert c.reassignments.under_way == {("t", 0): [2]}
    c.view.remove_topic("t")
    await c.reassignments.advance({("t", 0)})
    assert c.reassignments.under_way == {} and zk.pending() is None
