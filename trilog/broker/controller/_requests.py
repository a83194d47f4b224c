"""What the controller tells the brokers, built from its view (Kafka's
ControllerBrokerRequestBatch); pure: no I/O.

An event's handler collects what it changed in a ``RequestBatch``; at its end the batch's
requests go to the brokers' senders (``_channel.py``), in this order for each broker:

- **LeaderAndIsr** (v1) to a partition's live replicas, not the ones shutting down,
  whenever its state changes, and to a broker that (re)joins for every partition it
  replicates; ``partition_epoch`` is the state node's ZooKeeper version (Kafka's
  zkVersion), which a leader needs to write ISR changes conditionally.  ``is_new`` tells a
  replica that the partition was just created (or that it was just added to it), so it has
  no log to recover yet.  ``live_leaders`` gives the address of each partition's leader
  on the inter-broker listener, where followers fetch.
- **UpdateMetadata** (v4) to every live broker after every change.  It always carries
  *every* partition and every live broker: a broker may replace its metadata with it (a
  deleted topic is one that is no longer listed).
- **StopReplica** (v0): ``delete_partitions`` to the replicas of a deleted topic and to
  those a reassignment removed; without it to a broker shutting down, for the partitions it
  no longer leads.

Every request carries this controller's id and epoch, so that a broker refuses it once a
newer controller spoke (STALE_CONTROLLER_EPOCH).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from trilog._topic import PartitionKey
from trilog.broker.controller._view import ClusterView
from trilog.broker.network._listeners import SECURITY_PROTOCOL_IDS
from trilog.protocol import (
    LeaderAndIsrRequest,
    Message,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from trilog.zk import BrokerRegistration

#: Kafka's versions of the controller's requests (non-flexible, flat partition lists)
LEADER_AND_ISR_VERSION = 1
UPDATE_METADATA_VERSION = 4
STOP_REPLICA_VERSION = 0


def inter_broker_address(broker: BrokerRegistration, listener: str) -> tuple[str, int]:
    """Where brokers reach ``broker``: its endpoint on ``listener`` (its first one when it
    has none of that name)."""
    return broker.address(listener) or (broker.host, broker.port)


class RequestBatch:
    """The requests one event makes, sent together at its end: LeaderAndIsr, then
    UpdateMetadata, then StopReplica to each broker.  It names partitions and brokers only:
    the states go in when it is sent, so each request carries the view as the event left
    it."""

    def __init__(self) -> None:
        #: broker -> partition -> is_new
        self.leader_and_isr: dict[int, dict[PartitionKey, bool]] = {}
        self.update_metadata = False
        #: (broker, delete_partitions) -> partitions
        self.stop_replica: dict[tuple[int, bool], set[PartitionKey]] = {}

    def add_leader_and_isr(self, brokers: Iterable[int], tp: PartitionKey,
                           is_new: bool = False) -> None:
        """LeaderAndIsr for ``tp`` to ``brokers``; metadata follows any state change."""
        for broker in brokers:
            self.leader_and_isr.setdefault(broker, {})[tp] = is_new
        self.update_metadata = True

    def add_stop_replica(self, brokers: Iterable[int], tp: PartitionKey,
                         delete: bool) -> None:
        for broker in brokers:
            self.stop_replica.setdefault((broker, delete), set()).add(tp)


class RequestBuilder:
    """Builds the requests of the controller ``controller_id`` of epoch ``epoch`` from
    ``view``; leaders' addresses are on the inter-broker ``listener``."""

    def __init__(self, view: ClusterView, controller_id: int, epoch: int,
                 listener: str) -> None:
        self.view = view
        self.controller_id = controller_id
        self.epoch = epoch
        self.listener = listener

    def leader_and_isr(self, tps: Mapping[PartitionKey, bool]) -> Message:
        """The states of ``tps`` (partition -> is_new) that the view holds."""
        R = LeaderAndIsrRequest
        view = self.view
        states = []
        leaders = set()
        for tp, is_new in sorted(tps.items()):
            state = view.states.get(tp)
            if state is None:
                continue
            leaders.add(state.leader)
            states.append(R.LeaderAndIsrPartitionState(
                topic_name=tp[0], partition_index=tp[1],
                controller_epoch=state.controller_epoch, leader=state.leader,
                leader_epoch=state.leader_epoch, isr=list(state.isr),
                partition_epoch=view.version(tp), replicas=view.replicas(tp),
                is_new=is_new))
        return R(controller_id=self.controller_id, controller_epoch=self.epoch,
                 ungrouped_partition_states=states, live_leaders=[
                     R.LeaderAndIsrLiveLeader(broker_id=b, host_name=address[0],
                                              port=address[1])
                     for b in sorted(leaders) if b in view.live
                     for address in [inter_broker_address(view.live[b], self.listener)]])

    def update_metadata(self) -> Message:
        """Every partition with a state and every live broker with all its endpoints, and,
        for a moment after their leadership moved, the brokers found gone (``_term.py``'s
        ``FENCED_LISTED_S``: offline replicas leading nothing).  The answer that moves a
        dead broker's partitions must still list it: librdkafka drops a broker missing from
        an answer, and a partition it was producing to then waits out a leader query (~1 s)
        before it goes to its new leader.  Not for longer: kafka-python picks a listed dead
        broker to ask and raises when it refuses."""
        R = UpdateMetadataRequest
        view = self.view
        states = []
        for tp in view.partitions():
            state = view.states.get(tp)
            if state is None:
                continue
            states.append(R.UpdateMetadataPartitionState(
                topic_name=tp[0], partition_index=tp[1],
                controller_epoch=state.controller_epoch, leader=state.leader,
                leader_epoch=state.leader_epoch, isr=list(state.isr),
                zk_version=view.version(tp), replicas=view.replicas(tp),
                offline_replicas=view.offline_replicas(tp)))
        return R(controller_id=self.controller_id, controller_epoch=self.epoch,
                 ungrouped_partition_states=states, live_brokers=[
                     R.UpdateMetadataBroker(id=b.broker_id, rack=None, endpoints=[
                         R.UpdateMetadataBroker.UpdateMetadataEndpoint(
                             port=port, host=host, listener=name,
                             security_protocol=SECURITY_PROTOCOL_IDS[
                                 b.protocols.get(name, "PLAINTEXT")])
                         for name, host, port in (b.endpoints
                                                  or (("PLAINTEXT", b.host, b.port),))])
                     for _id, b in sorted(view.listed().items())])

    def stop_replica(self, tps: Collection[PartitionKey], delete: bool) -> Message:
        return StopReplicaRequest(
            controller_id=self.controller_id, controller_epoch=self.epoch,
            delete_partitions=delete, ungrouped_partitions=[
                StopReplicaRequest.StopReplicaPartitionV0(topic_name=t, partition_index=p)
                for t, p in sorted(tps)])
