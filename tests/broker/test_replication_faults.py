"""Replication under faults, on real broker processes and a real ZooKeeper: a leader's
divergent tail (records past the high watermark that no follower took) is truncated when
it returns (KIP-101), and a partition whose in-sync replicas are all down stays offline
until one of them returns, unless its topic allows unclean leader election."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from broker_helpers import connect, roundtrip, send_request
from replication_helpers import (
    NOT_ENOUGH_REPLICAS,
    SETTINGS,
    create,
    fully_replicated,
    log_bytes,
    metadata,
    produce_all,
    read_all,
    wait_for,
    wait_unregistered,
)

from trilog import protocol as p
from trilog.records import iter_batches

pytestmark = pytest.mark.slow


def log_values(log_dir: Path, topic: str, partition: int) -> list[bytes]:
    return [r.value for b in iter_batches(log_bytes(log_dir, topic, partition))
            for r in b.records()]


@pytest.fixture
def three(broker_process, zookeeper):
    def start(i: int, log_dir=None):
        return broker_process(log_dir, broker_id=i, zookeeper=zookeeper, overrides=SETTINGS)
    brokers = {i: start(i) for i in (1, 2, 3)}
    return brokers, start


# -- 1. divergence (KIP-101) ---------------------------------------------------------------------


def test_a_returning_leader_truncates_its_divergent_tail(three, zookeeper):
    brokers, start = three
    create(brokers[1], "d", 1, 3, {"min.insync.replicas": "1"})
    meta = wait_for(lambda: fully_replicated(list(brokers.values()), "d", 1, 3),
                    what="three in-sync replicas")
    old_id = meta[0].leader_id
    old = brokers[old_id]
    followers = {i: b for i, b in brokers.items() if i != old_id}
    acked = []
    for i in range(5):
        values = [b"acked-%d-%d" % (i, j) for j in range(4)]
        assert produce_all(old, "d", 0, values) == 0
        acked.extend(values)

    # The followers freeze (long enough for their pending long polls to return empty, far
    # shorter than the ZooKeeper session and replica.lag.time.max.ms); the leader takes
    # acks=1 records that no follower will ever fetch from it, and dies.
    for f in followers.values():
        os.kill(f.pid, signal.SIGSTOP)
    try:
        time.sleep(0.5)
        divergent = [b"divergent-%d" % j for j in range(7)]
        assert produce_all(old, "d", 0, divergent, acks=1) == 0
        old.kill()
    finally:
        for f in followers.values():
            os.kill(f.pid, signal.SIGCONT)
    assert log_values(old.log_dir, "d", 0) == acked + divergent

    # Another replica leads (a new leader epoch) and takes new writes at the offsets the
    # divergent records hold on the dead leader.
    some = next(iter(followers.values()))
    new_meta = wait_for(lambda: (m := metadata(some, "d")) and m[0].leader_id in followers
                        and m, what="a new leader")
    new_leader = followers[new_meta[0].leader_id]
    after = []
    for i in range(3):
        values = [b"after-%d-%d" % (i, j) for j in range(3)]
        wait_for(lambda v=values: produce_all(new_leader, "d", 0, v) == 0,
                 what="acks=all on the new leader")
        after.extend(values)
    assert read_all(new_leader, "d", 0) == acked + after

    # The old leader returns as a follower: it truncates its divergent tail and converges.
    wait_unregistered(zookeeper, old_id)
    brokers[old_id] = start(old_id, old.log_dir)
    wait_for(lambda: fully_replicated(list(brokers.values()), "d", 1, 3),
             what="the old leader back in the ISR")
    wait_for(lambda: len({log_bytes(b.log_dir, "d", 0) for b in brokers.values()}) == 1,
             what="identical logs on every replica")
    for b in brokers.values():
        assert log_values(b.log_dir, "d", 0) == acked + after
    assert read_all(new_leader, "d", 0) == acked + after


# -- 2. every in-sync replica down ----------------------------------------------------------------


def test_a_partition_without_live_isr_stays_offline_unless_unclean(three, zookeeper):
    """Two topics, one allowing unclean leader election: two brokers die, the third (the
    last ISR) takes acks=1 writes and refuses acks=all; then it dies too.  One of the first
    two returns alone: the clean topic stays offline, the unclean one is led by it (without
    the records only the last ISR had).  The last ISR member returns: the clean topic is led
    by it with every acknowledged record, and the unclean topic's replicas converge."""
    brokers, start = three
    topics = {"clean": {"min.insync.replicas": "2"},
              "unclean": {"min.insync.replicas": "2", "unclean.leader.election.enable": "true"}}
    for topic, configs in topics.items():
        create(brokers[1], topic, 1, 3, configs)
    for topic in topics:
        wait_for(lambda t=topic: fully_replicated(list(brokers.values()), t, 1, 3),
                 what=f"three in-sync replicas of {topic}")
    acked = {t: [] for t in topics}
    for topic in topics:
        leader = brokers[metadata(brokers[1], topic)[0].leader_id]
        for i in range(3):
            values = [b"%s-all-%d-%d" % (topic.encode(), i, j) for j in range(5)]
            assert produce_all(leader, topic, 0, values) == 0
            acked[topic].extend(values)

    # Two of three die; the last one leads both topics with an ISR of itself alone.
    last_id = 3
    for i in (1, 2):
        brokers[i].kill()
    last = brokers[last_id]
    for topic in topics:
        wait_for(lambda t=topic: (m := metadata(last, t)) and m[0].leader_id == last_id
                 and list(m[0].isr_nodes) == [last_id], what=f"{topic} led by {last_id} alone")
        # acks=all with min.insync.replicas=2 is refused before appending ...
        assert produce_all(last, topic, 0, [b"refused"]) == NOT_ENOUGH_REPLICAS
        # ... and acks=1 is still acknowledged.
        tail = [b"%s-one-%d" % (topic.encode(), j) for j in range(4)]
        assert produce_all(last, topic, 0, tail, acks=1) == 0
        acked[topic].extend(tail)
        assert read_all(last, topic, 0) == acked[topic], log_values(last.log_dir, topic, 0)

    # The last ISR member dies too; one of the others returns alone.
    last.kill()
    for i in (1, 2, 3):
        wait_unregistered(zookeeper, i)
    brokers[1] = start(1, brokers[1].log_dir)
    wait_for(lambda: (m := metadata(brokers[1], "unclean")) and m[0].leader_id == 1,
             what="the unclean topic led by the returned broker")
    without_tail = acked["unclean"][:15]
    assert read_all(brokers[1], "unclean", 0) == without_tail
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        m = metadata(brokers[1], "clean")
        assert m is not None and m[0].leader_id == -1, m
        assert produce_all(brokers[1], "clean", 0, [b"nowhere"], acks=1) != 0
        time.sleep(0.3)

    # The last ISR member returns: it leads the clean topic again, nothing acknowledged lost.
    brokers[last_id] = start(last_id, last.log_dir)
    wait_for(lambda: (m := metadata(brokers[1], "clean")) and m[0].leader_id == last_id,
             what="the clean topic led by the last ISR member")
    wait_for(lambda: read_all(brokers[last_id], "clean", 0) == acked["clean"],
             what="every acknowledged record of the clean topic")
    brokers[2] = start(2, brokers[2].log_dir)
    for topic in topics:
        wait_for(lambda t=topic: fully_replicated(list(brokers.values()), t, 1, 3),
                 what=f"three in-sync replicas of {topic} again")
        wait_for(lambda t=topic: len({log_bytes(b.log_dir, t, 0)
                                      for b in brokers.values()}) == 1,
                 what=f"identical logs of {topic}")
    assert log_values(brokers[2].log_dir, "clean", 0) == acked["clean"]
    assert log_values(brokers[2].log_dir, "unclean", 0) == without_tail


