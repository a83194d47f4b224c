"""``LeaderEpochCache``: which leader epoch wrote which offsets (Kafka's
``LeaderEpochFileCache``, KIP-101), kept in ``<partition dir>/leader-epoch-checkpoint``.

Each entry ``(epoch, start_offset)`` says that the leader of ``epoch`` wrote its first record
at ``start_offset``; an epoch ends where the next one starts, the latest one at the log end
offset.  A follower that asks the leader for the end offset of its own latest epoch
(OffsetForLeaderEpoch, ``end_offset_for``) learns where the two logs diverge, and truncates
there instead of to its high watermark.

File format (Kafka's ``LeaderEpochCheckpointFile``)::

    0              version
    2              number of entries
    0 0            epoch start_offset
    3 1200

Written with ``write_atomically`` before the in-memory entries change, so a failed write
leaves both as they were.  ``Log`` writes it before the bytes of an append that starts an
epoch (so the file never lacks an epoch the segments hold) and after a truncation (so a
crash between the two leaves entries past the log end, which opening removes again).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from typing import NamedTuple

from trilog.storage._files import write_atomically

logger = logging.getLogger("trilog.storage")

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
#: OffsetForLeaderEpoch's answer when the epoch is unknown (Kafka's
#: ``OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH`` and ``UNDEFINED_EPOCH_OFFSET``).
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

_VERSION = 0


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """The epochs of one partition's log, ascending in both epoch and start offset.

    Invariants: along the entries, epochs and start offsets both strictly increase (a new
    epoch at the latest entry's offset replaces that entry, which wrote nothing); every
    epoch and offset is >= 0.

    Thread-safe: changes serialise on a lock (held for the checkpoint write, which is rare:
    a new epoch, a truncation); readers work on an immutable tuple without the lock.
    ``path`` None keeps the cache in memory only.
    """

    def __init__(self, path: str | None, entries: Iterable[EpochEntry | tuple[int, int]] = ()
                 ) -> None:
        self.path = path
        self._lock = threading.Lock()
        kept: list[EpochEntry] = []
        for epoch, start in entries:
            _add(kept, EpochEntry(epoch, start))
        self._entries: tuple[EpochEntry, ...] = tuple(kept)

    # -- reading -------------------------------------------------------------------------

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return self._entries

    @property
    def latest_epoch(self) -> int | None:
        """The epoch of the last entry (the current leader's, on a leader), or None."""
        entries = self._entries
        return entries[-1].epoch if entries else None

    @property
    def latest_entry(self) -> EpochEntry | None:
        entries = self._entries
        return entries[-1] if entries else None

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"LeaderEpochCache({list(self._entries)})"

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch (Kafka's ``endOffsetFor``): ``(epoch, end_offset)`` where
        the epoch is the largest known epoch <= ``epoch`` and the end offset is the start
        offset of the first epoch above it, or ``log_end_offset`` for the latest epoch.

        ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)`` for ``UNDEFINED_EPOCH``, an empty
        cache, or an epoch above the latest.  An epoch below the first known one answers
        ``(epoch, first entry's start offset)``: the data before it is gone, and the follower
        truncates to where this log's history starts (Kafka since KIP-279).
        """
        entries = self._entries
        if epoch == UNDEFINED_EPOCH or not entries or epoch > entries[-1].epoch:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == entries[-1].epoch:
            return epoch, log_end_offset
        floor: EpochEntry | None = None
        for entry in entries:
            if entry.epoch > epoch:
                if floor is None:
                    return epoch, entry.start_offset
                return floor.epoch, entry.start_offset
            floor = entry
        raise AssertionError("unreachable: the latest epoch is above the one asked for")

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch that wrote ``offset`` (Kafka's ``epochForOffset``), or None if the offset
        lies before the first entry."""
        found = None
        for entry in self._entries:
            if entry.start_offset > offset:
                break
            found = entry.epoch
        return found

    # -- changing ------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` (Kafka's ``assign``); return
        whether the entries changed (and the checkpoint was written).

        The latest epoch again at a later offset changes nothing (an epoch's start offset is
        never moved forward).  Anything else first removes, from the end, every entry whose
        epoch is >= ``epoch`` or whose start offset is >= ``start_offset`` (keeping both
        strictly increasing), then appends the new entry: the same epoch at an earlier
        offset, an older epoch after a newer one, or a newer epoch starting below the latest
        entry's start all replace the conflicting tail.  ``ValueError`` for a negative
        epoch or offset."""
        return self.assign_all([(epoch, start_offset)])

    def assign_all(self, entries: Iterable[tuple[int, int]]) -> bool:
        """``assign`` each entry in turn, writing the checkpoint once."""
        pending = list(entries)
        for epoch, start in pending:
            if epoch < 0 or start < 0:
                raise ValueError(f"invalid leader epoch entry ({epoch}, {start})")
        if not any(_update_needed(self._entries, e, s) for e, s in pending):
            return False  # the common case, without the lock
        with self._lock:
            kept = list(self._entries)
            changed = False
            for epoch, start in pending:
                changed |= _add(kept, EpochEntry(epoch, start))
            if changed:
                self._replace(kept)
            return changed

    def truncate_from_end(self, end_offset: int) -> bool:
        """Remove every entry starting at or after ``end_offset`` (the log was truncated
        there); a negative offset changes nothing.  Return whether anything went."""
        with self._lock:
            kept = list(self._entries)
            if end_offset < 0:
                return False
            while kept and kept[-1].start_offset >= end_offset:
                kept.pop()
            if len(kept) == len(self._entries):
                return False
            removed = self._entries[len(kept):]
            self._replace(kept)
        logger.debug("%s: removed epochs %s after truncating to %d",
                     self.path, list(removed), end_offset)
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at ``start_offset``: drop the entries that start at or before
        it except the last such, whose start becomes ``start_offset`` (Kafka's
        ``truncateFromStart``; an entry starting exactly there is kept as it is).  A
        negative offset changes nothing.  Return whether anything changed."""
        with self._lock:
            entries = self._entries
            if start_offset < 0:
                return False
            n = 0
            while n < len(entries) and entries[n].start_offset <= start_offset:
                n += 1
            if n == 0 or (n == 1 and entries[0].start_offset == start_offset):
                return False
            kept = [EpochEntry(entries[n - 1].epoch, start_offset), *entries[n:]]
            self._replace(kept)
            return True

    def clear(self) -> None:
        """Forget every entry (Kafka's ``clearAndFlush``: the log restarted empty)."""
        with self._lock:
            if self._entries:
                self._replace([])

    def write(self, *, sync: bool = True) -> None:
        """Write the checkpoint with the current entries (e.g. after rebuilding them);
        ``sync=False``: not fsynced (entries the next opening would rebuild the same)."""
        with self._lock:
            self._replace(list(self._entries), sync=sync)

    def _replace(self, kept: list[EpochEntry], *, sync: bool = True) -> None:
        """Under the lock: write the checkpoint, then publish ``kept``."""
        if self.path is not None:
            write_atomically(self.path, format_checkpoint(kept), sync=sync)
        self._entries = tuple(kept)


def _update_needed(entries: tuple[EpochEntry, ...], epoch: int, start: int) -> bool:
    if not entries:
        return True
    last = entries[-1]
    return epoch != last.epoch or start < last.start_offset


def _add(kept: list[EpochEntry], entry: EpochEntry) -> bool:
    """``assign`` on a list: remove the conflicting tail and append ``entry`` (if needed)."""
    if not _update_needed(tuple(kept[-1:]), *entry):
        return False
    removed = []
    while kept and (kept[-1].epoch >= entry.epoch or kept[-1].start_offset >= entry.start_offset):
        removed.append(kept.pop())
    if len(removed) > 1 or (removed and removed[0].start_offset != entry.start_offset):
        # An entry at the same offset only replaces an epoch that wrote nothing.
        logger.warning("leader epoch entry %s replaces the conflicting entries %s",
                       tuple(entry), [tuple(e) for e in reversed(removed)])
    kept.append(entry)
    return True


def epochs_from_batches(batches: Iterable[tuple[int, int]]) -> list[EpochEntry]:
    """The entries of a log from its batches' ``(partition_leader_epoch, base_offset)``,
    oldest first (Kafka's rule when recovering a segment: a batch starts an entry when its
    epoch is above the latest one; -1, a batch written without a leader epoch, never does)."""
    entries: list[EpochEntry] = []
    latest = -1
    for epoch, base_offset in batches:
        if epoch > latest:
            entries.append(EpochEntry(epoch, base_offset))
            latest = epoch
    return entries


# -- the checkpoint file -------------------------------------------------------------------


def format_checkpoint(entries: Iterable[tuple[int, int]]) -> bytes:
    entries = list(entries)
    lines = [str(_VERSION), str(len(entries))]
    lines += [f"{epoch} {start}" for epoch, start in entries]
    return ("\n".join(lines) + "\n").encode("ascii")


def parse_checkpoint(text: str) -> list[EpochEntry]:
    """The entries of a checkpoint file's text; ``ValueError`` if it is malformed (a wrong
    version or count, a line that is not two integers, entries that are not ascending)."""
    lines = text.splitlines()
    if len(lines) < 2:
        raise ValueError("missing version or count line")
    if int(lines[0]) != _VERSION:
        raise ValueError(f"unknown version {lines[0]!r}")
    count = int(lines[1])
    body = [line for line in lines[2:] if line.strip()]
    if len(body) != count:
        raise ValueError(f"expected {count} entries, found {len(body)}")
    entries: list[EpochEntry] = []
    for line in body:
        fields = line.split()
        if len(fields) != 2:
            raise ValueError(f"malformed line {line!r}")
        entry = EpochEntry(int(fields[0]), int(fields[1]))
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"negative epoch or offset in {line!r}")
        if entries and (entry.epoch <= entries[-1].epoch
                        or entry.start_offset <= entries[-1].start_offset):
            raise ValueError(f"entry {line!r} is not above the one before it")
        entries.append(entry)
    return entries


def read_checkpoint(path: str | os.PathLike[str]) -> list[EpochEntry] | None:
    """The entries of the checkpoint at ``path``, or None when it is missing or malformed
    (logged): the caller rebuilds them from the batches' headers."""
    try:
        fd = os.open(path, os.O_RDONLY)  # (os calls: an opening reads thousands of these)
    except FileNotFoundError:
        return None
    except OSError as exc:
        logger.warning("cannot read %s (%s); rebuilding it from the log", path, exc)
        return None
    try:
        parts = []
        while chunk := os.read(fd, 1 << 16):
            parts.append(chunk)
        text = b"".join(parts).decode("ascii")
    except (OSError, UnicodeDecodeError) as exc:
        logger.warning("cannot read %s (%s); rebuilding it from the log", path, exc)
        return None
    finally:
        os.close(fd)
    try:
        return parse_checkpoint(text)
    except ValueError as exc:
        logger.warning("ignoring malformed %s (%s); rebuilding it from the log", path, exc)
        return None


def load_leader_epochs(
    directory: str,
    log_start_offset: int,
    log_end_offset: int,
    batch_epochs: Iterable[tuple[int, int]],
    *,
    empty: bool,
    discard: bool = False,
    none_if_missing: bool = False,
) -> LeaderEpochCache:
    """The leader-epoch cache of the log in ``directory`` when it opens: the checkpoint, cut
    to the log's offsets (a crash may leave entries past the log end or before the log
    start, as Kafka's loader expects), or, when the file is missing or unreadable, rebuilt
    from ``batch_epochs`` (``(partition_leader_epoch, base_offset)`` of every batch, oldest
    first: a walk of the segments, taken only then and once, as the result is written).
    ``empty``: the log holds no batch; ``discard``: it restarted empty, its epochs go;
    ``none_if_missing`` (a standalone log whose directory listing has no checkpoint: an
    entry is written to the file, fsynced, when it is made, and from then on the file is
    only ever replaced by a rename, so a missing file, not a corrupt one, means none, after
    a crash too): no walk of every header, and no file written for an empty cache."""
    path = f"{directory}/{LEADER_EPOCH_CHECKPOINT_FILE}"
    found = None if none_if_missing else read_checkpoint(path)
    stored: list[EpochEntry] = [] if found is None else found
    write = False
    if discard:
        stored, write = [], True
    elif found is None and not none_if_missing:
        stored = [] if empty else epochs_from_batches(batch_epochs)
        write = not empty
        if write:
            logger.info("%s: rebuilt the leader-epoch cache from the batch headers: %s",
                        directory, [tuple(e) for e in stored])
    cut = LeaderEpochCache(None, stored)
    if stored:
        cut.truncate_from_end(log_end_offset)
        cut.truncate_from_start(log_start_offset)
    cache = LeaderEpochCache(path, cut.entries)
    if write or list(cut.entries) != stored:
        try:
            # Not fsynced (one fsync a log would slow the start of 50,000 logs): a lost or
            # torn file is rebuilt or cut the same way at the next opening.
            cache.write(sync=False)
        except OSError as exc:  # a full disk must not stop a start
            logger.warning("%s: cannot write %s: %s", directory, LEADER_EPOCH_CHECKPOINT_FILE,
                           exc)
    return cache
