"""``trilog console`` as an operator runs it (a child process) against a real standalone
broker whose topics and group were written by kafka-python: every page and its JSON twin,
record browsing and its bounds, bad input answered with 400/404 pages (never a trace), the
login (basic auth, over TLS), read-only mode, and the samples behind the charts."""

from __future__ import annotations

import ssl
import subprocess
import sys
import time

import pytest

from console_helpers import (
    COMMITTED,
    GROUP,
    PARTITIONS,
    PER_PARTITION,
    RETENTION_MS,
    TOPIC,
    ConsoleProcess,
    get,
    seed,
    wait_for,
)

pytest.importorskip("h11", reason="the console needs h11 (the console extra)")

_MAIN = "import sys; from trilog.cli import main; sys.exit(main())"


@pytest.fixture(scope="module")
def cluster(module_broker_process):
    broker = module_broker_process(overrides={"group.initial.rebalance.delay.ms": 0})
    later_ms = seed(broker.bootstrap)
    return broker, later_ms


@pytest.fixture(scope="module")
def console(cluster, tmp_path_factory):
    broker, _ = cluster
    process = ConsoleProcess(broker.bootstrap,
                             log=tmp_path_factory.mktemp("console") / "console.log")
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log()
        assert "Traceback" not in process.log(), process.log()


def test_the_ready_line_names_the_url_and_the_cluster(console, cluster):
    assert console.url.startswith("http://127.0.0.1:")
    assert cluster[0].bootstrap in console.line


def test_the_overview_shows_the_broker_the_controller_and_the_partitions(console, cluster):
    broker, _ = cluster
    page = get(console.url + "/")
    assert page.status == 200 and page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"].startswith("default-src 'self'")
    assert page.headers["cache-control"] == "no-store"
    assert f"127.0.0.1:{broker.port}" in page.body and "Brokers" in page.body
    d = get(console.url + "/api/cluster").json()
    assert d["brokers"] == [{"id": broker.broker_id, "host": "127.0.0.1", "port": broker.port,
                             "rack": None, "controller": True}]
    assert d["controller_id"] == broker.broker_id and d["cluster_id"]
    assert d["topics"] >= 2 and d["partitions"] >= PARTITIONS + 1
    assert d["under_replicated"] == 0 and d["offline"] == 0


def test_the_topics_list_has_the_kafka_python_topic(console):
    page = get(console.url + "/topics")
    assert page.status == 200 and f'href="/topics/{TOPIC}"' in page.body
    rows = {t["name"]: t for t in get(console.url + "/api/topics").json()["topics"]}
    assert rows[TOPIC]["partitions"] == PARTITIONS
    assert rows[TOPIC]["replication_factor"] == 1
    assert rows["raw"]["partitions"] == 1


def test_a_topic_page_has_its_partitions_offsets_sizes_and_configs(console):
    d = get(console.url + f"/api/topics/{TOPIC}").json()
    assert [p["partition"] for p in d["partition_list"]] == list(range(PARTITIONS))
    for p in d["partition_list"]:
        assert p["log_start_offset"] == 0 and p["log_end_offset"] == PER_PARTITION
        assert p["leader"] == p["replicas"][0] == p["isr"][0]
        assert p["size"] > 0  # DescribeLogDirs
    configs = {c["name"]: c for c in d["configs"]}
    assert configs["retention.ms"]["value"] == RETENTION_MS
    assert not configs["retention.ms"]["default"]
    assert configs["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["cleanup.policy"]["default"]
    page = get(console.url + f"/topics/{TOPIC}")
    assert page.status == 200
    assert "Partitions" in page.body and "retention.ms" in page.body
    assert f'href="/topics/{TOPIC}/records?partition=2"' in page.body


def test_records_are_browsed_from_an_offset_with_keys_values_and_headers(console):
    d = get(console.url + f"/api/topics/{TOPIC}/records?partition=1&offset=5&limit=3").json()
    assert [r["offset"] for r in d["records"]] == [5, 6, 7]
    first = d["records"][0]
    assert first["key"] == {"format": "text", "text": "k5", "size": 2, "truncated": False}
    assert first["value"]["format"] == "json" and '"p": 1' in first["value"]["text"]
    assert first["headers"][0]["key"] == "source"
    assert first["headers"][0]["value"]["text"] == "test"
    assert d["next_offset"] == 8 and d["log_end_offset"] == PER_PARTITION
    page = get(console.url + f"/topics/{TOPIC}/records?partition=1&offset=5&limit=3")
    assert page.status == 200 and "k5" in page.body and "k8" not in page.body
    assert "offset=8" in page.body  # the link to the next page


def test_records_from_a_time_and_by_default_the_last_ones(console, cluster):
    _, later_ms = cluster
    d = get(console.url + f"/api/topics/{TOPIC}/records?partition=0&time={later_ms}").json()
    assert [r["offset"] for r in d["records"]] == [PER_PARTITION - 1]
    last = get(console.url + f"/api/topics/{TOPIC}/records?limit=4").json()
    assert [r["offset"] for r in last["records"]] == list(range(PER_PARTITION - 4,
                                                              PER_PARTITION))
    past = get(console.url + f"/api/topics/{TOPIC}/records?offset=1000").json()
    assert past["records"] == [] and past["log_end_offset"] == PER_PARTITION


def test_binary_values_are_hex_and_html_is_escaped(console):
    d = get(console.url + "/api/topics/raw/records?offset=0").json()
    binary, html = d["records"]
    assert binary["value"]["format"] == "hex" and binary["value"]["text"].startswith("fa fb")
    assert html["value"]["format"] == "text"
    page = get(console.url + "/topics/raw/records?offset=0").body
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)" in page
    forced = get(console.url + "/api/topics/raw/records?offset=1&format=hex").json()
    assert forced["records"][0]["value"]["text"].startswith("3c 73")


