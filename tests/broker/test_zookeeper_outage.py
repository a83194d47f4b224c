"""A ZooKeeper outage never stops a broker from serving the partitions it has."""

import trio

import trilog
from trilog.broker import open_broker
from trilog.zk import ZooKeeperServer
from trilog.zk._server import free_port


async def test_brokers_keep_serving_while_zookeeper_is_down(tmp_path):
    server = ZooKeeperServer(port=free_port(), data_dir=tmp_path / "zk")
    await trio.to_thread.run_sync(server.start)
    try:
        connect = server.connect_string + "/outage"
        conf = {"port": 0, "zookeeper.connect": connect, "zookeeper.session.timeout.ms": 4000}
        async with open_broker({**conf, "broker.id": 1, "log.dirs": str(tmp_path / "b1")}) as b1, \
                open_broker({**conf, "broker.id": 2, "log.dirs": str(tmp_path / "b2")}) as b2:
            async with trilog.open_admin(b1.bootstrap) as admin:
                await admin.create_topic("steady", 4)
            async with trilog.open_producer(b1.bootstrap) as producer:
                for i in range(100):
                    await producer.send("steady", b"before-%d" % i, partition=i % 4)

            await trio.to_thread.run_sync(server.stop)  # ZooKeeper is gone
            await trio.sleep(1)

            # Both brokers still answer Metadata from their cache and serve their partitions.
            async with trilog.open_producer(b2.bootstrap, delivery_timeout_ms=20_000) as producer:
                metas = [await producer.send_and_wait("steady", b"during-%d" % p, partition=p)
                         for p in range(4)]
            assert [m.offset for m in metas] == [25, 25, 25, 25]
            async with trilog.open_simple_consumer(b1.bootstrap) as consumer:
                for p in range(4):
                    values = [r.value for r in await consumer.fetch("steady", p, 0)]
                    assert values[-1] == b"during-%d" % p and len(values) == 26
            # Creating a topic needs ZooKeeper: a clear error, not a hang.
            async with trilog.open_admin(b1.bootstrap, request_timeout_s=60) as admin:
                with trio.fail_after(45):
                    try:
                        await admin.create_topic("new-while-down", 1)
                    except trilog.ApiError as exc:
                        assert exc.code == 7  # REQUEST_TIMED_OUT
                    else:
                        raise AssertionError("CreateTopics succeeded without ZooKeeper")
    finally:
        await trio.to_thread.run_sync(server.stop)
