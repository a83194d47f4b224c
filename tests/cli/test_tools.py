"""``trilog produce``, ``trilog consume`` and ``trilog perf`` as an operator runs them: real
processes, stdin and stdout, against an in-process broker."""

from __future__ import annotations

import signal
import subprocess
import sys
import types

import pytest
import trio

import trilog
from trilog.broker import open_broker
from trilog.records import MemoryRecords
from trilog.zk._server import free_port

_MAIN = "import sys; from trilog.cli import main; sys.exit(main())"


async def cli(*args: str, stdin: bytes = b"", timeout: float = 60
              ) -> subprocess.CompletedProcess:
    """Run ``trilog ARGS...`` in a child process; stdout/stderr as text."""
    with trio.fail_after(timeout):
        done = await trio.run_process([sys.executable, "-c", _MAIN, *args], stdin=stdin,
                                      capture_stdout=True, capture_stderr=True, check=False)
    return subprocess.CompletedProcess(done.args, done.returncode,
                                       done.stdout.decode("utf-8", "replace"),
                                       done.stderr.decode("utf-8", "replace"))


@pytest.fixture
async def broker(tmp_path):
    async with open_broker({"port": 0, "host.name": "127.0.0.1",
                            "log.dirs": str(tmp_path / "data"), "num.partitions": 1,
                            "message.max.bytes": 10_000}) as b:
        yield b


@pytest.fixture
def bootstrap(broker) -> str:
    return f"127.0.0.1:{broker.port}"