# -- reduced: a follower that hears of its new leader before the leader does ------------------


def controller_id(broker) -> int:
    with connect(broker.bootstrap) as sock:
        return roundtrip(sock, p.MetadataRequest(topics=[]), 5).controller_id


def test_a_follower_keeps_fetching_when_it_hears_of_its_leader_first(three):
    """A new partition's leader is paused while the controller tells every replica: the
    followers' first requests (OffsetForLeaderEpoch) wait at the leader beside its own
    LeaderAndIsr, which it is still handling (creating the log) when it answers them, with
    NOT_LEADER_OR_FOLLOWER.  The followers must try again: no other LeaderAndIsr is coming.
    (Without the pause the same happens by chance, for a few percent of new partitions.)"""
    brokers, _start = three
    controller = controller_id(brokers[1])
    leader_id = next(i for i in brokers if i != controller)
    leader = brokers[leader_id]
    order = [leader_id] + [i for i in brokers if i != leader_id]
    R = p.CreateTopicsRequest
    os.kill(leader.pid, signal.SIGSTOP)
    try:
        with connect(brokers[controller].bootstrap) as sock:
            send_request(sock, R(topics=[R.CreatableTopic(
                name="s", num_partitions=-1, replication_factor=-1, configs=[],
                assignments=[R.CreatableTopic.CreatableReplicaAssignment(
                    partition_index=0, broker_ids=order)])], timeout_ms=15_000), 3)
            time.sleep(1.0)  # the followers' fetchers are waiting for the leader
            os.kill(leader.pid, signal.SIGCONT)
    finally:
        os.kill(leader.pid, signal.SIGCONT)
    wait_for(lambda: (m := metadata(leader, "s")) and m[0].leader_id == leader_id,
             what="the leader of s")
    wait_for(lambda: produce_all(leader, "s", 0, [b"one"], acks=1) == 0, what="a produce")
    # Every follower copies the record within a few fetch waits and stays in the ISR.
    stuck = []
    deadline = time.monotonic() + 5
    for b in brokers.values():
        while log_values(b.log_dir, "s", 0) != [b"one"]:
            if time.monotonic() > deadline:
                stuck.append(b.broker_id)
                break
            time.sleep(0.1)
    for b in brokers.values():
        b.kill()  # a controlled shutdown with stuck followers would only take longer
    assert not stuck, f"followers that never fetched from {leader_id}: {stuck}"
