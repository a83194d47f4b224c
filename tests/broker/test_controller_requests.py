"""What the controller tells the brokers (``controller/_requests.py``) built from a view
without ZooKeeper, and its per-broker senders (``controller/_channel.py``) against stand-in
brokers: order, resending on a new connection, and the end of a term on
STALE_CONTROLLER_EPOCH."""

from __future__ import annotations

import pytest
import trio
from broker_helpers import serve_kafka
from wait_helpers import wait_until

from trilog.broker.controller._channel import BrokerChannel, ChannelManager
from trilog.broker.controller._errors import StaleController
from trilog.broker.controller._requests import (
    LEADER_AND_ISR_VERSION,
    STOP_REPLICA_VERSION,
    UPDATE_METADATA_VERSION,
    RequestBatch,
    RequestBuilder,
    inter_broker_address,
)
from trilog.broker.controller._view import ClusterView
from trilog.errors import StaleControllerEpochError
from trilog.protocol import (
    ApiKey,
    LeaderAndIsrResponse,
    StopReplicaResponse,
    UpdateMetadataResponse,
    decode_request,
    encode_request,
)
from trilog.zk import BrokerRegistration, PartitionState

S = PartitionState


def registration(broker_id: int) -> BrokerRegistration:
    """A broker with a plaintext listener and a TLS inter-broker listener."""
    return BrokerRegistration(
        broker_id, "10.0.0.%d" % broker_id, 9092,
        endpoints=(("PLAINTEXT", "10.0.0.%d" % broker_id, 9092),
                   ("REPLICATION", "10.1.0.%d" % broker_id, 9093)),
        protocols={"PLAINTEXT": "PLAINTEXT", "REPLICATION": "SSL"})


def cluster() -> ClusterView:
    view = ClusterView()
    view.live = {b: registration(b) for b in (1, 2)}
    view.assignments = {"t": {0: [1, 2, 3], 1: [3, 2]}, "new": {0: [2, 1]}}
    view.set_state(("t", 0), S(1, 4, (1, 2), 7), 12)
    view.set_state(("t", 1), S(2, 1, (2,), 7), 3)
    # new-0 has no state yet: it is in no request
    return view


def roundtrip(request, version):
    """The request as a broker decodes it at the version the controller sends."""
    _header, decoded = decode_request(encode_request(request, version, 1, "controller-1")[4:])
    return decoded


def test_leader_and_isr_carries_the_states_versions_and_the_leaders_addresses():
    builder = RequestBuilder(cluster(), 1, 9, "REPLICATION")
    request = roundtrip(builder.leader_and_isr({("t", 1): False, ("t", 0): True,
                                                ("new", 0): True}),
                        LEADER_AND_ISR_VERSION)
    assert (request.controller_id, request.controller_epoch) == (1, 9)
    got = [(s.topic_name, s.partition_index, s.controller_epoch, s.leader, s.leader_epoch,
            s.isr, s.partition_epoch, s.replicas, s.is_new)
           for s in request.ungrouped_partition_states]
    assert got == [("t", 0, 7, 1, 4, [1, 2], 12, [1, 2, 3], True),
                   ("t", 1, 7, 2, 1, [2], 3, [3, 2], False)]
    # Followers fetch from the leaders on the inter-broker listener.
    assert [(b.broker_id, b.host_name, b.port) for b in request.live_leaders] == \
        [(1, "10.1.0.1", 9093), (2, "10.1.0.2", 9093)]


def test_a_leader_that_is_not_live_is_not_in_live_leaders():
    view = cluster()
    view.live.pop(2)
    request = RequestBuilder(view, 1, 9, "REPLICATION").leader_and_isr({("t", 1): False})
    assert [s.leader for s in request.ungrouped_partition_states] == [2]
    assert request.live_leaders == []


def test_update_metadata_carries_every_partition_and_every_live_broker():
    view = cluster()
    request = roundtrip(RequestBuilder(view, 1, 9, "REPLICATION").update_metadata(),
                        UPDATE_METADATA_VERSION)
    assert request.controller_epoch == 9
    states = {(s.topic_name, s.partition_index): s for s in request.ungrouped_partition_states}
    assert list(states) == [("t", 0), ("t", 1)]
    assert (states[("t", 0)].zk_version, states[("t", 0)].offline_replicas) == (12, [3])
    assert (states[("t", 1)].leader, states[("t", 1)].replicas) == (2, [3, 2])
    assert [b.id for b in request.live_brokers] == [1, 2]
    endpoints = [(e.listener, e.host, e.port, e.security_protocol)
                 for e in request.live_brokers[0].endpoints]
    assert endpoints == [("PLAINTEXT", "10.0.0.1", 9092, 0), ("REPLICATION", "10.1.0.1", 9093, 1)]