def _no_traceback(result: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in result.stderr, result.stderr


# -- produce and consume --------------------------------------------------------------------------


async def test_produce_keyed_lines_and_consume_them_back(bootstrap):
    lines = b"k1:hello\nk2:wor:ld\n:empty key\nk3:caf\xc3\xa9\nk4:\xff\xfe\n"
    produced = await cli("produce", "--topic", "lines", "--bootstrap-server", bootstrap,
                         "--key-separator", ":", stdin=lines)
    assert produced.returncode == 0, produced.stderr
    assert produced.stdout == ""

    consumed = await cli("consume", "--topic", "lines", "--bootstrap-server", bootstrap,
                         "--from-beginning", "--max-messages", "5",
                         "--format", "{offset} {partition} {key} {value}")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == [
        "0 0 k1 hello",
        "1 0 k2 wor:ld",  # split at the first separator only
        "2 0  empty key",
        "3 0 k3 café",
        "4 0 k4 \ufffd\ufffd",  # undecodable bytes are replaced
    ]
    assert "Processed a total of 5 messages" in consumed.stderr


async def test_produce_with_idempotence(bootstrap):
    refused = await cli("produce", "--topic", "idem", "--bootstrap-server", bootstrap,
                        "--idempotence", "--acks", "1", stdin=b"x\n")
    assert refused.returncode == 2 and "--idempotence needs --acks all" in refused.stderr
    produced = await cli("produce", "--topic", "idem", "--bootstrap-server", bootstrap,
                         "--idempotence", "--acks", "all", "--partition", "0",
                         stdin=b"one\ntwo\n")
    assert produced.returncode == 0, produced.stderr
    async with trilog.open_simple_consumer(bootstrap_servers=bootstrap) as consumer:
        fetched = await consumer.fetch("idem", 0, 0)
    batches = list(MemoryRecords(bytes(fetched._data)).batches())
    assert [r.value for b in batches for r in b] == [b"one", b"two"]
    assert all(b.producer_id >= 0 for b in batches)  # written by an idempotent producer


async def test_lines_without_key_have_null_keys_and_format_escapes(bootstrap):
    produced = await cli("produce", "--topic", "plain", "--bootstrap-server", bootstrap,
                         "--compression", "lz4", "--acks", "all",
                         stdin=b"one\r\ntwo\n\nlast-without-newline")
    assert produced.returncode == 0, produced.stderr
    consumed = await cli("consume", "--topic", "plain", "--bootstrap-server", bootstrap,
                         "--from-beginning", "--timeout-ms", "1500",
                         "--format", r"{topic}\t{key}\t{value}|{timestamp}")
    assert consumed.returncode == 0, consumed.stderr
    rows = [line.split("\t") for line in consumed.stdout.splitlines()]
    assert [r[:2] for r in rows] == [["plain", "None"]] * 4
    values = [r[2].split("|") for r in rows]
    assert [v for v, _ in values] == ["one", "two", "", "last-without-newline"]
    assert all(int(ts) > 1_500_000_000_000 for _, ts in values)


async def test_consume_merges_partitions_and_filters_one(tmp_path):
    async with open_broker({"port": 0, "host.name": "127.0.0.1",
                            "log.dirs": str(tmp_path / "data"), "num.partitions": 3}) as b:
        bootstrap = f"127.0.0.1:{b.port}"
        stdin = b"".join(b"key-%d:value-%d\n" % (i, i) for i in range(60))
        produced = await cli("produce", "--topic", "multi", "--bootstrap-server", bootstrap,
                             "--key-separator", ":", stdin=stdin)
        assert produced.returncode == 0, produced.stderr

        everything = await cli("consume", "--topic", "multi", "--bootstrap-server", bootstrap,
                               "--from-beginning", "--max-messages", "60",
                               "--format", "{partition} {offset} {key} {value}")
        assert everything.returncode == 0, everything.stderr
        rows = [line.split() for line in everything.stdout.splitlines()]
        assert sorted(r[3] for r in rows) == sorted(f"value-{i}" for i in range(60))
        assert {r[0] for r in rows} == {"0", "1", "2"}  # keys hash to every partition
        for p in "012":  # each partition in offset order, from 0
            offsets = [int(r[1]) for r in rows if r[0] == p]
            assert offsets == list(range(len(offsets)))

        one = await cli("consume", "--topic", "multi", "--bootstrap-server", bootstrap,
                        "--partition", "1", "--offset", "1", "--timeout-ms", "1000",
                        "--format", "{partition} {offset}")
        assert one.returncode == 0, one.stderr
        expected = [f"1 {o}" for o in range(1, sum(1 for r in rows if r[0] == "1"))]
        assert one.stdout.splitlines() == expected


async def test_consume_starts_at_the_end_by_default(bootstrap):
    await cli("produce", "--topic", "old", "--bootstrap-server", bootstrap, stdin=b"old\n")
    result = await cli("consume", "--topic", "old", "--bootstrap-server", bootstrap,
                       "--timeout-ms", "700")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert "Processed a total of 0 messages" in result.stderr


async def test_consume_follows_new_records_and_ctrl_c_exits_cleanly(bootstrap):
    await cli("produce", "--topic", "live", "--bootstrap-server", bootstrap, stdin=b"before\n")
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-c", _MAIN, "consume", "--topic", "live",
         "--bootstrap-server", bootstrap, "--format", "{offset}:{value}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        async with trilog.open_producer(bootstrap_servers=bootstrap, linger_ms=0) as producer:
            seen = b""
            with trio.fail_after(30):
                # The consumer starts at the end: send until one record it printed shows up.
                while b"after" not in seen:
                    await producer.send_and_wait("live", b"after")
                    with trio.move_on_after(0.3):
                        seen += await proc.stdout.receive_some()
        assert b"before" not in seen
        proc.send_signal(signal.SIGINT)
        with trio.fail_after(20):
            stderr = b""
            while chunk := await proc.stderr.receive_some():
                stderr += chunk
            rc = await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
        with trio.CancelScope(shield=True):
            await proc.wait()
            await proc.stdout.aclose()
            await proc.stderr.aclose()
    assert rc == 0, stderr
    assert b"Traceback" not in stderr
    assert b"Processed a total of" in stderr


async def test_consume_waits_for_a_topic_that_does_not_exist_yet(bootstrap):
    result = await cli("consume", "--topic", "never", "--bootstrap-server", bootstrap,
                       "--timeout-ms", "800")
    assert result.returncode == 1
    assert "does not exist yet; waiting" in result.stderr
    assert "'never' does not exist" in result.stderr
    _no_traceback(result)


# -- failures -------------------------------------------------------------------------------------


async def test_failed_deliveries_and_bad_lines_exit_1(bootstrap):
    stdin = b"a:small\nno separator here\nb:" + b"x" * 20_000 + b"\nc:fine\n"
    # A small --batch-size puts the oversize record in a batch of its own (the broker
    # rejects a whole batch).
    result = await cli("produce", "--topic", "fails", "--bootstrap-server", bootstrap,
                       "--key-separator", ":", "--batch-size", "1000", stdin=stdin)
    assert result.returncode == 1
    assert "line 2: no key separator ':'" in result.stderr
    assert "MESSAGE_TOO_LARGE" in result.stderr  # the broker's message.max.bytes is 10,000
    assert "2 of 4 records failed" in result.stderr
    _no_traceback(result)
    consumed = await cli("consume", "--topic", "fails", "--bootstrap-server", bootstrap,
                         "--from-beginning", "--timeout-ms", "1000", "--format", "{value}")
    assert consumed.stdout.splitlines() == ["small", "fine"]


#: every command that talks to a broker
_CLIENT_COMMANDS = {
    "produce": ["produce", "--topic", "t"],
    "consume": ["consume", "--topic", "t", "--from-beginning", "--timeout-ms", "500"],
    "consume-group": ["consume", "--topic", "t", "--group", "g"],
    "perf-produce": ["perf", "produce", "--topic", "t", "--num-records", "10",
                     "--record-size", "10"],
    "perf-consume": ["perf", "consume", "--topic", "t", "--messages", "10"],
    "topics-list": ["topics", "--list"],
    "topics-create": ["topics", "--create", "--topic", "t"],
    "configs": ["configs", "--entity-type", "topics", "--entity-name", "t", "--describe"],
    "groups-list": ["groups", "--list"],
    "groups-describe": ["groups", "--describe", "--group", "g"],
    "get-offsets": ["get-offsets", "--topic", "t"],
    "delete-records": ["delete-records", "--offset-json-file", "OFFSETS"],
    "acls": ["acls", "--list"],
}


async def test_unreachable_bootstrap_fails_fast_and_clearly(tmp_path):
    """Every client command, at an address where nothing listens: one line naming it and
    why, exit 1, after --bootstrap-timeout-ms (5 s; a broker may be starting), not a hang
    (`consume --group` once hung until killed)."""
    offsets = tmp_path / "offsets.json"
    offsets.write_text('{"partitions": [{"topic": "t", "partition": 0, "offset": 1}]}')
    results = {}

    async def run(name: str, args: list[str], port: int) -> None:
        args = [str(offsets) if a == "OFFSETS" else a for a in args]
        start = trio.current_time()
        results[name] = (port, await cli(*args, "--bootstrap-server", f"127.0.0.1:{port}",
                                         stdin=b"x\n", timeout=60),
                         trio.current_time() - start)

    async with trio.open_nursery() as nursery:
        for name, args in _CLIENT_COMMANDS.items():
            nursery.start_soon(run, name, args, free_port())
    for name, (port, result, took) in results.items():
        assert result.returncode == 1, (name, result.stderr)
        assert (f"no broker answered at 127.0.0.1:{port} within 5 s (--bootstrap-timeout-ms): "
                f"cannot connect to 127.0.0.1:{port}: Connection refused") in result.stderr, \
            (name, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, (name, result.stderr)
        assert took < 30, (name, took)
        _no_traceback(result)


async def test_the_bootstrap_timeout_is_a_setting():
    port = free_port()
    start = trio.current_time()
    result = await cli("topics", "--list", "--bootstrap-server", f"127.0.0.1:{port}",
                       "--bootstrap-timeout-ms", "500")
    assert result.returncode == 1 and "within 0.5 s (--bootstrap-timeout-ms)" in result.stderr
    assert trio.current_time() - start < 5  # within 30 s, then (a cold start is near 2 s)
    bad = await cli("topics", "--list", "--bootstrap-timeout-ms", "0")
    assert bad.returncode == 2 and "not a positive number of milliseconds" in bad.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["produce", "--topic", "t", "--compression", "zip"], "unknown compression 'zip'"),
    (["perf", "produce", "--topic", "t", "--num-records", "1", "--record-size", "1",
      "--compression", "brotli"], "unknown compression 'brotli'"),
    (["produce"], "the following arguments are required: --topic"),
    (["consume"], "the following arguments are required: --topic"),
    (["perf", "produce", "--topic", "t"], "--num-records"),
    (["produce", "--topic", "t", "--acks", "2"], "invalid choice: '2'"),
    (["consume", "--topic", "t", "--format", "{offset} {nope}"], "--format uses {nope}"),
    (["consume", "--topic", "t", "--format", "{offset"], "bad --format"),
    (["consume", "--topic", "t", "--offset", "soon"], "--offset must be a number"),
    (["consume", "--topic", "t", "--from-beginning", "--offset", "3"], "not allowed with"),
    (["produce", "--topic", "t", "--bootstrap-server", "a:1", "--zookeeper", "z:2"],
     "not allowed with"),
])
async def test_bad_options_exit_2_with_a_clear_message(args, message):
    # Nothing listens on the default bootstrap: every case fails before connecting.
    result = await cli(*args, stdin=b"x\n")
    assert result.returncode == 2, result
    assert message in result.stderr
    _no_traceback(result)


