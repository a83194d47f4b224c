"""Partition reassignment by the controller (``controller/_reassignment.py``, Kafka's
onPartitionReassignment) against a real ZooKeeper and fake brokers (``test_control``'s
harness): the steps of a reassignment as ZooKeeper and the brokers see them, its resumption
by a new controller, and the plans it drops."""

from __future__ import annotations

import trio
from test_control import harness, wait_until

from trilog.protocol import ApiKey
from trilog.zk import (
    ISR_CHANGE_NOTIFICATION,
    REASSIGN_PARTITIONS,
    NoNodeError,
    PartitionState,
    decode_reassignment,
    decode_topic_assignment,
    encode_isr_change,
    encode_reassignment,
    partition_state_path,
    topic_path,
)


async def assignment(h, topic):
    return decode_topic_assignment(topic, await h.zk.get(topic_path(topic)))


async def assignment_becomes(h, topic, expected, timeout=15.0):
    """The controller writes a partition's state before its assignment: wait for both."""
    with trio.fail_after(timeout):
        while await assignment(h, topic) != expected:
            await trio.sleep(0.02)


async def pending(h):
    """What ``/admin/reassign_partitions`` still lists (None: the node is gone)."""
    try:
        return decode_reassignment(await h.zk.get(REASSIGN_PARTITIONS))
    except NoNodeError:
        return None


async def node_gone(h, timeout=15.0):
    with trio.fail_after(timeout):
        while await pending(h) is not None:
            await trio.sleep(0.02)


async def join_isr(h, topic, partition, isr):
    """What a leader does when followers caught up: write the ISR conditionally and post an
    ISR change notification."""
    data, version = await h.zk.get_versioned(partition_state_path(topic, partition))
    state = PartitionState.decode(data)
    await h.zk.set(partition_state_path(topic, partition),
                   PartitionState(state.leader, state.leader_epoch, tuple(isr),
                                  state.controller_epoch).encode(), version=version)
    await h.zk.create(f"{ISR_CHANGE_NOTIFICATION}/isr_change_",
                      encode_isr_change([(topic, partition)]), sequence=True, makepath=True)


def told(broker, topic, partition):
    return [s for s in broker.leader_and_isr()
            if (s.topic_name, s.partition_index) == (topic, partition)]


def stopped(broker):
    return [(r.delete_partitions, sorted((p.topic_name, p.partition_index)
                                         for p in r.ungrouped_partitions))
            for r in broker.requests(ApiKey.STOP_REPLICA)]


async def test_a_partition_moves_to_new_replicas_and_its_leader_with_it(zookeeper):
    async with harness(zookeeper) as h:
        for b in (1, 2, 3, 4):
            await h.start_broker(b)
        await h.create_topic("t", {0: [1, 2], 1: [3, 4]})
        controller, _ = await h.start_controller(1)
        await controller.active_epoch.wait_value(1)
        assert controller.states()[("t", 0)] == PartitionState(1, 0, (1, 2), 1)

        # t-0 moves from [1, 2] to [2, 3]; t-1 is where the plan puts it already, and
        # "gone" does not exist: both leave the node at once.
        await h.zk.create(REASSIGN_PARTITIONS, encode_reassignment(
            {("t", 0): [2, 3], ("t", 1): [3, 4], ("gone", 0): [1]}), makepath=True)

        # Step 1: the assignment is the target and the old replicas, with a new epoch
        # for every replica; the new one (3) is told it is new.
        await wait_until(lambda: controller.states()[("t", 0)].leader_epoch == 1)
        assert (await assignment(h, "t"))[0] == [2, 3, 1]
        assert controller.states()[("t", 0)] == PartitionState(1, 1, (1, 2), 1)
        for b in (1, 2, 3):
            await wait_until(lambda b=b: any(s.leader_epoch == 1
                                             for s in told(h.brokers[b], "t", 0)))
            last = told(h.brokers[b], "t", 0)[-1]
            assert (last.leader, last.isr, last.replicas, last.is_new) == \
                (1, [1, 2], [2, 3, 1], b == 3)
        assert not told(h.brokers[4], "t", 0)
        await wait_until(lambda: any(s.replicas == [2, 3, 1] for s in
                                     h.brokers[4].last_metadata().ungrouped_partition_states))
        assert await pending(h) == {("t", 0): [2, 3]}
        assert (await assignment(h, "t"))[1] == [3, 4]

        # It waits while 3 is not in the ISR.
        await trio.sleep(0.3)
        assert (await assignment(h, "t"))[0] == [2, 3, 1]

        # Step 2 done: the leader adds 3 to the ISR.  Then 2 leads (the first target
        # replica in the ISR), 1 leaves the ISR and the assignment, and deletes its replica.
        await join_isr(h, "t", 0, (1, 2, 3))
        await wait_until(lambda: controller.states()[("t", 0)].leader_epoch == 3)
        assert controller.states()[("t", 0)] == PartitionState(2, 3, (2, 3), 1)
        assert await h.read_state("t", 0) == PartitionState(2, 3, (2, 3), 1)
        await assignment_becomes(h, "t", {0: [2, 3], 1: [3, 4]})
        await wait_until(lambda: stopped(h.brokers[1]))
        assert stopped(h.brokers[1]) == [(True, [("t", 0)])]
        # broker 1 heard of its successor before it was stopped
        assert [(s.leader, s.leader_epoch) for s in told(h.brokers[1], "t", 0)][-1] == (2, 2)
        for b in (2, 3):
            await wait_until(lambda b=b: told(h.brokers[b], "t", 0)[-1].leader_epoch == 3)
            last = told(h.brokers[b], "t", 0)[-1]
            assert (last.leader, last.isr, last.replicas) == (2, [2, 3], [2, 3])
        assert not stopped(h.brokers[2]) and not stopped(h.brokers[3])
        await wait_until(lambda: any(
            s.partition_index == 0 and s.replicas == [2, 3] and s.leader == 2
            for s in h.brokers[4].last_metadata().ungrouped_partition_states))
        await wait_until(lambda: not controller._term.reassignments.under_way)
        await node_gone(h)  # the node goes right after the in-memory plan