def test_a_fenced_broker_is_listed_only_while_still_listed():
    """A broker found gone is offline in its partitions at once, and listed a moment longer
    (``still_listed``), so that the answer moving its partitions names it."""
    view = cluster()
    view.fenced = {3: registration(3)}
    view.still_listed = {3}
    request = RequestBuilder(view, 1, 9, "PLAINTEXT").update_metadata()
    assert [b.id for b in request.live_brokers] == [1, 2, 3]
    states = {(s.topic_name, s.partition_index): s for s in request.ungrouped_partition_states}
    assert states[("t", 1)].offline_replicas == [3]
    view.still_listed = set()
    request = RequestBuilder(view, 1, 9, "PLAINTEXT").update_metadata()
    assert [b.id for b in request.live_brokers] == [1, 2]


def test_a_broker_registered_without_endpoints_is_plaintext_on_its_host_and_port():
    view = cluster()
    view.live = {5: BrokerRegistration(5, "h5", 5555)}
    request = RequestBuilder(view, 1, 9, "PLAINTEXT").update_metadata()
    assert [(e.listener, e.host, e.port, e.security_protocol)
            for e in request.live_brokers[0].endpoints] == [("PLAINTEXT", "h5", 5555, 0)]
    assert inter_broker_address(view.live[5], "REPLICATION") == ("h5", 5555)
    assert inter_broker_address(registration(2), "REPLICATION") == ("10.1.0.2", 9093)
    assert inter_broker_address(registration(2), "OTHER") == ("10.0.0.2", 9092)


def test_stop_replica_lists_its_partitions_in_order():
    request = roundtrip(RequestBuilder(cluster(), 1, 9, "PLAINTEXT").stop_replica(
        {("t", 1), ("a", 0), ("t", 0)}, delete=True), STOP_REPLICA_VERSION)
    assert (request.controller_id, request.controller_epoch, request.delete_partitions) == \
        (1, 9, True)
    assert [(p.topic_name, p.partition_index) for p in request.ungrouped_partitions] == \
        [("a", 0), ("t", 0), ("t", 1)]


def test_a_batch_gathers_per_broker_and_any_state_change_brings_metadata():
    batch = RequestBatch()
    assert not batch.update_metadata
    batch.add_stop_replica([2], ("t", 0), delete=False)
    assert not batch.update_metadata
    batch.add_leader_and_isr([1, 2], ("t", 0), is_new=True)
    batch.add_leader_and_isr([2], ("t", 1))
    assert batch.update_metadata
    assert batch.leader_and_isr == {1: {("t", 0): True}, 2: {("t", 0): True, ("t", 1): False}}
    batch.add_stop_replica([2, 3], ("t", 1), delete=True)
    assert batch.stop_replica == {(2, False): {("t", 0)}, (2, True): {("t", 1)},
                                  (3, True): {("t", 1)}}


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[int, int, object]] = []

    def send(self, request, version) -> None:
        self.sent.append((request.API_KEY, version, request))


async def test_the_manager_sends_a_batch_leader_and_isr_then_metadata_then_stop_replica():
    view = cluster()
    async with trio.open_nursery() as nursery:
        manager = ChannelManager(RequestBuilder(view, 1, 9, "PLAINTEXT"), nursery,
                                 security=None, timeout_s=1.0)
        recorders = manager.channels = {1: Recorder(), 2: Recorder()}
        batch = RequestBatch()
        batch.add_leader_and_isr([2, 3], ("t", 1))  # 3 has no channel: not live
        batch.add_stop_replica([2], ("t", 0), delete=False)
        manager.send(batch)
        # The states as the view holds them when the batch is sent.
        view.set_state(("t", 1), S(3, 2, (3,), 9), 4)
        manager.send(batch)
    assert [(k, v) for k, v, _r in recorders[1].sent] == \
        [(ApiKey.UPDATE_METADATA, UPDATE_METADATA_VERSION)] * 2
    assert [(k, v) for k, v, _r in recorders[2].sent] == [
        (ApiKey.LEADER_AND_ISR, LEADER_AND_ISR_VERSION),
        (ApiKey.UPDATE_METADATA, UPDATE_METADATA_VERSION),
        (ApiKey.STOP_REPLICA, STOP_REPLICA_VERSION)] * 2
    first, second = (r for k, _v, r in recorders[2].sent if k == ApiKey.LEADER_AND_ISR)
    assert first.ungrouped_partition_states[0].leader == 2
    assert second.ungrouped_partition_states[0].leader == 3