async def test_partition_that_does_not_exist(bootstrap):
    result = await cli("produce", "--topic", "one", "--bootstrap-server", bootstrap,
                       "--partition", "5", stdin=b"x\n")
    assert result.returncode == 2
    assert "partitions 0..0, not 5" in result.stderr
    result = await cli("consume", "--topic", "one", "--bootstrap-server", bootstrap,
                       "--partition", "5")
    assert result.returncode == 2
    assert "no partition 5" in result.stderr


async def test_offset_out_of_range(bootstrap):
    await cli("produce", "--topic", "short", "--bootstrap-server", bootstrap, stdin=b"a\nb\n")
    result = await cli("consume", "--topic", "short", "--bootstrap-server", bootstrap,
                       "--offset", "7", "--timeout-ms", "500")
    assert result.returncode == 1
    assert "offset 7 is out of range for short-0: it holds offsets 0..1" in result.stderr


# -- perf --------------------------------------------------------------------------------------------


async def test_perf_produce_and_consume_print_their_summaries(bootstrap):
    produced = await cli("perf", "produce", "--topic", "perf", "--num-records", "5000",
                         "--record-size", "64", "--bootstrap-server", bootstrap,
                         "--compression", "gzip")
    assert produced.returncode == 0, produced.stderr
    summary = produced.stdout.strip()
    assert "\r" not in produced.stdout  # no progress line when stdout is not a terminal
    assert summary.startswith("5000 records sent, ")
    for field in ("records/sec", "MB/sec)", "ms avg latency", "ms max latency", "ms 50th",
                  "ms 95th", "ms 99th", "ms 99.9th."):
        assert field in summary, summary

    consumed = await cli("perf", "consume", "--topic", "perf", "--messages", "5000",
                         "--bootstrap-server", bootstrap)
    assert consumed.returncode == 0, consumed.stderr
    summary = consumed.stdout.strip()
    assert summary.startswith("5000 records consumed, ")
    assert "records/sec" in summary and "MB/sec" in summary
    mb = float(summary.split(" MB in ")[0].rsplit(" ", 1)[1])
    assert mb == pytest.approx(5000 * 64 / 2**20, abs=0.01)

    short = await cli("perf", "consume", "--topic", "perf", "--messages", "6000",
                      "--bootstrap-server", bootstrap, "--timeout-ms", "700")
    assert short.returncode == 1
    assert "only 5000 of 6000 records" in short.stderr