def test_browsing_is_bounded(console):
    page = get(console.url + f"/api/topics/{TOPIC}/records?offset=0&limit=1000")
    assert page.status == 400 and "limit 1000 is more than 200" in page.json()["error"]
    d = get(console.url + f"/api/topics/{TOPIC}/records?offset=0&limit=200").json()
    assert len(d["records"]) == PER_PARTITION  # up to the log end, no more


@pytest.mark.parametrize(("path", "status", "words"), [
    ("/topics/no-such-topic", 404, "no topic 'no-such-topic'"),
    ("/api/topics/no-such-topic", 404, "no topic 'no-such-topic'"),
    ("/topics/no-such-topic/records", 404, "no-such-topic"),
    (f"/topics/{TOPIC}/records?offset=abc", 400, "offset 'abc' is not a whole number"),
    (f"/topics/{TOPIC}/records?offset=-3", 400, "offset -3 is below 0"),
    (f"/topics/{TOPIC}/records?partition=9", 404, "has no partition 9"),
    (f"/topics/{TOPIC}/records?time=yesterday", 400, "time 'yesterday' is neither"),
    (f"/topics/{TOPIC}/records?format=xml", 400, "format 'xml'"),
    (f"/topics/{TOPIC}/records?offset=1&time=5", 400, "offset or time, not both"),
    ("/groups/no-such-group", 404, "no consumer group 'no-such-group'"),
    ("/nowhere", 404, "no page at /nowhere"),
    ("/static/missing.js", 404, "no static file"),
])
def test_bad_input_gets_a_clear_page_never_a_trace(console, path, status, words):
    page = get(console.url + path)
    assert page.status == status, page.body
    assert words.replace("'", "&#x27;") in page.body or words in page.body, page.body
    assert "Traceback" not in page.body


def test_only_reading_methods_are_served(console):
    page = get(console.url + "/topics", method="POST", data=b"x=1")
    assert page.status == 405 and page.headers["allow"] == "GET, HEAD"


def test_groups_show_state_members_and_lag(console):
    rows = get(console.url + "/api/groups").json()["groups"]
    (row,) = [g for g in rows if g["group"] == GROUP]
    assert row["state"] == "Empty" and row["members"] == 0
    assert row["lag"] == PARTITIONS * (PER_PARTITION - COMMITTED)
    d = get(console.url + f"/api/groups/{GROUP}").json()
    assert {(p["topic"], p["partition"], p["committed_offset"], p["log_end_offset"], p["lag"])
            for p in d["partitions"]} == {(TOPIC, p, COMMITTED, PER_PARTITION,
                                           PER_PARTITION - COMMITTED)
                                          for p in range(PARTITIONS)}
    page = get(console.url + f"/groups/{GROUP}")
    assert page.status == 200 and "Lag by partition" in page.body
    assert 'data-chart="/api/charts/groups/billing"' in page.body


def test_the_samples_give_rates_and_lag_over_time(console, cluster):
    broker, _ = cluster
    lag = wait_for(lambda: [s for s in get(console.url + f"/api/charts/groups/{GROUP}")
                            .json()["series"] if len(s["points"]) >= 2], what="lag samples")
    assert lag[0]["name"] == "total"
    assert lag[0]["points"][-1][1] == PARTITIONS * (PER_PARTITION - COMMITTED)
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("rates", 1, 1)])
    admin.close()
    # a sample of the empty topic first: a rate is a difference between two samples
    wait_for(lambda: any(s["name"] == "rates" and s["points"] for s in
                         get(console.url + "/api/charts/throughput").json()["series"]),
             what="a sample of topic 'rates'")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(50):
        producer.send("rates", value=b"x")
    producer.flush()
    producer.close()

    def produced() -> bool:
        chart = get(console.url + "/api/charts/topics/rates").json()
        return any(v > 0 for s in chart["series"] if s["name"] == "produced"
                   for _, v in s["points"])

    wait_for(produced, what="a produce rate above 0 for topic 'rates'")
    throughput = get(console.url + "/api/charts/throughput").json()
    assert throughput["unit"] == "records/s"
    assert "rates" in {s["name"] for s in throughput["series"]}


# -- other modes: each its own console process -------------------------------------------------


