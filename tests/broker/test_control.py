"""The controller's work (``controller.Controller``) against a real ZooKeeper and fake brokers:
small TCP servers that answer ApiVersions, record the LeaderAndIsr, UpdateMetadata and
StopReplica requests they get (answering NONE), and are registered in ``/brokers/ids`` by
ZooKeeper sessions of their own, so that closing a session is a broker's death."""

from __future__ import annotations

from contextlib import asynccontextmanager

import trio
from broker_helpers import serve_kafka
from wait_helpers import wait_until

from trilog.broker.configs._broker_config import BrokerConfig
from trilog.broker.controller._controller import Controller
from trilog.broker.controller._election import ControllerElection
from trilog.errors import (
    ElectionNotNeededError,
    NotControllerError,
    PreferredLeaderNotAvailableError,
    StaleControllerEpochError,
    UnknownTopicOrPartitionError,
)
from trilog.protocol import (
    ApiKey,
    ControlledShutdownRequest,
    ElectLeadersRequest,
    LeaderAndIsrResponse,
    RequestHeader,
    StopReplicaResponse,
    UpdateMetadataResponse,
    encode_response,
)
from trilog.zk import (
    CONTROLLER_EPOCH,
    ISR_CHANGE_NOTIFICATION,
    BrokerRegistration,
    PartitionState,
    broker_path,
    encode_isr_change,
    encode_topic_assignment,
    open_zookeeper,
    partition_state_path,
    topic_path,
)

SERVED = {ApiKey.API_VERSIONS: (0, 2), ApiKey.LEADER_AND_ISR: (0, 3),
          ApiKey.STOP_REPLICA: (0, 1), ApiKey.UPDATE_METADATA: (0, 5)}
ANSWERS = {ApiKey.LEADER_AND_ISR: LeaderAndIsrResponse(error_code=0, partition_errors=[]),
           ApiKey.STOP_REPLICA: StopReplicaResponse(error_code=0, partition_errors=[]),
           ApiKey.UPDATE_METADATA: UpdateMetadataResponse(error_code=0)}


class FakeBroker:
    """Answers the controller's requests and keeps them: ``received`` is a list of
    ``(api_key, version, request)``."""

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.port = 0
        self.received: list[tuple[int, int, object]] = []
        self.session = trio.CancelScope()
        #: answer LeaderAndIsr with STALE_CONTROLLER_EPOCH (it has seen a newer controller)
        self.stale = False

    def requests(self, api_key):
        return [r for k, _v, r in self.received if k == api_key]

    def leader_and_isr(self):
        """Every partition state received in LeaderAndIsr, in order."""
        return [s for r in self.requests(ApiKey.LEADER_AND_ISR)
                for s in r.ungrouped_partition_states]

    def last_metadata(self):
        got = self.requests(ApiKey.UPDATE_METADATA)
        return got[-1] if got else None

    def metadata_states(self):
        """The partition states of the last UpdateMetadata, none before the first."""
        last = self.last_metadata()
        return last.ungrouped_partition_states if last is not None else []

    def metadata_broker_ids(self):
        last = self.last_metadata()
        return sorted(b.id for b in last.live_brokers) if last is not None else []

    async def handle(self, stream) -> None:
        try:
            await serve_kafka(stream, self.answer, versions=SERVED)
        except trio.BrokenResourceError:
            pass  # a client reset its connection (a controller watch that stopped)

    async def answer(self, header, request):
        self.received.append((header.api_key, header.api_version, request))
        if header.api_key != ApiKey.LEADER_AND_ISR:
            return ANSWERS[header.api_key]
        if self.stale:
            return LeaderAndIsrResponse(error_code=StaleControllerEpochError.code,
                                        partition_errors=[])
        # Kafka's answer to a leader epoch that is not newer: no news to the controller,
        # which goes on.
        return LeaderAndIsrResponse(error_code=0, partition_errors=[
            LeaderAndIsrResponse.LeaderAndIsrPartitionError(
                topic_name=s.topic_name, partition_index=s.partition_index,
                error_code=StaleControllerEpochError.code)
            for s in request.ungrouped_partition_states])


