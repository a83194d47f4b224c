"""Client quotas with independent clients and the operator's tool: the issue's acceptance
with librdkafka (confluent-kafka producers, benchmarks/quotas.py's measurement, shortened),
kafka-python's own encoding of DescribeClientQuotas / AlterClientQuotas (its admin has no
quota methods: its protocol classes go through its connection), and ``trilog configs`` for
users and clients as an operator runs it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import trio
from cli_helpers import cli

from trilog.client import QuotaFilter, open_admin, quota_entity

MIB = 1024 * 1024
BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "quotas.py"


def load_benchmark():
    spec = importlib.util.spec_from_file_location("quotas_benchmark", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["quotas_benchmark"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def broker(broker_process):
    # Two 1 s windows: a fresh client's burst is one second's quota, not ten (the default's).
    return broker_process(overrides={"num.partitions": 1, "quota.window.num": 2})


def test_a_librdkafka_producer_is_held_near_its_byte_rate_and_told_so(broker):
    pytest.importorskip("confluent_kafka")
    bench = load_benchmark()
    bench.set_quota(broker.bootstrap, "limited", MIB)
    seconds = 4.0
    limited, free = bench.measure(broker.bootstrap, seconds)
    assert not limited.errors and not free.errors, (limited.errors, free.errors)
    assert limited.max_throttle_ms > 0 and limited.throttle_events > 0
    assert limited.stats_throttle_max_ms > 0  # librdkafka's statistics say so too
    # Kafka's rate lets a burst through first (a window's worth) and throttles a request
    # only once the rate is over: generous bounds, far below an unthrottled producer.
    assert 0.3 * MIB <= limited.rate(seconds) <= 2.0 * MIB, limited.rate(seconds) / MIB
    # another client id in the same run is not slowed
    assert free.throttle_events == 0
    assert free.rate(seconds) >= 3 * limited.rate(seconds), free.rate(seconds) / MIB


def test_kafka_python_encodes_the_quota_apis_as_trilog_reads_them(broker):
    kafka = pytest.importorskip("kafka")
    from kafka.protocol.admin.client_quotas import (
        AlterClientQuotasRequest,
        DescribeClientQuotasRequest,
    )

    admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="kp",
                                   request_timeout_ms=10_000)
    try:
        send = admin._manager.send  # the versions are negotiated: v1, flexible
        altered = admin._manager.run(send, AlterClientQuotasRequest(entries=[
            ([("client-id", "kp-app")], [("producer_byte_rate", 2048.0, False)]),
            ([("user", None)], [("request_percentage", 25.5, False)]),
            ([("user", "u")], [("consumer_byte_rate", 1.5, False)]),
        ], validate_only=False))
        assert [e.error_code for e in altered.entries] == [0, 0, 42]
        described = admin._manager.run(send, DescribeClientQuotasRequest(
            components=[("client-id", 0, "kp-app")], strict=False))
        assert described.error_code == 0
        assert [([(d.entity_type, d.entity_name) for d in e.entity],
                 [(v.key, v.value) for v in e.values]) for e in described.entries] == [
            ([("client-id", "kp-app")], [("producer_byte_rate", 2048.0)])]
    finally:
        admin.close()


async def test_trilog_configs_alters_and_describes_client_quotas(broker):
    b = broker.bootstrap
    done = await cli("configs", "--bootstrap-server", b, "--entity-type", "clients",
                     "--entity-name", "app", "--alter", "--add-config",
                     "producer_byte_rate=1048576,consumer_byte_rate=2097152")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Completed updating config for client-id 'app'.\n"
    done = await cli("configs", "--bootstrap-server", b, "--entity-type", "users",
                     "--entity-name", "alice", "--entity-type", "clients", "--entity-default",
                     "--alter", "--add-config", "request_percentage=50")
    assert done.returncode == 0, done.stderr
    assert done.stdout == ("Completed updating config for user-principal 'alice', "
                           "the default client-id.\n")
    done = await cli("configs", "--bootstrap-server", b, "--user-defaults", "--alter",
                     "--add-config", "producer_byte_rate=4096")
    assert done.returncode == 0, done.stderr
    async with open_admin(b) as admin:
        assert await admin.describe_client_quotas() == {
            quota_entity(client_id="app"): {"producer_byte_rate": 1048576.0,
                                            "consumer_byte_rate": 2097152.0},
            quota_entity("alice", default_client=True): {"request_percentage": 50.0},
            quota_entity(default_user=True): {"producer_byte_rate": 4096.0},
        }
        assert list(await admin.describe_client_quotas(
            [QuotaFilter.exact("user", "alice")], strict=False)) == [
            quota_entity("alice", default_client=True)]

    described = await cli("configs", "--bootstrap-server", b, "--entity-type", "clients",
                          "--describe")
    assert described.returncode == 0, described.stderr
    assert described.stdout == ("Quota configs for client-id 'app' are "
                                "consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0\n")
    described = await cli("configs", "--bootstrap-server", b, "--entity-type", "users",
                          "--entity-default", "--describe")
    assert described.stdout == ("Quota configs for the default user-principal are "
                                "producer_byte_rate=4096.0\n")

    deleted = await cli("configs", "--bootstrap-server", b, "--client", "app", "--alter",
                        "--delete-config", "consumer_byte_rate")
    assert deleted.returncode == 0, deleted.stderr
    async with open_admin(b) as admin:
        assert (await admin.describe_client_quotas([QuotaFilter.exact("client-id", "app")],
                                                   strict=True)) == {
            quota_entity(client_id="app"): {"producer_byte_rate": 1048576.0}}


async def test_trilog_configs_refuses_bad_quota_input_in_one_line(broker):
    b = broker.bootstrap
    cases = [
        (["--entity-type", "clients", "--entity-name", "app", "--alter", "--add-config",
          "producer_byte_rate=fast"], 2, "a quota is a number"),
        (["--entity-type", "clients", "--entity-name", "app", "--alter", "--add-config",
          "producer_byte_rate=1.5"], 1, "whole number"),
        (["--entity-type", "clients", "--entity-name", "app", "--alter", "--add-config",
          "bytes_per_fortnight=5"], 1, "unknown quota"),
        (["--entity-type", "clients", "--alter", "--add-config", "producer_byte_rate=5"], 2,
         "--entity-name or --entity-default"),
        (["--entity-default", "--entity-type", "clients", "--describe"], 2,
         "needs an --entity-type before it"),
        (["--entity-type", "topics", "--entity-name", "t", "--entity-type", "clients",
          "--describe"], 2, "do not mix"),
        (["--entity-type", "clients", "--entity-name", "app", "--alter"], 2,
         "--add-config or --delete-config"),
    ]
    for args, status, text in cases:
        done = await cli("configs", "--bootstrap-server", b, *args)
        assert done.returncode == status, (args, done.stderr)
        assert text in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


async def test_a_consumer_over_its_byte_rate_is_slowed_not_starved(broker):
    import trilog

    async with trilog.open_producer(bootstrap_servers=broker.bootstrap) as producer:
        for _ in range(100):
            await producer.send("reads", b"r" * 10_000)
        await producer.flush()
    async with open_admin(broker.bootstrap) as admin:
        await admin.alter_client_quotas(quota_entity(client_id="reader"),
                                        {"consumer_byte_rate": 300_000})
    started = trio.current_time()
    received = 0
    async with trilog.open_consumer("reads", bootstrap_servers=broker.bootstrap,
                                    client_id="reader", group_id=None,
                                    auto_offset_reset="earliest") as consumer:
        with trio.fail_after(30):
            while received < 100:
                batches = await consumer.getmany(timeout_ms=1000)
                received += sum(len(records) for records in batches.values())
    took = trio.current_time() - started
    # 1 MB at 300 KB/s with one second's burst: about 2.5 s; unthrottled, a fraction of one
    assert received == 100 and 1.2 <= took <= 20, took


async def test_a_running_brokers_metrics_show_the_throttled_client(tmp_path):
    from prometheus_client.exposition import generate_latest

    import trilog
    from trilog.broker import open_broker
    from trilog.broker._broker import BrokerSource
    from trilog.broker._metrics import registry_for

    settings = {"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0",
                "quota.window.num": 2}
    async with open_broker(settings) as broker:
        async with open_admin(broker.bootstrap) as admin:
            await admin.alter_client_quotas(quota_entity(default_client=True),
                                            {"producer_byte_rate": 50_000})
        async with trilog.open_producer(bootstrap_servers=broker.bootstrap, client_id="pusher",
                                        acks=1, buffer_memory=100_000) as producer:
            for _ in range(12):  # 120 KB at 50 KB/s: throttled after the first 50 KB
                await (await producer.send("m", b"m" * 10_000)).wait()
        text = generate_latest(registry_for(BrokerSource(broker))).decode()
    labels = '{client_id="pusher",type="Produce",user=""}'
    assert f"trilog_quota_byte_rate{labels}" in text
    throttle = next(line for line in text.splitlines()
                    if line.startswith(f"trilog_quota_throttle_time_ms_total{labels}"))
    assert float(throttle.split()[-1]) > 0


async def test_trilogs_connection_holds_its_requests_for_the_throttle_time(broker):
    # KIP-219 on the client's side: the broker reads nothing from a throttled connection,
    # so a request sent meanwhile would wait there with its timeout running.
    from broker_helpers import batch, produce_request

    from trilog.net import open_connection
    from trilog.protocol import MetadataRequest

    async with open_admin(broker.bootstrap) as admin:
        await admin.create_topic("held", 1)
        await admin.alter_client_quotas(quota_entity(client_id="held"),
                                        {"producer_byte_rate": 25_000})
    host, port = broker.bootstrap.split(":")
    async with open_connection(host, int(port), client_id="held",
                               request_timeout_s=2.0) as conn:
        answer = await conn.request(produce_request("held", 0, batch([b"h" * 100_000])))
        # 100 KB against 25 KB/s over one second: three seconds over, past the timeout
        assert answer.throttle_time_ms > 2_000
        started = trio.current_time()
        await conn.request(MetadataRequest(topics=[]))  # no RequestTimedOutError
        assert trio.current_time() - started >= answer.throttle_time_ms / 1000 * 0.9
