"""The operator tools of issue 12 as an operator runs them (child processes) against a real
broker process: ``trilog topics`` with configs and ``--alter``, ``trilog configs``,
``trilog delete-records``, ``trilog get-offsets``; what they change is checked through the
admin API, and bad input is one line and a non-zero status, never a traceback."""

from __future__ import annotations

import json

import pytest
from cli_helpers import cli

import trilog
from trilog.client import open_admin
from trilog.zk._server import free_port

@pytest.fixture
def broker(broker_process):
    return broker_process(overrides={"num.partitions": 1})


async def produce(bootstrap: str, topic: str, per_partition: dict[int, int],
                  timestamp_ms: int | None = None) -> None:
    async with trilog.open_producer(bootstrap) as producer:
        for partition, n in per_partition.items():
            for i in range(n):
                await producer.send(topic, b"v%d" % i, key=b"k%d" % i, partition=partition,
                                    timestamp_ms=timestamp_ms)
        await producer.flush()


# -- trilog topics ---------------------------------------------------------------------------


async def test_topics_create_with_configs_describe_alter_and_exclude_internal(broker):
    b = broker.bootstrap
    created = await cli("topics", "--bootstrap-server", b, "--create", "--topic", "orders",
                        "--partitions", "2", "--config", "retention.ms=3600000",
                        "--config", "cleanup.policy=[compact,delete]")
    assert created.returncode == 0, created.stderr
    assert created.stdout == "Created topic orders.\n"

    altered = await cli("topics", "--bootstrap-server", b, "--alter", "--topic", "orders",
                        "--partitions", "3")
    assert altered.returncode == 0, altered.stderr
    described = await cli("topics", "--bootstrap-server", b, "--describe", "--topic", "orders")
    assert described.returncode == 0, described.stderr
    first, *partitions = described.stdout.splitlines()
    assert first == ("Topic: orders\tPartitionCount: 3\tConfigs: "
                     "cleanup.policy=compact,delete,retention.ms=3600000")
    assert [line.split("\t")[2] for line in partitions] == [
        "Partition: 0", "Partition: 1", "Partition: 2"]

    # A group commit makes __consumer_offsets; --exclude-internal hides it.
    async with trilog.open_consumer_connector("g", bootstrap_servers=b, topics={"orders": 1},
                                    auto_offset_reset="smallest", consumer_timeout_ms=300) as c:
        async for _ in c.streams["orders"][0]:
            pass
        await c.commit_offsets()
    listed = await cli("topics", "--bootstrap-server", b, "--list")
    assert "__consumer_offsets" in listed.stdout.split()
    listed = await cli("topics", "--bootstrap-server", b, "--list", "--exclude-internal")
    assert listed.stdout.split() == ["orders"]
    everything = await cli("topics", "--bootstrap-server", b, "--describe",
                           "--exclude-internal")
    assert "__consumer_offsets" not in everything.stdout and "orders" in everything.stdout


async def test_topics_bad_input(broker):
    b = broker.bootstrap
    malformed = await cli("topics", "--bootstrap-server", b, "--create", "--topic", "t",
                          "--config", "retention.ms")
    assert malformed.returncode == 2 and "NAME=VALUE" in malformed.stderr
    refused = await cli("topics", "--bootstrap-server", b, "--create", "--topic", "t",
                        "--config", "retention.ms=soon")
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1 and "retention.ms" in refused.stderr
    shrink = await cli("topics", "--bootstrap-server", b, "--alter", "--topic", "nope",
                       "--partitions", "2")
    assert shrink.returncode == 1 and "nope" in shrink.stderr
    no_count = await cli("topics", "--bootstrap-server", b, "--alter", "--topic", "t")
    assert no_count.returncode == 2 and "--partitions" in no_count.stderr


# -- trilog configs --------------------------------------------------------------------------


async def test_configs_alter_is_seen_by_describe_configs(broker):
    b = broker.bootstrap
    async with open_admin(b) as admin:
        await admin.create_topic("events", 1)
    altered = await cli("configs", "--bootstrap-server", b, "--entity-type", "topics",
                        "--entity-name", "events", "--alter",
                        "--add-config", "retention.ms=60000,segment.bytes=1048576",
                        "--add-config", "cleanup.policy=[compact,delete]")
    assert altered.returncode == 0, altered.stderr
    assert altered.stdout == "Completed updating config for topic events.\n"
    async with open_admin(b) as admin:
        (events,) = await admin.describe_configs(topics=["events"])
    assert events.overrides == {"retention.ms": "60000", "segment.bytes": "1048576",
                                "cleanup.policy": "compact,delete"}

    deleted = await cli("configs", "--bootstrap-server", b, "--topic", "events", "--alter",
                        "--delete-config", "segment.bytes,cleanup.policy")
    assert deleted.returncode == 0, deleted.stderr
    described = await cli("configs", "--bootstrap-server", b, "--entity-type", "topics",
                          "--entity-name", "events", "--describe")
    assert described.returncode == 0, described.stderr
    assert described.stdout.splitlines() == [
        "Dynamic configs for topic events are:",
        "  retention.ms=60000 sensitive=false source=DYNAMIC_TOPIC_CONFIG",
    ]
    every = await cli("configs", "--bootstrap-server", b, "--topic", "events", "--describe",
                      "--all")
    assert "  segment.bytes=" in every.stdout and "source=DEFAULT_CONFIG" in every.stdout

    brokers = await cli("configs", "--bootstrap-server", b, "--entity-type", "brokers",
                        "--entity-name", str(broker.broker_id), "--describe", "--all")
    assert brokers.returncode == 0, brokers.stderr
    assert f"  log.dirs={broker.log_dir} sensitive=false source=STATIC_BROKER_CONFIG " \
        "read-only=true" in brokers.stdout.splitlines()


