"""``trilog transactions`` (kafka-transactions.sh's --list and --describe) and ``trilog
consume --isolation-level``, run as an operator runs them against a broker process with a
transaction coordinator (skipped against one without)."""

from __future__ import annotations

import pytest
from cli_helpers import cli

import trilog
from trilog.cli._transactions import DESCRIBE_HEADERS, LIST_HEADERS
from trilog.client import open_client
from trilog.protocol import ApiKey


@pytest.fixture
async def bootstrap(broker_process):
    broker = broker_process(overrides={"num.partitions": 1})
    async with open_client(broker.bootstrap) as client:
        conn = await client.any_connection()
        if ApiKey.END_TXN not in conn.api_versions:
            pytest.skip("the broker has no transaction coordinator (EndTxn)")
    return broker.bootstrap


async def test_help_says_what_each_action_does():
    done = await cli("transactions", "--help")
    assert done.returncode == 0
    for words in ("--list", "--describe", "--transactional-id", "--duration-filter",
                  "Ongoing", "kafka-transactions.sh"):
        assert words in done.stdout
    consume = await cli("consume", "--help")
    assert "--isolation-level" in consume.stdout and "read_committed" in consume.stdout


@pytest.mark.parametrize("args, message", [
    (["--describe"], "--transactional-id"),
    (["--list", "--transactional-id", "x"], "--describe"),
    (["--describe", "--transactional-id", "x", "--duration-filter", "5"], "--list"),
])
async def test_bad_options_exit_2(args, message):
    done = await cli("transactions", *args)
    assert done.returncode == 2
    assert message in done.stderr


def table(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.split("\t") if cell.strip()]
            for line in text.splitlines() if line.strip()]


async def test_list_and_describe_a_transaction_open_then_committed(bootstrap):
    async with trilog.open_producer(bootstrap, transactional_id="cli-tx", linger_ms=1) as p:
        await p.init_transactions()
        p.begin_transaction()
        await p.send("cli-out", b"one")
        await p.flush()
        listed = await cli("transactions", "--bootstrap-server", bootstrap, "--list")
        assert listed.returncode == 0, listed.stderr
        rows = table(listed.stdout)
        assert rows[0] == list(LIST_HEADERS)
        (mine,) = [r for r in rows[1:] if r[0] == "cli-tx"]
        assert mine[1] == "0" and mine[3] == "Ongoing"
        assert int(mine[2]) == p.idempotence.producer_id
        described = await cli("transactions", "--bootstrap-server", bootstrap, "--describe",
                              "--transactional-id", "cli-tx")
        assert described.returncode == 0, described.stderr
        header, row = table(described.stdout)
        assert header == list(DESCRIBE_HEADERS)
        fields = dict(zip(header, row))
        assert fields["TransactionState"] == "Ongoing"
        assert fields["TopicPartitions"] == "cli-out-0"
        assert fields["TransactionTimeoutMs"] == "60000"
        assert int(fields["TransactionDurationMs"]) >= 0
        assert int(fields["ProducerEpoch"]) == p.idempotence.producer_epoch
        await p.commit_transaction()
    done = await cli("transactions", "--bootstrap-server", bootstrap, "--describe",
                     "--transactional-id", "cli-tx")
    fields = dict(zip(*table(done.stdout)))
    assert fields["TransactionState"] in ("CompleteCommit", "PrepareCommit")
    quiet = await cli("transactions", "--bootstrap-server", bootstrap, "--list",
                      "--duration-filter", "3600000")
    assert table(quiet.stdout) == [list(LIST_HEADERS)]  # nothing open for an hour


async def test_describing_an_unknown_id_fails_clearly(bootstrap):
    done = await cli("transactions", "--bootstrap-server", bootstrap, "--describe",
                     "--transactional-id", "nobody")
    assert done.returncode == 1
    assert "nobody" in done.stderr and "TRANSACTIONAL_ID_NOT_FOUND" in done.stderr


async def test_consume_prints_what_its_isolation_level_reads(bootstrap):
    async with trilog.open_producer(bootstrap, transactional_id="cli-consume",
                                    linger_ms=1) as p:
        await p.init_transactions()
        p.begin_transaction()
        await p.send("cli-iso", b"committed")
        await p.commit_transaction()
        p.begin_transaction()
        await p.send("cli-iso", b"aborted")
        await p.flush()
        await p.abort_transaction()
    for level, expected in (("read_committed", ["committed"]),
                            ("read_uncommitted", ["committed", "aborted"])):
        done = await cli("consume", "--bootstrap-server", bootstrap, "--topic", "cli-iso",
                         "--from-beginning", "--timeout-ms", "1500",
                         "--isolation-level", level)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == expected, level
