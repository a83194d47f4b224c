"""``trilog groups`` as an operator runs it (a child process), against an in-process broker
with kafka-python group members, and against brokers in ZooKeeper mode with trilog's
ZooKeeper consumer connector."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime

import pytest
import trio
from kazoo.client import KazooClient

import trilog
from trilog.broker import open_broker
from trilog.cli._groups import parse_datetime_ms
from trilog.cli._common import UsageError
from trilog.client import open_group_admin
from trilog.client._groups_admin import decode_consumer_assignment
from trilog.zk._server import free_port

_MAIN = "import sys; from trilog.cli import main; sys.exit(main())"
TOPIC = "events"


async def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``trilog groups ARGS...`` in a child process; stdout/stderr as text."""
    with trio.fail_after(timeout):
        done = await trio.run_process([sys.executable, "-c", _MAIN, "groups", *args],
                                      capture_stdout=True, capture_stderr=True, check=False)
    result = subprocess.CompletedProcess(done.args, done.returncode,
                                         done.stdout.decode("utf-8", "replace"),
                                         done.stderr.decode("utf-8", "replace"))
    assert "Traceback" not in result.stderr, result.stderr
    return result


def table(stdout: str, group: str) -> dict[tuple[str, int], list[str]]:
    """The partition rows of a describe or reset table: (topic, partition) -> columns."""
    out = {}
    for line in stdout.splitlines():
        cols = line.split()
        if cols and cols[0] == group and len(cols) >= 5:
            out[(cols[1], int(cols[2]))] = cols[3:]
    return out


def members(stdout: str) -> list[list[str]]:
    """The rows of the members table of a describe."""
    _, found, rest = stdout.partition("#PARTITIONS")
    return [line.split() for line in rest.splitlines()[1:] if line.strip()] if found else []


async def produce(bootstrap: str, topic: str, per_partition: dict[int, int], *,
                  partitions: int = 2, timestamps: list[int] | None = None) -> None:
    async with trilog.open_admin(bootstrap) as admin:
        try:
            await admin.create_topic(topic, partitions)
        except trilog.ApiError as exc:
            if exc.code != 36:  # TOPIC_ALREADY_EXISTS
                raise
    async with trilog.open_producer(bootstrap) as producer:
        for partition, n in per_partition.items():
            for i in range(n):
                ts = timestamps[i] if timestamps else None
                await producer.send(topic, b"%d" % i, partition=partition, timestamp_ms=ts)


# -- broker-coordinated groups: kafka-python members ------------------------------------------------


@pytest.fixture
async def broker(tmp_path):
    async with open_broker({"port": 0, "host.name": "127.0.0.1", "log.dirs": str(tmp_path),
                            "group.initial.rebalance.delay.ms": 0,
                            "offsets.topic.num.partitions": 3}) as b:
        yield b


