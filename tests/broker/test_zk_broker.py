"""Cluster mode in-process (``open_broker`` with ``zookeeper.connect``): admin answers
mean what they say."""

from __future__ import annotations

import gc
import json
import warnings

import pytest
import trio
from broker_helpers import (
    batch,
    create_topics_request,
    fetch_request,
    only_partition,
    produce_request,
    trio_connect,
    trio_roundtrip,
)
from kazoo.client import KazooClient

from trilog import protocol as p
from trilog.broker import open_broker


def _config(tmp_path, zookeeper, broker_id: int = 1) -> dict:
    return {"port": 0, "log.dirs": str(tmp_path / f"data-{broker_id}"), "broker.id": broker_id,
            "zookeeper.connect": zookeeper}


async def test_cluster_create_topics_then_produce_at_once(tmp_path, zookeeper):
    async with open_broker(_config(tmp_path, zookeeper)) as broker:
        stream = await trio_connect(broker.port)
        codes = []
        for i in range(10):
            topic = f"fresh-{i}"
            response = await trio_roundtrip(stream, create_topics_request({topic: 1}), 2)
            assert response.topics[0].error_code == 0
            part = only_partition(await trio_roundtrip(
                stream, produce_request(topic, 0, batch([b"first"])), 3))
            codes.append(part.error_code)
        await stream.aclose()
        # Leave once every log exists (a shutdown mid-refresh is the other bug below).
        with trio.fail_after(10):
            while not all((f"fresh-{i}", 0) in broker.logs for i in range(10)):
                await trio.sleep(0.01)
        await trio.sleep(0.5)  # and their state nodes are written
    assert codes == [0] * 10


async def test_cluster_delete_then_fetch_and_produce_get_unknown(tmp_path, zookeeper):
    async with open_broker(_config(tmp_path, zookeeper)) as broker:
        stream = await trio_connect(broker.port)
        assert (await trio_roundtrip(stream, create_topics_request({"gone": 1}), 2)
                ).topics[0].error_code == 0
        with trio.fail_after(10):
            while only_partition(await trio_roundtrip(
                    stream, produce_request("gone", 0, batch([b"x"])), 3)).error_code:
                await trio.sleep(0.05)
        response = await trio_roundtrip(
            stream, p.DeleteTopicsRequest(topic_names=["gone"], timeout_ms=5000), 1)
        assert [r.error_code for r in response.responses] == [0]
        # Like Kafka, the local logs go a moment after the answer (rename, then delete).
        with trio.fail_after(10):
            while list((tmp_path / "data-1").glob("gone-*")):
                await trio.sleep(0.05)
        part = only_partition(await trio_roundtrip(stream, fetch_request("gone", 0, 0), 4))
        assert part.error_code == 3
        part = only_partition(await trio_roundtrip(
            stream, produce_request("gone", 0, batch([b"y"])), 3))
        assert part.error_code == 3
        await stream.aclose()


async def test_shutdown_during_a_watch_refresh_leaves_no_unclosed_generator(tmp_path,
                                                                            zookeeper):
    kazoo = KazooClient(zookeeper)
    await trio.to_thread.run_sync(kazoo.start, 10)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            async with open_broker(_config(tmp_path, zookeeper)) as broker:
                # An assignment written straight to ZooKeeper: the topics watch fires and
                # the broker creates 300 logs; leave while it is at it.
                assignment = {"version": 1, "partitions": {str(i): [1] for i in range(300)}}
                await trio.to_thread.run_sync(
                    kazoo.create, "/brokers/topics/big", json.dumps(assignment).encode())
                with trio.fail_after(10):
                    while "big" not in broker.cluster.topics():
                        await trio.sleep(0.001)
            gc.collect()
        leaked = [str(w.message) for w in caught if "eventual_values" in str(w.message)]
        assert leaked == []
    finally:
        await trio.to_thread.run_sync(kazoo.stop)
        await trio.to_thread.run_sync(kazoo.close)


async def test_duplicate_broker_id_raises_and_the_first_broker_is_unaffected(tmp_path,
                                                                              zookeeper):
    from trilog.broker.cluster._zookeeper import BrokerIdInUseError

    async with open_broker(_config(tmp_path, zookeeper, 5)) as first:
        config = _config(tmp_path, zookeeper, 5)
        config["log.dirs"] = str(tmp_path / "other")
        with pytest.raises(BrokerIdInUseError, match="already registered"):
            async with open_broker(config):
                pass  # pragma: no cover
        stream = await trio_connect(first.port)
        meta = await trio_roundtrip(stream, p.MetadataRequest(topics=[]), 1)
        assert [(b.node_id, b.port) for b in meta.brokers] == [(5, first.port)]
        await stream.aclose()
