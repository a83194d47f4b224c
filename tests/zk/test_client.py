import trio
import pytest

from trilog.zk import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    ZooKeeperUnavailableError,
    open_zookeeper,
)
from trilog.zk._server import free_port


async def test_calls_and_errors(zookeeper):
    async with open_zookeeper(zookeeper) as zk:
        await zk.create("/a", b"1")
        assert await zk.get("/a") == b"1"
        with pytest.raises(NodeExistsError):
            await zk.create("/a", b"2")
        with pytest.raises(NoNodeError):
            await zk.get("/missing")
        await zk.put("/deep/er/node", b"x")
        await zk.put("/deep/er/node", b"y")
        assert await zk.get("/deep/er/node") == b"y"
        assert await zk.exists("/deep") and not await zk.exists("/nope")
        await zk.delete("/deep", recursive=True)
        assert not await zk.exists("/deep")


async def test_conditional_writes_let_one_writer_win(zookeeper):
    async with open_zookeeper(zookeeper) as zk:
        await zk.create("/state", b"a")
        data, version = await zk.get_versioned("/state")
        assert data == b"a"
        assert await zk.set("/state", b"b", version=version) == version + 1
        with pytest.raises(BadVersionError):  # a second writer read the old version too
            await zk.set("/state", b"c", version=version)
        assert await zk.get_versioned("/state") == (b"b", version + 1)


async def test_children_watch_delivers_latest(zookeeper):
    async with open_zookeeper(zookeeper) as zk:
        children = await zk.watch_children("/brokers/ids")
        with trio.fail_after(10):
            await children.wait_value(lambda v: v == [])
        await zk.create("/brokers/ids/2", b"", ephemeral=True)
        await zk.create("/brokers/ids/1", b"", ephemeral=True)
        with trio.fail_after(10):
            await children.wait_value(lambda v: v == ["1", "2"])
        await zk.delete("/brokers/ids/2")
        with trio.fail_after(10):
            await children.wait_value(lambda v: v == ["1"])


async def test_data_watch(zookeeper):
    async with open_zookeeper(zookeeper) as zk:
        data = await zk.watch_data("/cfg")
        await zk.put("/cfg", b"v1")
        with trio.fail_after(10):
            await data.wait_value(lambda v: v == b"v1")
        await zk.delete("/cfg")
        with trio.fail_after(10):
            await data.wait_value(lambda v: v is None)


async def test_ephemeral_nodes_vanish_with_the_session(zookeeper):
    async with open_zookeeper(zookeeper) as watcher:
        children = await watcher.watch_children("/eph")
        async with open_zookeeper(zookeeper) as zk:
            await zk.create("/eph/me", b"", ephemeral=True)
            with trio.fail_after(10):
                await children.wait_value(lambda v: v == ["me"])
        with trio.fail_after(10):
            await children.wait_value(lambda v: v == [])


async def test_dead_zookeeper_is_a_clear_error():
    with pytest.raises(ZooKeeperUnavailableError, match="cannot connect"):
        async with open_zookeeper(f"127.0.0.1:{free_port()}", connection_timeout_ms=500):
            pass  # pragma: no cover
