"""``trilog topics --elect-leaders`` and ``trilog topics --reassign`` as an operator runs
them (child processes): against ZooKeeper alone for the plan checks, and against three real
broker processes for a partition that moves with its data and a preferred leader that comes
back after a restart."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import trio
from test_admin_tools import cli  # tests/cli is on sys.path

import trilog
from trilog.client import open_admin
from trilog.errors import InvalidReplicaAssignmentError, ReassignmentInProgressError
from trilog.errors import UnknownTopicOrPartitionError
from trilog.zk import (
    REASSIGN_PARTITIONS,
    BrokerRegistration,
    broker_path,
    decode_reassignment,
    encode_topic_assignment,
    open_zookeeper,
    topic_path,
)

SETTINGS = {"zookeeper.session.timeout.ms": 4000, "replica.lag.time.max.ms": 3000,
            "replica.fetch.wait.max.ms": 100, "auto.leader.rebalance.enable": "false"}


def plan_file(tmp_path: Path, partitions: dict[tuple[str, int], list[int]]) -> str:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r} for (t, p), r in partitions.items()]}))
    return str(path)


async def write_topic(zookeeper: str, topic: str, assignment: dict[int, list[int]]) -> None:
    async with open_zookeeper(zookeeper) as zk:
        await zk.create(topic_path(topic), encode_topic_assignment(assignment), makepath=True)


# -- the plan, against ZooKeeper alone ---------------------------------------------------------


async def test_reassign_checks_the_plan_and_refuses_a_second_one(zookeeper, tmp_path):
    async with open_zookeeper(zookeeper) as zk:
        for b in (1, 2, 3):  # registered brokers, and no controller to carry plans out
            await zk.create(broker_path(b), BrokerRegistration(b, "127.0.0.1", 1).encode(),
                            makepath=True)
        await zk.create(topic_path("t"), encode_topic_assignment({0: [1, 2], 1: [2, 3]}),
                        makepath=True)
    async with open_admin(zookeeper=zookeeper) as admin:
        with pytest.raises(UnknownTopicOrPartitionError):
            await admin.alter_partition_reassignments({("t", 2): [1]})
        with pytest.raises(UnknownTopicOrPartitionError):
            await admin.alter_partition_reassignments({("nope", 0): [1]})
        with pytest.raises(InvalidReplicaAssignmentError, match=r"\[7\]"):
            await admin.alter_partition_reassignments({("t", 0): [1, 7]})
        with pytest.raises(InvalidReplicaAssignmentError):
            await admin.alter_partition_reassignments({("t", 0): [1, 1]})
        assert await admin.list_partition_reassignments() == {}
    z = ("--zookeeper", zookeeper)

    wrong = await cli("topics", *z, "--reassign", "--execute",
                      "--reassignment-json-file", plan_file(tmp_path, {("t", 0): [3, 9]}))
    assert wrong.returncode != 0 and "[9]" in wrong.stderr and wrong.stdout == ""
    bad = tmp_path / "bad.json"
    bad.write_text('{"version":1,"partitions":[{"topic":"t","partition":"0"}]}')
    malformed = await cli("topics", *z, "--reassign", "--execute",
                          "--reassignment-json-file", str(bad))
    assert malformed.returncode != 0 and "partition" in malformed.stderr
    usage = await cli("topics", "--bootstrap-server", "127.0.0.1:1", "--reassign",
                      "--execute", "--reassignment-json-file", str(bad))
    assert usage.returncode != 0 and "--zookeeper" in usage.stderr

    plan = plan_file(tmp_path, {("t", 0): [3, 2], ("t", 1): [2, 3]})
    started = await cli("topics", *z, "--reassign", "--execute",
                        "--reassignment-json-file", plan)
    assert started.returncode == 0, started.stderr
    assert started.stdout == (
        "Current partition replica assignment\n\n"
        '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]},'
        '{"topic":"t","partition":1,"replicas":[2,3]}]}\n\n'
        "Save this to use as the --reassignment-json-file option during rollback\n"
        "Successfully started partition reassignments for t-0,t-1\n")
    async with open_zookeeper(zookeeper) as zk:
        assert decode_reassignment(await zk.get(REASSIGN_PARTITIONS)) == {
            ("t", 0): [3, 2], ("t", 1): [2, 3]}
    again = await cli("topics", *z, "--reassign", "--execute",
                      "--reassignment-json-file", plan)
    assert again.returncode != 0 and "in progress" in again.stderr
    async with open_admin(zookeeper=zookeeper) as admin:
        with pytest.raises(ReassignmentInProgressError):
            await admin.alter_partition_reassignments({("t", 0): [1]})

    verify = await cli("topics", *z, "--reassign", "--verify",
                       "--reassignment-json-file", plan)
    assert verify.returncode == 0, verify.stderr
    assert verify.stdout == ("Status of partition reassignment:\n"
                             "Reassignment of partition t-0 is still in progress.\n"
                             "Reassignment of partition t-1 is still in progress.\n")
    # The controller dropped the plan (its log says why): t-0 did not move.
    async with open_zookeeper(zookeeper) as zk:
        await zk.delete(REASSIGN_PARTITIONS)
    verify = await cli("topics", *z, "--reassign", "--verify",
                       "--reassignment-json-file", plan)
    assert verify.returncode == 1
    assert verify.stdout.splitlines()[1:] == [
        "Reassignment of partition t-0 failed: its replicas are 1,2, not 3,2 (see the "
        "controller's log)",
        "Reassignment of partition t-1 is complete."]


# -- on a real cluster -------------------------------------------------------------------------


@pytest.fixture
def cluster(broker_process, zookeeper):
    def start(i: int, log_dir=None):
        return broker_process(log_dir, broker_id=i, zookeeper=zookeeper, overrides=SETTINGS)
    return {i: start(i) for i in (1, 2, 3)}, start


async def wait_partition(bootstrap: str, topic: str, partition: int, predicate,
                         timeout: float = 30.0):
    """The partition's metadata once ``predicate(info)`` holds."""
    with trio.fail_after(timeout):
        while True:
            try:
                async with open_admin(bootstrap) as admin:
                    (info,) = await admin.describe_topics([topic])
                found = [p for p in info.partitions if p.partition == partition]
                if found and predicate(found[0]):
                    return found[0]
            except trilog.TrilogError:
                pass
            await trio.sleep(0.1)