async def test_a_new_controller_resumes_a_reassignment(zookeeper):
    async with harness(zookeeper) as h:
        for b in (1, 2, 3):
            await h.start_broker(b)
        await h.create_topic("t", {0: [1, 2, 3]})
        first, first_session = await h.start_controller(1)
        await first.active_epoch.wait_value(1)
        second, _ = await h.start_controller(2)

        # Shrinking to a subset needs no new replica: it completes at once.  A reorder
        # keeps the leader (1) and changes the preferred one.
        await h.zk.create(REASSIGN_PARTITIONS, encode_reassignment({("t", 0): [3, 1]}),
                          makepath=True)
        await wait_until(lambda: first.states()[("t", 0)].isr == (1, 3))
        assert first.states()[("t", 0)] == PartitionState(1, 1, (1, 3), 1)
        await assignment_becomes(h, "t", {0: [3, 1]})
        await wait_until(lambda: stopped(h.brokers[2]) == [(True, [("t", 0)])])
        await node_gone(h)

        # A move to [2] is under way (2 joins the replicas) when the controller dies;
        # the next one finishes it once 2 is in the ISR.
        await h.zk.create(REASSIGN_PARTITIONS, encode_reassignment({("t", 0): [2]}))
        await wait_until(lambda: first.states()[("t", 0)].leader_epoch == 2)
        assert (await assignment(h, "t"))[0] == [2, 3, 1]
        first_session.cancel()
        await second.active_epoch.wait_value(2)
        await trio.sleep(0.3)
        assert (await assignment(h, "t"))[0] == [2, 3, 1]
        await join_isr(h, "t", 0, (1, 2, 3))
        await wait_until(lambda: (second.states()[("t", 0)].leader,
                                  second.states()[("t", 0)].isr) == (2, (2,)))
        await assignment_becomes(h, "t", {0: [2]})
        await wait_until(lambda: [r for r in stopped(h.brokers[3]) if r[0]]
                         == [(True, [("t", 0)])])
        await node_gone(h)


async def test_a_plan_naming_a_broker_that_is_not_live_is_dropped(zookeeper):
    async with harness(zookeeper) as h:
        for b in (1, 2):
            await h.start_broker(b)
        await h.create_topic("t", {0: [1], 1: [2]})
        controller, _ = await h.start_controller(1)
        await controller.active_epoch.wait_value(1)
        await h.zk.create(REASSIGN_PARTITIONS, encode_reassignment(
            {("t", 0): [1, 7], ("t", 1): [1]}), makepath=True)
        # t-0 is dropped (7 is not live); t-1 moves from 2 to 1.
        await wait_until(lambda: controller.states()[("t", 1)].leader_epoch == 1)
        assert (await assignment(h, "t")) == {0: [1], 1: [1, 2]}
        assert await pending(h) == {("t", 1): [1]}
        await join_isr(h, "t", 1, (2, 1))
        await wait_until(lambda: controller.states()[("t", 1)] == PartitionState(1, 3, (1,), 1))
        await assignment_becomes(h, "t", {0: [1], 1: [1]})
        await node_gone(h)
