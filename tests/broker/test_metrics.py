"""The broker's metrics: the collector over a fake broker state, the request counters of a
real broker in-process, the request log, and ``/metrics`` of a broker process under a
produce load (scraped with a plain HTTP client, parsed with prometheus_client's parser)."""

from __future__ import annotations

import logging
import re
import socket
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
import trio
from broker_helpers import batch, produce_request, trio_connect, trio_roundtrip
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import trilog
from trilog.broker import open_broker
from trilog.broker._metrics import (
    FLUSH_BUCKETS_S,
    METRICS,
    Buckets,
    RequestMetrics,
    error_counts,
    registry_for,
)
from trilog.errors import (
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)
from trilog.protocol import ApiKey, ApiVersionsResponse, MetadataResponse, ProduceResponse
from trilog.zk._server import free_port

DOCS = Path(__file__).resolve().parents[2] / "docs"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``{(sample name, sorted labels): value}`` of a text exposition."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def families(text: str) -> dict[str, str]:
    """``{family name: type}``."""
    return {f.name: f.type for f in text_string_to_metric_families(text)}


def value(scraped, name: str, **labels: str) -> float:
    return scraped[(name, tuple(sorted(labels.items())))]


# -- the collector, over a fake broker -------------------------------------------------------


class FakeSource:
    def __init__(self) -> None:
        self.requests = RequestMetrics()
        self.flushes = Buckets(FLUSH_BUCKETS_S)
        self.cleaner_stats: dict[str, float] | None = None
        self.log_list = [
            SimpleNamespace(topic="events", partition=0, size_in_bytes=4096, log_start_offset=10,
                            log_end_offset=110, last_stable_offset=90, segments=(1, 2)),
            SimpleNamespace(topic="events", partition=1, size_in_bytes=0, log_start_offset=0,
                            log_end_offset=0, last_stable_offset=0, segments=(1,)),
        ]

    def network(self):
        return {"open_connections": 3, "connections_accepted": 7, "connections_refused": 1,
                "connections_idled_out": 2, "queued_request_bytes": 512,
                "queued_request_limit": 1 << 20, "parked_fetches": 4}

    def logs(self):
        return self.log_list

    def groups(self):
        return {"readers": ("Stable", 2), "joining": ("PreparingRebalance", 1)}

    def committed_offsets(self):
        return [("readers", "events", 0, 60), ("readers", "events", 1, 0),
                ("old", "events", 0, 200), ("old", "gone", 0, 5)]

    def cleaner(self):
        return self.cleaner_stats

    def under_replicated_partitions(self):
        return 0

    def quotas(self):
        return [("producer_byte_rate", "", "app", 1024.5, 1500, 2),
                ("request_percentage", "alice", "app", 12.5, 0, 0)]


def scrape(source) -> str:
    return generate_latest(registry_for(source)).decode()


