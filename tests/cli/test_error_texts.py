"""The mistakes a newcomer makes in the first hour, each answered in one line that names the
thing and the fix (issue 26, item 6); bad options exit 2, failures 1."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from cli_helpers import cli
from security_helpers import make_certs
from trilog.cli._main import COMMANDS
from trilog.records import MemoryRecords
from trilog.zk._server import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def broker(module_broker_process):
    return module_broker_process(overrides={"num.partitions": 1})


# -- the broker command -----------------------------------------------------------------------


async def test_a_property_that_is_not_a_number(tmp_path):
    done = await cli("broker", "--log-dir", str(tmp_path), "--override", "num.partitions=abc")
    assert done.returncode == 2
    assert done.stderr.strip() == ("trilog broker: override: num.partitions='abc' is not "
                                   "valid: expected a whole number, such as 3")
    ratio = await cli("broker", "--log-dir", str(tmp_path),
                      "--override", "log.cleaner.min.cleanable.ratio=half")
    assert ratio.returncode == 2 and "expected a number, such as 0.5" in ratio.stderr


async def test_a_log_dir_under_a_file(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    under = await cli("broker", "--port", "0", "--log-dir", str(afile / "sub"))
    assert under.returncode == 2
    assert under.stderr.strip() == (
        f"trilog broker: log directory {afile / 'sub'} (--log-dir, log.dirs) cannot be "
        f"created: {afile} is a file, not a directory; choose another path")
    itself = await cli("broker", "--port", "0", "--log-dir", str(afile))
    assert itself.returncode == 2 and f"{afile} (--log-dir, log.dirs) is a file" in itself.stderr


async def test_a_port_out_of_range(tmp_path):
    flag = await cli("broker", "--port", "80000", "--log-dir", str(tmp_path))
    assert flag.returncode == 2
    assert "argument --port: 80000 is not a port number (0-65535; 0 picks a free port)" \
        in flag.stderr
    override = await cli("broker", "--override", "port=80000", "--log-dir", str(tmp_path))
    assert override.returncode == 2
    assert override.stderr.strip() == "trilog broker: override: port=80000 is above its " \
                                      "maximum 65535"


def test_the_ready_line_is_printed_once(broker_process):
    broker = broker_process()
    broker.stop()
    printed = b"".join(broker.stdout_lines).decode() + broker.stderr()
    assert len(re.findall(r"listening on 127\.0\.0\.1:\d+", printed)) == 1, printed


async def test_zookeeper_on_a_busy_port(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = await cli("zookeeper", "--port", str(port), "--data-dir", str(tmp_path / "zk"))
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"trilog zookeeper: cannot serve on 127.0.0.1:{port}: Address already in use "
        "(another ZooKeeper, or another program, listens there); choose another port")
    assert "serving" not in done.stdout
    bad = await cli("zookeeper", "--port", "70000")
    assert bad.returncode == 2 and "70000 is not a port number" in bad.stderr


# -- the client tools -------------------------------------------------------------------------


async def test_deleting_a_topic_that_does_not_exist(broker):
    done = await cli("topics", "--bootstrap-server", broker.bootstrap, "--delete",
                     "--topic", "nope")
    assert done.returncode == 1
    assert "cannot delete topic 'nope': it does not exist" in done.stderr
    assert "does not host this topic-partition" not in done.stderr


async def test_creating_an_existing_topic_with_if_not_exists(broker):
    args = ("topics", "--bootstrap-server", broker.bootstrap, "--create", "--topic", "twice")
    first = await cli(*args, "--if-not-exists")
    assert first.returncode == 0 and first.stdout == "Created topic twice.\n"
    again = await cli(*args, "--if-not-exists")
    assert again.returncode == 0
    assert again.stdout == "Topic twice already exists; not created (--if-not-exists).\n"


async def test_a_topic_config_that_is_not_a_number(broker):
    await cli("topics", "--bootstrap-server", broker.bootstrap, "--create", "--topic", "cfg")
    done = await cli("configs", "--bootstrap-server", broker.bootstrap, "--entity-type",
                     "topics", "--entity-name", "cfg", "--alter", "--add-config",
                     "retention.ms=abc")
    assert done.returncode == 1
    assert "retention.ms='abc': must be a whole number, such as 3600000" in done.stderr
    assert "invalid literal" not in done.stderr


@pytest.mark.parametrize("tool", [["topics", "--list"], ["produce", "--topic", "t"],
                                  ["consume", "--topic", "t"], ["groups", "--list"]])
async def test_a_bootstrap_server_without_a_port_is_a_bad_option(tool):
    done = await cli(*tool, "--bootstrap-server", "127.0.0.1")
    assert done.returncode == 2
    assert "argument --bootstrap-server: bootstrap server '127.0.0.1' is not host:port " \
           "(e.g. 127.0.0.1:9092)" in done.stderr


async def test_a_plaintext_tool_at_a_tls_or_sasl_listener_hears_of_command_config(
        broker_process, tmp_path):
    """A TLS listener closes a plaintext client at its first bytes, a SASL listener at its
    first request after ApiVersions: the tool says which it likely met, and what to set."""
    certs = make_certs(tmp_path)
    tls = broker_process(overrides={"listeners": "SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                                    "ssl.certfile": certs["server"], "ssl.cafile": certs["ca"]})
    done = await cli("topics", "--list", "--bootstrap-server", tls.bootstrap,
                     "--bootstrap-timeout-ms", "1000")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"trilog topics: no broker answered at {tls.bootstrap}: broker {tls.bootstrap} closed "
        "the connection during the first request: is it a TLS (SSL) listener? set "
        "security.protocol in --command-config FILE (security.protocol=SSL or SASL_SSL, "
        "ssl.ca.location=..., ...; see docs/security.md)")
    sasl = tls.listener("SASL_PLAINTEXT")
    done = await cli("acls", "--list", "--bootstrap-server", sasl)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"trilog acls: broker {sasl} closed the connection at its first request after "
        "ApiVersions: is it a SASL listener? set security.protocol (SASL_PLAINTEXT or "
        "SASL_SSL), sasl.mechanism and the login in --command-config FILE (see "
        "docs/security.md)")
    config = tmp_path / "client.properties"
    config.write_text(f"security.protocol=SSL\nssl.ca.location={certs['ca']}\n")
    fixed = await cli("topics", "--list", "--bootstrap-server", tls.bootstrap,
                      "--command-config", str(config))
    assert fixed.returncode == 0, fixed.stderr


async def test_produce_waits_for_every_in_sync_replica_by_default(broker):
    """--acks defaults to all, as the library (and Kafka 3) do: the records come from an
    idempotent producer (a producer id in the batch), which only acks=all gives."""
    assert "default all" in (await cli("produce", "--help")).stdout
    assert "default all" in (await cli("perf", "produce", "--help")).stdout
    done = await cli("produce", "--topic", "acked", "--bootstrap-server", broker.bootstrap,
                     stdin=b"one\n")
    assert done.returncode == 0, done.stderr
    import trilog

    async with trilog.open_simple_consumer(broker.bootstrap) as consumer:
        fetched = await consumer.fetch("acked", 0, 0)
    [batch] = list(MemoryRecords(bytes(fetched._data)).batches())
    assert batch.producer_id >= 0


# -- words in the docs and the help -----------------------------------------------------------


def test_no_page_or_help_says_a_codec_needs_an_extra_package():
    texts = {p.name: p.read_text() for p in (ROOT / "docs").glob("*.md")}
    texts["README.md"] = (ROOT / "README.md").read_text()
    for command in ("produce", "perf"):
        texts[f"trilog {command} --help"] = subprocess.run(
            [sys.executable, "-c", "import sys; from trilog.cli import main; sys.exit(main())",
             command, "--help"], capture_output=True, text=True, timeout=60).stdout
    stale = re.compile(r"`fast` extra|fast extra|needs (python-snappy|zstandard)|"
                       r"snappy needs|zstd needs", re.IGNORECASE)
    assert {name for name, text in texts.items() if stale.search(text)} == set()


def test_the_readme_names_every_command():
    readme = (ROOT / "README.md").read_text()
    missing = [name for name in COMMANDS if f"`trilog {name}" not in readme]
    assert missing == []
