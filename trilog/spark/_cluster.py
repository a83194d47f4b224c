"""Driver-side questions to the cluster: which partitions, which offsets.

Each public function opens its own ``trilog.sync.SimpleConsumer`` (or takes one the caller
opened for a single planning step) and closes it before returning: Spark pickles readers and
may run planning in forked workers, so no connection outlives the call that made it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import trilog
import trilog.sync as ts
from trilog.errors import TrilogError, UnknownTopicOrPartitionError
from trilog.spark._options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    OptionError,
    ReadOptions,
    Subscription,
)
from trilog.spark._planning import Positions


class DataLossError(TrilogError):
    """Records a query needed are gone (retention deleted them, or a partition vanished) and
    ``failOnDataLoss`` is true."""


@contextmanager
def open_consumer(options: ReadOptions) -> Iterator[ts.SimpleConsumer]:
    """A consumer with the query's connection and kafka.* client settings."""
    with ts.SimpleConsumer(**options.connection.kwargs(), **options.consumer) as c:
        yield c


def list_topics(consumer: ts.SimpleConsumer) -> list[str]:
    """Every topic of the cluster (for ``subscribePattern``)."""
    return consumer.list_topics()


def topic_partitions(consumer: ts.SimpleConsumer, options: ReadOptions, *,
                     missing_ok: bool) -> list[tuple[str, int]]:
    """The partitions the subscription covers now, sorted.

    A named topic that does not exist is an error unless ``missing_ok`` (a streaming query
    waits for it to appear).  An assigned partition the topic lacks is always an error."""
    sub: Subscription = options.subscription
    if sub.pattern is not None:
        topics = [t for t in list_topics(consumer) if sub.matches(t)]
    elif sub.assigned:
        topics = [t for t, _ in sub.assigned]
    else:
        topics = list(sub.topics)
    out: list[tuple[str, int]] = []
    for topic in topics:
        try:
            parts = consumer.partitions_for(topic)
        except UnknownTopicOrPartitionError:
            if missing_ok or sub.pattern is not None:
                continue  # a pattern's topic deleted since listing: nothing to read
            raise OptionError(f"topic {topic!r} ({sub.kind}) does not exist on "
                              f"{options.connection.describe()}") from None
        if sub.assigned:
            wanted = dict(sub.assigned)[topic]
            absent = sorted(set(wanted) - set(parts))
            if absent:
                raise OptionError(f"option assign: topic {topic!r} has no partition(s) "
                                  f"{absent} (it has {list(parts)})")
            parts = wanted
        out.extend((topic, p) for p in parts)
    return sorted(out)


def _one(consumer: ts.SimpleConsumer, topic: str, partition: int, time: int) -> int | None:
    got = consumer.offsets_before(topic, partition, time=time, max_offsets=1)
    return got[0] if got else None


def earliest(consumer: ts.SimpleConsumer, tps) -> Positions:
    return {tp: _one(consumer, *tp, trilog.EARLIEST) for tp in tps}


def latest(consumer: ts.SimpleConsumer, tps) -> Positions:
    return {tp: _one(consumer, *tp, trilog.LATEST) for tp in tps}


def _by_timestamp(consumer, tps, ts_ms: int, strategy: str, option: str) -> Positions:
    out: Positions = {}
    for tp in tps:
        offset = _one(consumer, *tp, ts_ms)
        if offset is None:
            if strategy == "error":
                raise OptionError(f"option {option}={ts_ms}: {tp[0]}-{tp[1]} has no record at or "
                                  "after that time (startingOffsetsByTimestampStrategy=error)")
            offset = _one(consumer, *tp, trilog.LATEST)
        out[tp] = offset
    return out


def resolve(consumer: ts.SimpleConsumer, tps: list[tuple[str, int]], spec: OffsetSpec,
            option: str, timestamp: int | None = None, strategy: str = "latest") -> Positions:
    """Concrete offsets for ``tps`` from an ``OffsetSpec`` (or a timestamp, which wins).

    JSON offsets must name exactly the partitions being read (as Spark's Kafka source asks),
    so a typo in a topic or partition is an error rather than a silent default."""
    if timestamp is not None:
        return _by_timestamp(consumer, tps, timestamp, strategy, option.replace(
            "Offsets", "Timestamp"))
    if spec.kind == "earliest":
        return earliest(consumer, tps)
    if spec.kind == "latest":
        return latest(consumer, tps)
    given = spec.as_dict()
    unknown = sorted(set(given) - set(tps))
    if unknown:
        raise OptionError(f"option {option} names {_names(unknown)}, which the query does "
                          f"not read (it reads {_names(tps)})")
    missing = sorted(set(tps) - set(given))
    if missing:
        raise OptionError(f"option {option} must give an offset for every partition read; "
                          f"missing {_names(missing)} (use -2 for earliest, -1 for latest)")
    out: Positions = {}
    for tp in tps:
        offset = given[tp]
        if offset == EARLIEST:
            offset = _one(consumer, *tp, trilog.EARLIEST)
        elif offset == LATEST:
            offset = _one(consumer, *tp, trilog.LATEST)
        out[tp] = offset
    return out


def _names(tps) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps)