async def read_all(bootstrap: str, topic: str, partition: int) -> list[bytes]:
    out: list[bytes] = []
    async with trilog.open_simple_consumer(bootstrap_servers=bootstrap) as consumer:
        offset = 0
        while True:
            fetched = await consumer.fetch(topic, partition, offset)
            records = fetched.records()
            if not records:
                return out
            out.extend(r.value for r in records)
            offset = records[-1].offset + 1


def log_bytes(log_dir: Path, topic: str, partition: int) -> bytes:
    directory = log_dir / f"{topic}-{partition}"
    return b"".join((directory / name).read_bytes()
                    for name in sorted(os.listdir(directory)) if name.endswith(".log"))


@pytest.mark.slow
async def test_reassign_moves_a_partition_with_its_data(cluster, zookeeper, tmp_path):
    brokers, _start = cluster
    bootstrap = brokers[2].bootstrap
    await write_topic(zookeeper, "moved", {0: [1, 2]})
    await wait_partition(bootstrap, "moved", 0, lambda p: p.leader == 1 and p.isr == (1, 2))
    values = [b"value-%04d" % i for i in range(400)]
    async with trilog.open_producer(bootstrap, acks=-1) as producer:
        for v in values:
            await producer.send("moved", v, partition=0)
        await producer.flush()

    plan = plan_file(tmp_path, {("moved", 0): [2, 3]})
    z = ("--zookeeper", zookeeper)
    started = await cli("topics", *z, "--reassign", "--execute",
                        "--reassignment-json-file", plan)
    assert started.returncode == 0, started.stderr
    assert '{"topic":"moved","partition":0,"replicas":[1,2]}' in started.stdout
    assert started.stdout.endswith("Successfully started partition reassignment for moved-0\n")
    with trio.fail_after(30):
        while True:
            verify = await cli("topics", *z, "--reassign", "--verify",
                               "--reassignment-json-file", plan)
            assert verify.returncode == 0, verify.stdout + verify.stderr
            if "moved-0 is complete." in verify.stdout:
                break
            assert "moved-0 is still in progress." in verify.stdout
            await trio.sleep(0.2)

    # Broker 2 leads (1 is gone from the replicas), 3 is in sync and holds the same log.
    info = await wait_partition(bootstrap, "moved", 0,
                                lambda p: p.replicas == (2, 3) and p.isr == (2, 3))
    assert info.leader == 2
    with trio.fail_after(15):
        while (brokers[1].log_dir / "moved-0").exists():
            await trio.sleep(0.1)
    assert log_bytes(brokers[3].log_dir, "moved", 0) == log_bytes(brokers[2].log_dir, "moved", 0)
    assert await read_all(bootstrap, "moved", 0) == values
    # It keeps taking acks=all records, and 3 keeps up.
    async with trilog.open_producer(bootstrap, acks=-1) as producer:
        await producer.send("moved", b"after", partition=0)
        await producer.flush()
    assert (await read_all(brokers[3].bootstrap, "moved", 0))[-2:] == [values[-1], b"after"]
    with trio.fail_after(15):
        while log_bytes(brokers[3].log_dir, "moved", 0) != \
                log_bytes(brokers[2].log_dir, "moved", 0):
            await trio.sleep(0.1)


