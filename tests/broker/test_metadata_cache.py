"""A cluster broker's metadata cache (``ZooKeeperCluster.update_metadata``): what the
controller's UpdateMetadata says, and what a broker that finished its controlled shutdown
says of itself."""

from __future__ import annotations

from trilog import protocol as p
from trilog.broker.cluster._cluster import BrokerInfo
from trilog.broker.cluster._zookeeper import ZooKeeperCluster

R = p.UpdateMetadataRequest


def cluster() -> ZooKeeperCluster:
    c = ZooKeeperCluster(None, BrokerInfo(1, "127.0.0.1", 9092), "cid", None, 1, None, None)
    c._assignments = {"t": {0: [1, 2], 1: [2, 1]}}
    c._brokers = {1: BrokerInfo(1, "127.0.0.1", 9092), 2: BrokerInfo(2, "127.0.0.1", 9093)}
    return c


def update(leaders: dict[int, int], broker2_port: int = 9093):
    return R(controller_id=1, controller_epoch=1, ungrouped_partition_states=[
        R.UpdateMetadataPartitionState(
            topic_name="t", partition_index=i, controller_epoch=1, leader=leader,
            leader_epoch=3, isr=[1, 2], zk_version=0, replicas=[1, 2], offline_replicas=[])
        for i, leader in leaders.items()], live_brokers=[
        R.UpdateMetadataBroker(id=b, rack=None, endpoints=[
            R.UpdateMetadataBroker.UpdateMetadataEndpoint(
                port=port, host="127.0.0.1", listener="PLAINTEXT", security_protocol=0)])
        for b, port in ((1, 9092), (2, broker2_port))])


def test_update_metadata_gives_leaders_replicas_isr_and_addresses():
    c = cluster()
    # Broker 2 restarted on another port: the controller's live brokers carry it.
    c.update_metadata(update({0: 1, 1: 2}, broker2_port=9999))
    assert c.topics() == {"t": {0: 1, 1: 2}}
    assert c.replica_info("t", 0) == ([1, 2], [1, 2])
    assert {b.node_id: b.port for b in c.brokers()} == {1: 9092, 2: 9999}


def test_a_broker_done_with_its_controlled_shutdown_names_itself_leader_of_nothing():
    c = cluster()
    c.update_metadata(update({0: 1, 1: 2}))
    c.step_down()
    assert c.topics() == {"t": {0: -1, 1: 2}}


def test_a_controlled_shutdown_that_left_partitions_keeps_naming_itself_their_leader():
    c = cluster()
    c.update_metadata(update({0: 1, 1: 1}))
    c.step_down(keep={("t", 1)})  # no other live replica can lead t-1
    assert c.topics() == {"t": {0: -1, 1: 1}}
