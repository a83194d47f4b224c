"""Pure decisions of the log cleaner (Kafka's ``LogCleanerManager`` and ``Cleaner``): what
part of a log is dirty, which log is the filthiest, how segments are grouped, and from when
tombstones may go.

They take plain numbers and return plain numbers, so they are tested without files.

A compacted log is, oldest first: the **clean** section (already compacted: at most one
record per key), from the log start to the *first dirty offset* (the cleaner checkpoint);
the **dirty** section, cleanable up to the *first uncleanable offset* (the active segment's
base, an earlier segment still within ``min_compaction_lag_ms``, or the segment holding the
last stable offset: nothing of an undecided transaction, nor at or above the high
watermark, is cleaned); and the uncleanable rest.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from typing import NamedTuple, TypeVar

#: Indexes of a segment's offsets are relative 32-bit ints.
_MAX_RELATIVE_OFFSET = 2**31 - 1

K = TypeVar("K")


class SegmentFacts(NamedTuple):
    """What the decisions need of a segment."""

    base_offset: int
    size: int
    largest_timestamp: int = -1  # the max record timestamp, or the file's mtime when none
    index_bytes: int = 0  # the offset index's size on disk (entries x 8)
    time_index_bytes: int = 0  # the time index's (entries x 12)


class CleanableRange(NamedTuple):
    """Where the dirty section of a log lies, and how big each section is."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int  # the segments below the first dirty offset (Kafka counts them whole)
    cleanable_bytes: int  # the segments from the one holding the first dirty offset on

    @property
    def dirty_ratio(self) -> float:
        """``cleanable / (clean + cleanable)`` (Kafka's ``cleanableRatio``); 0 when empty."""
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


def first_dirty_offset(checkpoint: int | None, log_start_offset: int, log_end_offset: int) -> int:
    """Where cleaning resumes: the checkpointed offset, or the log start offset when there
    is none or it lies outside the log (retention or DeleteRecords passed it; truncation
    left it beyond the end: then the whole log is dirty again, as in Kafka)."""
    if checkpoint is None or checkpoint < log_start_offset or checkpoint > log_end_offset:
        return log_start_offset
    return checkpoint


def cleanable_range(
    segments: Sequence[SegmentFacts],
    first_dirty: int,
    now_ms: int,
    min_compaction_lag_ms: int,
    stable_offset: int | None = None,
) -> CleanableRange:
    """The sections of a log of ``segments`` (oldest first, the last one active) whose
    dirty part starts at ``first_dirty`` (Kafka's ``cleanableOffsets`` and
    ``calculateCleanableBytes``).

    The first uncleanable offset is the active segment's base, or the base of the first
    inactive segment at or after the one holding ``first_dirty`` whose largest timestamp is
    within ``min_compaction_lag_ms`` of ``now_ms``, or the base of the segment holding
    ``stable_offset`` (the log's last stable offset: at most its high watermark), whichever
    comes first.  It is never below ``first_dirty``.
    """
    uncleanable_index = len(segments) - 1
    if stable_offset is not None:
        holding = bisect_right([s.base_offset for s in segments], stable_offset) - 1
        uncleanable_index = min(uncleanable_index, max(holding, 0))
    if min_compaction_lag_ms > 0:
        for i, seg in enumerate(segments[:uncleanable_index]):
            nxt = segments[i + 1].base_offset
            if nxt > first_dirty and seg.largest_timestamp > now_ms - min_compaction_lag_ms:
                uncleanable_index = i
                break
    first_uncleanable = max(first_dirty, segments[uncleanable_index].base_offset)
    clean = sum(s.size for s in segments if s.base_offset < first_dirty)
    cleanable = 0
    for i, seg in enumerate(segments[:uncleanable_index]):
        end = segments[i + 1].base_offset
        if end > first_dirty:  # holds offsets at or above first_dirty
            cleanable += seg.size
    return CleanableRange(first_dirty, first_uncleanable, clean, cleanable)


def choose_filthiest(candidates: Iterable[tuple[K, CleanableRange, float]]) -> K | None:
    """Of ``(key, range, min_cleanable_dirty_ratio)`` the key of the log with the largest
    dirty ratio above its own minimum and something to clean (Kafka's
    ``grabFilthiestCompactedLog``); None when no log qualifies."""
    best: tuple[float, K] | None = None
    for key, rng, min_ratio in candidates:
        ratio = rng.dirty_ratio
        if rng.cleanable_bytes <= 0 or ratio <= min_ratio:
            continue
        if best is None or ratio > best[0]:
            best = (ratio, key)
    return None if best is None else best[1]


def group_segments_by_size(
    segments: Sequence[SegmentFacts],
    max_size: int,
    max_index_size: int,
    first_uncleanable_offset: int,
) -> list[list[int]]:
    """Runs of consecutive segments to clean into one each (Kafka's ``groupSegmentsBySize``),
    as lists of indexes into ``segments``.

    A group's log bytes stay within ``max_size`` and each index's bytes within
    ``max_index_size`` (one segment alone may exceed them), and its offsets must fit the
    relative 32-bit index of its first segment (a segment's last offset is bounded by the
    next segment's base, or by ``first_uncleanable_offset`` for the last one).  Empty
    segments at the end of a group are left out of it (they hold nothing to clean, and a
    cleaned segment must end where its group's last batch did).
    """
    groups: list[list[int]] = []
    i = 0
    n = len(segments)
    while i < n:
        group = [i]
        size = segments[i].size
        index_bytes = segments[i].index_bytes
        time_index_bytes = segments[i].time_index_bytes
        i += 1
        while i < n:
            seg = segments[i]
            bound = segments[i + 1].base_offset - 1 if i + 1 < n else first_uncleanable_offset - 1
            if (
                size + seg.size > max_size
                or index_bytes + seg.index_bytes > max_index_size
                or time_index_bytes + seg.time_index_bytes > max_index_size
                or (seg.size > 0
                    and bound - segments[group[0]].base_offset > _MAX_RELATIVE_OFFSET)
            ):
                break
            group.append(i)
            size += seg.size
            index_bytes += seg.index_bytes
            time_index_bytes += seg.time_index_bytes
            i += 1
        while group and segments[group[-1]].size == 0:
            group.pop()
        if group:
            groups.append(group)
    return groups


def delete_horizon_ms(last_clean_segment_modified_ms: int | None, delete_retention_ms: int) -> int:
    """Tombstones in a segment last modified at or before this time may be removed (Kafka's
    rule before KIP-534: ``delete.retention.ms`` before the last modification of the last
    segment of the clean section).  With no clean section yet, none may go."""
    if last_clean_segment_modified_ms is None:
        return -(2**63)
    return last_clean_segment_modified_ms - delete_retention_ms