def _join_and_commit(bootstrap: str, group: str, expected: int):
    """A kafka-python member of ``group`` that consumed ``expected`` records of TOPIC and
    committed; returned still a member (its heartbeat thread keeps it in the group)."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id="reader-one",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=6000, heartbeat_interval_ms=200,
                             request_timeout_ms=15000, fetch_max_wait_ms=100,
                             retry_backoff_ms=50)
    consumer.subscribe([TOPIC])
    got = 0
    for _ in range(300):
        got += sum(len(rs) for rs in consumer.poll(timeout_ms=100).values())
        if got >= expected:
            break
    assert got == expected
    consumer.commit()
    return consumer


async def test_broker_group_list_describe_and_reset(broker):
    bootstrap = broker.bootstrap
    await produce(bootstrap, TOPIC, {0: 10, 1: 10})
    consumer = await trio.to_thread.run_sync(_join_and_commit, bootstrap, "readers", 20)
    try:
        await produce(bootstrap, TOPIC, {0: 5})

        listed = await cli("--list", "--bootstrap-server", bootstrap)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.split() == ["readers"]

        described = await cli("--describe", "--group", "readers", "--bootstrap-server",
                              bootstrap)
        assert described.returncode == 0, described.stderr
        assert "state Stable" in described.stdout and "1 member(s)" in described.stdout
        assert "consumer/range" in described.stdout
        rows = table(described.stdout, "readers")
        assert sorted(rows) == [(TOPIC, 0), (TOPIC, 1)]
        assert rows[(TOPIC, 0)][:3] == ["10", "15", "5"]  # current, log end, lag
        assert rows[(TOPIC, 1)][:3] == ["10", "10", "0"]
        member, host, client = rows[(TOPIC, 0)][3:]
        assert member.startswith("reader-one") and host == "/127.0.0.1" \
            and client == "reader-one"
        assert members(described.stdout) == [[member, "-", "/127.0.0.1", "reader-one", "2",
                                               f"{TOPIC}:0,1"]]

        # A dry run prints the plan and says --execute would be refused; --execute is.
        dry = await cli("--reset-offsets", "--group", "readers", "--topic", TOPIC,
                        "--to-earliest", "--bootstrap-server", bootstrap)
        assert dry.returncode == 0, dry.stderr
        assert table(dry.stdout, "readers") == {(TOPIC, 0): ["10", "0"], (TOPIC, 1): ["10", "0"]}
        assert "dry run" in dry.stderr and "--execute is refused" in dry.stderr
        refused = await cli("--reset-offsets", "--group", "readers", "--topic", TOPIC,
                            "--to-earliest", "--execute", "--bootstrap-server", bootstrap)
        assert refused.returncode == 1
        assert "inactive" in refused.stderr and "1 active member" in refused.stderr
    finally:
        await trio.to_thread.run_sync(consumer.close)

    async with open_group_admin(bootstrap) as admin:
        group = await admin.describe_group("readers")
        assert group.state == "Empty" and not group.members and not group.active
        assert [p.current_offset for p in group.partitions] == [10, 10]  # the dry run wrote nothing

    async def reset(*target: str) -> dict:
        done = await cli("--reset-offsets", "--group", "readers", "--topic", TOPIC, *target,
                         "--execute", "--bootstrap-server", bootstrap)
        assert done.returncode == 0, done.stderr
        assert "Reset" in done.stdout
        async with open_group_admin(bootstrap) as admin:
            group = await admin.describe_group("readers")
        return {p.partition: p.current_offset for p in group.partitions}

    assert await reset("--to-earliest") == {0: 0, 1: 0}
    assert await reset("--to-offset", "7", "--partition", "0") == {0: 7, 1: 0}
    assert await reset("--to-latest", "--partition", "1") == {0: 7, 1: 10}
    clamped = await cli("--reset-offsets", "--group", "readers", "--topic", TOPIC,
                        "--to-offset", "99", "--bootstrap-server", bootstrap)
    assert table(clamped.stdout, "readers") == {(TOPIC, 0): ["7", "15"], (TOPIC, 1): ["10", "10"]}
    assert "offset 99 is past the log end; using 15" in clamped.stderr

    # Another client reads the same committed offsets.
    def committed_by_kafka_python() -> dict[int, int]:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id="readers",
                                 enable_auto_commit=False)
        try:
            return {p: consumer.committed(TopicPartition(TOPIC, p)) for p in (0, 1)}
        finally:
            consumer.close(autocommit=False)

    assert await trio.to_thread.run_sync(committed_by_kafka_python) == {0: 7, 1: 10}


async def test_broker_reset_to_datetime_creates_a_new_group(broker):
    bootstrap = broker.bootstrap
    base = 1_700_000_000_000
    await produce(bootstrap, "timed", {0: 10}, partitions=1,
                  timestamps=[base + i * 1000 for i in range(10)])

    async def to_datetime(text: str) -> list[str]:
        done = await cli("--reset-offsets", "--group", "fresh", "--topic", "timed",
                         "--to-datetime", text, "--execute", "--bootstrap-server", bootstrap)
        assert done.returncode == 0, done.stderr
        return table(done.stdout, "fresh")[("timed", 0)]

    at_4 = datetime.fromtimestamp((base + 4000) / 1000, UTC)
    assert await to_datetime(at_4.isoformat()) == ["-", "4"]  # no offset committed before
    assert await to_datetime(at_4.strftime("%Y-%m-%dT%H:%M:%S.500Z")) == ["4", "5"]
    assert await to_datetime("2100-01-01T00:00:00+00:00") == ["5", "10"]  # after all: the end
    described = await cli("--describe", "--group", "fresh", "--bootstrap-server", bootstrap)
    assert described.returncode == 0, described.stderr
    assert table(described.stdout, "fresh")[("timed", 0)] == ["10", "10", "0", "-", "-", "-"]
    assert "has no active members" in described.stdout


async def test_broker_errors(broker):
    bootstrap = broker.bootstrap
    await produce(bootstrap, TOPIC, {0: 1})
    unknown = await cli("--describe", "--group", "nobody", "--bootstrap-server", bootstrap)
    assert unknown.returncode == 1
    assert "group 'nobody' does not exist" in unknown.stderr

    no_topic = await cli("--reset-offsets", "--group", "g", "--topic", "missing",
                         "--to-earliest", "--bootstrap-server", bootstrap)
    assert no_topic.returncode == 1 and "topic 'missing' does not exist" in no_topic.stderr
    no_partition = await cli("--reset-offsets", "--group", "g", "--topic", TOPIC,
                             "--partition", "5", "--to-earliest", "--bootstrap-server", bootstrap)
    assert no_partition.returncode == 1 and "has no partition 5" in no_partition.stderr

    bad_time = await cli("--reset-offsets", "--group", "g", "--topic", TOPIC,
                         "--to-datetime", "yesterday", "--bootstrap-server", bootstrap)
    assert bad_time.returncode == 2 and "not an ISO 8601 date-time" in bad_time.stderr
    for args, message in [
        (["--describe"], "--describe needs --group"),
        (["--reset-offsets", "--group", "g", "--to-latest"], "needs --topic"),
        (["--reset-offsets", "--group", "g", "--topic", TOPIC], "needs one of --to-earliest"),
        (["--list", "--execute"], "go with --reset-offsets only"),
    ]:
        usage = await cli(*args, "--bootstrap-server", bootstrap)
        assert usage.returncode == 2 and message in usage.stderr, (args, usage.stderr)

    nothing_there = f"127.0.0.1:{free_port()}"
    for action in (["--list"], ["--describe", "--group", "g"]):
        with trio.fail_after(10):  # fails at once, without retrying for the coordinator
            unreachable = await cli(*action, "--bootstrap-server", nothing_there)
        assert unreachable.returncode == 1
        assert f"cannot connect to {nothing_there}" in unreachable.stderr


# -- groups of the ZooKeeper consumer connector -------------------------------------------------------


@pytest.fixture
async def zk_cluster(zookeeper, tmp_path):
    """Two brokers in ZooKeeper mode: each coordinates some groups."""
    conf = {"port": 0, "host.name": "127.0.0.1", "zookeeper.connect": zookeeper,
            "offsets.topic.num.partitions": 4, "group.initial.rebalance.delay.ms": 0}
    async with open_broker({**conf, "broker.id": 1, "log.dirs": str(tmp_path / "b1")}) as b1, \
            open_broker({**conf, "broker.id": 2, "log.dirs": str(tmp_path / "b2")}) as b2:
        yield b1, b2


def _zk_offsets(zookeeper: str, group: str, topic: str) -> dict[int, int]:
    zk = KazooClient(zookeeper)
    zk.start(timeout=10)
    try:
        base = f"/consumers/{group}/offsets/{topic}"
        return {int(p): int(zk.get(f"{base}/{p}")[0]) for p in zk.get_children(base)}
    finally:
        zk.stop()
        zk.close()


async def test_zookeeper_group_list_describe_and_reset(zk_cluster, zookeeper):
    bootstrap = zk_cluster[0].bootstrap
    await produce(bootstrap, "zk-events", {0: 10, 1: 10})
    where = ("--zookeeper", zookeeper)
    async with trilog.open_consumer_connector(
            "zkg", zookeeper=zookeeper, topics={"zk-events": 1}, auto_offset_reset="smallest",
            enable_auto_commit=False, consumer_timeout_ms=500, consumer_id="me") as consumer:
        records = [r async for r in consumer.streams["zk-events"][0]]
        assert len(records) == 20
        await consumer.commit_offsets()
        await produce(bootstrap, "zk-events", {0: 5})

        listed = await cli("--list", *where)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.split() == ["zkg"]

        described = await cli("--describe", "--group", "zkg", *where)
        assert described.returncode == 0, described.stderr
        assert "(zookeeper): state Active, 1 member(s)" in described.stdout
        assert table(described.stdout, "zkg") == {
            ("zk-events", 0): ["10", "15", "5", "me-0", "-", "-"],
            ("zk-events", 1): ["10", "10", "0", "me-0", "-", "-"],
        }
        assert members(described.stdout) == [["me", "-", "-", "-", "2", "zk-events:0,1"]]

        dry = await cli("--reset-offsets", "--group", "zkg", "--topic", "zk-events",
                        "--to-earliest", *where)
        assert dry.returncode == 0, dry.stderr
        assert table(dry.stdout, "zkg") == {("zk-events", 0): ["10", "0"],
                                            ("zk-events", 1): ["10", "0"]}
        assert "--execute is refused" in dry.stderr
        refused = await cli("--reset-offsets", "--group", "zkg", "--topic", "zk-events",
                            "--to-earliest", "--execute", *where)
        assert refused.returncode == 1 and "1 active member" in refused.stderr
        assert await trio.to_thread.run_sync(_zk_offsets, zookeeper, "zkg", "zk-events") \
            == {0: 10, 1: 10}

    async def reset(*target: str) -> dict[int, int]:
        done = await cli("--reset-offsets", "--group", "zkg", "--topic", "zk-events", *target,
                         "--execute", *where)
        assert done.returncode == 0, done.stderr
        return await trio.to_thread.run_sync(_zk_offsets, zookeeper, "zkg", "zk-events")

    assert await reset("--to-earliest") == {0: 0, 1: 0}
    assert await reset("--to-offset", "3", "--partition", "1") == {0: 0, 1: 3}
    assert await reset("--to-latest", "--partition", "0") == {0: 15, 1: 3}

    described = await cli("--describe", "--group", "zkg", *where)
    assert "state Empty, 0 member(s)" in described.stdout
    assert table(described.stdout, "zkg") == {
        ("zk-events", 0): ["15", "15", "0", "-", "-", "-"],
        ("zk-events", 1): ["3", "10", "7", "-", "-", "-"],
    }

    # The connector resumes from the reset offsets.
    async with trilog.open_consumer_connector(
            "zkg", zookeeper=zookeeper, topics={"zk-events": 1}, enable_auto_commit=False,
            consumer_timeout_ms=500) as again:
        rest = [(r.partition, r.offset) async for r in again.streams["zk-events"][0]]
    assert sorted(rest) == [(1, o) for o in range(3, 10)]

    unknown = await cli("--describe", "--group", "nobody", *where)
    assert unknown.returncode == 1 and "group 'nobody' does not exist" in unknown.stderr


async def test_broker_groups_of_every_coordinator_are_listed(zk_cluster):
    b1, b2 = zk_cluster
    async with trilog.open_admin(b1.bootstrap) as admin:
        with trio.fail_after(10):  # both live before the offsets topic is spread over them
            while len(await admin.brokers()) < 2:
                await trio.sleep(0.05)
    await produce(b1.bootstrap, TOPIC, {0: 3, 1: 3})
    groups = [f"group-{i}" for i in range(8)]
    coordinators = set()
    async with open_group_admin(b1.bootstrap) as admin:
        for group in groups:  # a reset of a group that does not exist yet creates it
            await admin.reset_offsets(group, TOPIC, timestamp_ms=trilog.LATEST, execute=True)
            described = await admin.describe_group(group)
            assert [p.current_offset for p in described.partitions] == [3, 3]
            coordinators.add(described.coordinator.node_id)
    assert coordinators == {1, 2}  # 4 offsets partitions over 2 brokers: both coordinate
    for bootstrap in (b1.bootstrap, b2.bootstrap):
        listed = await cli("--list", "--bootstrap-server", bootstrap)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.split() == groups
    described = await cli("--describe", "--all-groups", "--bootstrap-server", b2.bootstrap)
    assert described.returncode == 0, described.stderr
    assert all(table(described.stdout, g) == {(TOPIC, 0): ["3", "3", "0", "-", "-", "-"],
                                              (TOPIC, 1): ["3", "3", "0", "-", "-", "-"]}
               for g in groups)


# -- pure parts --------------------------------------------------------------------------------------


def test_decode_consumer_assignment():
    data = (b"\x00\x01" + b"\x00\x00\x00\x02"
            + b"\x00\x01a" + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x03"
            + b"\x00\x01b" + b"\x00\x00\x00\x00"
            + b"\xff\xff\xff\xff")
    assert decode_consumer_assignment(data) == [("a", 0), ("a", 3)]
    assert decode_consumer_assignment(b"") == []
    with pytest.raises(trilog.ProtocolError):
        decode_consumer_assignment(b"\x00\x00\x7f\xff\xff\xff")  # a count the bytes cannot hold


def test_parse_datetime():
    assert parse_datetime_ms("1970-01-01T00:00:01Z") == 1000
    assert parse_datetime_ms("1970-01-01T01:00:00.001+01:00") == 1
    local = datetime(2024, 5, 1, 12, 0, 0).astimezone()
    assert parse_datetime_ms("2024-05-01T12:00:00") == int(local.timestamp() * 1000)
    with pytest.raises(UsageError):
        parse_datetime_ms("2024-13-01")
