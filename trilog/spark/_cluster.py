"""Driver-side questions to the cluster: which partitions, which offsets.

Each public function opens its own ``trilog.sync.SimpleConsumer`` (or takes one the caller
opened for a single planning step) and closes it before returning: Spark pickles readers and
may run planning in forked workers, so no connection outlives the call that made it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
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


def _one(consumer: ts.SimpleConsumer, tp: tuple[str, int], time: int) -> int | None:
    got = consumer.offsets_before(tp[0], tp[1], time=time, max_offsets=1)
    return got[0] if got else None


def _edge(consumer: ts.SimpleConsumer, tp: tuple[str, int], time: int) -> int:
    """The log start (``trilog.EARLIEST``) or end (``trilog.LATEST``): always known."""
    offset = _one(consumer, tp, time)
    if offset is None:
        raise OptionError(f"the broker gave no offset of {tp[0]}-{tp[1]} for time {time}")
    return offset


def earliest(consumer: ts.SimpleConsumer, tps: Iterable[tuple[str, int]]) -> Positions:
    return {tp: _edge(consumer, tp, trilog.EARLIEST) for tp in tps}


def latest(consumer: ts.SimpleConsumer, tps: Iterable[tuple[str, int]]) -> Positions:
    return {tp: _edge(consumer, tp, trilog.LATEST) for tp in tps}


def _by_timestamp(consumer: ts.SimpleConsumer, stamps: Mapping[tuple[str, int], int],
                  option: str,
                  no_match: str) -> Positions:
    """The offset of each partition's first record stamped at or after its timestamp
    (ListOffsets, as Kafka's ``offsetsForTimes``); ``no_match`` says what a partition with
    no record that recent gets: its end ("latest") or an error."""
    out: Positions = {}
    for tp, ts_ms in stamps.items():
        offset = _one(consumer, tp, ts_ms)
        if offset is None:
            if no_match == "error":
                raise OptionError(
                    f"option {option}: {tp[0]}-{tp[1]} has no record stamped at or after "
                    f"{ts_ms} (startingOffsetsByTimestampStrategy=error, the default; set it "
                    "to latest to start such partitions at their end)")
            offset = _edge(consumer, tp, trilog.LATEST)
        out[tp] = offset
    return out


def resolve(consumer: ts.SimpleConsumer, tps: list[tuple[str, int]], spec: OffsetSpec, *,
            no_match: str = "latest") -> Positions:
    """Concrete offsets for ``tps`` from an ``OffsetSpec``; ``no_match`` is for timestamps
    no record is that recent (see ``_by_timestamp``).

    JSON offsets and timestamps must name exactly the partitions being read (as Spark's Kafka
    source asks), so a typo in a topic or partition is an error rather than a silent default."""
    if spec.kind == "earliest":
        return earliest(consumer, tps)
    if spec.kind == "latest":
        return latest(consumer, tps)
    if spec.kind == "timestamp":
        assert spec.timestamp is not None
        return _by_timestamp(consumer, dict.fromkeys(tps, spec.timestamp), spec.option,
                             no_match)
    given = spec.as_dict()
    what = "a timestamp" if spec.kind == "timestamps" else "an offset"
    unknown = sorted(set(given) - set(tps))
    if unknown:
        raise OptionError(f"option {spec.option} names {_names(unknown)}, which the query "
                          f"does not read (it reads {_names(tps)})")
    missing = sorted(set(tps) - set(given))
    if missing:
        raise OptionError(f"option {spec.option} must give {what} for every partition read; "
                          f"missing {_names(missing)}"
                          + (" (use -2 for earliest, -1 for latest)" if spec.kind == "json"
                             else ""))
    if spec.kind == "timestamps":
        return _by_timestamp(consumer, {tp: given[tp] for tp in tps}, spec.option, no_match)
    out: Positions = {}
    for tp in tps:
        offset = given[tp]
        if offset == EARLIEST:
            offset = _edge(consumer, tp, trilog.EARLIEST)
        elif offset == LATEST:
            offset = _edge(consumer, tp, trilog.LATEST)
        out[tp] = offset
    return out


def _names(tps) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps)
