"""What the console remembers: end offsets, committed offsets, lag and sizes sampled every
few seconds, from which rates and charts come (Kafka's brokers keep no history a client
can read, so the console keeps its own, for ``history_s``).

``History`` is pure data (tested without a server): ``record(sample)`` adds one
``Sample``; rates are offset deltas over time between consecutive samples (a topic
recreated, its offsets going back, counts as 0, not a negative rate).  ``run_sampler``
takes the samples through the public admin clients, in the console's nursery.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import trio

from trilog._concurrency import unwrap_exception_group
from trilog._topic import PartitionKey
from trilog.client import LATEST, Admin, GroupAdmin, GroupDescription
from trilog.console._reopen import ReopeningAdmin
from trilog.errors import ApiError, GroupIdNotFoundError, NetworkError, TrilogError

log = logging.getLogger("trilog.console")


@dataclass(frozen=True)
class Sample:
    """One look at the cluster at ``time_s`` (seconds since the epoch)."""

    time_s: float
    #: every partition's log end offset
    end_offsets: dict[PartitionKey, int] = field(default_factory=dict)
    #: each group's committed offsets
    committed: dict[str, dict[PartitionKey, int]] = field(default_factory=dict)
    #: each group's lag per partition (log end - committed)
    lag: dict[str, dict[PartitionKey, int]] = field(default_factory=dict)
    #: bytes of each partition's log (one replica: the largest), when the brokers tell
    sizes: dict[PartitionKey, int] | None = None
    #: the internal topics (``__consumer_offsets``, ...): left out of the totals, where
    #: their writes (offset commits) would pass for production
    internal: frozenset[str] = frozenset()


class Series:
    """``(time_s, value)`` points for the last ``keep_s`` seconds."""

    def __init__(self, keep_s: float) -> None:
        self.keep_s = keep_s
        self.points: deque[tuple[float, float]] = deque()

    def add(self, t: float, value: float) -> None:
        self.points.append((t, value))
        while self.points and self.points[0][0] < t - self.keep_s:
            self.points.popleft()

    def rates(self) -> list[tuple[float, float]]:
        """The rate between each point and the one before it, per second (>= 0)."""
        pts = list(self.points)
        return [(t1, max(v1 - v0, 0) / (t1 - t0))
                for (t0, v0), (t1, v1) in zip(pts, pts[1:]) if t1 > t0]

    def rate(self) -> float | None:
        """The latest rate (None: fewer than two points)."""
        rates = self.rates()
        return rates[-1][1] if rates else None

    def last(self) -> float | None:
        return self.points[-1][1] if self.points else None


class History:
    """The samples' sums by topic and by group; see the module docstring."""

    def __init__(self, keep_s: float = 900.0) -> None:
        self.keep_s = keep_s
        self.topic_end: dict[str, Series] = {}
        self.topic_consumed: dict[str, Series] = {}  # committed offsets, all groups
        self.group_lag: dict[str, Series] = {}
        self.group_topic_lag: dict[tuple[str, str], Series] = {}
        self.sizes: dict[PartitionKey, int] = {}
        self.internal: frozenset[str] = frozenset()
        self.last_time_s: float | None = None
        self.samples = 0
        self.last_error: str | None = None

    def _series(self, table: dict[Any, Series], key: Any) -> Series:
        series = table.get(key)
        if series is None:
            series = table[key] = Series(self.keep_s)
        return series

    def record(self, sample: Sample) -> None:
        t = sample.time_s
        for topic, total in _by_topic(sample.end_offsets).items():
            self._series(self.topic_end, topic).add(t, total)
        consumed: dict[str, int] = {}
        for offsets in sample.committed.values():
            for topic, total in _by_topic(offsets).items():
                consumed[topic] = consumed.get(topic, 0) + total
        for topic, total in consumed.items():
            self._series(self.topic_consumed, topic).add(t, total)
        for group, lags in sample.lag.items():
            self._series(self.group_lag, group).add(t, sum(lags.values()))
            for topic, total in _by_topic(lags).items():
                self._series(self.group_topic_lag, (group, topic)).add(t, total)
        if sample.sizes is not None:
            self.sizes = dict(sample.sizes)
        self.internal = sample.internal
        self.last_time_s = t
        self.samples += 1
        self.last_error = None

    def produce_rate(self, topic: str | None = None) -> float | None:
        """Records/s written to ``topic`` (None: to every topic not internal) at the last
        sample."""
        return _rate_sum(self.topic_end if topic else self._external(self.topic_end), topic)

    def consume_rate(self, topic: str | None = None) -> float | None:
        """Records/s the groups committed past on ``topic`` (None: every topic not
        internal)."""
        return _rate_sum(self.topic_consumed if topic else
                         self._external(self.topic_consumed), topic)

    def _external(self, table: dict[str, Series]) -> dict[str, Series]:
        return {t: s for t, s in table.items() if t not in self.internal}

    def topic_size(self, topic: str) -> int | None:
        sizes = [s for (t, _), s in self.sizes.items() if t == topic]
        return sum(sizes) if sizes else None

    def throughput_chart(self, topics: Iterable[str] | None = None) -> dict[str, Any]:
        """Produce rate per topic (all sampled topics when None) over time."""
        names = sorted(self._external(self.topic_end)) if topics is None else list(topics)
        return _chart("records/s", [(t, self.topic_end[t].rates())
                                    for t in names if t in self.topic_end])

    def topic_chart(self, topic: str) -> dict[str, Any]:
        """Records/s produced to and consumed (committed) from ``topic`` over time."""
        series = []
        if topic in self.topic_end:
            series.append(("produced", self.topic_end[topic].rates()))
        if topic in self.topic_consumed:
            series.append(("consumed", self.topic_consumed[topic].rates()))
        return _chart("records/s", series)

    def cluster_chart(self) -> dict[str, Any]:
        """Records/s produced and consumed in all, over time."""
        produced = self._external(self.topic_end).values()
        consumed = self._external(self.topic_consumed).values()
        return _chart("records/s", [("produced", _summed_rates(produced)),
                                    ("consumed", _summed_rates(consumed))])

    def lag_chart(self, group: str) -> dict[str, Any]:
        """``group``'s total lag and its lag per topic, over time."""
        series = []
        if group in self.group_lag:
            series.append(("total", list(self.group_lag[group].points)))
        for (g, topic), s in sorted(self.group_topic_lag.items()):
            if g == group:
                series.append((topic, list(s.points)))
        if len(series) == 2:  # one topic: its line is the total's
            series = series[:1]
        return _chart("records", series)


