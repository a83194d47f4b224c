"""Fast failover (trilog/broker/controller/_liveness.py, _channel.py, _term.py,
_controller_watch.py): a broker or controller whose process is gone is noticed by the
connections to it closing and a refused probe, and its leadership moves at once, while its
ZooKeeper registration still exists; a broker whose connection drops while its process lives
(or that is paused) is left to its session timeout.  Also: the first broker back after the
whole cluster crashed does not lead with dead brokers in its ISR."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import trio
from broker_helpers import connect, roundtrip, serve_kafka
from kazoo.client import KazooClient
from replication_helpers import (
    controller_id,
    create,
    fully_replicated,
    metadata,
    produce_all,
    read_all,
    registered,
    wait_for,
)

from trilog import protocol as p
from trilog.broker.controller._channel import BrokerChannel
from trilog.broker.controller._liveness import probe

# -- the probe and the sender, against stand-in listeners ------------------------------------------


async def test_a_probe_tells_refused_from_answered():
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    assert await probe("127.0.0.1", port) is True
    await listeners[0].aclose()
    assert await probe("127.0.0.1", port) is False


async def test_a_probe_taken_by_a_dying_listener_connects_again():
    # A process exiting closes its sockets one by one: its listener, closed a moment after
    # the probe's connection got into its backlog, resets that connection.  The probe
    # connects again and is refused (it used to count the first connection as an answer).
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listener.socket.getsockname()[1]

    async def exit_soon():
        await trio.sleep(0.01)
        await listener.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(exit_soon)
        assert await probe("127.0.0.1", port) is False


async def test_a_probe_of_a_listener_that_drops_every_connection_is_unknown():
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listener.socket.getsockname()[1]

    async def drop_all():
        while True:
            stream = await listener.accept()
            await stream.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drop_all)
        assert await probe("127.0.0.1", port, timeout_s=0.5) is None
        nursery.cancel_scope.cancel()
    await listener.aclose()


class Replay:
    """``stream`` with ``first`` (bytes already read from it) read again first."""

    def __init__(self, stream, first: bytes) -> None:
        self.stream, self.first = stream, first

    def __aiter__(self):
        return self._chunks()

    async def _chunks(self):
        yield self.first
        async for data in self.stream:
            yield data

    async def send_all(self, data) -> None:
        await self.stream.send_all(data)


async def test_a_sender_reports_a_broker_gone_only_when_its_listener_refuses():
    """The stand-in broker closes the controller's connection twice while it still listens
    (an idle close, a restart of its network: not gone), then closes its listener and the
    connection (a killed process): only then is ``on_gone`` called."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    connections: list[trio.SocketStream] = []
    accepted = trio.Event()
    gone = trio.Event()

    async def handle(stream):
        try:
            first = await stream.receive_some()
            if not first:
                return  # a probe: connected and closed at once
            connections.append(stream)
            accepted.set()
            await serve_kafka(Replay(stream, first), None)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    channel = BrokerChannel(7, ("127.0.0.1", port), controller_id=1, security=None,
                            timeout_s=5, on_gone=gone.set)
    server = trio.CancelScope()

    async def serve() -> None:
        with server:
            await trio.serve_listeners(handle, listeners)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        nursery.start_soon(channel.run)
        for _ in range(2):
            await accepted.wait()
            accepted = trio.Event()
            await trio.sleep(0.2)  # the sender waits on an idle, negotiated connection
            await connections[-1].aclose()
        await accepted.wait()
        await trio.sleep(0.5)
        assert not gone.is_set()
        assert len(connections) == 3  # it reconnected each time
        server.cancel()  # the process dies: its listener and connections close
        await trio.sleep(0.1)
        await listeners[0].aclose()
        await connections[-1].aclose()
        with trio.fail_after(10):
            await gone.wait()
        channel.close()
        nursery.cancel_scope.cancel()


# -- real brokers ------------------------------------------------------------------------------------

SESSION_MS = 20_000
SETTINGS = {"zookeeper.session.timeout.ms": SESSION_MS, "replica.lag.time.max.ms": 2000,
            "replica.fetch.wait.max.ms": 100, "default.replication.factor": 3}


