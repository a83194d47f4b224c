"""What a tool that shows a cluster reads (the console): the admin's describe_cluster and
the group admin's list_offsets, against a real broker process."""

from __future__ import annotations

import time

import trio

from trilog import open_producer
from trilog.client import EARLIEST, LATEST, open_admin, open_group_admin


async def test_describe_cluster_names_the_controller_and_the_brokers(broker):
    async with open_admin(broker.bootstrap) as admin:
        cluster = await admin.describe_cluster()
    assert cluster.cluster_id
    assert cluster.controller_id == broker.broker_id
    (only,) = cluster.brokers
    assert (only.node_id, only.host, only.port, only.rack) == \
        (broker.broker_id, "127.0.0.1", broker.port, None)


async def test_list_offsets_by_leader_for_start_end_and_time(broker):
    async with open_producer(bootstrap_servers=broker.bootstrap) as producer:
        for i in range(5):
            await producer.send("listed", b"%d" % i, partition=0)
        await producer.flush()
        later = int(time.time() * 1000) + 1
        await trio.sleep(0.01)
        await producer.send_and_wait("listed", b"last", partition=1)
    async with open_group_admin(broker.bootstrap) as groups:
        tps = [("listed", 0), ("listed", 1), ("listed", 2)]
        assert await groups.list_offsets(tps, EARLIEST) == {tp: 0 for tp in tps}
        assert await groups.list_offsets(tps) == {("listed", 0): 5, ("listed", 1): 1,
                                                  ("listed", 2): 0}
        by_time = await groups.list_offsets(tps, later)
        assert by_time == {("listed", 0): -1, ("listed", 1): 0, ("listed", 2): -1}
        assert await groups.list_offsets([]) == {}


async def test_an_admin_outlives_its_brokers_restart(broker_process):
    from trilog.errors import NetworkError

    broker = broker_process()
    async with open_admin(broker.bootstrap) as admin:
        await admin.create_topic("before", num_partitions=1)
        broker.stop()
        broker = broker_process(broker.log_dir, port=broker.port)
        # The request that finds the old connection closed fails (retriable); the admin
        # then reaches the cluster again through its bootstrap servers.
        try:
            await admin.describe_cluster()
        except NetworkError:
            pass
        assert "before" in await admin.list_topics()
