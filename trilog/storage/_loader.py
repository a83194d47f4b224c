"""Opening a partition's log at start: its segment files, their indexes, and recovery.

``load_segments`` first finishes or undoes what the log cleaner was doing (see below), lists
``<20-digit base offset>.log|.index|.timeindex|.txnindex`` in the directory (removing what
an interrupted delete or write left), trusts the segments below the recovery point (loading
their indexes, or rebuilding them when missing or corrupt), and re-validates every batch
from the segment holding the recovery point on (``LogSegment.recover``).  The log is its
longest valid prefix: after the first invalid batch nothing is kept.  It says from which
segment on it recovered (``LoadedLog.first_recovered``): the aborted-transaction indexes of
those segments are rebuilt with the producer state (``_producer_load``), which needs the
state of the producers at their start.

The cleaner's swap (Kafka's protocol): a cleaned segment is written as
``<base>.log.cleaned`` (with ``.index.cleaned``, ``.timeindex.cleaned``) and fsynced, then
renamed to ``.swap`` names (the log file last) and the directory fsynced: **the commit
point**.  Then the segments it replaces are unlinked and the ``.swap`` files take their
final names.  So at start a ``.cleaned`` file is an uncommitted clean (removed: the old
segments are all there), and a ``<base>.log.swap`` a committed one: every segment whose
base offset lies in ``[base, the swap's next offset)`` is removed and the swap takes its
final name (its indexes too, or they are rebuilt).  A cleaned segment always ends with the
last batch of the last segment it replaces, so that range is exactly the replaced ones.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from typing import NamedTuple

from trilog.storage._config import LogConfig
from trilog.storage._epochs import LEADER_EPOCH_CHECKPOINT_FILE
from trilog.storage._files import fsync_dir, remove
from trilog.storage._producer_snapshot import SUFFIX as SNAPSHOT_SUFFIX
from trilog.storage._segment import LogSegment, segment_file_name, walk_batches

logger = logging.getLogger("trilog.storage")

_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")
#: Left by an interrupted delete, write, or log cleaning (``.swap`` files that remain once
#: ``_finish_swaps`` ran are index files of a swap that never reached its commit point).
_LEFTOVERS = (".deleted", ".cleaned", ".swap", ".tmp")
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"


class LoadedLog(NamedTuple):
    segments: tuple[LogSegment, ...]  # at least one; all but the last made inactive
    recovery_point: int
    created: bool  # the directory was empty: a first segment was created in it
    #: the base offset of the first segment recovery re-validated (it and every later one),
    #: or None when every segment was trusted
    first_recovered: int | None
    #: the offsets of the producer snapshots in the directory, ascending
    snapshot_offsets: list[int]
    #: the directory holds a ``leader-epoch-checkpoint``
    epoch_checkpoint: bool


def load_segments(
    directory: str, config: LogConfig, recovery_point: int, needs_recovery: bool
) -> LoadedLog:
    """Open (and if ``needs_recovery``, recover) the segments of the log in ``directory``.

    Without ``needs_recovery`` (after a clean shutdown) every segment is trusted unless its
    files disagree.  After a recovery whose rebuilt indexes were all written, the recovery
    point is the new log end offset; otherwise it stays where it was.
    """
    names = os.listdir(directory)  # (once: a broker opens 50,000 logs)
    if _finish_swaps(directory, names):
        names = os.listdir(directory)
    listing = _list_directory(directory, names)
    bases = listing.bases
    segments: list[LogSegment] = []
    try:
        for base in bases:
            segments.append(LogSegment.open(directory, base, config,
                                            load_txn_index=base in listing.txn_indexes))
        first_unverified = len(segments)
        if needs_recovery and segments:
            # The segment holding the recovery point and all later ones are re-validated.
            first_unverified = max(0, bisect_right(bases, recovery_point) - 1)
        indexes_written, recovered = _load_or_recover(directory, segments, first_unverified,
                                                      listing.index_files, recovery_point)
        if needs_recovery and segments and indexes_written:
            recovery_point = segments[-1].next_offset
        first_recovered = segments[recovered].base_offset if recovered < len(segments) else None
        created = not segments
        if created:
            segments.append(LogSegment.create(directory, 0, config))
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    for segment in segments[:-1]:
        segment.on_become_inactive()
    return LoadedLog(tuple(segments), recovery_point, created, first_recovered,
                     listing.snapshots, LEADER_EPOCH_CHECKPOINT_FILE in names)


def _finish_swaps(directory: str, names: list[str]) -> bool:
    """Complete every committed swap of the log cleaner (``<base>.log.swap``) among the
    directory's ``names``: remove the segments it replaces, then give it its final name.
    Whether there was one."""
    swaps = [n for n in names if n.endswith(".log.swap")]  # (the cheap test: mostly none)
    if not swaps:
        return False
    swaps = sorted(n for n in swaps if n[:20].isdigit() and len(n) == 29)
    if not swaps:
        return False
    logs = [int(n[:20]) for n in names
            if n.endswith(".log") and len(n) == 24 and n[:20].isdigit()]
    for name in swaps:
        base = int(name[:20])
        path = os.path.join(directory, name)
        end = _next_offset(path, base)
        for old in logs:
            if old == base or base <= old < end:
                for suffix in _SUFFIXES:
                    remove(os.path.join(directory, segment_file_name(old, suffix)))
        for suffix in (".index", ".timeindex", ".txnindex"):
            swapped = os.path.join(directory, segment_file_name(base, suffix + SWAP_SUFFIX))
            if os.path.exists(swapped):
                os.replace(swapped, os.path.join(directory, segment_file_name(base, suffix)))
        os.replace(path, os.path.join(directory, segment_file_name(base, ".log")))
        logger.warning("%s: finished the interrupted swap of cleaned segment %d (replacing "
                       "offsets %d..%d)", directory, base, base, end - 1)
    fsync_dir(directory)
    return True


def _next_offset(path: str, base_offset: int) -> int:
    """One past the last offset of the valid batches of the log file ``path``."""
    fd = os.open(path, os.O_RDONLY)
    try:
        end = base_offset
        for _pos, _size, header in walk_batches(fd, 0, os.fstat(fd).st_size, chunk=1 << 20):
            end = header.next_offset
        return end
    finally:
        os.close(fd)


class _Listing(NamedTuple):
    bases: list[int]  # of the .log files, ascending
    txn_indexes: set[int]  # the bases with a .txnindex file
    index_files: dict[int, int]  # how many of .index and .timeindex each base has
    snapshots: list[int]  # the offsets of the producer snapshots, ascending


def _list_directory(directory: str, names: list[str]) -> _Listing:
    """What the directory holds (one listing: a broker opens thousands of logs); leftovers
    of interrupted work and indexes whose log is gone are removed on the way."""
    bases: list[int] = []
    index_files: list[tuple[int, str]] = []
    snapshots: list[int] = []
    for name in names:
        if name.endswith(_LEFTOVERS):
            remove(f"{directory}/{name}")
            continue
        # <20 digits>.<suffix>; (no os.path calls: a broker opens 50,000 logs)
        stem, ext = name[:20], name[20:]
        if ext[:1] != "." or not stem.isdigit():
            continue
        if ext == ".log":
            bases.append(int(stem))
        elif ext == SNAPSHOT_SUFFIX:
            snapshots.append(int(stem))
        elif ext in _SUFFIXES:
            index_files.append((int(stem), f"{directory}/{name}"))
    known = set(bases)
    txn_indexes = set()
    counts: dict[int, int] = {}
    for base, path in index_files:
        if base not in known:
            remove(path)
        elif path.endswith(".txnindex"):
            txn_indexes.add(base)
        else:
            counts[base] = counts.get(base, 0) + 1
    return _Listing(sorted(bases), txn_indexes, counts, sorted(snapshots))


def _load_or_recover(directory: str, segments: list[LogSegment], first_unverified: int,
                     index_files: dict[int, int], recovery_point: int) -> tuple[bool, int]:
    """Trust the segments before ``first_unverified`` (until one's files disagree), recover
    the rest, and drop everything after the first invalid stretch (in place).  Return
    whether every rebuilt index reached the disk, and the index of the first segment
    recovered (``len(segments)`` if none was).  ``recovery_point``: the offsets below it
    were fsynced before the crash."""
    indexes_written = True
    i = 0
    while i < len(segments):
        segment = segments[i]
        if i < first_unverified:
            if segment.load_indexes(index_files.get(segment.base_offset, 0)):
                segment.release_fd()
                i += 1
                continue
            logger.warning("%s: segment %d does not end on a batch boundary; recovering",
                           directory, segment.base_offset)
            first_unverified = i
        min_offset = segments[i - 1].next_offset if i else segment.base_offset
        truncated, written = _recover_segment(directory, segment, min_offset, recovery_point,
                                              index_files.get(segment.base_offset, 0))
        indexes_written &= written
        if truncated or (segment.size == 0 and i < len(segments) - 1):
            # Nothing valid may follow an invalid (or lost) stretch: the log is its longest
            # valid prefix.
            logger.warning("%s: truncated %d invalid bytes from segment %d at offset %d",
                           directory, truncated, segment.base_offset, segment.next_offset)
            for dead in segments[i + 1 :]:
                logger.warning("%s: deleting segment %d after the corruption",
                               directory, dead.base_offset)
                dead.delete()
            del segments[i + 1 :]
        segment.release_fd()  # (opening leaves no file open: 50,000 logs open at start)
        i += 1
    return indexes_written, min(first_unverified, len(segments))


def _recover_segment(directory: str, segment: LogSegment, min_offset: int,
                     recovery_point: int, index_files: int) -> tuple[int, bool]:
    """Recover one segment and make what recovery decided durable; return the bytes it
    truncated and whether its rebuilt indexes were written.  ``index_files``: how many of
    its ``.index`` and ``.timeindex`` the directory holds."""
    truncated = segment.recover(min_offset)
    if truncated or segment.next_offset > recovery_point:
        # Bytes past the recovery point may be only in the page cache.  (A segment that
        # ends at or below it was fsynced whole before the crash: the usual case after a
        # crash, the segment holding the recovery point, needs no fsync a log.)
        os.fsync(segment.fd)
    if not index_files and not len(segment.offset_index):
        # Neither file is there (the listing said so) nor needed: no flush looks for them.
        segment.offset_index.absent()
        segment.time_index.absent()
    try:
        segment.flush_indexes()
    except OSError as exc:
        # A full disk must not stop a start: the rebuilt indexes serve from memory, and the
        # next flush writes them.  Until one does, the recovery point stays where it was,
        # so that a crash recovers these again.
        logger.warning("%s: cannot write the rebuilt indexes of segment %d: %s",
                       directory, segment.base_offset, exc)
        return truncated, False
    return truncated, True