@pytest.fixture
def three(broker_process, zookeeper):
    brokers = {i: broker_process(broker_id=i, zookeeper=zookeeper, overrides=SETTINGS)
               for i in (1, 2, 3)}
    return brokers


def _state(zookeeper: str, topic: str, partition: int):
    client = KazooClient(zookeeper)
    client.start(timeout=10)
    try:
        data, stat = client.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        return json.loads(data), stat.version
    finally:
        client.stop()
        client.close()


def _answer(broker, topic):
    """``broker``'s Metadata v7 answer (with leader epochs) for ``topic``."""
    with connect(broker.bootstrap) as sock:
        return roundtrip(sock, p.MetadataRequest(topics=[
            p.MetadataRequest.MetadataRequestTopic(name=topic)]), 7)


def _leader_elsewhere(brokers, topic, old):
    for b in brokers.values():
        if b.broker_id != old:
            m = metadata(b, topic)
            if m and m[0].leader_id not in (-1, old):
                return m[0]
    return None


@pytest.mark.slow
def test_a_killed_leader_and_a_killed_controller_fail_over_before_their_sessions_end(
        three, zookeeper):
    brokers = three
    controller = wait_for(lambda: controller_id(brokers[1]) in brokers
                          and controller_id(brokers[1]), what="a controller")
    # A partition led by a broker that is not the controller (its preferred leader).
    others = sorted(b for b in brokers if b != controller)
    topic = "f"
    create(brokers[1], topic, 1, 3, {"min.insync.replicas": "2"},
           replicas=[others[0], controller, others[1]])
    meta = wait_for(lambda: fully_replicated(list(brokers.values()), topic, 1, 3),
                    what="three in-sync replicas")
    leader = meta[0].leader_id
    assert leader == others[0]
    epoch = _answer(brokers[leader], topic).topics[0].partitions[0].leader_epoch
    assert epoch >= 0

    brokers[leader].kill()
    new = wait_for(lambda: _leader_elsewhere(brokers, topic, leader), what="a new leader")
    # Elected while the dead broker's ZooKeeper session (20 s) still holds its registration.
    assert leader in registered(zookeeper)
    assert leader not in new.isr_nodes
    # Offline and leading nothing; the new leader's epoch is newer (KIP-320: a client
    # ignores an answer older than its own).
    answer = wait_for(lambda: (a := _answer(brokers[new.leader_id], topic))
                      and a.topics[0].partitions[0].leader_id != leader and a,
                      what="the new leader's own answer")
    (part,) = answer.topics[0].partitions
    assert part.offline_replicas == [leader] and leader not in part.isr_nodes
    assert part.leader_epoch > epoch
    assert produce_all(brokers[new.leader_id], topic, 0, [b"after the leader"]) == 0
    # Listed a moment (controller/_term.py's FENCED_LISTED_S), then no more, though still
    # registered: clients do not pick it to ask.
    wait_for(lambda: leader not in {b.node_id for b in
                                    _answer(brokers[new.leader_id], topic).brokers},
             timeout=10, what="the dead broker out of the broker list")
    assert leader in registered(zookeeper)

    # The controller dies: another is elected while its registration is still there.
    brokers[controller].kill()
    survivor = next(b for i, b in brokers.items() if i not in (leader, controller))
    wait_for(lambda: controller_id(survivor) not in (None, -1, controller),
             what="a new controller")
    assert controller in registered(zookeeper)
    assert controller_id(survivor) == survivor.broker_id


