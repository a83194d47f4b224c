"""The broker's Prometheus metrics: plain counters where the work happens, read at scrape time.

The only module that imports ``prometheus_client``.  Hot paths never call it: the request
handler adds to a :class:`RequestMetrics` (plain ints in dicts), the flush timer to a
:class:`Buckets`, and everything else that already exists (connections and queued request
bytes in the network, log sizes and offsets in the ``LogManager``, groups and committed
offsets in the group coordinator, the cleaner's ``statistics()``) is read only when
Prometheus scrapes, by :class:`BrokerCollector`.

``serve_metrics`` answers ``GET /metrics`` on ``metrics.host:metrics.port`` with a tiny
HTTP/1.1 responder on trio, in the broker's nursery: one request per connection, a bounded
request head, a bounded number of scrapes at once, ``404`` for any other path.

Every metric, with its type, labels and meaning, is listed in ``docs/operations.md``
("Metrics and logs"); :data:`METRICS` is the same list, and a test keeps the two in step.
"""

from __future__ import annotations

import logging
import math
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial
from typing import Any, Protocol

import trio
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry

from trilog.errors import ERROR_CODES, TrilogError
from trilog.protocol import ApiKey, Array, Struct, StructValue


log = logging.getLogger("trilog.broker.metrics")

#: Upper bounds (seconds) of the request-time histogram's buckets.
REQUEST_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                     2.5, 5.0, 10.0, 30.0, 60.0)
#: Upper bounds (seconds) of the log-flush histogram's buckets.
FLUSH_BUCKETS_S = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                   1.0, 2.5, 5.0, 10.0)