class Harness:
    def __init__(self, zookeeper: str, nursery: trio.Nursery, zk) -> None:
        self.connect = zookeeper
        self.nursery = nursery
        self.zk = zk  # the test's own session, for writing the layout
        self.brokers: dict[int, FakeBroker] = {}

    async def start_broker(self, broker_id: int) -> FakeBroker:
        broker = self.brokers.get(broker_id) or FakeBroker(broker_id)
        if not broker.port:
            listeners = await self.nursery.start(trio.serve_tcp, broker.handle, 0)
            broker.port = listeners[0].socket.getsockname()[1]
        broker.session = trio.CancelScope()
        self.brokers[broker_id] = broker

        async def registered(task_status=trio.TASK_STATUS_IGNORED):
            with broker.session:
                async with open_zookeeper(self.connect, session_timeout_ms=4000) as zk:
                    await zk.create(broker_path(broker_id),
                                    BrokerRegistration(broker_id, "127.0.0.1", broker.port)
                                    .encode(), ephemeral=True, makepath=True)
                    task_status.started()
                    await trio.sleep_forever()

        await self.nursery.start(registered)
        return broker

    async def kill(self, broker_id: int) -> None:
        """The broker's session ends: its registration goes at once."""
        self.brokers[broker_id].session.cancel()
        await wait_until(lambda: True)

    async def start_controller(self, broker_id: int = 1, unclean=(), **settings):
        """A Controller with its election and ZooKeeper session; returns (controller,
        cancel scope of its session)."""
        config = BrokerConfig.from_dict({"auto.leader.rebalance.enable": False,
                                         "controller.socket.timeout.ms": 5000, **settings})
        scope = trio.CancelScope()

        async def run(task_status=trio.TASK_STATUS_IGNORED):
            with scope:
                async with open_zookeeper(self.connect, session_timeout_ms=4000) as zk:
                    election = ControllerElection(zk, broker_id)
                    controller = Controller(zk, election, broker_id, config,
                                            lambda topic: topic in unclean)
                    task_status.started(controller)
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(election.run)
                        nursery.start_soon(controller.run)

        controller = await self.nursery.start(run)
        return controller, scope

    async def create_topic(self, topic: str, assignment: dict[int, list[int]]) -> None:
        await self.zk.create(topic_path(topic), encode_topic_assignment(assignment),
                             makepath=True)

    async def write_state(self, topic: str, partition: int, state: PartitionState) -> None:
        await self.zk.create(partition_state_path(topic, partition), state.encode(),
                             makepath=True)

    async def read_state(self, topic: str, partition: int) -> PartitionState:
        return PartitionState.decode(await self.zk.get(partition_state_path(topic, partition)))


@asynccontextmanager
async def harness(zookeeper):
    async with open_zookeeper(zookeeper) as zk:
        async with trio.open_nursery() as nursery:
            yield Harness(zookeeper, nursery, zk)
            nursery.cancel_scope.cancel()


async def states_become(controller, expected, timeout=15.0):
    """Wait until the controller's states are ``expected`` (an event's writes are done);
    returns them."""
    with trio.move_on_after(timeout):
        while controller.states() != expected:
            await trio.sleep(0.02)
    assert controller.states() == expected
    return expected


def states_of(states, topic):
    return {p: s for (t, p), s in states.items() if t == topic}


T_ASSIGNMENT = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}


