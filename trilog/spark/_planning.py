"""Pure planning decisions of the data source: offset ranges, splitting, rate limits.

No pyspark and no network here (style rule 8): data in, data out, tested without a server.
A *position map* is ``{(topic, partition): offset}``; the streaming engine keeps positions as
``{topic: {"partition": offset}}`` JSON, built here in one canonical (sorted) order so the
engine's string comparison of two equal offsets always says "equal".
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

Positions = dict[tuple[str, int], int]


@dataclass(frozen=True, order=True)
class OffsetRange:
    """The records ``[start, end)`` of one partition: what one Spark task reads, exactly."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(self.end - self.start, 0)


def to_offset_json(positions: Mapping[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    """``{(t, p): o}`` -> ``{t: {"p": o}}``, topics and partitions in sorted order."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(positions):
        out.setdefault(topic, {})[str(partition)] = int(positions[(topic, partition)])
    return out


def from_offset_json(offsets: Mapping[str, Mapping[str, int]] | None) -> Positions:
    if not offsets:
        return {}
    return {(topic, int(p)): int(o) for topic, parts in offsets.items() for p, o in parts.items()}


def plan_ranges(ranges: Iterable[OffsetRange], min_partitions: int | None,
                max_records: int | None) -> list[OffsetRange]:
    """What the tasks read: ranges of at most ``max_records`` records (the option
    ``maxRecordsPerPartition``), split further while there are fewer than ``min_partitions``
    (``minPartitions``).  The records read are the same either way; only how many tasks
    read them changes."""
    return split_ranges(cap_ranges(ranges, max_records), min_partitions)


def cap_ranges(ranges: Iterable[OffsetRange], max_records: int | None) -> list[OffsetRange]:
    """Split each range of more than ``max_records`` records into the fewest near-equal
    pieces of at most ``max_records``; drop empty ranges.  Sorted, like ``split_ranges``."""
    out: list[OffsetRange] = []
    for r in ranges:
        if r.size <= 0:
            continue
        n = math.ceil(r.size / max_records) if max_records else 1
        bounds = [r.start + r.size * k // n for k in range(n + 1)]
        out.extend(OffsetRange(r.topic, r.partition, a, b) for a, b in itertools.pairwise(bounds))
    return sorted(out)


def split_ranges(ranges: Iterable[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Drop empty ranges; if fewer than ``min_partitions`` remain, split them in proportion
    to their sizes (largest remainders first) until there are ``min_partitions`` (or every
    range is down to single records).  The result is sorted, so planning is deterministic."""
    ranges = sorted(r for r in ranges if r.size > 0)
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    shares = [r.size * min_partitions / total for r in ranges]
    parts = [max(1, min(r.size, math.floor(s))) for r, s in zip(ranges, shares)]
    while sum(parts) < min_partitions:
        candidates = [i for i, r in enumerate(ranges) if parts[i] < r.size]
        if not candidates:
            break
        best = max(candidates, key=lambda i: (shares[i] - parts[i], ranges[i].size, -i))
        parts[best] += 1
    out: list[OffsetRange] = []
    for r, n in zip(ranges, parts):
        bounds = [r.start + r.size * k // n for k in range(n + 1)]
        out.extend(OffsetRange(r.topic, r.partition, a, b)
                   for a, b in itertools.pairwise(bounds) if b > a)
    return sorted(out)


def rate_limit(starts: Mapping[tuple[str, int], int], ends: Positions,
               max_offsets: int) -> Positions:
    """Cap ``ends`` so that at most ``max_offsets`` records are read in total, shared among
    partitions in proportion to how far each is behind (as Spark's Kafka source does).
    Rounding leftovers go to the partitions with the largest remainders, so the batch reads
    exactly ``min(max_offsets, total lag)`` records."""
    lags = {tp: max(end - starts.get(tp, end), 0) for tp, end in ends.items()}
    total = sum(lags.values())
    if total <= max_offsets:
        return dict(ends)
    shares = {tp: lag * max_offsets / total for tp, lag in lags.items()}
    take = {tp: math.floor(s) for tp, s in shares.items()}
    left = max_offsets - sum(take.values())
    for tp in sorted(lags, key=lambda tp: (-(shares[tp] - take[tp]), tp))[:left]:
        take[tp] += 1
    return {tp: (starts[tp] + take[tp] if tp in starts else end) for tp, end in ends.items()}


def hold_batch(available: int, min_offsets: int, waited_ms: float | None,
               max_delay_ms: int) -> bool:
    """Whether a micro-batch waits for more records (``minOffsetsPerTrigger``): while fewer
    than ``min_offsets`` are available, until ``max_delay_ms`` (``maxTriggerDelay``) has
    passed since the last batch was let through (``waited_ms``).  As in Spark's Kafka source,
    the first batch (``waited_ms is None``) never waits."""
    if waited_ms is None or waited_ms >= max_delay_ms:
        return False
    return available < min_offsets
