"""The controller's ZooKeeper reads and conditional writes (``controller/_store.py``) and the
state machine that writes through them (``controller/_state_machine.py``), over an
in-memory ZooKeeper (``controller_helpers``)."""

from __future__ import annotations

import pytest
from controller_helpers import Parts, zookeeper_with

from trilog.broker.controller._errors import StaleController
from trilog.broker.controller._store import WRITE_ATTEMPTS
from trilog.zk import PartitionState, encode_topic_assignment, partition_state_path, topic_path

S = PartitionState


async def test_a_state_is_created_then_written_at_the_version_it_was_read():
    zk = await zookeeper_with("t", {0: [1, 2]}, {})
    c = Parts(zk)
    await c.load("t")
    assert await c.store.update([("t", 0)], lambda tp, s: S(1, 0, (1, 2), 1)) == [("t", 0)]
    assert zk.state("t", 0) == S(1, 0, (1, 2), 1) and c.view.version(("t", 0)) == 0
    # The same state: nothing to write.
    assert await c.store.update([("t", 0)], lambda tp, s: s) == []
    await c.store.update([("t", 0)], lambda tp, s: S(2, 1, (2,), 1))
    assert zk.nodes[partition_state_path("t", 0)][1] == c.view.version(("t", 0)) == 1


async def test_a_lost_write_is_decided_again_on_the_state_the_winner_left():
    zk = await zookeeper_with("t", {0: [1, 2, 3]}, {0: S(1, 3, (1, 2, 3), 1)})
    c = Parts(zk)
    await c.load("t")
    path = partition_state_path("t", 0)

    def leader_writes_first(p):
        if p == path and zk.nodes[path][1] == 0:
            zk.nodes[path] = [S(1, 3, (1, 2), 1).encode(), 1]  # the leader shrank the ISR
    zk.interfere = leader_writes_first
    seen = []

    def decide(tp, state):
        seen.append(state)
        return S(2, state.leader_epoch + 1, state.isr, 1)

    assert await c.store.update([("t", 0)], decide) == [("t", 0)]
    assert seen == [S(1, 3, (1, 2, 3), 1), S(1, 3, (1, 2), 1)]
    assert zk.state("t", 0) == c.view.states[("t", 0)] == S(2, 4, (1, 2), 1)
    assert c.view.version(("t", 0)) == 2


async def test_a_write_that_keeps_losing_is_left_for_the_next_event():
    zk = await zookeeper_with("t", {0: [1, 2]}, {0: S(1, 0, (1, 2), 1)})
    c = Parts(zk)
    await c.load("t")
    path = partition_state_path("t", 0)
    zk.interfere = lambda p: zk.nodes[path].__setitem__(1, zk.nodes[path][1] + 1)
    tries = []
    assert await c.store.update([("t", 0)], lambda tp, s: tries.append(s) or S(2, 1, (2,), 1)) \
        == []
    assert len(tries) == WRITE_ATTEMPTS
    assert zk.state("t", 0) == S(1, 0, (1, 2), 1)


async def test_a_state_written_by_a_newer_controller_makes_this_one_stale():
    zk = await zookeeper_with("t", {0: [1, 2]}, {0: S(1, 0, (1, 2), 5)})
    c = Parts(zk, epoch=4)
    with pytest.raises(StaleController):
        await c.load("t")


async def test_a_deleted_topic_is_not_brought_back_by_a_state_write():
    zk = await zookeeper_with("t", {0: [1, 2]}, {})
    c = Parts(zk)
    await c.load("t")
    await zk.delete(topic_path("t"))
    assert await c.store.update([("t", 0)], lambda tp, s: S(1, 0, (1, 2), 1)) == []
    assert topic_path("t") not in zk.nodes


async def test_an_assignment_is_rewritten_for_one_partition_keeping_the_others():
    zk = await zookeeper_with("t", {0: [1, 2], 1: [3, 4]}, {})
    c = Parts(zk)
    await c.load("t")
    path = topic_path("t")

    def someone_adds_a_partition(p):
        if p == path and zk.nodes[path][1] == 0:
            zk.nodes[path] = [encode_topic_assignment({0: [1, 2], 1: [3, 4], 2: [1]}), 1]
    zk.interfere = someone_adds_a_partition
    assert await c.store.write_assignment(("t", 0), [2, 3])
    assert zk.assignment("t") == c.view.assignments["t"] == {0: [2, 3], 1: [3, 4], 2: [1]}
    assert not await c.store.write_assignment(("t", 5), [1])




async def test_elections_go_through_the_view_and_the_store():
    zk = await zookeeper_with("t", {0: [1, 2, 3], 1: [2, 3]},
                              {0: S(1, 2, (1, 2, 3), 1), 1: S(2, 0, (2, 3), 1)})
    c = Parts(zk, live=(2, 3))
    await c.load("t")
    # 1 died: t-0's next ISR member leads; 1 leaves nothing else (it led t-0 only).
    assert await c.machine.elect_offline(c.view.led_by({1})) == [("t", 0)]
    assert zk.state("t", 0) == S(2, 3, (2, 3), 1)
    c.view.shutting_down.add(2)
    assert await c.machine.elect_for_shutdown([("t", 0), ("t", 1)]) == [("t", 0), ("t", 1)]
    assert zk.state("t", 0) == S(3, 4, (3,), 1) and zk.state("t", 1) == S(3, 1, (3,), 1)
    # Nothing moves back to 2 while it shuts down.
    assert await c.machine.elect_preferred([("t", 1)]) == []
    c.view.shutting_down.clear()
    assert await c.machine.elect_preferred([("t", 1)]) == []  # 2 is not in the ISR