async def test_perf_produce_throughput_limit(bootstrap):
    with trio.fail_after(60):
        t0 = trio.current_time()
        result = await cli("perf", "produce", "--topic", "slow", "--num-records", "300",
                           "--record-size", "10", "--throughput", "500",
                           "--bootstrap-server", bootstrap)
    assert result.returncode == 0, result.stderr
    rate = float(result.stdout.split(" records/sec")[0].rsplit(" ", 1)[1])
    assert rate <= 550
    assert trio.current_time() - t0 >= 0.55  # 300 records at 500/s take 0.6 s


def test_help_explains_each_tool():
    for args, words in ((["produce"], ["--key-separator", "Exit status"]),
                        (["consume"], ["--from-beginning", "{offset}", "Ctrl-C"]),
                        (["perf", "produce"], ["--throughput", "99.9th"]),
                        (["perf", "consume"], ["--messages", "records/sec"])):
        out = subprocess.run([sys.executable, "-c", _MAIN, *args, "--help"],
                             check=False, capture_output=True, text=True, timeout=30)
        assert out.returncode == 0
        for word in words:
            assert word in out.stdout, (args, word)


async def test_produce_and_consume_through_zookeeper(tmp_path, zookeeper):
    async with open_broker({"port": 0, "host.name": "127.0.0.1", "broker.id": 3,
                            "log.dirs": str(tmp_path / "zk-data"),
                            "zookeeper.connect": zookeeper}):
        produced = await cli("produce", "--topic", "via-zk", "--zookeeper", zookeeper,
                             "--key-separator", "=", stdin=b"a=1\nb=2\n")
        assert produced.returncode == 0, produced.stderr
        consumed = await cli("consume", "--topic", "via-zk", "--zookeeper", zookeeper,
                             "--from-beginning", "--max-messages", "2",
                             "--format", "{key}={value}")
        assert consumed.returncode == 0, consumed.stderr
        assert consumed.stdout.splitlines() == ["a=1", "b=2"]