#: ``(name, type, labels, meaning)`` of every metric the broker serves (docs/operations.md).
METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("trilog_topic_bytes_in_total", "counter", "topic",
     "Record bytes appended to the topic's logs by Produce requests."),
    ("trilog_topic_records_in_total", "counter", "topic",
     "Records appended to the topic's logs by Produce requests."),
    ("trilog_topic_bytes_out_total", "counter", "topic",
     "Record bytes put in Fetch responses for the topic."),
    ("trilog_requests_total", "counter", "api, version",
     "Requests answered (or, for Produce with acks=0, handled)."),
    ("trilog_request_seconds", "histogram", "api",
     "Time from decoding a request to its response being ready to send (a long poll's wait "
     "included; not the time on the wire)."),
    ("trilog_request_errors_total", "counter", "api, error",
     "Error codes in responses, each partition's counted (Kafka's error names)."),
    ("trilog_requests_refused_total", "counter", "api",
     "Requests that got no answer and closed their connection: undecodable, an unknown API, "
     "an unsupported version, or a request-level failure."),
    ("trilog_request_bytes_total", "counter", "api", "Bytes of requests, size prefix included."),
    ("trilog_response_bytes_total", "counter", "api", "Bytes of responses, size prefix included."),
    ("trilog_request_queue_bytes", "gauge", "",
     "Request bytes received or queued and not yet answered (queued.max.request.bytes "
     "caps them)."),
    ("trilog_request_queue_limit_bytes", "gauge", "",
     "queued.max.request.bytes (-1: no limit)."),
    ("trilog_fetches_parked", "gauge", "", "Long-poll fetches waiting for data."),
    ("trilog_connections", "gauge", "", "Client connections open."),
    ("trilog_connections_accepted_total", "counter", "", "Client connections accepted and served."),
    ("trilog_connections_refused_total", "counter", "",
     "Connections closed at once for a limit (max.connections, max.connections.per.ip, the "
     "descriptor budget)."),
    ("trilog_connections_idle_closed_total", "counter", "",
     "Connections closed after connections.max.idle.ms without a request."),
    ("trilog_under_replicated_partitions", "gauge", "",
     "Partitions led here whose in-sync replicas are fewer than their replicas."),
    ("trilog_log_flush_seconds", "histogram", "",
     "Time of each fsync of a partition by the flush timer (log.flush.interval.ms, and the "
     "flush that follows a segment roll)."),
    ("trilog_partitions", "gauge", "", "Partition logs held by this broker."),
    ("trilog_log_size_bytes", "gauge", "topic, partition", "Bytes of the partition's segments."),
    ("trilog_log_segments", "gauge", "topic, partition", "Segments of the partition."),
    ("trilog_log_start_offset", "gauge", "topic, partition", "The partition's first offset."),
    ("trilog_log_end_offset", "gauge", "topic, partition",
     "The offset the partition's next record gets."),
    ("trilog_log_cleaner_passes_total", "counter", "",
     "Log cleaner passes done (a pass cleans the dirty part of one compacted log)."),
    ("trilog_log_cleaner_incomplete_passes_total", "counter", "",
     "Passes stopped early because the log changed meanwhile (the rest is cleaned later)."),
    ("trilog_log_cleaner_failed_passes_total", "counter", "",
     "Passes that failed; their log is skipped until a restart."),
    ("trilog_log_cleaner_bytes_read_total", "counter", "",
     "Bytes the cleaner read (the key map's scan included)."),
    ("trilog_log_cleaner_bytes_written_total", "counter", "", "Bytes of cleaned segments written."),
    ("trilog_log_cleaner_records_read_total", "counter", "", "Records the cleaner read."),
    ("trilog_log_cleaner_records_removed_total", "counter", "",
     "Records dropped: superseded by a later record of their key, or expired tombstones."),
    ("trilog_log_cleaner_tombstones_removed_total", "counter", "",
     "Tombstones dropped after delete.retention.ms."),
    ("trilog_log_cleaner_segments_replaced_total", "counter", "",
     "Segments swapped for cleaned ones."),
    ("trilog_log_cleaner_last_pass_seconds", "gauge", "", "How long the last pass took."),
    ("trilog_log_cleaner_last_buffer_utilization", "gauge", "",
     "How full the key map (log.cleaner.dedupe.buffer.size) was in the last pass (0..1)."),
    ("trilog_log_cleaner_in_progress", "gauge", "", "Logs being cleaned now."),
    ("trilog_log_cleaner_uncleanable", "gauge", "",
     "Logs the cleaner skips after a failure (until a restart)."),
    ("trilog_log_cleaner_dirty_ratio", "gauge", "topic, partition",
     "Each compacted log's dirty bytes over its cleanable bytes (cleaned when above "
     "min.cleanable.dirty.ratio)."),
    ("trilog_groups", "gauge", "state",
     "Consumer groups this broker coordinates, by state (groups known only by their committed "
     "offsets count as Empty)."),
    ("trilog_group_members", "gauge", "group", "Members of each group this broker coordinates."),
    ("trilog_consumer_group_committed_offset", "gauge", "group, topic, partition",
     "The group's committed offset of the partition."),
    ("trilog_consumer_group_lag", "gauge", "group, topic, partition",
     "Log end offset less the committed offset, for partitions whose log is on this broker."),
    ("trilog_consumer_group_lag_read_committed", "gauge", "group, topic, partition",
     "Last stable offset less the committed offset: the lag of a read_committed consumer, "
     "which cannot read past a transaction still open."),
    ("trilog_quota_byte_rate", "gauge", "type, user, client_id",
     "Kafka's byte-rate: the bytes per second a client quota measures now (type Produce: "
     "request bytes, Fetch: fetched record bytes), over quota.window.num windows; user or "
     "client_id empty when the quota is shared by all of them."),
    ("trilog_quota_request_time_percent", "gauge", "user, client_id",
     "Kafka's request-time: the share of one request handler's time (percent) a "
     "request_percentage quota measures now."),
    ("trilog_quota_throttle_time_ms_total", "counter", "type, user, client_id",
     "Kafka's throttle-time, summed: milliseconds of throttle given in answers (type "
     "Produce, Fetch or Request: the quota that set it)."),
    ("trilog_quota_throttled_responses_total", "counter", "type, user, client_id",
     "Answers throttled by a client quota."),
)

#: quota key -> the ``type`` label of the quota metrics (Kafka's quota types)
QUOTA_TYPES = {"producer_byte_rate": "Produce", "consumer_byte_rate": "Fetch",
               "request_percentage": "Request"}


# -- plain counters (the hot paths' side) --------------------------------------------------------