async def test_startup_elects_creates_states_and_tells_every_broker(zookeeper):
    async with harness(zookeeper) as h:
        for b in (1, 2, 3):
            await h.start_broker(b)
        await h.create_topic("t", T_ASSIGNMENT)
        # A partition whose leader (4) is not live: its first live ISR member leads.
        await h.create_topic("u", {0: [4, 1]})
        await h.write_state("u", 0, PartitionState(4, 3, (4, 1), 0))
        controller, _ = await h.start_controller(1)
        await controller.active_epoch.wait_value(1)

        states = controller.states()
        assert states_of(states, "t") == {
            0: PartitionState(1, 0, (1, 2, 3), 1), 1: PartitionState(2, 0, (2, 3, 1), 1),
            2: PartitionState(3, 0, (3, 1, 2), 1)}
        assert states[("u", 0)] == PartitionState(1, 4, (1,), 1)
        for (topic, partition), state in states.items():
            assert await h.read_state(topic, partition) == state

        for b, broker in h.brokers.items():
            await wait_until(lambda broker=broker: broker.last_metadata() is not None)
            got = broker.leader_and_isr()
            expected = {(t, p) for t, parts in (("t", T_ASSIGNMENT), ("u", {0: [4, 1]}))
                        for p, replicas in parts.items() if b in replicas}
            assert {(s.topic_name, s.partition_index) for s in got} == expected
            for s in got:
                assert s.controller_epoch == 1
                assert s.is_new == (s.topic_name == "t")
                # the state node's version: u-0's was rewritten once
                assert s.partition_epoch == (s.topic_name == "u")
            request = broker.requests(ApiKey.LEADER_AND_ISR)[0]
            assert request.controller_id == 1 and request.controller_epoch == 1
            assert {lead.broker_id for lead in request.live_leaders} <= {1, 2, 3}
            metadata = broker.last_metadata()
            assert metadata.controller_epoch == 1
            assert sorted(b.id for b in metadata.live_brokers) == [1, 2, 3]
            assert metadata.live_brokers[0].endpoints[0].listener == "PLAINTEXT"
            by_tp = {(s.topic_name, s.partition_index): s
                     for s in metadata.ungrouped_partition_states}
            assert set(by_tp) == {("t", 0), ("t", 1), ("t", 2), ("u", 0)}
            assert by_tp[("u", 0)].offline_replicas == [4]
            assert by_tp[("t", 1)].leader == 2 and by_tp[("t", 1)].replicas == [2, 3, 1]


async def test_a_dead_broker_loses_its_leaderships_and_isr_places(zookeeper):
    async with harness(zookeeper) as h:
        for b in (1, 2, 3):
            await h.start_broker(b)
        await h.create_topic("t", T_ASSIGNMENT)
        # Only broker 2 is in sync: offline when it dies, unless unclean election is on.
        for topic in ("solo", "dirty"):
            await h.create_topic(topic, {0: [2, 3]})
            await h.write_state(topic, 0, PartitionState(2, 5, (2,), 0))
        controller, _ = await h.start_controller(1, unclean={"dirty"})
        await controller.active_epoch.wait_value(1)
        seen = len(h.brokers[3].leader_and_isr())

        await h.kill(2)
        states = await states_become(controller, {
            # t-1 ([2, 3, 1]): the next ISR member in assignment order leads.
            ("t", 1): PartitionState(3, 1, (3, 1), 1),
            # Where 2 followed, it leaves the ISR; the leader keeps its epoch.
            ("t", 0): PartitionState(1, 0, (1, 3), 1),
            ("t", 2): PartitionState(3, 0, (3, 1), 1),
            ("solo", 0): PartitionState(-1, 6, (2,), 1),
            ("dirty", 0): PartitionState(3, 6, (3,), 1)})
        for (topic, partition), state in states.items():
            assert await h.read_state(topic, partition) == state

        broker3 = h.brokers[3]
        await wait_until(lambda: {(s.topic_name, s.partition_index)
                                  for s in broker3.leader_and_isr()[seen:]}
                         >= {("t", 0), ("t", 1), ("t", 2), ("dirty", 0)})
        told = {(s.topic_name, s.partition_index): s for s in broker3.leader_and_isr()[seen:]}
        assert told[("t", 1)].leader == 3 and told[("t", 1)].leader_epoch == 1
        assert told[("t", 1)].partition_epoch == 1
        # Only an ISR change: the same leader epoch, a newer version of the state.
        assert (told[("t", 2)].leader, told[("t", 2)].leader_epoch, told[("t", 2)].isr,
                told[("t", 2)].partition_epoch) == (3, 0, [3, 1], 1)
        await wait_until(lambda: broker3.metadata_broker_ids() == [1, 3])
        by_tp = {(s.topic_name, s.partition_index): s
                 for s in broker3.last_metadata().ungrouped_partition_states}
        assert by_tp[("solo", 0)].leader == -1
        assert by_tp[("t", 1)].offline_replicas == [2]

        # Broker 2 returns: the offline partition's last ISR member leads it again, and
        # it is told about every partition it replicates.
        broker2 = h.brokers[2]
        before = len(broker2.leader_and_isr())
        await h.start_broker(2)
        await wait_until(lambda: controller.states()[("solo", 0)].leader == 2)
        assert controller.states()[("solo", 0)] == PartitionState(2, 7, (2,), 1)
        await wait_until(lambda: {(s.topic_name, s.partition_index)
                                  for s in broker2.leader_and_isr()[before:]}
                         == {("t", 0), ("t", 1), ("t", 2), ("solo", 0), ("dirty", 0)})