class _FakeDelivery:
    def __init__(self, error=None) -> None:
        self.error = error

    def done(self) -> bool:
        return True

    def exception(self):
        return self.error

    async def wait(self) -> None:
        raise AssertionError("done deliveries are not waited for")


@pytest.mark.parametrize("every", [1, 3])
async def test_perf_collector_times_acknowledged_records_and_counts_failures(monkeypatch,
                                                                              every):
    from trilog.cli import _perf

    # "now", when the collector stamps: only the module's clock, not trio's
    monkeypatch.setattr(_perf, "time", types.SimpleNamespace(perf_counter=lambda: 10.0))
    stats = _perf.LatencyStats(1)
    stats.sample_every = every
    errors = [None] * 10
    errors[0] = errors[6] = trilog.TrilogError("broker said no")
    deliveries = [_FakeDelivery(e) for e in errors]
    sent_at = [1.0 + i for i in range(10)]  # latencies 9, 8, ... 0 seconds
    seen = []
    await _perf._collect(stats, sent_at, deliveries, lambda: True, seen.append)
    acked = [10.0 - t for t, e in zip(sent_at, errors) if e is None]
    assert (stats.count, stats.failed, len(seen)) == (8, 2, 2)
    assert stats.total == pytest.approx(sum(acked))
    assert stats.max == pytest.approx(8.0)  # the oldest acknowledged record, sent at 2.0
    assert list(stats.samples) == pytest.approx(acked[every - 1::every])