class Buckets:
    """A histogram as plain numbers: counts per bucket (not cumulative), their sum and count.

    ``observe`` is a bisection and three additions.  One writer at a time (the trio thread,
    or the one worker thread of a timer); a scrape reading meanwhile may see the sum one
    observation ahead of the count, which Prometheus tolerates.
    """

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound (+Inf)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, float]]:
        """Prometheus's buckets: ``(le, observations <= le)``, ending with ``+Inf``."""
        out: list[tuple[str, float]] = []
        total = 0
        for bound, n in zip(self.bounds, self.counts):
            total += n
            out.append((_float_text(bound), total))
        out.append(("+Inf", total + self.counts[-1]))
        return out


class TopicCounters:
    __slots__ = ("bytes_in", "bytes_out", "records_in")

    def __init__(self) -> None:
        self.bytes_in = 0
        self.records_in = 0
        self.bytes_out = 0


class ApiCounters:
    """One API's counters: requests per version, their times, bytes, and error codes."""

    __slots__ = ("errors", "request_bytes", "response_bytes", "seconds", "versions")

    def __init__(self) -> None:
        self.versions: dict[int, int] = {}  # version -> requests
        self.seconds = Buckets(REQUEST_BUCKETS_S)
        self.request_bytes = 0
        self.response_bytes = 0
        self.errors: dict[int, int] = {}  # error code -> count


class RequestMetrics:
    """What the request handler counts: per API (and version, and error), per topic.

    Runs in the trio thread.  Keys are bounded: API keys and versions are those the broker
    serves (a refused request's unknown key counts as -1), error codes are Kafka's, topics
    exist (a deleted topic's counters go with it, ``forget_topic``).
    """

    def __init__(self) -> None:
        self.apis: dict[int, ApiCounters] = {}  # api key -> its counters
        self.refused: dict[int, int] = {}  # api key (-1: unknown) -> requests
        self.topics: dict[str, TopicCounters] = {}

    def request_done(self, api_key: int, version: int, seconds: float, request_bytes: int,
                     response_bytes: int, errors: Mapping[int, int]) -> None:
        api = self.apis.get(api_key)
        if api is None:
            api = self.apis[api_key] = ApiCounters()
        versions = api.versions
        versions[version] = versions.get(version, 0) + 1
        api.seconds.observe(seconds)
        api.request_bytes += request_bytes
        api.response_bytes += response_bytes
        if errors:
            counts = api.errors
            for code, n in errors.items():
                counts[code] = counts.get(code, 0) + n

    def request_refused(self, api_key: int) -> None:
        if api_key not in _API_NAMES:
            api_key = -1
        self.refused[api_key] = self.refused.get(api_key, 0) + 1

    def _topic(self, topic: str) -> TopicCounters:
        counters = self.topics.get(topic)
        if counters is None:
            counters = self.topics[topic] = TopicCounters()
        return counters

    def produced(self, topic: str, size: int, records: int) -> None:
        counters = self._topic(topic)
        counters.bytes_in += size
        counters.records_in += records

    def fetched(self, topic: str, size: int) -> None:
        self._topic(topic).bytes_out += size

    def forget_topic(self, topic: str) -> None:
        self.topics.pop(topic, None)


def error_counts(response: StructValue) -> dict[int, int]:
    """The non-zero ``error_code`` fields anywhere in a response, counted (Kafka's
    ``AbstractResponse.errorCounts``): a walk over the structs that can hold one, planned
    once per struct class from its schema, so a Fetch answer of many partitions costs one
    attribute read per partition."""
    counts: dict[int, int] = {}
    _count_errors(response, counts)
    return counts


def _count_errors(value: StructValue, counts: dict[int, int]) -> None:
    has_code, structs, arrays = _plan(type(value))
    if has_code:
        code = value.error_code
        if code:
            counts[code] = counts.get(code, 0) + 1
    for name in structs:
        child = getattr(value, name)
        if child is not None:
            _count_errors(child, counts)
    for name in arrays:
        items = getattr(value, name)
        if not items:
            continue
        item_code, item_structs, item_arrays = _plan(type(items[0]))
        if item_structs or item_arrays:
            for item in items:
                _count_errors(item, counts)
        elif item_code:  # leaves (a partition's answer): only their codes to read
            for item in items:
                code = item.error_code
                if code:
                    counts[code] = counts.get(code, 0) + 1


