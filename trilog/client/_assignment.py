"""Who consumes which partition: the seed's rebalance arithmetic and topic filters (pure).

Seed 000/001, "Consumer rebalancing algorithm": for each topic, sort its partitions and the
consumer threads that subscribe to it, then give each thread a contiguous range; the first
``P mod C`` threads get one partition more (Kafka's range assignor).  Every consumer of a
group computes this from the same ZooKeeper data and so reaches the same answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping


def assign_ranges(partitions: Iterable[int], threads: Iterable[str]) -> dict[str, list[int]]:
    """Range-assign one topic's ``partitions`` to consumer ``threads``.

    Depends only on the sorted inputs; every partition goes to exactly one thread; the
    sizes differ by at most one; threads beyond the partition count get nothing.
    """
    parts = sorted(set(partitions))
    ids = sorted(set(threads))
    out: dict[str, list[int]] = {t: [] for t in ids}
    if not ids:
        return out
    per, extra = divmod(len(parts), len(ids))
    start = 0
    for i, thread in enumerate(ids):
        count = per + (1 if i < extra else 0)
        out[thread] = parts[start:start + count]
        start += count
    return out


def thread_ids(consumer_id: str, streams: int) -> list[str]:
    """The seed's consumer thread ids: ``<consumer id>-<n>``."""
    return [f"{consumer_id}-{n}" for n in range(streams)]


def assign_group(subscriptions: Mapping[str, Mapping[str, int]],
                 partitions: Mapping[str, Iterable[int]]) -> dict[str, dict[str, list[int]]]:
    """The whole group's assignment: ``{thread id: {topic: [partitions]}}``.

    ``subscriptions`` maps each consumer id to ``{topic: number of streams}`` (for filters,
    the topics it matched); ``partitions`` maps each topic to its partition numbers.
    """
    result: dict[str, dict[str, list[int]]] = {}
    topics = sorted({t for sub in subscriptions.values() for t in sub})
    for topic in topics:
        threads = [tid for cid, sub in subscriptions.items() if topic in sub
                   for tid in thread_ids(cid, sub[topic])]
        for thread, parts in assign_ranges(partitions.get(topic, ()), threads).items():
            if parts:
                result.setdefault(thread, {})[topic] = parts
    return result


@dataclass(frozen=True)
class TopicFilter:
    """A regular expression over topic names (seed: ``createMessageStreamsByFilter``)."""

    pattern: str

    def __post_init__(self) -> None:
        try:
            re.compile(self.pattern)
        except re.error as exc:
            raise ValueError(f"bad topic filter {self.pattern!r}: {exc}") from None

    #: the name written in the consumer's registration ("pattern" field)
    kind = "static"

    def matches(self, topic: str) -> bool:
        raise NotImplementedError

    def select(self, topics: Iterable[str]) -> list[str]:
        # Internal topics are never matched by a filter, as in Kafka.
        return sorted(t for t in topics if not t.startswith("__") and self.matches(t))


@dataclass(frozen=True)
class Whitelist(TopicFilter):
    """Topics whose whole name matches ``pattern``."""

    kind = "white_list"

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.pattern, topic) is not None


@dataclass(frozen=True)
class Blacklist(TopicFilter):
    """Every topic except those whose whole name matches ``pattern``."""

    kind = "black_list"

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.pattern, topic) is None
