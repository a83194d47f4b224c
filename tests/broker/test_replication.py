"""Replication on real broker processes and a real ZooKeeper: a topic with three replicas
survives the loss of its leader, followers converge to the leader's log byte for byte, and
``acks=all`` means what it says."""

from __future__ import annotations

import subprocess
import sys

import pytest
from replication_helpers import (
    NOT_ENOUGH_REPLICAS,
    SETTINGS,
    create,
    fully_replicated,
    live_brokers,
    log_bytes,
    metadata,
    produce_all,
    read_all,
    wait_for,
)

import trilog.sync

pytestmark = pytest.mark.slow


@pytest.fixture
def three(broker_process, zookeeper):
    def start(i: int, log_dir=None):
        return broker_process(log_dir, broker_id=i, zookeeper=zookeeper, overrides=SETTINGS)
    brokers = {i: start(i) for i in (1, 2, 3)}
    wait_for(lambda: len(live_brokers(brokers[1])) == 3, what="three brokers registered")
    return brokers, start


def test_a_replicated_topic_survives_its_leaders_death(three):
    brokers, start = three
    create(brokers[1], "r", 3, 3)
    meta = wait_for(lambda: fully_replicated(list(brokers.values()), "r", 3, 3),
                    what="three in-sync replicas everywhere")
    assert all(sorted(x.replica_nodes) == [1, 2, 3] for x in meta.values())
    leader_id = meta[0].leader_id
    leader = brokers[leader_id]
    acked = []
    for i in range(50):
        values = [b"r%03d-%d" % (i, j) for j in range(10)]
        assert produce_all(leader, "r", 0, values) == 0
        acked.extend(values)
    leader.kill()
    survivors = [b for i, b in brokers.items() if i != leader_id]
    new_meta = wait_for(lambda: (m := metadata(survivors[0], "r")) and m[0].leader_id not in
                        (-1, leader_id) and m, what="a new leader")
    new_leader = brokers[new_meta[0].leader_id]
    # Nothing acknowledged is lost.  (A new leader's high watermark, what consumers may
    # read, catches up with its log once its follower fetched: Kafka's behaviour too.)
    wait_for(lambda: read_all(new_leader, "r", 0) == acked, what="every acked record")
    more = [b"after-%d" % j for j in range(10)]
    wait_for(lambda: produce_all(new_leader, "r", 0, more) == 0, what="acks=all with 2 ISR")
    # The dead broker returns, catches up, rejoins the ISR; the logs are identical.
    brokers[leader_id] = start(leader_id, leader.log_dir)
    wait_for(lambda: fully_replicated(list(brokers.values()), "r", 3, 3),
             what="the returned broker back in the ISR")
    assert read_all(new_leader, "r", 0) == acked + more
    wait_for(lambda: len({log_bytes(b.log_dir, "r", 0) for b in brokers.values()}) == 1,
             what="identical logs on every replica")


def test_acks_all_needs_min_insync_replicas(three):
    brokers, _start = three
    create(brokers[1], "m", 1, 3, {"min.insync.replicas": "2"})
    meta = wait_for(lambda: fully_replicated(list(brokers.values()), "m", 1, 3),
                    what="three in-sync replicas")
    leader_id = meta[0].leader_id
    followers = [b for i, b in brokers.items() if i != leader_id]
    assert produce_all(brokers[leader_id], "m", 0, [b"one"]) == 0
    for f in followers:
        f.kill()
    # The followers leave the ISR after replica.lag.time.max.ms; then acks=all is refused
    # before appending, and acks=1 still works.
    wait_for(lambda: produce_all(brokers[leader_id], "m", 0, [b"two"]) ==
             NOT_ENOUGH_REPLICAS, what="NOT_ENOUGH_REPLICAS")
    assert produce_all(brokers[leader_id], "m", 0, [b"three"], acks=1) == 0


def test_the_producer_follows_a_leader_restarted_on_another_port(three):
    """trilog's producer keeps one writer per broker id: when a broker comes back on a new
    port and leads again, the producer reaches it at its new address (it kept connecting
    to the old one, and every record timed out)."""
    brokers, start = three
    create(brokers[1], "moved", 1, 3, {"min.insync.replicas": "2"})
    meta = wait_for(lambda: fully_replicated(list(brokers.values()), "moved", 1, 3),
                    what="three in-sync replicas")
    first = meta[0].leader_id  # the preferred leader
    other = next(i for i in brokers if i != first)
    producer = trilog.sync.Producer(
        ",".join(b.bootstrap for b in brokers.values()), acks="all", linger_ms=0,
        retries=1000, retry_backoff_ms=20, delivery_timeout_ms=20_000)
    try:
        def send(value: bytes) -> int:
            return producer.send("moved", value, partition=0).get(timeout=30).offset

        assert send(b"to the first leader") == 0  # the producer's writer for `first` exists
        old_port = brokers[first].port
        brokers[first].kill()
        assert send(b"to the second leader") == 1
        brokers[first] = start(first, brokers[first].log_dir)
        assert brokers[first].port != old_port
        wait_for(lambda: fully_replicated(list(brokers.values()), "moved", 1, 3),
                 what="the restarted broker back in the ISR")
        elect = subprocess.run(
            [sys.executable, "-m", "trilog", "topics", "--bootstrap-server",
             brokers[other].bootstrap, "--elect-leaders", "--topic", "moved"],
            capture_output=True, text=True, timeout=60)
        assert elect.returncode == 0, elect.stderr
        wait_for(lambda: metadata(brokers[other], "moved")[0].leader_id == first,
                 what="the restarted broker leading again")
        assert send(b"to the restarted leader") == 2
    finally:
        producer.close()
    assert read_all(brokers[first], "moved", 0) == [
        b"to the first leader", b"to the second leader", b"to the restarted leader"]
