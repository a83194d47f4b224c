"""Building a log's producer state at opening and after a truncation: the newest snapshot
at or below the point, and the batch headers after it (Kafka's ``rebuildProducerState``).

The state must be exact (a transaction may stay open longer than any tail of the log one
would read): it is the newest snapshot that decodes, at or below the log end offset (and at
or below the first segment recovery re-validated, whose ``.txnindex`` is rebuilt on the
way), plus a replay of every batch header from there to the log end.  After a clean close
the snapshot is at the log end and nothing is replayed; after a crash the replay covers the
segments since the last roll, which recovery has just read.  Without any usable snapshot the
whole log is replayed, from the log start offset.

Only headers are read, through the segments' own descriptors, and a control batch's first
bytes for its marker.  Runs while the log opens or under every lock of a truncation.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import NamedTuple

from trilog.records import (
    CONTROL_MASK,
    HEADER_SIZE,
    CorruptRecordsError,
    EndTxnMarker,
    read_end_txn_marker,
)
from trilog.storage._producer_snapshot import ProducerSnapshots
from trilog.storage._producer_state import ProducerStateManager
from trilog.storage._segment import LogSegment, walk_batches

logger = logging.getLogger("trilog.storage")

#: A marker's batch is 78 bytes: this prefix holds it, or any marker of sane size.
_MARKER_PREFIX = HEADER_SIZE + 64


class ProducerStateLoad(NamedTuple):
    """How the state was built: from the snapshot at ``snapshot_offset`` (None: none was
    usable), then the headers from ``replayed_from`` on: ``batches_replayed`` of them, in
    ``segments_replayed`` segments."""

    snapshot_offset: int | None
    replayed_from: int
    batches_replayed: int
    segments_replayed: int


def load_producer_state(
    state: ProducerStateManager,
    snapshots: ProducerSnapshots,
    segments: Sequence[LogSegment],
    log_start_offset: int,
    log_end_offset: int,
    *,
    rebuild_from: int | None,
    now_ms: int,
    expiration_ms: int,
    high_watermark: int | None = None,
) -> ProducerStateLoad:
    """Build ``state`` for the log of ``segments`` (see the module docstring).  The
    ``.txnindex`` of every segment whose base offset is ``rebuild_from`` or later is rebuilt
    from its markers.  Snapshots above the log end offset are deleted: they describe batches
    the log no longer holds.  A replicated log's ``high_watermark``: a transaction whose
    marker the replay finds at or above it stays unstable until it passes."""
    snapshots.delete_above(log_end_offset)
    target = log_end_offset if rebuild_from is None else min(rebuild_from, log_end_offset)
    found = snapshots.read_latest(target)
    if found is None:
        state.reset()
        snapshot_offset = None
        start = log_start_offset
        if log_end_offset > log_start_offset:
            logger.info("no producer snapshot to start from: replaying every batch header "
                        "from offset %d", start)
    else:
        snapshot_offset, entries = found
        state.load_snapshot(entries, now_ms, expiration_ms)
        start = max(snapshot_offset, log_start_offset)
    batches = replayed_segments = 0
    for i, segment in enumerate(segments):
        end = segments[i + 1].base_offset if i + 1 < len(segments) else log_end_offset
        rebuild = rebuild_from is not None and segment.base_offset >= rebuild_from
        if rebuild:
            segment.txn_index.reset()
        if end <= start or segment.base_offset >= log_end_offset:
            continue
        replayed_segments += 1
        batches += _replay_segment(state, segment, start, rebuild, high_watermark)
    return ProducerStateLoad(snapshot_offset, start, batches, replayed_segments)


def _replay_segment(state: ProducerStateManager, segment: LogSegment, start: int,
                    rebuild: bool, high_watermark: int | None) -> int:
    """Apply the batches of ``segment`` from offset ``start`` on; return how many."""
    fd = segment.dup_fd()
    if fd is None:
        return 0
    n = 0
    try:
        position = segment.offset_index.lookup(start)[1] if segment.base_offset < start else 0
        for pos, size, header in walk_batches(fd, position, segment.size, chunk=1 << 20):
            if header.last_offset < start:
                continue
            n += 1
            if header.producer_id < 0:
                continue
            marker = None
            if header.attributes & CONTROL_MASK:
                marker = _marker(segment, fd, pos, size)
            for entry in state.apply_header(header, marker, high_watermark):
                if rebuild:
                    segment.txn_index.append(entry)
    finally:
        os.close(fd)
    return n


def _marker(segment: LogSegment, fd: int, position: int, size: int) -> EndTxnMarker | None:
    """The marker of the control batch at ``position`` (its first bytes read); a malformed
    one (which an append would have refused) is logged and taken for an emptied batch."""
    try:
        return read_end_txn_marker(os.pread(fd, min(size, _MARKER_PREFIX), position))
    except CorruptRecordsError as exc:
        logger.warning("%s: ignoring the control batch at byte %d: %s", segment.log_path,
                       position, exc)
        return None
