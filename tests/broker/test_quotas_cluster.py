"""Client quotas in a ZooKeeper cluster: a quota altered through one broker is in Kafka's
layout (``/config/clients/<id>``, ``/config/users/<user>`` beside the user's SCRAM
credentials, a ``/config/changes`` notification naming the entity), reaches the other
broker without a restart, and throttles there; ``trilog users`` and quotas leave each
other's keys in ``/config/users/<user>``."""

from __future__ import annotations

import json
import time

import pytest
from broker_helpers import batch, connect, create_topics_request, produce_request, roundtrip
from kazoo.client import KazooClient
from security_helpers import trilog_users
from quota_helpers import alter_request, ask, everything

from trilog import protocol as p

pytestmark = pytest.mark.slow


def node(kazoo: KazooClient, path: str) -> dict:
    return json.loads(kazoo.get(path)[0])


def led_by(sock, topic: str, broker_id: int) -> int:
    meta = roundtrip(sock, p.MetadataRequest(topics=[
        p.MetadataRequest.MetadataRequestTopic(name=topic)]), 1)
    return next(x.partition_index for x in meta.topics[0].partitions
                if x.leader_id == broker_id)


def test_a_quota_altered_on_one_broker_reaches_and_throttles_on_the_other(broker_process,
                                                                          zookeeper):
    settings = {"quota.window.num": 2}
    brokers = [broker_process(broker_id=i, zookeeper=zookeeper, overrides=settings)
               for i in (1, 2)]
    trilog_users("--zookeeper", zookeeper, "--add", "alice", "--password", "secret")
    with connect(brokers[0].bootstrap) as sock:
        created = roundtrip(sock, create_topics_request({"t": 4}), 2)
        assert created.topics[0].error_code == 0
        for request in [alter_request({"producer_byte_rate": 100_000}, client_id="slow"),
                        alter_request({"consumer_byte_rate": 5_000_000}, user="alice")]:
            assert ask(sock, request, 1).entries[0].error_code == 0
    wanted = {(("client-id", "slow"),): {"producer_byte_rate": 100_000.0},
              (("user", "alice"),): {"consumer_byte_rate": 5_000_000.0}}
    with connect(brokers[1].bootstrap) as sock:
        deadline = time.monotonic() + 15
        while everything(sock) != wanted:
            assert time.monotonic() < deadline, "broker 2 never saw the quotas"
            time.sleep(0.1)
        partition = led_by(sock, "t", 2)
        throttled = None
        for _ in range(40):  # 100 KB/s: throttled after about 100 KB on broker 2 too
            answer = ask(sock, produce_request("t", partition, batch([b"x" * 20_000])), 7,
                         "slow")
            if answer.throttle_time_ms:
                throttled = answer
                break
        assert throttled is not None and 0 < throttled.throttle_time_ms <= 2000

    kazoo = KazooClient(zookeeper)
    kazoo.start(timeout=10)
    try:
        assert node(kazoo, "/config/clients/slow")["config"] == {"producer_byte_rate": "100000"}
        alice = node(kazoo, "/config/users/alice")["config"]
        assert alice["consumer_byte_rate"] == "5000000" and "SCRAM-SHA-256" in alice
        changes = [node(kazoo, f"/config/changes/{n}")
                   for n in sorted(kazoo.get_children("/config/changes"))]
        assert {"version": 2, "entity_path": "clients/slow"} in changes
        assert {"version": 2, "entity_path": "users/alice"} in changes
        # the user's credentials are the users tool's: changing them keeps the quota, and
        # the quota-only user is no SCRAM user
        trilog_users("--zookeeper", zookeeper, "--add", "alice", "--password", "other")
        assert node(kazoo, "/config/users/alice")["config"]["consumer_byte_rate"] == "5000000"
        trilog_users("--zookeeper", zookeeper, "--delete", "alice")
        assert node(kazoo, "/config/users/alice")["config"] == {
            "consumer_byte_rate": "5000000"}
        assert "alice" not in trilog_users("--zookeeper", zookeeper, "--list")
    finally:
        kazoo.stop()
        kazoo.close()
    with connect(brokers[0].bootstrap) as sock:
        assert everything(sock) == wanted