#: struct class -> (has an error_code, struct fields, array-of-struct fields), where an
#: error code may be found below
_PLANS: dict[type, tuple[bool, tuple[str, ...], tuple[str, ...]]] = {}


def _plan(cls: type[StructValue]) -> tuple[bool, tuple[str, ...], tuple[str, ...]]:
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _make_plan(cls._struct)
    return plan


def _make_plan(struct: Struct) -> tuple[bool, tuple[str, ...], tuple[str, ...]]:
    structs: list[str] = []
    arrays: list[str] = []
    for field in struct.fields:
        inner = field.type.item if isinstance(field.type, Array) else field.type
        if isinstance(inner, Struct) and _may_hold_errors(inner):
            (arrays if isinstance(field.type, Array) else structs).append(field.name)
    return "error_code" in struct.field_names, tuple(structs), tuple(arrays)


def _may_hold_errors(struct: Struct) -> bool:
    has_code, structs, arrays = _plan(struct.cls)
    return has_code or bool(structs) or bool(arrays)


def _camel(name: str) -> str:
    return "".join(word.capitalize() for word in name.split("_"))


#: API key -> Kafka's name of the request (``Produce``, ``ApiVersions``, ``InitProducerId``).
_API_NAMES: dict[int, str] = {int(key): _camel(key.name) for key in ApiKey}


def api_name(api_key: int) -> str:
    return _API_NAMES.get(api_key, "unknown")


def error_name(code: int) -> str:
    cls = ERROR_CODES.get(code)
    return cls.name if cls is not None else f"ERROR_{code}"


def _float_text(value: float) -> str:
    return repr(float(value))


# -- what a scrape reads ---------------------------------------------------------------------------


class LogView(Protocol):
    """What the collector reads of a partition's log (``trilog.storage.Log``)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def size_in_bytes(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def log_end_offset(self) -> int: ...
    @property
    def last_stable_offset(self) -> int: ...
    @property
    def segments(self) -> tuple[object, ...]: ...


class MetricsSource(Protocol):
    """The broker state a scrape reads (a running broker: ``_broker.BrokerSource``; tests
    give a fake)."""

    requests: RequestMetrics
    flushes: Buckets

    def network(self) -> Mapping[str, int]:
        """``Network.statistics()`` plus ``queued_request_limit`` and ``parked_fetches``."""
        ...

    def logs(self) -> Iterable[LogView]: ...

    def groups(self) -> Mapping[str, tuple[str, int]]:
        """``{group: (state, members)}`` of the groups coordinated here."""
        ...

    def committed_offsets(self) -> Iterable[tuple[str, str, int, int]]:
        """``(group, topic, partition, committed offset)`` of the groups coordinated here."""
        ...

    def cleaner(self) -> Mapping[str, Any] | None:
        """The log cleaner's ``statistics()``, or None when no cleaner runs."""
        ...

    def under_replicated_partitions(self) -> int: ...

    def quotas(self) -> Iterable[tuple[str, str, str, float, int, int]]:
        """``(quota key, user, client id, rate now, throttle ms given, answers throttled)``
        of every client quota rate kept (``QuotaManager.statistics``)."""
        ...


