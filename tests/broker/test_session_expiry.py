"""Cluster mode: the broker's ZooKeeper session expires; it registers again and serves on.

The standard trick expires a session on demand: a second client connects with the same
session id and password and closes, which ends the session on the server.
"""

from __future__ import annotations

import json

import pytest
import trio
from broker_helpers import (
    batch,
    create_topics_request,
    fetch_request,
    metadata_request,
    only_partition,
    produce_request,
    records_of,
    trio_connect,
    trio_roundtrip,
)
from kazoo.client import KazooClient

from trilog.broker import open_broker


def _kazoo(hosts: str, client_id=None) -> KazooClient:
    client = KazooClient(hosts=hosts, client_id=client_id, timeout=10)
    client.start(timeout=10)
    return client


def _close(client: KazooClient) -> None:
    client.stop()
    client.close()


async def _expire_session(zookeeper_server, zk_client) -> int:
    """End the session of ``zk_client`` (a running KazooClient) on the server."""
    session_id, password = zk_client.client_id

    def expire():
        _close(_kazoo(zookeeper_server.connect_string, client_id=(session_id, password)))

    await trio.to_thread.run_sync(expire)
    return session_id


async def _wait_for(fn, timeout: float, what: str):
    with trio.fail_after(timeout):
        while True:
            value = await trio.to_thread.run_sync(fn)
            if value:
                return value
            await trio.sleep(0.1)


async def _produce_when_ready(stream, topic: str, partition: int, value: bytes) -> None:
    # A new topic's log may appear a moment after CreateTopics answers (see
    # test_cluster_create_topics_then_produce_at_once in test_zk_broker.py).
    with trio.fail_after(10):
        while True:
            part = only_partition(await trio_roundtrip(
                stream, produce_request(topic, partition, batch([value])), 3))
            if part.error_code != 3:
                break
            await trio.sleep(0.05)
    assert part.error_code == 0


def _config(tmp_path, zookeeper, broker_id: int) -> dict:
    return {
        "port": 0,
        "log.dirs": str(tmp_path / f"data-{broker_id}"),
        "broker.id": broker_id,
        "zookeeper.connect": zookeeper,
        "zookeeper.session.timeout.ms": 4000,
    }


@pytest.mark.timeout(120)
async def test_session_expiry_re_registers_and_keeps_serving(tmp_path, zookeeper,
                                                             zookeeper_server):
    kazoo = await trio.to_thread.run_sync(_kazoo, zookeeper)
    try:
        async with open_broker(_config(tmp_path, zookeeper, 1)) as broker:
            stream = await trio_connect(broker.port)
            response = await trio_roundtrip(stream, create_topics_request({"kept": 2}), 2)
            assert response.topics[0].error_code == 0
            await _produce_when_ready(stream, "kept", 0, b"before")

            def owner(path):
                stat = kazoo.exists(path)
                return None if stat is None else stat.ephemeralOwner

            states = [f"/brokers/topics/kept/partitions/{i}/state" for i in (0, 1)]
            old = await _wait_for(lambda: owner("/brokers/ids/1"), 10, "registration")
            # The controller writes partition states: persistent nodes, owned by no session.
            await _wait_for(lambda: all(owner(s) == 0 for s in states), 10, "state nodes")
            zk_client = broker.cluster.zk._client
            assert zk_client.client_id[0] == old

            expired = await _expire_session(zookeeper_server, zk_client)
            assert expired == old

            # The broker gets a new session and puts its ephemeral nodes back.
            new = await _wait_for(
                lambda: (o := owner("/brokers/ids/1")) not in (None, old) and o, 30,
                "re-registration",
            )
            assert zk_client.client_id[0] == new
            data = json.loads(await trio.to_thread.run_sync(
                lambda: kazoo.get("/brokers/ids/1")[0]))
            assert data["port"] == broker.port

            def leader(s):
                return json.loads(kazoo.get(s)[0])["leader"]

            # This broker, the controller again in its new session, leads its partitions.
            await _wait_for(lambda: all(leader(s) == 1 for s in states), 15,
                            "the partitions led again")

            # It still serves: old data, new appends, a new topic (the watches still work).
            with trio.fail_after(15):
                while only_partition(await trio_roundtrip(
                        stream, produce_request("kept", 0, batch([b"after"])), 3)).error_code:
                    await trio.sleep(0.1)
            part = only_partition(await trio_roundtrip(stream, fetch_request("kept", 0, 0), 4))
            assert [r.value for r in records_of(part.records)] == [b"before", b"after"]
            response = await trio_roundtrip(stream, create_topics_request({"fresh": 1}), 2)
            assert response.topics[0].error_code == 0
            meta = await trio_roundtrip(stream, metadata_request(["kept", "fresh"]), 1)
            assert [(t.name, t.error_code) for t in meta.topics] == [("kept", 0), ("fresh", 0)]
            assert all(x.leader_id == 1 for t in meta.topics for x in t.partitions)

            # A broker that joins after the expiry is seen through the /brokers/ids watch.
            async with open_broker(_config(tmp_path, zookeeper, 2)) as second:
                with trio.fail_after(10):
                    while True:
                        meta = await trio_roundtrip(stream, metadata_request([]), 1)
                        if {b.node_id for b in meta.brokers} == {1, 2}:
                            break
                        await trio.sleep(0.1)
                assert {b.port for b in meta.brokers} == {broker.port, second.port}
            await stream.aclose()
        # A clean shutdown removes the registration.
        assert await trio.to_thread.run_sync(kazoo.exists, "/brokers/ids/1") is None
    finally:
        await trio.to_thread.run_sync(_close, kazoo)