async def test_new_topics_and_partitions_get_states(zookeeper):
    async with harness(zookeeper) as h:
        for b in (1, 2):
            await h.start_broker(b)
        controller, _ = await h.start_controller(1)
        await controller.active_epoch.wait_value(1)

        await h.create_topic("fresh", {0: [1, 2], 1: [2, 1]})
        await wait_until(lambda: len(states_of(controller.states(), "fresh")) == 2)
        assert states_of(controller.states(), "fresh") == {
            0: PartitionState(1, 0, (1, 2), 1), 1: PartitionState(2, 0, (2, 1), 1)}
        assert await h.read_state("fresh", 1) == PartitionState(2, 0, (2, 1), 1)
        broker2 = h.brokers[2]
        await wait_until(lambda: len(broker2.leader_and_isr()) == 2)
        assert all(s.is_new for s in broker2.leader_and_isr())

        # A partition none of whose replicas is live is created offline, and elected
        # when one of them joins.
        await h.create_topic("later", {0: [3, 4]})
        await wait_until(lambda: ("later", 0) in controller.states())
        assert controller.states()[("later", 0)] == PartitionState(-1, 0, (), 1)
        await h.start_broker(3)
        await wait_until(lambda: controller.states()[("later", 0)].leader == 3)
        assert controller.states()[("later", 0)] == PartitionState(3, 1, (3,), 1)
        await h.zk.delete(topic_path("later"), recursive=True)
        await wait_until(lambda: ("later", 0) not in controller.states())
        assert len(broker2.leader_and_isr()) == 2
        broker2.received.clear()

        # CreatePartitions: the assignment grows.
        await h.zk.set(topic_path("fresh"),
                       encode_topic_assignment({0: [1, 2], 1: [2, 1], 2: [1, 2]}))
        await wait_until(lambda: ("fresh", 2) in controller.states())
        await wait_until(lambda: len(broker2.leader_and_isr()) == 1)
        last = broker2.leader_and_isr()[-1]
        assert (last.topic_name, last.partition_index, last.leader, last.is_new) == \
            ("fresh", 2, 1, True)
        await wait_until(lambda: len(broker2.metadata_states()) == 3)

        # Deleted: its replicas stop and delete it.
        await h.zk.delete(topic_path("fresh"), recursive=True)
        await wait_until(lambda: broker2.requests(ApiKey.STOP_REPLICA))
        stop = broker2.requests(ApiKey.STOP_REPLICA)[0]
        assert stop.delete_partitions
        assert sorted((p.topic_name, p.partition_index) for p in stop.ungrouped_partitions) \
            == [("fresh", 0), ("fresh", 1), ("fresh", 2)]
        await wait_until(lambda: broker2.last_metadata() is not None
                         and not broker2.metadata_states())
        assert controller.states() == {}