class BrokerCollector:
    """A prometheus_client custom collector: every metric of :data:`METRICS`, built from
    ``source`` when scraped.  Runs in the trio thread (it reads unlocked broker state)."""

    def __init__(self, source: MetricsSource) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        source = self.source
        yield from self._topics(source.requests)
        yield from self._requests(source.requests)
        yield from self._network(source.network())
        yield GaugeMetricFamily("trilog_under_replicated_partitions", _doc(
            "trilog_under_replicated_partitions"), value=source.under_replicated_partitions())
        yield _histogram("trilog_log_flush_seconds", [((), source.flushes)])
        yield from self._logs(source.logs())
        cleaner = source.cleaner()
        if cleaner is not None:
            yield from _cleaner(cleaner)
        yield from self._groups(source)
        yield from self._quotas(source.quotas())

    def _quotas(self, rates: Iterable[tuple[str, str, str, float, int, int]]
                ) -> Iterator[Metric]:
        labels = ["type", "user", "client_id"]
        byte_rate = GaugeMetricFamily("trilog_quota_byte_rate", _doc("trilog_quota_byte_rate"),
                                      labels=labels)
        request_time = GaugeMetricFamily("trilog_quota_request_time_percent",
                                         _doc("trilog_quota_request_time_percent"),
                                         labels=labels[1:])
        throttle, throttled = (
            CounterMetricFamily(n, _doc(n + "_total"), labels=labels)
            for n in ("trilog_quota_throttle_time_ms", "trilog_quota_throttled_responses"))
        for key, user, client_id, rate, throttle_ms, count in sorted(rates):
            kind = QUOTA_TYPES.get(key, key)
            if kind == "Request":
                request_time.add_metric([user, client_id], rate)
            else:
                byte_rate.add_metric([kind, user, client_id], rate)
            throttle.add_metric([kind, user, client_id], throttle_ms)
            throttled.add_metric([kind, user, client_id], count)
        yield from (byte_rate, request_time, throttle, throttled)

    def _topics(self, requests: RequestMetrics) -> Iterator[Metric]:
        names = ("trilog_topic_bytes_in", "trilog_topic_records_in", "trilog_topic_bytes_out")
        bytes_in, records_in, bytes_out = (
            CounterMetricFamily(n, _doc(n + "_total"), labels=["topic"]) for n in names)
        for topic, c in sorted(requests.topics.items()):
            bytes_in.add_metric([topic], c.bytes_in)
            records_in.add_metric([topic], c.records_in)
            bytes_out.add_metric([topic], c.bytes_out)
        yield from (bytes_in, records_in, bytes_out)

    def _requests(self, requests: RequestMetrics) -> Iterator[Metric]:
        apis = sorted(requests.apis.items())
        total = CounterMetricFamily("trilog_requests", _doc("trilog_requests_total"),
                                    labels=["api", "version"])
        errors = CounterMetricFamily("trilog_request_errors", _doc("trilog_request_errors_total"),
                                     labels=["api", "error"])
        sizes = {name: CounterMetricFamily(name, _doc(name + "_total"), labels=["api"])
                 for name in ("trilog_request_bytes", "trilog_response_bytes")}
        for key, api in apis:
            name = api_name(key)
            for version, n in sorted(api.versions.items()):
                total.add_metric([name, str(version)], n)
            for code, n in sorted(api.errors.items()):
                errors.add_metric([name, error_name(code)], n)
            sizes["trilog_request_bytes"].add_metric([name], api.request_bytes)
            sizes["trilog_response_bytes"].add_metric([name], api.response_bytes)
        yield total
        yield _histogram("trilog_request_seconds",
                         [((api_name(key),), api.seconds) for key, api in apis], labels=["api"])
        yield errors
        refused = CounterMetricFamily("trilog_requests_refused",
                                      _doc("trilog_requests_refused_total"), labels=["api"])
        for key, n in sorted(requests.refused.items()):
            refused.add_metric([api_name(key)], n)
        yield refused
        yield from sizes.values()

    def _network(self, stats: Mapping[str, int]) -> Iterator[Metric]:
        for name, key in (("trilog_request_queue_bytes", "queued_request_bytes"),
                          ("trilog_request_queue_limit_bytes", "queued_request_limit"),
                          ("trilog_fetches_parked", "parked_fetches"),
                          ("trilog_connections", "open_connections")):
            yield GaugeMetricFamily(name, _doc(name), value=stats[key])
        for name, key in (("trilog_connections_accepted", "connections_accepted"),
                          ("trilog_connections_refused", "connections_refused"),
                          ("trilog_connections_idle_closed", "connections_idled_out")):
            yield CounterMetricFamily(name, _doc(name + "_total"), value=stats[key])

    def _logs(self, logs: Iterable[LogView]) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        families = {name: GaugeMetricFamily(name, _doc(name), labels=labels)
                    for name in ("trilog_log_size_bytes", "trilog_log_segments",
                                 "trilog_log_start_offset", "trilog_log_end_offset")}
        count = 0
        for lg in sorted(logs, key=lambda lg: (lg.topic, lg.partition)):
            count += 1
            at = [lg.topic, str(lg.partition)]
            families["trilog_log_size_bytes"].add_metric(at, lg.size_in_bytes)
            families["trilog_log_segments"].add_metric(at, len(lg.segments))
            families["trilog_log_start_offset"].add_metric(at, lg.log_start_offset)
            families["trilog_log_end_offset"].add_metric(at, lg.log_end_offset)
        yield GaugeMetricFamily("trilog_partitions", _doc("trilog_partitions"), value=count)
        yield from families.values()

    def _groups(self, source: MetricsSource) -> Iterator[Metric]:
        groups = source.groups()
        committed = sorted(source.committed_offsets())
        states: dict[str, int] = {}
        for state, _members in groups.values():
            states[state] = states.get(state, 0) + 1
        offsets_only = {g for g, *_ in committed if g not in groups}
        if offsets_only:
            states["Empty"] = states.get("Empty", 0) + len(offsets_only)
        by_state = GaugeMetricFamily("trilog_groups", _doc("trilog_groups"), labels=["state"])
        for state, n in sorted(states.items()):
            by_state.add_metric([state], n)
        yield by_state
        members = GaugeMetricFamily("trilog_group_members", _doc("trilog_group_members"),
                                    labels=["group"])
        for group, (_state, n) in sorted(groups.items()):
            members.add_metric([group], n)
        yield members
        ends = {(lg.topic, lg.partition): (lg.log_end_offset, lg.last_stable_offset)
                for lg in source.logs()}
        labels = ["group", "topic", "partition"]
        offsets = GaugeMetricFamily("trilog_consumer_group_committed_offset",
                                    _doc("trilog_consumer_group_committed_offset"), labels=labels)
        lag = GaugeMetricFamily("trilog_consumer_group_lag", _doc("trilog_consumer_group_lag"),
                                labels=labels)
        stable_lag = GaugeMetricFamily("trilog_consumer_group_lag_read_committed",
                                       _doc("trilog_consumer_group_lag_read_committed"),
                                       labels=labels)
        for group, topic, partition, offset in committed:
            at = [group, topic, str(partition)]
            offsets.add_metric(at, offset)
            marks = ends.get((topic, partition))
            if marks is not None and offset >= 0:
                lag.add_metric(at, max(marks[0] - offset, 0))
                stable_lag.add_metric(at, max(marks[1] - offset, 0))
        yield offsets
        yield lag
        yield stable_lag


