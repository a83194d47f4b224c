"""The client's connection layer against an in-process broker (and against nothing)."""

import trio
import pytest

from trilog.broker import open_broker
from trilog.client import open_admin, open_connection, parse_bootstrap
from trilog.errors import (
    NetworkError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    InvalidTopicError,
)
from trilog.protocol import ApiKey, MetadataRequest
from trilog.zk._server import free_port


@pytest.fixture
async def broker(tmp_path):
    async with open_broker({"port": 0, "log.dirs": str(tmp_path / "data"),
                            "num.partitions": 2}) as b:
        yield b


async def test_negotiates_versions_and_pipelines(broker):
    async with open_connection("127.0.0.1", broker.port) as conn:
        assert conn.api_versions[ApiKey.METADATA] == (0, 9)
        assert conn.version_for(ApiKey.PRODUCE, (0, 99)) == 7
        results = []

        async def ask():
            results.append(await conn.request(MetadataRequest(topics=None)))

        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(ask)
        assert len(results) == 20
        assert all(r.brokers[0].port == broker.port for r in results)


async def test_connect_refused_is_a_network_error():
    with pytest.raises(NetworkError, match="cannot connect"):
        async with open_connection("127.0.0.1", free_port()):
            pass  # pragma: no cover


async def test_a_silent_peer_times_out_and_fails_the_request():
    async def silent(stream):
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, silent, 0)
        port = listeners[0].socket.getsockname()[1]
        with pytest.raises(RequestTimedOutError):
            async with open_connection("127.0.0.1", port, request_timeout_s=0.3):
                pass  # pragma: no cover - negotiation itself times out
        nursery.cancel_scope.cancel()


async def test_broker_going_away_fails_waiting_requests(tmp_path):
    async with open_broker({"port": 0, "log.dirs": str(tmp_path)}) as b:
        async with open_connection("127.0.0.1", b.port) as conn:
            await conn.request(MetadataRequest(topics=None))
            b.shutdown()
            await b.stopped.wait()
            with pytest.raises(NetworkError):
                await conn.request(MetadataRequest(topics=None))


async def test_admin_through_the_broker(broker):
    async with open_admin(f"127.0.0.1:{free_port()},127.0.0.1:{broker.port}") as admin:
        await admin.create_topic("events", 3)
        with pytest.raises(TopicAlreadyExistsError):
            await admin.create_topic("events", 3)
        with pytest.raises(InvalidTopicError):
            await admin.create_topic("../escape", 1)
        assert await admin.list_topics() == ["events"]
        (info,) = await admin.describe_topics(["events"])
        assert [p.partition for p in info.partitions] == [0, 1, 2]
        assert {p.leader for p in info.partitions} == {0}
        await admin.delete_topic("events")
        with pytest.raises(UnknownTopicOrPartitionError, match="does not exist|not host"):
            await admin.delete_topic("events")
        assert await admin.list_topics() == []


def test_parse_bootstrap():
    assert parse_bootstrap("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap(["[::1]:9092"]) == [("::1", 9092)]
    with pytest.raises(ValueError):
        parse_bootstrap("nohost")
    with pytest.raises(ValueError):
        parse_bootstrap("")


async def test_a_request_after_an_idle_spell_still_times_out(tmp_path):
    """The timeout watch rests while nothing is pending; a later request wakes it."""
    from trilog import protocol as p

    async with open_broker({"port": 0, "log.dirs": str(tmp_path)}) as b:
        async with open_admin(bootstrap_servers=f"127.0.0.1:{b.port}") as admin:
            await admin.create_topic("quiet", 1)
        async with open_connection("127.0.0.1", b.port) as conn:
            await trio.sleep(0.3)  # idle: several of the watch's periods
            parked = p.FetchRequest(
                replica_id=-1, max_wait_ms=10_000, min_bytes=1, max_bytes=1 << 20,
                topics=[p.FetchRequest.FetchTopic(topic="quiet", partitions=[
                    p.FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=0,
                                                             partition_max_bytes=1 << 20)])])
            with trio.fail_after(5), pytest.raises(RequestTimedOutError):
                await conn.request(parked, version=4, timeout_s=0.3)
            assert conn.closed