def _by_topic(offsets: dict[PartitionKey, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for (topic, _), value in offsets.items():
        if value >= 0:
            out[topic] = out.get(topic, 0) + value
    return out


def _rate_sum(table: dict[str, Series], topic: str | None) -> float | None:
    if topic is not None:
        series = table.get(topic)
        return series.rate() if series is not None else None
    rates = [r for r in (s.rate() for s in table.values()) if r is not None]
    return sum(rates) if rates else None


def _summed_rates(all_series: Iterable[Series]) -> list[tuple[float, float]]:
    """The rates of many series added up at each sample time."""
    total: dict[float, float] = {}
    for s in all_series:
        for t, rate in s.rates():
            total[t] = total.get(t, 0.0) + rate
    return sorted(total.items())


def _chart(unit: str, series: list[tuple[str, list[tuple[float, float]]]]) -> dict[str, Any]:
    return {"unit": unit, "series": [
        {"name": name, "points": [[round(t * 1000), round(v, 3)] for t, v in points]}
        for name, points in series]}


#: how many groups are described at once
_DESCRIBE_AT_ONCE = 8


async def describe_groups(groups: GroupAdmin) -> dict[str, GroupDescription | ApiError]:
    """Every group's description (a few at a time), by group id, or the broker's error for
    it (one group's coordinator loading, say, does not hide the others); a group deleted
    since it was listed is left out.  A ``NetworkError`` is raised: the cluster is away."""
    names = await groups.list_groups()
    found: dict[str, GroupDescription | ApiError] = {}
    limiter = trio.CapacityLimiter(_DESCRIBE_AT_ONCE)

    async def describe(group: str) -> None:
        async with limiter:
            try:
                found[group] = await groups.describe_group(group)
            except GroupIdNotFoundError:
                pass
            except NetworkError:
                raise
            except ApiError as exc:
                found[group] = exc

    with unwrap_exception_group():
        async with trio.open_nursery() as nursery:
            for name in names:
                nursery.start_soon(describe, name)
    return {name: found[name] for name in names if name in found}


async def take_sample(admin: Admin, groups: GroupAdmin) -> Sample:
    """One ``Sample`` through the admin clients: every partition's end offset (one
    ListOffsets per leader), each group's committed offsets and lag, the log dirs' sizes
    (left out when the brokers do not answer DescribeLogDirs)."""
    now = time.time()
    topics = await admin.describe_topics()
    tps = [(t.name, p.partition) for t in topics if t.error is None for p in t.partitions]
    ends = await groups.list_offsets(tps, LATEST)
    committed: dict[str, dict[PartitionKey, int]] = {}
    lag: dict[str, dict[PartitionKey, int]] = {}
    for group, d in (await describe_groups(groups)).items():
        if isinstance(d, ApiError):
            continue  # no sample of this group this time
        committed[group] = {(p.topic, p.partition): p.current_offset
                            for p in d.partitions if p.current_offset is not None}
        lag[group] = {(p.topic, p.partition): p.lag for p in d.partitions if p.lag is not None}
    sizes: dict[PartitionKey, int] | None = None
    try:
        sizes = {}
        for log_dir in await admin.describe_log_dirs():
            for part in log_dir.partitions:
                key = (part.topic, part.partition)
                sizes[key] = max(sizes.get(key, 0), part.size)
    except TrilogError as exc:
        log.debug("no log dir sizes: %s", exc)
        sizes = None
    internal = frozenset(t.name for t in topics if t.internal)
    return Sample(now, ends, committed, lag, sizes, internal)


async def run_sampler(admins: ReopeningAdmin, groups: GroupAdmin, history: History,
                      interval_s: float, *,
                      task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Sample every ``interval_s`` into ``history`` until cancelled; a failed sample is
    logged and kept in ``history.last_error`` (the overview shows it), never fatal."""
    task_status.started()
    while True:
        try:
            history.record(await take_sample(await admins.get(), groups))
        except TrilogError as exc:
            if isinstance(exc, NetworkError):
                admins.invalidate()
            error = str(exc) or type(exc).__name__
            # once per outage, not at every interval
            (log.debug if error == history.last_error else log.warning)(
                "the console's sample failed: %s", error)
            history.last_error = error
        await trio.sleep(interval_s)