_DOCS = {name: meaning for name, _type, _labels, meaning in METRICS}


def _doc(name: str) -> str:
    return _DOCS[name]


def _histogram(name: str, series: Iterable[tuple[tuple[str, ...], Buckets]],
               labels: list[str] | None = None) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, _doc(name), labels=labels or [])
    for values, buckets in series:
        family.add_metric(list(values), buckets.cumulative(), buckets.sum)
    return family


#: The log cleaner's ``statistics()`` numbers that only grow: served as counters.
_CLEANER_COUNTERS = frozenset({"passes", "incomplete_passes", "failed_passes", "bytes_read",
                               "bytes_written", "records_read", "records_removed",
                               "tombstones_removed", "segments_replaced"})


def _cleaner(stats: Mapping[str, Any]) -> Iterator[Metric]:
    """The cleaner's ``statistics()`` as metrics: its growing numbers as counters, other
    numbers as gauges (``*_ms`` in seconds), collections as their size, and
    ``{(topic, partition): number}`` mappings as gauges by topic and partition.  A key this
    list does not know still shows, by the same rules (``_doc`` names it)."""
    for key, value in sorted(stats.items()):
        name = "trilog_log_cleaner_" + "".join(c if c.isalnum() else "_" for c in key)
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            if not math.isfinite(value):
                continue
            if key in _CLEANER_COUNTERS:
                yield CounterMetricFamily(name, _cleaner_doc(name + "_total", key), value=value)
            elif name.endswith("_ms"):
                name = name.removesuffix("_ms") + "_seconds"
                yield GaugeMetricFamily(name, _cleaner_doc(name, key), value=value / 1000)
            else:
                yield GaugeMetricFamily(name, _cleaner_doc(name, key), value=value)
        elif isinstance(value, Mapping):
            family = GaugeMetricFamily(name, _cleaner_doc(name, key),
                                       labels=["topic", "partition"])
            for tp, number in sorted(value.items()):
                if isinstance(tp, tuple) and len(tp) == 2 and isinstance(number, (int, float)):
                    family.add_metric([str(tp[0]), str(tp[1])], number)
            yield family
        elif isinstance(value, (list, tuple, set, frozenset)):
            yield GaugeMetricFamily(name, _cleaner_doc(name, key), value=len(value))