async def test_configs_bad_input(broker):
    b = broker.bootstrap
    base = ("configs", "--bootstrap-server", b, "--entity-type", "topics")
    unknown = await cli(*base, "--entity-name", "nope", "--describe")
    assert unknown.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in unknown.stderr
    assert unknown.stderr.count("\n") == 1
    async with open_admin(b) as admin:
        await admin.create_topic("t", 1)
    malformed = await cli(*base, "--entity-name", "t", "--alter", "--add-config", "x")
    assert malformed.returncode == 2 and "NAME=VALUE" in malformed.stderr
    typo = await cli(*base, "--entity-name", "t", "--alter", "--add-config", "retention.mss=1")
    assert typo.returncode == 1 and "retention.ms" in typo.stderr  # the nearest good name
    nothing = await cli(*base, "--entity-name", "t", "--alter")
    assert nothing.returncode == 2 and "--add-config" in nothing.stderr
    static = await cli("configs", "--bootstrap-server", b, "--broker",
                       str(broker.broker_id), "--alter", "--add-config", "log.retention.hours=1")
    assert static.returncode == 1 and "static" in static.stderr
    down = await cli(*base, "--entity-name", "t", "--describe",
                     "--bootstrap-server", f"127.0.0.1:{free_port()}")
    assert down.returncode in (1, 2)


# -- trilog delete-records and get-offsets ---------------------------------------------------


async def test_delete_records_from_kafkas_json_and_get_offsets(broker, tmp_path):
    b = broker.bootstrap
    async with open_admin(b) as admin:
        await admin.create_topic("logs", 2)
    await produce(b, "logs", {0: 20, 1: 5}, timestamp_ms=1_700_000_000_000)
    await produce(b, "logs", {0: 1}, timestamp_ms=1_800_000_000_000)

    latest = await cli("get-offsets", "--bootstrap-server", b, "--topic", "logs")
    assert latest.returncode == 0, latest.stderr
    assert latest.stdout.splitlines() == ["logs:0:21", "logs:1:5"]

    spec = tmp_path / "delete.json"
    spec.write_text(json.dumps({"partitions": [
        {"topic": "logs", "partition": 0, "offset": 10},
        {"topic": "logs", "partition": 1, "offset": -1}], "version": 1}))
    deleted = await cli("delete-records", "--bootstrap-server", b, "--offset-json-file",
                        str(spec))
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        "partition: logs-0\tlow_watermark: 10",
        "partition: logs-1\tlow_watermark: 5",
    ]
    earliest = await cli("get-offsets", "--bootstrap-server", b, "--topic", "logs",
                         "--time", "earliest")
    assert earliest.stdout.splitlines() == ["logs:0:10", "logs:1:5"]
    by_time = await cli("get-offsets", "--bootstrap-server", b, "--topic", "logs",
                        "--partitions", "0,1", "--time", "1750000000000")
    assert by_time.stdout.splitlines() == ["logs:0:20"]  # partition 1 has no such record
    one = await cli("get-offsets", "--bootstrap-server", b, "--topic", "logs",
                    "--partitions", "1", "--time", "-1")
    assert one.stdout.splitlines() == ["logs:1:5"]

    too_far = tmp_path / "too-far.json"
    too_far.write_text('{"partitions":[{"topic":"logs","partition":1,"offset":99}],'
                       '"version":1}')
    failed = await cli("delete-records", "--bootstrap-server", b, "--offsets-json",
                       str(too_far))
    assert failed.returncode == 1
    assert "partition: logs-1\terror: OFFSET_OUT_OF_RANGE" in failed.stdout


@pytest.mark.parametrize("content, complaint", [
    (None, "cannot read"),
    ("{not json", "is not JSON"),
    ('{"version": 1}', "no \"partitions\" list"),
    ('{"partitions": [{"topic": "t", "partition": 0}]}', "missing 'offset'"),
    ('{"partitions": [{"topic": "t", "partition": 0, "offset": -5}]}', "offset must be"),
    ('{"partitions": [{"topic": "t", "partition": 0, "offset": 1},'
     ' {"topic": "t", "partition": 0, "offset": 2}]}', "twice"),
])
async def test_delete_records_bad_json(tmp_path, content, complaint):
    spec = tmp_path / "spec.json"
    if content is not None:
        spec.write_text(content)
    result = await cli("delete-records", "--bootstrap-server", f"127.0.0.1:{free_port()}",
                       "--offset-json-file", str(spec))
    assert result.returncode == 2 and complaint in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1


async def test_get_offsets_bad_input(broker):
    b = broker.bootstrap
    unknown = await cli("get-offsets", "--bootstrap-server", b, "--topic", "nope")
    assert unknown.returncode == 1 and "does not exist" in unknown.stderr
    bad_time = await cli("get-offsets", "--bootstrap-server", b, "--topic", "x",
                         "--time", "yesterday")
    assert bad_time.returncode == 2 and "--time" in bad_time.stderr
    async with open_admin(b) as admin:
        await admin.create_topic("one", 1)
    no_partition = await cli("get-offsets", "--bootstrap-server", b, "--topic", "one",
                             "--partitions", "0,3")
    assert no_partition.returncode == 1 and "no partition 3" in no_partition.stderr
    down = await cli("get-offsets", "--bootstrap-server", f"127.0.0.1:{free_port()}",
                     "--topic", "one")
    assert down.returncode == 1 and down.stderr.count("\n") == 1
