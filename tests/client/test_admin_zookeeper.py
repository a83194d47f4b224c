"""Topic admin straight in ZooKeeper, with brokers that pick the change up by watches."""

import subprocess
import sys

import trio
import pytest

from trilog.broker import open_broker
from trilog.client import open_admin
from trilog.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError


async def test_zookeeper_admin_spreads_topics_over_live_brokers(zookeeper, tmp_path):
    conf = {"port": 0, "zookeeper.connect": zookeeper}
    async with open_broker({**conf, "broker.id": 1, "log.dirs": str(tmp_path / "b1")}) as b1, \
            open_broker({**conf, "broker.id": 2, "log.dirs": str(tmp_path / "b2")}) as b2:
        async with open_admin(zookeeper=zookeeper) as admin:
            assert [b.node_id for b in await admin.brokers()] == [1, 2]
            await admin.create_topic("spread", 4)
            with pytest.raises(TopicAlreadyExistsError):
                await admin.create_topic("spread", 4)
            with trio.fail_after(10):
                while True:
                    (info,) = await admin.describe_topics(["spread"])
                    if all(p.leader >= 0 for p in info.partitions):
                        break
                    await trio.sleep(0.05)
            leaders = [p.leader for p in info.partitions]
            assert sorted(set(leaders)) == [1, 2] and leaders.count(1) == 2
            # Each broker makes logs for exactly the partitions it leads (once the
            # controller's LeaderAndIsr reaches it, a moment after the state is in ZooKeeper).
            def logs_of(broker):
                return sorted(lg.partition for lg in broker.logs.logs() if lg.topic == "spread")

            led = {b: [p.partition for p in info.partitions if p.leader == b.broker_id]
                   for b in (b1, b2)}
            with trio.move_on_after(10):
                while any(logs_of(b) != led[b] for b in led):
                    await trio.sleep(0.05)
            assert {b.broker_id: logs_of(b) for b in led} == \
                {b.broker_id: partitions for b, partitions in led.items()}
            await admin.delete_topic("spread")
            with pytest.raises(UnknownTopicOrPartitionError):
                await admin.delete_topic("spread")
            with trio.fail_after(10):
                while any(lg.topic == "spread" for b in (b1, b2) for lg in b.logs.logs()):
                    await trio.sleep(0.05)


def test_cli_topics_against_zookeeper(zookeeper):
    def topics(*args):
        return subprocess.run([sys.executable, "-m", "trilog.cli._main", "topics",
                               "--zookeeper", zookeeper, *args],
                              capture_output=True, text=True, timeout=60)

    out = topics("--create", "--topic", "t")
    assert out.returncode == 1 and "no brokers" in out.stderr
    assert topics("--list").stdout == ""
    bad = topics("--create")
    assert bad.returncode == 2 and "--topic is required" in bad.stderr