def test_read_only_mode_hides_records(cluster, tmp_path):
    broker, _ = cluster
    process = ConsoleProcess(broker.bootstrap, "--no-records", log=tmp_path / "c.log")
    try:
        assert "read-only" in process.line
        page = get(process.url + f"/topics/{TOPIC}")
        assert page.status == 200 and "/records" not in page.body
        for path in (f"/topics/{TOPIC}/records", f"/api/topics/{TOPIC}/records?offset=0"):
            refused = get(process.url + path)
            assert refused.status == 403 and "--no-records" in refused.body
            assert '"k' not in refused.body
    finally:
        assert process.stop() == 0


@pytest.fixture
def users_file(tmp_path):
    path = tmp_path / "users.txt"
    # alice in the clear, bob by the SHA-256 of "hunter2"
    path.write_text("# console users\nalice:wonderland\n"
                    "bob:sha256:f52fbd32b2b3b86ff88ef6c490628285f482af15ddcb29541f94bcf526a3f6c7\n")
    return path


def test_a_login_is_required_over_tls(cluster, tmp_path, users_file):
    trustme = pytest.importorskip("trustme")
    broker, _ = cluster
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_and_cert_chain_pem.write_to_path(tmp_path / "console.pem")
    process = ConsoleProcess(broker.bootstrap, "--host", "127.0.0.1",
                             "--basic-auth-file", str(users_file),
                             "--tls-cert", str(tmp_path / "console.pem"),
                             "--tls-key", str(tmp_path / "console.pem"),
                             log=tmp_path / "c.log")
    try:
        assert process.url.startswith("https://")
        client = ssl.create_default_context()
        ca.configure_trust(client)
        url = process.url + f"/topics/{TOPIC}/records?offset=0"
        refused = get(url, context=client)
        assert refused.status == 401 and "k0" not in refused.body
        assert refused.headers["www-authenticate"].startswith("Basic realm=")
        assert get(url, context=client, user="alice", password="nope").status == 401
        assert get(url, context=client, user="mallory", password="wonderland").status == 401
        ok = get(url, context=client, user="alice", password="wonderland")
        assert ok.status == 200 and "k0" in ok.body
        assert get(process.url + "/api/cluster", context=client, user="bob",
                   password="hunter2").status == 200
    finally:
        assert process.stop() == 0


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _MAIN, *args], capture_output=True,
                          text=True, timeout=60, check=False)


def test_a_login_without_tls_is_refused_off_loopback(users_file):
    done = _cli("console", "--host", "0.0.0.0", "--basic-auth-file", str(users_file))
    assert done.returncode == 2, done
    assert "--tls-cert and --tls-key" in done.stderr and "Traceback" not in done.stderr
    bad = _cli("console", "--basic-auth-file", "/nonexistent/users")
    assert bad.returncode == 2 and "cannot read --basic-auth-file" in bad.stderr


def test_the_command_is_listed_and_explains_itself():
    assert "console" in _cli("--help").stdout
    text = _cli("console", "--help").stdout
    for option in ("--bootstrap-server", "--command-config", "--port", "--no-records",
                   "--basic-auth-file", "--tls-cert", "/api/"):
        assert option in text, option


def test_an_unreachable_cluster_is_one_line(tmp_path):
    start = time.monotonic()
    done = _cli("console", "--bootstrap-server", "127.0.0.1:1", "--bootstrap-timeout-ms",
                "500")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("trilog console:"), done.stderr
    assert time.monotonic() - start < 30


def test_the_console_logs_in_to_the_cluster_with_command_config(broker_process, tmp_path):
    from security_helpers import add_users

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
    refused = _cli("console", "--bootstrap-server", sasl, "--command-config", str(bad),
                   "--port", "0")
    assert refused.returncode == 1, refused.stderr
    assert "SASL_AUTHENTICATION_FAILED" in refused.stderr and "Traceback" not in refused.stderr
    process = ConsoleProcess(sasl, "--command-config", str(good), log=tmp_path / "c.log")
    try:
        d = get(process.url + "/api/cluster").json()
        assert [b["id"] for b in d["brokers"]] == [broker.broker_id]
        assert get(process.url + "/api/groups").status == 200
    finally:
        assert process.stop() == 0, process.log()


def test_a_broker_restart_is_a_503_page_then_the_console_carries_on(broker_process, tmp_path):
    broker = broker_process()
    process = ConsoleProcess(broker.bootstrap, log=tmp_path / "c.log")
    try:
        assert get(process.url + "/api/cluster").status == 200
        broker.stop()
        down = get(process.url + "/api/cluster")
        assert down.status == 503 and "the cluster did not answer" in down.json()["error"]
        page = get(process.url + "/topics")
        assert page.status == 503 and "Traceback" not in page.body
        again = broker_process(broker.log_dir, port=broker.port)
        answer = wait_for(lambda: (a := get(process.url + "/api/cluster")).status == 200 and a,
                          what="the console to reach the restarted broker")
        assert [b["port"] for b in answer.json()["brokers"]] == [again.port]
        assert get(process.url + "/groups").status == 200
    finally:
        assert process.stop() == 0, process.log()
    assert "Traceback" not in process.log()