def test_the_collector_reads_the_broker_state_at_scrape_time():
    source = FakeSource()
    source.requests.request_done(ApiKey.PRODUCE, 7, 0.002, 1000, 60, {})
    source.requests.request_done(ApiKey.PRODUCE, 7, 0.3, 1000, 60,
                                 {NotLeaderOrFollowerError.code: 2})
    source.requests.request_done(ApiKey.FETCH, 11, 0.5, 100, 5000, {})
    source.requests.produced("events", 2000, 20)
    source.requests.fetched("events", 5000)
    source.requests.request_refused(999)
    source.flushes.observe(0.003)
    scraped = samples(scrape(source))

    assert value(scraped, "trilog_topic_bytes_in_total", topic="events") == 2000
    assert value(scraped, "trilog_topic_records_in_total", topic="events") == 20
    assert value(scraped, "trilog_topic_bytes_out_total", topic="events") == 5000
    assert value(scraped, "trilog_requests_total", api="Produce", version="7") == 2
    assert value(scraped, "trilog_request_seconds_count", api="Produce") == 2
    assert value(scraped, "trilog_request_seconds_bucket", api="Produce", le="0.0025") == 1
    assert value(scraped, "trilog_request_seconds_bucket", api="Produce", le="+Inf") == 2
    assert value(scraped, "trilog_request_seconds_sum", api="Produce") == pytest.approx(0.302)
    assert value(scraped, "trilog_request_errors_total", api="Produce",
                 error="NOT_LEADER_OR_FOLLOWER") == 2
    assert value(scraped, "trilog_requests_refused_total", api="unknown") == 1
    assert value(scraped, "trilog_request_bytes_total", api="Produce") == 2000
    assert value(scraped, "trilog_response_bytes_total", api="Fetch") == 5000
    assert value(scraped, "trilog_connections") == 3
    assert value(scraped, "trilog_connections_accepted_total") == 7
    assert value(scraped, "trilog_connections_refused_total") == 1
    assert value(scraped, "trilog_connections_idle_closed_total") == 2
    assert value(scraped, "trilog_request_queue_bytes") == 512
    assert value(scraped, "trilog_fetches_parked") == 4
    assert value(scraped, "trilog_under_replicated_partitions") == 0
    assert value(scraped, "trilog_log_flush_seconds_count") == 1
    assert value(scraped, "trilog_partitions") == 2
    assert value(scraped, "trilog_log_size_bytes", topic="events", partition="0") == 4096
    assert value(scraped, "trilog_log_segments", topic="events", partition="0") == 2
    assert value(scraped, "trilog_log_start_offset", topic="events", partition="0") == 10
    assert value(scraped, "trilog_log_end_offset", topic="events", partition="0") == 110
    # Groups: two with members, "old" known by its offsets only (Empty).
    assert value(scraped, "trilog_groups", state="Stable") == 1
    assert value(scraped, "trilog_groups", state="PreparingRebalance") == 1
    assert value(scraped, "trilog_groups", state="Empty") == 1
    assert value(scraped, "trilog_group_members", group="readers") == 2
    # Lag: the log end less the committed offset; never negative; only for logs held here.
    lag = {k[1]: v for k, v in scraped.items() if k[0] == "trilog_consumer_group_lag"}
    assert lag == {
        (("group", "readers"), ("partition", "0"), ("topic", "events")): 50,
        (("group", "readers"), ("partition", "1"), ("topic", "events")): 0,
        (("group", "old"), ("partition", "0"), ("topic", "events")): 0,
    }
    assert value(scraped, "trilog_consumer_group_committed_offset", group="old", topic="gone",
                 partition="0") == 5
    # A read_committed consumer's lag stops at the last stable offset (a transaction open
    # from offset 90).
    stable = {k[1]: v for k, v in scraped.items()
              if k[0] == "trilog_consumer_group_lag_read_committed"}
    assert stable == {
        (("group", "readers"), ("partition", "0"), ("topic", "events")): 30,
        (("group", "readers"), ("partition", "1"), ("topic", "events")): 0,
        (("group", "old"), ("partition", "0"), ("topic", "events")): 0,
    }


def test_values_move_between_scrapes_without_new_registration():
    source = FakeSource()
    registry = registry_for(source)
    first = samples(generate_latest(registry).decode())
    source.requests.produced("events", 100, 1)
    source.log_list[1].log_end_offset = 1
    second = samples(generate_latest(registry).decode())
    assert ("trilog_topic_bytes_in_total", (("topic", "events"),)) not in first
    assert value(second, "trilog_topic_bytes_in_total", topic="events") == 100
    assert value(second, "trilog_log_end_offset", topic="events", partition="1") == 1


#: What the log cleaner's statistics() gives (trilog/storage/_cleaner_manager.py's vocabulary).
CLEANER_STATS = {
    "passes": 3, "incomplete_passes": 1, "failed_passes": 1, "bytes_read": 4096,
    "bytes_written": 1024, "records_read": 100, "records_removed": 90, "tombstones_removed": 2,
    "segments_replaced": 4, "last_pass_ms": 250, "last_buffer_utilization": 0.5,
    "in_progress": [("compacted", 0)], "uncleanable": [],
    "dirty_ratio": {("compacted", 0): 0.75, ("compacted", 1): 0.0},
}


def test_cleaner_progress_comes_from_its_statistics():
    source = FakeSource()
    assert not any(n.startswith("trilog_log_cleaner_") for n in families(scrape(source)))
    source.cleaner_stats = {**CLEANER_STATS, "new_number": 7}
    text = scrape(source)
    scraped = samples(text)
    assert families(text)["trilog_log_cleaner_passes"] == "counter"
    assert value(scraped, "trilog_log_cleaner_passes_total") == 3
    assert value(scraped, "trilog_log_cleaner_records_removed_total") == 90
    assert value(scraped, "trilog_log_cleaner_last_pass_seconds") == 0.25
    assert value(scraped, "trilog_log_cleaner_last_buffer_utilization") == 0.5
    assert value(scraped, "trilog_log_cleaner_in_progress") == 1
    assert value(scraped, "trilog_log_cleaner_uncleanable") == 0
    assert value(scraped, "trilog_log_cleaner_dirty_ratio", topic="compacted",
                 partition="0") == 0.75
    assert value(scraped, "trilog_log_cleaner_new_number") == 7  # a number not listed yet


