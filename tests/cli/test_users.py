"""``trilog users`` (SCRAM credentials, never passwords) and the tools' ``--command-config``
(Kafka's client properties for TLS and SASL), as an operator runs them."""

from __future__ import annotations

import json

import pytest
from security_helpers import add_users
from cli_helpers import cli

pytestmark = pytest.mark.slow


async def test_users_are_added_listed_and_deleted_with_salted_credentials(tmp_path):
    data = tmp_path / "data"
    add_users("--log-dir", str(data))
    listed = await cli("users", "--log-dir", str(data), "--list")
    assert listed.returncode == 0
    assert listed.stdout.splitlines() == ["alice\tSCRAM-SHA-256,SCRAM-SHA-512",
                                          "bob\tSCRAM-SHA-256,SCRAM-SHA-512"]
    stored = (data / "users.json").read_text()
    assert "alice-secret" not in stored
    assert json.loads(stored)["users"]["alice"]["SCRAM-SHA-256"].startswith("salt=")
    only = await cli("users", "--log-dir", str(data), "--add", "carol", "--password", "c",
                     "--mechanism", "SCRAM-SHA-512", "--iterations", "8192")
    assert only.returncode == 0 and "carol: SCRAM-SHA-512" in only.stdout
    assert "iterations=8192" in (data / "users.json").read_text()
    assert (await cli("users", "--log-dir", str(data), "--delete", "bob")).returncode == 0
    listed = await cli("users", "--log-dir", str(data), "--list")
    assert [line.split("\t")[0] for line in listed.stdout.splitlines()] == ["alice", "carol"]


@pytest.mark.parametrize("args, status, message", [
    (["--delete", "nobody"], 1, "no user 'nobody'"),
    (["--add", "x", "--password", "p", "--iterations", "100"], 2, "at least 4096"),
    (["--add", "x"], 2, "needs --password"),
    (["--list", "--password", "p"], 2, "go with --add"),
    (["--add", "a/b", "--password", "p"], 2, "not a user name"),
])
async def test_bad_users_commands_are_one_line(tmp_path, args, status, message):
    done = await cli("users", "--log-dir", str(tmp_path), *args)
    assert done.returncode == status and message in done.stderr, done.stderr


async def test_tools_log_in_with_command_config(broker_process, tmp_path):
    data = tmp_path / "data"
    add_users("--log-dir", str(data))
    broker = broker_process(data, overrides={
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"})
    sasl = broker.listener("SASL_PLAINTEXT")
    good, bad = tmp_path / "good.properties", tmp_path / "bad.properties"
    jaas = ('sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule '
            'required username="alice" password="{}";\n')
    for path, password in ((good, "alice-secret"), (bad, "nope")):
        path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                        + jaas.format(password))
    created = await cli("topics", "--bootstrap-server", sasl, "--command-config", str(good),
                        "--create", "--topic", "secured", "--partitions", "2")
    assert created.returncode == 0, created.stderr
    listed = await cli("topics", "--bootstrap-server", sasl, "--command-config", str(good),
                       "--list")
    assert "secured" in listed.stdout.split()
    refused = await cli("topics", "--bootstrap-server", sasl, "--command-config", str(bad),
                        "--list")
    assert refused.returncode == 1 and "SASL_AUTHENTICATION_FAILED" in refused.stderr, \
        refused.stderr
    missing = await cli("topics", "--bootstrap-server", sasl, "--command-config",
                        str(tmp_path / "none.properties"), "--list")
    assert missing.returncode == 2 and "cannot read --command-config" in missing.stderr