def header(api_key, version=1):
    return RequestHeader(api_key, version, 1, "test")


async def test_controlled_shutdown_moves_leaderships_away(zookeeper):
    async with harness(zookeeper) as h:
        for b in (1, 2, 3):
            await h.start_broker(b)
        await h.create_topic("t", T_ASSIGNMENT)
        await h.create_topic("single", {0: [2]})
        controller, _ = await h.start_controller(1)
        other, _ = await h.start_controller(3)
        await controller.active_epoch.wait_value(1)

        refused = await other.controlled_shutdown(ControlledShutdownRequest(broker_id=2),
                                                  header(ApiKey.CONTROLLED_SHUTDOWN))
        assert refused.error_code == NotControllerError.code
        assert refused.remaining_partitions == []

        answer = await controller.controlled_shutdown(ControlledShutdownRequest(broker_id=2),
                                                      header(ApiKey.CONTROLLED_SHUTDOWN))
        for version in (1, 2):
            encode_response(answer, version, 1)
        assert answer.error_code == 0
        assert [(p.topic_name, p.partition_index) for p in answer.remaining_partitions] == \
            [("single", 0)]
        states = controller.states()
        assert states[("t", 1)] == PartitionState(3, 1, (3, 1), 1)
        assert states[("t", 0)] == PartitionState(1, 0, (1, 3), 1)  # (2 followed: epoch kept)
        assert states[("single", 0)] == PartitionState(2, 0, (2,), 1)
        assert await h.read_state("t", 1) == states[("t", 1)]
        broker2 = h.brokers[2]
        await wait_until(lambda: broker2.requests(ApiKey.STOP_REPLICA))
        stop = broker2.requests(ApiKey.STOP_REPLICA)[0]
        assert not stop.delete_partitions
        assert sorted((p.topic_name, p.partition_index) for p in stop.ungrouped_partitions) \
            == [("t", 0), ("t", 1), ("t", 2)]

        # While it shuts down, elections avoid it: broker 3 dies and t-2 ([3, 1, 2]) goes
        # to 1, never to 2.
        await h.kill(3)
        await wait_until(lambda: controller.states()[("t", 2)].leader != 3)
        assert controller.states()[("t", 2)].leader == 1