def test_every_metric_is_served_and_documented():
    source = FakeSource()
    source.cleaner_stats = CLEANER_STATS
    source.requests.request_done(ApiKey.PRODUCE, 7, 0.001, 10, 10, {1: 1})
    source.requests.request_refused(0)
    source.requests.produced("events", 1, 1)
    served = families(scrape(source))
    declared = {name.removesuffix("_total"): kind for name, kind, _l, _m in METRICS}
    assert served == declared
    operations = (DOCS / "operations.md").read_text()
    for name, kind, labels, _meaning in METRICS:
        assert f"`{name}`" in operations, f"{name} is not in docs/operations.md"


def test_error_counts_walks_every_partition():
    R = ProduceResponse
    P = R.TopicProduceResponse.PartitionProduceResponse
    response = R(responses=[
        R.TopicProduceResponse(name="a", partition_responses=[
            P(index=0, error_code=0), P(index=1, error_code=NotLeaderOrFollowerError.code)]),
        R.TopicProduceResponse(name="b", partition_responses=[
            P(index=0, error_code=NotLeaderOrFollowerError.code),
            P(index=1, error_code=UnknownTopicOrPartitionError.code)]),
    ], throttle_time_ms=0)
    assert error_counts(response) == {NotLeaderOrFollowerError.code: 2,
                                      UnknownTopicOrPartitionError.code: 1}
    M = MetadataResponse
    T = M.MetadataResponseTopic
    metadata = M(brokers=[], topics=[
        T(name="a", error_code=LeaderNotAvailableError.code, partitions=[
            T.MetadataResponsePartition(partition_index=0,
                                        error_code=LeaderNotAvailableError.code),
            T.MetadataResponsePartition(partition_index=1, error_code=0)]),
        T(name="b", error_code=0, partitions=[]),
    ])
    assert error_counts(metadata) == {LeaderNotAvailableError.code: 2}
    assert error_counts(ApiVersionsResponse(error_code=35)) == {35: 1}


def test_buckets_are_cumulative():
    buckets = Buckets((1.0, 2.0))
    for v in (0.5, 1.0, 1.5, 3.0):
        buckets.observe(v)
    assert buckets.cumulative() == [("1.0", 2), ("2.0", 3), ("+Inf", 4)]
    assert (buckets.count, buckets.sum) == (4, 6.0)


# -- a real broker in-process: counters and the request log ---------------------------------------


async def test_requests_are_counted_and_logged_at_debug(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="trilog.broker.requests")
    config = {"port": 0, "log.dirs": str(tmp_path / "data"), "num.partitions": 1}
    async with open_broker(config) as broker:
        async with trilog.open_producer(broker.bootstrap, client_id="metrics-test") as producer:
            await producer.send_and_wait("logged", b"v" * 100)
        stream = await trio_connect(broker.port)
        async with stream:
            response = await trio_roundtrip(stream, produce_request("logged", 5, batch([b"x"])), 7)
        assert response.responses[0].partition_responses[0].error_code == \
            UnknownTopicOrPartitionError.code
        metrics = broker.metrics
        produce = metrics.apis[ApiKey.PRODUCE]
        assert produce.versions == {7: 2}
        assert produce.errors == {UnknownTopicOrPartitionError.code: 1}
        assert metrics.topics["logged"].records_in == 1
        assert metrics.topics["logged"].bytes_in > 100
        assert produce.seconds.count == 2
    lines = [r for r in caplog.records if r.name == "trilog.broker.requests"
             and r.levelno == logging.DEBUG]
    produced = [r.getMessage() for r in lines if r.getMessage().startswith("Produce v7 ")]
    assert len(produced) == 2, [r.getMessage() for r in lines]
    ok = re.fullmatch(r"Produce v7 client_id=metrics-test peer=127\.0\.0\.1:\d+ "
                      r"request_bytes=\d+ response_bytes=\d+ time_ms=\d+\.\d{3} errors=none",
                      produced[0])
    assert ok, produced[0]
    assert produced[1].endswith("errors=UNKNOWN_TOPIC_OR_PARTITION:1"), produced[1]
    assert {"Metadata", "ApiVersions"} <= {r.api for r in lines}  # structured fields too
    assert lines[0].request_bytes > 0 and lines[0].time_ms >= 0


async def test_nothing_is_logged_per_request_at_info(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="trilog.broker.requests")
    config = {"port": 0, "log.dirs": str(tmp_path / "data")}
    async with open_broker(config) as broker:
        async with trilog.open_producer(broker.bootstrap) as producer:
            await producer.send_and_wait("quiet", b"v")
    assert not [r for r in caplog.records if r.name == "trilog.broker.requests"]


async def test_a_refused_request_is_counted(tmp_path):
    async with open_broker({"port": 0, "log.dirs": str(tmp_path / "data")}) as broker:
        stream = await trio_connect(broker.port)
        async with stream:
            # Metadata v999: no answer, the connection closes.
            await stream.send_all(b"\0\0\0\x0a" + b"\0\x03\x03\xe7\0\0\0\x01\xff\xff")
            assert await stream.receive_some(100) == b""
        assert broker.metrics.refused == {ApiKey.METADATA: 1}