SERVED = {ApiKey.API_VERSIONS: (0, 2), ApiKey.LEADER_AND_ISR: (0, 3),
          ApiKey.UPDATE_METADATA: (0, 5)}


class StandIn:
    """A broker that records what it gets; ``drop_first`` connections are closed at their
    first request, unanswered; ``stale`` answers LeaderAndIsr with STALE_CONTROLLER_EPOCH
    (top level) or, per partition, with ``partition_stale``."""

    def __init__(self, drop_first=0, stale=False, partition_stale=False) -> None:
        self.received: list[tuple[int, int, int]] = []  # (connection, api key, version)
        self.connections = 0
        self.drop_first = drop_first
        self.stale = stale
        self.partition_stale = partition_stale

    async def handle(self, stream) -> None:
        self.connections += 1
        connection = self.connections

        async def answer(header, request):
            self.received.append((connection, header.api_key, header.api_version))
            if connection <= self.drop_first:
                await stream.aclose()
                await trio.sleep_forever()
            if header.api_key == ApiKey.UPDATE_METADATA:
                return UpdateMetadataResponse(error_code=0)
            if header.api_key == ApiKey.STOP_REPLICA:
                return StopReplicaResponse(error_code=0, partition_errors=[])
            errors = [LeaderAndIsrResponse.LeaderAndIsrPartitionError(
                topic_name="t", partition_index=0,
                error_code=StaleControllerEpochError.code)] if self.partition_stale else []
            return LeaderAndIsrResponse(
                error_code=StaleControllerEpochError.code if self.stale else 0,
                partition_errors=errors)

        try:
            await serve_kafka(stream, answer, versions=SERVED)
        except trio.ClosedResourceError:
            pass


async def channel_to(nursery, broker: StandIn) -> BrokerChannel:
    listeners = await nursery.start(trio.serve_tcp, broker.handle, 0)
    port = listeners[0].socket.getsockname()[1]
    return BrokerChannel(1, ("127.0.0.1", port), controller_id=1, security=None,
                         timeout_s=5.0)


async def test_a_channel_sends_in_order_and_resends_on_a_new_connection():
    builder = RequestBuilder(cluster(), 1, 9, "PLAINTEXT")
    broker = StandIn(drop_first=1, partition_stale=True)
    async with trio.open_nursery() as nursery:
        channel = await channel_to(nursery, broker)
        nursery.start_soon(channel.run)
        channel.send(builder.leader_and_isr({("t", 0): False}), LEADER_AND_ISR_VERSION)
        channel.send(builder.update_metadata(), UPDATE_METADATA_VERSION)
        # The broker does not serve StopReplica: not sent, and the channel goes on.
        channel.send(builder.stop_replica({("t", 0)}, delete=False), STOP_REPLICA_VERSION)
        channel.send(builder.update_metadata(), UPDATE_METADATA_VERSION)
        await wait_until(lambda: len(broker.received) == 4)
        channel.close()
        nursery.cancel_scope.cancel()
    # The first connection lost the LeaderAndIsr: the same request again on the second,
    # and a partition's STALE_CONTROLLER_EPOCH (a state sent again) is no news.
    assert broker.received == [
        (1, ApiKey.LEADER_AND_ISR, LEADER_AND_ISR_VERSION),
        (2, ApiKey.LEADER_AND_ISR, LEADER_AND_ISR_VERSION),
        (2, ApiKey.UPDATE_METADATA, UPDATE_METADATA_VERSION),
        (2, ApiKey.UPDATE_METADATA, UPDATE_METADATA_VERSION)]


async def test_a_broker_that_saw_a_newer_controller_ends_the_channel_and_its_term():
    builder = RequestBuilder(cluster(), 1, 9, "PLAINTEXT")
    with pytest.RaisesGroup(StaleController):
        async with trio.open_nursery() as nursery:
            channel = await channel_to(nursery, StandIn(stale=True))
            nursery.start_soon(channel.run)
            channel.send(builder.leader_and_isr({("t", 0): False}), LEADER_AND_ISR_VERSION)