def _cleaner_doc(name: str, key: str) -> str:
    return _DOCS.get(name, f"The log cleaner's {key} (its statistics()).")


def registry_for(source: MetricsSource) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(source))
    return registry


# -- the HTTP responder ------------------------------------------------------------------------

#: The longest request head (request line and headers) read; a longer one gets 431.
MAX_REQUEST_HEAD = 8192
#: Scrapes answered at once; more connections are closed as soon as they are accepted.
MAX_CONNECTIONS = 8
#: How long a client may take to send its request head.
REQUEST_TIMEOUT_S = 10.0

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            408: "Request Timeout", 431: "Request Header Fields Too Large",
            500: "Internal Server Error"}


class _Responder:
    """Answers scrapes on accepted connections (see the module docstring)."""

    def __init__(self, render: Callable[[], bytes]) -> None:
        self._render = render
        self._open = 0
        self.scrapes = 0

    async def __call__(self, stream: trio.SocketStream) -> None:
        if self._open >= MAX_CONNECTIONS:
            await trio.aclose_forcefully(stream)
            return
        self._open += 1
        try:
            async with stream:
                await self._answer(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            pass  # the scraper went away
        except Exception:  # a bug here must not take the broker down
            log.exception("answering a metrics request failed")
        finally:
            self._open -= 1

    async def _answer(self, stream: trio.SocketStream) -> None:
        head = None
        status = 408
        with trio.move_on_after(REQUEST_TIMEOUT_S):
            head, status = await _read_head(stream)
        if head is None:
            await _respond(stream, status, b"")
            return
        request_line = head.split(b"\r\n", 1)[0]
        parts = request_line.split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            await _respond(stream, 400, b"malformed request line\n")
            return
        method, target = parts[0], parts[1].split(b"?", 1)[0]
        if target != b"/metrics":
            await _respond(stream, 404, b"not found: metrics are at /metrics\n")
            return
        if method not in (b"GET", b"HEAD"):
            await _respond(stream, 405, b"only GET\n", extra=b"Allow: GET, HEAD\r\n")
            return
        try:
            body = self._render()
        except Exception:
            log.exception("collecting the metrics failed")
            await _respond(stream, 500, b"collecting the metrics failed\n")
            return
        self.scrapes += 1
        await _respond(stream, 200, body, content_type=CONTENT_TYPE_PLAIN_0_0_4.encode(),
                       head_only=method == b"HEAD")


async def _read_head(stream: trio.SocketStream) -> tuple[bytes | None, int]:
    """The request head up to its blank line, or ``(None, status)`` for a bad one."""
    data = bytearray()
    while True:
        end = data.find(b"\r\n\r\n")
        if end >= 0:
            return bytes(data[:end]), 200
        if len(data) > MAX_REQUEST_HEAD:
            return None, 431
        chunk = await stream.receive_some(4096)
        if not chunk:
            return None, 400
        data += chunk


async def _respond(stream: trio.SocketStream, status: int, body: bytes, *,
                   content_type: bytes = b"text/plain; charset=utf-8", extra: bytes = b"",
                   head_only: bool = False) -> None:
    head = (b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n%s\r\n"
            % (status, _REASONS[status].encode(), content_type, len(body), extra))
    await stream.send_all(head if head_only else head + body)


async def serve_metrics(source: MetricsSource, host: str, port: int, *,
                        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``GET /metrics`` on ``host:port`` until cancelled; ``task_status.started(port)``
    with the bound port once listening."""
    try:
        listeners = await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        raise TrilogError(f"cannot serve metrics on {host}:{port} (metrics.host, "
                          f"metrics.port): {exc.strerror or exc}") from None
    registry = registry_for(source)
    responder = _Responder(partial(generate_latest, registry))
    bound = listeners[0].socket.getsockname()[1]
    log.info("metrics at http://%s:%d/metrics", host, bound)
    async with trio.open_nursery() as nursery:
        task_status.started(bound)
        await trio.serve_listeners(responder, listeners, handler_nursery=nursery)