async def test_the_metrics_server_is_off_by_default(tmp_path):
    async with open_broker({"port": 0, "log.dirs": str(tmp_path / "data")}) as broker:
        assert broker.metrics_port is None


# -- a broker process under load, scraped over HTTP ----------------------------------------------


def http_get(port: int, path: str = "/metrics") -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def raw_http(port: int, data: bytes) -> bytes:
    """Send ``data`` and read until the server closes (a refused request may be cut off)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


async def test_metrics_of_a_broker_process_under_a_produce_load(broker_process):
    port = free_port()
    broker = broker_process(overrides={"metrics.port": port, "num.partitions": 2})
    assert broker.stdout_lines  # it is serving
    scrapes = []
    first_half = trio.Event()
    scraped = trio.Event()
    total = 4000

    async def load(producer) -> None:
        for i in range(total):
            await producer.send("load", b"%06d" % i + b"x" * 200)
            if i == total // 2:
                await producer.flush()
                first_half.set()
                await scraped.wait()  # the second half comes after the mid-load scrape
        await producer.flush()

    async with trilog.open_producer(broker.bootstrap, linger_ms=2, batch_size=16384) as producer:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(load, producer)
            await first_half.wait()
            scrapes.append(await trio.to_thread.run_sync(http_get, port))  # mid-load
            scraped.set()
        scrapes.append(await trio.to_thread.run_sync(http_get, port))  # after it, still open

    (status1, text1), (status2, text2) = scrapes
    assert status1 == status2 == 200
    first, second = samples(text1), samples(text2)

    def topic_total(scraped, name):
        return sum(v for (n, labels), v in scraped.items()
                   if n == name and ("topic", "load") in labels)

    assert 0 < topic_total(first, "trilog_topic_bytes_in_total") < \
        topic_total(second, "trilog_topic_bytes_in_total")
    assert topic_total(second, "trilog_topic_records_in_total") == total
    produce_count = value(second, "trilog_request_seconds_count", api="Produce")
    assert produce_count >= value(first, "trilog_request_seconds_count", api="Produce") > 0
    assert value(second, "trilog_request_seconds_bucket", api="Produce",
                 le="+Inf") == produce_count
    assert value(second, "trilog_connections") >= 1  # the producer's, open during the scrape
    assert value(second, "trilog_connections_accepted_total") >= 1
    assert sum(v for (n, labels), v in second.items() if n == "trilog_log_end_offset"
               and ("topic", "load") in labels) == total

    # Other paths are 404; a malformed or oversized request is refused; the broker goes on.
    assert (await trio.to_thread.run_sync(http_get, port, "/"))[0] == 404
    assert (await trio.to_thread.run_sync(http_get, port, "/metricsx"))[0] == 404
    malformed = await trio.to_thread.run_sync(raw_http, port, b"NONSENSE\r\n\r\n")
    assert malformed.startswith(b"HTTP/1.1 400 ")
    oversized = await trio.to_thread.run_sync(
        raw_http, port, b"GET /metrics HTTP/1.1\r\nX-Padding: " + b"a" * 100_000)
    assert oversized == b"" or oversized.startswith(b"HTTP/1.1 431 ")
    post = await trio.to_thread.run_sync(raw_http, port, b"POST /metrics HTTP/1.1\r\n\r\n")
    assert post.startswith(b"HTTP/1.1 405 ")
    status, text3 = await trio.to_thread.run_sync(http_get, port)
    assert status == 200 and "trilog_topic_bytes_in_total" in text3
    async with trilog.open_producer(broker.bootstrap) as producer:
        await producer.send_and_wait("load", b"after")
    assert broker.proc.poll() is None


async def test_a_busy_metrics_port_is_a_clear_error(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(trilog.TrilogError, match="cannot serve metrics on 127.0.0.1"):
            async with open_broker({"port": 0, "log.dirs": str(tmp_path / "data"),
                                    "metrics.port": port}):
                pass


def test_client_quota_rates_and_throttle_times_are_served_per_user_and_client_id():
    scraped = samples(scrape(FakeSource()))
    assert value(scraped, "trilog_quota_byte_rate", type="Produce", user="",
                 client_id="app") == 1024.5
    assert value(scraped, "trilog_quota_throttle_time_ms_total", type="Produce", user="",
                 client_id="app") == 1500
    assert value(scraped, "trilog_quota_throttled_responses_total", type="Produce", user="",
                 client_id="app") == 2
    assert value(scraped, "trilog_quota_request_time_percent", user="alice",
                 client_id="app") == 12.5
