"""Pure decisions about segments: which to delete, and the legacy offsets-before answer.

They take plain numbers and return plain numbers, so they are tested without files.
"""

from __future__ import annotations

from collections.abc import Sequence

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


def segments_to_delete(
    inactive: Sequence[tuple[int, int]],
    active_size: int,
    now_ms: int,
    retention_ms: int,
    retention_bytes: int,
) -> int:
    """How many of the oldest segments to delete (Kafka's ``deleteOldSegments``).

    ``inactive`` holds ``(size_in_bytes, largest_timestamp_ms)`` of every segment but the
    active one, oldest first; the active segment is never deleted.  First by time: delete
    while ``now_ms - largest_timestamp > retention_ms``.  Then by size: while the whole log
    (active segment included) is larger than ``retention_bytes`` by at least the next
    segment's size, delete it.  -1 disables either rule.
    """
    n = 0
    if retention_ms >= 0:
        while n < len(inactive) and now_ms - inactive[n][1] > retention_ms:
            n += 1
    if retention_bytes >= 0:
        diff = sum(size for size, _ in inactive[n:]) + active_size - retention_bytes
        while n < len(inactive) and diff - inactive[n][0] >= 0:
            diff -= inactive[n][0]
            n += 1
    return n


def offsets_before(
    segments: Sequence[tuple[int, int]],
    log_end_offset: int,
    last_segment_empty: bool,
    now_ms: int,
    timestamp: int,
    max_offsets: int,
) -> list[int]:
    """ListOffsets v0 (Kafka 0.8's ``getOffsetsBefore``), newest first.

    ``segments`` holds ``(base_offset, last_modified_ms)`` oldest first (base offsets
    already raised to the log start offset).  The candidates are every segment's base
    offset plus, if the last segment holds data, the log end offset stamped ``now_ms``.
    ``LATEST`` (-1) starts from the newest candidate, ``EARLIEST`` (-2) from the oldest,
    any other timestamp from the newest candidate last modified at or before it.
    """
    candidates = list(segments)
    if not last_segment_empty:
        candidates.append((log_end_offset, now_ms))
    if timestamp == LATEST_TIMESTAMP:
        start = len(candidates) - 1
    elif timestamp == EARLIEST_TIMESTAMP:
        start = 0
    else:
        start = len(candidates) - 1
        while start >= 0 and candidates[start][1] > timestamp:
            start -= 1
    count = min(max(max_offsets, 0), start + 1)
    found = [candidates[start - j][0] for j in range(count)]
    return sorted(found, reverse=True)