@pytest.mark.slow
def test_a_paused_leader_keeps_its_leadership_and_its_isr(three, zookeeper):
    """SIGSTOP for longer than replica.lag.time.max.ms (2 s), far shorter than the session:
    the kernel keeps its sockets and its listener answers, so no election happens; back, it
    handles its followers' queued fetches before its lag check, so its ISR never shrinks
    (the state node keeps its version)."""
    brokers = three
    create(brokers[1], "p", 1, 3)
    meta = wait_for(lambda: fully_replicated(list(brokers.values()), "p", 1, 3),
                    what="three in-sync replicas")
    leader = meta[0].leader_id
    state, version = _state(zookeeper, "p", 0)
    os.kill(brokers[leader].pid, signal.SIGSTOP)
    try:
        time.sleep(3.0)
        others = [b for i, b in brokers.items() if i != leader]
        assert all(metadata(b, "p")[0].leader_id == leader for b in others)
    finally:
        os.kill(brokers[leader].pid, signal.SIGCONT)
    time.sleep(2.5)  # a lag check or two after the pause
    assert _state(zookeeper, "p", 0) == (state, version)
    assert "stood still" in brokers[leader].stderr()


@pytest.mark.slow
def test_a_killed_follower_leaves_the_isr_and_the_leader_keeps_its_epoch(broker_process,
                                                                         zookeeper):
    """A follower is SIGKILLed: the controller takes it out of the ISR at once (long before
    replica.lag.time.max.ms, 30 s here, or its session); the leader adopts that ISR without
    a new leader epoch (KAFKA-15021: a new epoch would send every consumer through
    OffsetForLeaderEpoch), so its acks=all appends go on without the dead follower."""
    settings = {**SETTINGS, "replica.lag.time.max.ms": 30_000}
    brokers = {i: broker_process(broker_id=i, zookeeper=zookeeper, overrides=settings)
               for i in (1, 2, 3)}
    controller = wait_for(lambda: controller_id(brokers[1]) in brokers
                          and controller_id(brokers[1]), what="a controller")
    leader, follower = sorted(b for b in brokers if b != controller)
    create(brokers[1], "k", 1, 3, {"min.insync.replicas": "2"},
           replicas=[leader, controller, follower])
    wait_for(lambda: fully_replicated(list(brokers.values()), "k", 1, 3),
             what="three in-sync replicas")
    (before,) = _answer(brokers[leader], "k").topics[0].partitions
    assert produce_all(brokers[leader], "k", 0, [b"before"]) == 0
    state, version = _state(zookeeper, "k", 0)

    brokers[follower].kill()
    answer = wait_for(lambda: (a := _answer(brokers[leader], "k"))
                      and follower not in a.topics[0].partitions[0].isr_nodes and a,
                      timeout=10, what="the dead follower out of the ISR")
    assert follower in registered(zookeeper)  # (its session has not ended)
    (after,) = answer.topics[0].partitions
    assert (after.leader_id, after.leader_epoch) == (leader, before.leader_epoch)
    assert sorted(after.isr_nodes) == sorted([leader, controller])
    new_state, new_version = _state(zookeeper, "k", 0)
    assert new_state["leader_epoch"] == state["leader_epoch"] and new_version > version
    # The leader took the ISR: its acks=all append needs the controller's replica only.
    started = time.monotonic()
    assert produce_all(brokers[leader], "k", 0, [b"after"]) == 0
    assert time.monotonic() - started < 10
    assert read_all(brokers[leader], "k", 0) == [b"before", b"after"]


@pytest.mark.slow
def test_the_first_broker_back_after_a_full_crash_leads_without_the_dead(broker_process,
                                                                        zookeeper):
    """Every broker is SIGKILLed; one comes back at once, while the others' sessions still
    hold their registrations: it leads with itself alone in the ISR (the controller found
    the others gone), long before replica.lag.time.max.ms (30 s here) could drop them."""
    settings = {**SETTINGS, "replica.lag.time.max.ms": 30_000}
    brokers = {i: broker_process(broker_id=i, zookeeper=zookeeper, overrides=settings)
               for i in (1, 2, 3)}
    create(brokers[1], "c", 1, 3)
    wait_for(lambda: fully_replicated(list(brokers.values()), "c", 1, 3),
             what="three in-sync replicas")
    for b in brokers.values():
        b.proc.kill()  # all at once: nobody is left to shrink an ISR
    for b in brokers.values():
        b.kill()
    state, _version = _state(zookeeper, "c", 0)
    first = state["isr"][-1]
    back = broker_process(brokers[first].log_dir, broker_id=first, zookeeper=zookeeper,
                          overrides=settings)
    wait_for(lambda: (m := metadata(back, "c")) and m[0].leader_id == first
             and list(m[0].isr_nodes) == [first], what="led by the first back, alone in the ISR")
    assert set(registered(zookeeper)) >= {1, 2, 3} - {first}
    state, _version = _state(zookeeper, "c", 0)
    assert state["isr"] == [first]