@pytest.mark.slow
async def test_elect_leaders_brings_the_preferred_leader_back(cluster, zookeeper):
    brokers, start = cluster
    bootstrap = brokers[3].bootstrap
    await write_topic(zookeeper, "pref", {0: [1, 2], 1: [2, 1]})
    for partition, leader in ((0, 1), (1, 2)):
        await wait_partition(bootstrap, "pref", partition,
                             lambda p, leader=leader: p.leader == leader and len(p.isr) == 2)
    b = ("--bootstrap-server", bootstrap)

    # A restart of broker 1 (controlled shutdown) moves pref-0's leadership to 2 ...
    brokers[1].stop()
    await wait_partition(bootstrap, "pref", 0, lambda p: p.leader == 2)
    refused = await cli("topics", *b, "--elect-leaders", "--topic", "pref")
    assert refused.returncode == 1
    assert refused.stdout == (
        "Valid replica already elected for partitions pref-1\n"
        "Error completing leader election (PREFERRED) for partition: pref-0: "
        "PREFERRED_LEADER_NOT_AVAILABLE: The preferred leader was not available.\n"
        "1 replica(s) could not be elected\n")
    brokers[1] = start(1, brokers[1].log_dir)
    # ... where it stays once 1 is back in sync.
    await wait_partition(bootstrap, "pref", 0, lambda p: p.isr == (1, 2) and p.leader == 2)

    elected = await cli("topics", *b, "--elect-leaders", "--topic", "pref", "--partition", "0")
    assert elected.returncode == 0, elected.stdout + elected.stderr
    assert elected.stdout == \
        "Successfully completed leader election (PREFERRED) for partitions pref-0\n"
    await wait_partition(bootstrap, "pref", 0, lambda p: p.leader == 1)

    # Every partition: none needs an election now; unclean: every leader is live.
    everything = await cli("topics", *b, "--elect-leaders")
    assert (everything.returncode, everything.stdout) == (0, ""), everything.stderr
    unclean = await cli("topics", *b, "--elect-leaders", "--topic", "pref",
                        "--election-type", "unclean")
    assert unclean.returncode == 0, unclean.stderr
    assert unclean.stdout == "Valid replica already elected for partitions pref-0, pref-1\n"
    unknown = await cli("topics", *b, "--elect-leaders", "--topic", "pref", "--partition", "7")
    assert unknown.returncode == 1
    assert "pref-7: UNKNOWN_TOPIC_OR_PARTITION" in unknown.stdout
    usage = await cli("topics", "--zookeeper", zookeeper, "--elect-leaders")
    assert usage.returncode != 0 and "--bootstrap-server" in usage.stderr