async def test_elect_leaders_preferred_after_isr_change(zookeeper):
    async with harness(zookeeper) as h:
        for b in (1, 2, 3):
            await h.start_broker(b)
        await h.create_topic("t", T_ASSIGNMENT)
        controller, _ = await h.start_controller(1)
        await controller.active_epoch.wait_value(1)
        await h.kill(2)
        await wait_until(lambda: controller.states()[("t", 1)].leader == 3)
        await h.start_broker(2)
        await wait_until(lambda: h.brokers[2].leader_and_isr())

        def request(*tps):
            return ElectLeadersRequest(election_type=0, topic_partitions=[
                ElectLeadersRequest.TopicPartitions(topic=t, partitions=[p]) for t, p in tps])

        def codes(response):
            assert response.error_code == 0
            return {(r.topic, p.partition_id): p.error_code
                    for r in response.replica_election_results for p in r.partition_result}

        # 2 is back but not in the ISR yet: it cannot lead t-1.
        answer = await controller.elect_leaders(request(("t", 1), ("t", 0), ("nope", 0)),
                                                header(ApiKey.ELECT_LEADERS))
        for version in (0, 1):
            encode_response(answer, version, 1)
        assert codes(answer) == {("t", 1): PreferredLeaderNotAvailableError.code,
                                 ("t", 0): ElectionNotNeededError.code,
                                 ("nope", 0): UnknownTopicOrPartitionError.code}

        # The leader (3) adds 2 back to the ISR and notifies the controller, as a leader
        # does after an ISR change.
        data, version = await h.zk.get_versioned(partition_state_path("t", 1))
        caught_up = PartitionState(3, 1, (2, 3, 1), 1)
        await h.zk.set(partition_state_path("t", 1), caught_up.encode(), version=version)
        await h.zk.create(f"{ISR_CHANGE_NOTIFICATION}/isr_change_",
                          encode_isr_change([("t", 1)]), sequence=True, makepath=True)
        await wait_until(lambda: controller.states()[("t", 1)] == caught_up)
        metadata_seen = h.brokers[1].last_metadata
        await wait_until(lambda: any(s.isr == [2, 3, 1]
                                     for s in metadata_seen().ungrouped_partition_states))

        answer = await controller.elect_leaders(request(("t", 1)), header(ApiKey.ELECT_LEADERS))
        assert codes(answer) == {("t", 1): 0}
        assert controller.states()[("t", 1)] == PartitionState(2, 2, (2, 3, 1), 1)
        assert await h.read_state("t", 1) == PartitionState(2, 2, (2, 3, 1), 1)
        # "every partition" answers only those that needed an election: none now.
        everything = ElectLeadersRequest(election_type=0, topic_partitions=None)
        assert codes(await controller.elect_leaders(everything,
                                                    header(ApiKey.ELECT_LEADERS))) == {}
        assert await h.zk.get_children(ISR_CHANGE_NOTIFICATION) == []


async def test_auto_rebalance_moves_leadership_back_to_the_preferred_replica(zookeeper):
    async with harness(zookeeper) as h:
        for b in (1, 2):
            await h.start_broker(b)
        await h.create_topic("t", {0: [2, 1]})
        await h.write_state("t", 0, PartitionState(1, 4, (1, 2), 0))
        controller, _ = await h.start_controller(
            1, **{"auto.leader.rebalance.enable": True,
                  "leader.imbalance.check.interval.seconds": 1})
        await wait_until(lambda: controller.states().get(("t", 0), PartitionState(-1))
                         .leader == 2)
        assert controller.states()[("t", 0)] == PartitionState(2, 5, (1, 2), 1)


async def test_failover_to_another_controller_with_a_higher_epoch(zookeeper):
    async with harness(zookeeper) as h:
        for b in (1, 2, 3):
            await h.start_broker(b)
        await h.create_topic("t", T_ASSIGNMENT)
        first, first_session = await h.start_controller(1)
        await first.active_epoch.wait_value(1)
        second, _ = await h.start_controller(2)
        await wait_until(lambda: all(b.last_metadata() for b in h.brokers.values()))
        assert second.active_epoch.value == 0

        first_session.cancel()
        await second.active_epoch.wait_value(2)
        assert second.states() == first.states()  # read back from ZooKeeper
        for broker in h.brokers.values():
            await wait_until(lambda broker=broker: broker.last_metadata() is not None
                             and broker.last_metadata().controller_id == 2)
            assert broker.last_metadata().controller_epoch == 2
            assert broker.requests(ApiKey.LEADER_AND_ISR)[-1].controller_epoch == 2


async def test_a_broker_that_saw_a_newer_controller_ends_the_term(zookeeper):
    async with harness(zookeeper) as h:
        broker = await h.start_broker(1)
        controller, _ = await h.start_controller(1)
        await controller.active_epoch.wait_value(1)
        # Another controller took over (a higher epoch) and the broker heard from it.
        await h.zk.set(CONTROLLER_EPOCH, b"5")
        broker.stale = True
        await h.create_topic("t", {0: [1]})
        await controller.active_epoch.wait_value(0)
        assert broker.requests(ApiKey.LEADER_AND_ISR)[-1].controller_epoch == 1
        await trio.sleep(1.5)  # it stays out until the election moves on
        assert controller.active_epoch.value == 0
