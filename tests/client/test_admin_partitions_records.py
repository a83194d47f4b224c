"""The admin's CreatePartitions, DeleteRecords and DescribeLogDirs, and the groups admin's
DeleteGroups and OffsetDelete, against real brokers (a standalone process, in-process
ZooKeeper clusters) and, for the ZooKeeper backends, straight in ZooKeeper."""

from __future__ import annotations

import json

import pytest
import trio

from trilog import open_producer
from trilog.broker import open_broker
from trilog.client import open_admin, open_group_admin
from trilog.errors import (
    GroupIdNotFoundError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    TrilogError,
    UnknownTopicOrPartitionError,
)


async def _produce(bootstrap: str, topic: str, partition: int, n: int) -> None:
    async with open_producer(bootstrap_servers=bootstrap) as producer:
        for i in range(n):
            await producer.send(topic, b"%d" % i, partition=partition)
        await producer.flush()


async def test_create_partitions_delete_records_describe_log_dirs(broker):
    async with open_admin(broker.bootstrap) as admin:
        await admin.create_topic("grown", 2)
        await admin.create_partitions("grown", 3, validate_only=True)
        assert len((await admin.describe_topics(["grown"]))[0].partitions) == 2
        await admin.create_partitions("grown", 4)
        (info,) = await admin.describe_topics(["grown"])
        assert [p.partition for p in info.partitions] == [0, 1, 2, 3]
        await admin.create_partitions("grown", 5, [[broker.broker_id]])
        with pytest.raises(InvalidPartitionsError, match="already has 5"):
            await admin.create_partitions("grown", 5)
        with pytest.raises(InvalidReplicaAssignmentError):
            await admin.create_partitions("grown", 6, [[broker.broker_id + 1]])
        with pytest.raises(UnknownTopicOrPartitionError):
            await admin.create_partitions("nope", 2)

        await _produce(broker.bootstrap, "grown", 4, 10)
        deleted = await admin.delete_records({("grown", 4): 6, ("grown", 0): -1,
                                              ("grown", 9): 0, ("gone", 0): 0})
        assert [(d.topic, d.partition, d.low_watermark, d.error) for d in deleted] == [
            ("gone", 0, -1, "UNKNOWN_TOPIC_OR_PARTITION"),
            ("grown", 0, 0, None),
            ("grown", 4, 6, None),
            ("grown", 9, -1, "UNKNOWN_TOPIC_OR_PARTITION"),
        ]
        (too_far,) = await admin.delete_records({("grown", 4): 11})
        assert too_far.error == "OFFSET_OUT_OF_RANGE"

        (log_dir,) = await admin.describe_log_dirs(["grown"])
        assert log_dir.broker == broker.broker_id and log_dir.error is None
        assert log_dir.path == str(broker.log_dir.resolve())
        sizes = {p.partition: p.size for p in log_dir.partitions}
        assert sorted(sizes) == [0, 1, 2, 3, 4] and sizes[4] > 0 and sizes[0] == 0
        assert {p.topic for p in log_dir.partitions} == {"grown"}
        (everything,) = await admin.describe_log_dirs()
        assert {p.topic for p in everything.partitions} >= {"grown"}


async def test_delete_groups_and_offsets(broker):
    async with open_admin(broker.bootstrap) as admin:
        await admin.create_topic("g1", 2)
        await admin.create_topic("g2", 1)
    async with open_group_admin(broker.bootstrap) as groups:
        # A group known only by its committed offsets (a simple consumer's commits).
        await groups.reset_offsets("readers", "g1", offset=0, execute=True)
        await groups.reset_offsets("readers", "g2", offset=0, execute=True)
        assert "readers" in await groups.list_groups()
        assert await groups.delete_offsets("readers", "g1", [1]) == {1: None}
        described = await groups.describe_group("readers")
        assert [(r.topic, r.partition) for r in described.partitions] == [("g1", 0), ("g2", 0)]
        assert await groups.delete_offsets("readers", "g1") == {0: None, 1: None}
        assert await groups.delete_offsets("readers", "g2", [7]) == {
            7: "UNKNOWN_TOPIC_OR_PARTITION"}
        assert await groups.delete_groups(["readers", "nobody"]) == {
            "readers": None, "nobody": "GROUP_ID_NOT_FOUND"}
        assert "readers" not in await groups.list_groups()
        with pytest.raises(GroupIdNotFoundError):
            await groups.describe_group("readers")
        with pytest.raises(GroupIdNotFoundError):
            await groups.delete_offsets("readers", "g2")


async def test_zookeeper_backends(zookeeper, tmp_path):
    conf = {"port": 0, "zookeeper.connect": zookeeper}
    async with open_broker({**conf, "broker.id": 1, "log.dirs": str(tmp_path / "b1")}) as b1, \
            open_broker({**conf, "broker.id": 2, "log.dirs": str(tmp_path / "b2")}) as b2:
        async with open_admin(zookeeper=zookeeper) as admin:
            await admin.create_topic("zgrow", 1)
            await admin.create_partitions("zgrow", 4)
            with pytest.raises(InvalidPartitionsError):
                await admin.create_partitions("zgrow", 2)
            with pytest.raises(InvalidRequestError):
                await admin.create_partitions("__consumer_offsets", 99)
            with pytest.raises(TrilogError, match="bootstrap_servers"):
                await admin.delete_records({("zgrow", 0): 0})
            # Both brokers follow the assignment znode and serve their new partitions:
            # ZooKeeper names the leaders first, each broker opens its logs when its
            # LeaderAndIsr comes.
            def held() -> list[int]:
                return sorted(lg.partition for b in (b1, b2) for lg in b.logs.logs()
                              if lg.topic == "zgrow")

            with trio.fail_after(15):
                while True:
                    (info,) = await admin.describe_topics(["zgrow"])
                    if (len(info.partitions) == 4 and all(p.leader > 0 for p in info.partitions)
                            and held() == [0, 1, 2, 3]):
                        break
                    await trio.sleep(0.05)

        # The ZooKeeper connector's groups: /consumers/<group>.
        from trilog.zk import consumer_ids_path, consumer_offset_path, open_zookeeper

        async with open_zookeeper(zookeeper) as zk:
            await zk.create(consumer_offset_path("zg", "zgrow", 0), b"5", makepath=True)
            await zk.create(consumer_offset_path("zg", "other", 0), b"6", makepath=True)
            await zk.create(f"{consumer_ids_path('zg')}/m1", json.dumps(
                {"version": 1, "subscription": {"zgrow": 1}, "pattern": "static"}).encode(),
                makepath=True, ephemeral=True)
            async with open_group_admin(zookeeper=zookeeper) as groups:
                assert await groups.delete_offsets("zg", "zgrow", [0]) == {
                    0: "GROUP_SUBSCRIBED_TO_TOPIC"}
                assert await groups.delete_offsets("zg", "other") == {0: None}
                assert await groups.delete_groups(["zg"]) == {"zg": "NON_EMPTY_GROUP"}
                await zk.delete(f"{consumer_ids_path('zg')}/m1")
                assert await groups.delete_groups(["zg", "zz"]) == {
                    "zg": None, "zz": "GROUP_ID_NOT_FOUND"}
                assert await groups.list_groups() == []