# -- the leader's own stalls (pure) ---------------------------------------------------------------


def test_a_stall_is_a_tick_late_by_the_threshold():
    from trilog.broker.replication._replica_manager import stall_ms

    assert stall_ms(10.0, 10.25, 0.25, 500) == 0
    assert stall_ms(10.0, 10.7, 0.25, 500) == 0
    assert stall_ms(10.0, 13.25, 0.25, 500) == 3000


def test_a_stall_is_credited_to_the_followers():
    from trilog.broker.replication._partition import FollowerState, Partition

    part = Partition("t", 0, replicas=(1, 2, 3), leader=1, isr=(1, 2, 3))
    part.followers = {2: FollowerState(last_caught_up_ms=1000),
                      3: FollowerState(last_caught_up_ms=0)}
    # 4 s after follower 2 caught up, of which 3.5 s this leader stood still.
    assert part.lagging(1, 5000, 2000) == {2, 3}
    part.credit_stall(3500, 5000)
    assert part.followers[2].last_caught_up_ms == 4500
    assert part.lagging(1, 5000, 2000) == {3}  # (3 never caught up: no credit)
    part.credit_stall(10_000, 5000)
    assert part.followers[2].last_caught_up_ms == 5000  # never past now


# -- a broker that finds a leader gone holds Metadata answers for the controller's word ----------


async def test_metadata_waits_for_the_controller_after_a_leader_is_found_gone():
    from types import SimpleNamespace

    from trilog.broker.cluster import BrokerInfo, ZooKeeperCluster

    dead = await trio.open_tcp_listeners(0, host="127.0.0.1")
    dead_port = dead[0].socket.getsockname()[1]
    await dead[0].aclose()
    alive = await trio.open_tcp_listeners(0, host="127.0.0.1")
    alive_port = alive[0].socket.getsockname()[1]
    cluster = ZooKeeperCluster(None, BrokerInfo(1, "127.0.0.1", 1), "c", None, 1,
                               trio.CapacityLimiter(1), None)
    cluster._brokers = {1: BrokerInfo(1, "127.0.0.1", 1),
                        2: BrokerInfo(2, "127.0.0.1", dead_port),
                        3: BrokerInfo(3, "127.0.0.1", alive_port)}

    # A lost connection to a broker that still listens changes nothing.
    await cluster.peer_lost(3, ("127.0.0.1", alive_port))
    with trio.fail_after(0.1):
        await cluster.wait_settled()

    # One whose listener refuses: answers wait until the controller has moved its leadership
    # (it still lists the broker while its registration lasts) or no longer lists it.
    def update(leader, *ids):
        return SimpleNamespace(ungrouped_partition_states=[SimpleNamespace(
            topic_name="t", partition_index=0, leader=leader, leader_epoch=leader, isr=[leader],
            replicas=[1, 2, 3], offline_replicas=[])], topic_states=[], live_brokers=[
            SimpleNamespace(id=i, endpoints=None, v0_host="127.0.0.1", v0_port=9000 + i)
            for i in ids])

    for settling_update in (update(3, 1, 2, 3), update(2, 1, 3)):
        cluster.update_metadata(update(2, 1, 2, 3))
        await cluster.peer_lost(2, ("127.0.0.1", dead_port))
        settled = trio.Event()

        async def answer():
            await cluster.wait_settled()
            settled.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer)
            await trio.sleep(0.05)
            cluster.update_metadata(update(2, 1, 2, 3))  # the controller has not handled it
            await trio.sleep(0.05)
            assert not settled.is_set()
            cluster.update_metadata(settling_update)  # it has (well before SETTLE_S)
            with trio.fail_after(0.2):
                await settled.wait()
    await alive[0].aclose()
