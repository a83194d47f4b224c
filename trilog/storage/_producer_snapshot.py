"""Producer state snapshots: ``<dir>/<20-digit offset>.snapshot`` (Kafka's format).

A snapshot named ``N`` holds the producer state of the log's batches below offset ``N``, so
that opening a log reads it and replays only the batch headers from ``N`` on.  File layout
(big-endian; Kafka's ``ProducerSnapshot`` version 1):

    offset  size  field
    0       2     version                  1
    2       4     crc                      CRC-32C of every byte from offset 6 on
    6       4     entry count
    10      46*n  entries:
                    producer_id int64 | epoch int16 | last_sequence int32 | last_offset int64
                    | offset_delta int32 | timestamp int64 | coordinator_epoch int32
                    | current_txn_first_offset int64 (-1: no transaction open)

Of a producer's recent batches only the last is kept (Kafka's rule): ``last_sequence``,
``last_offset`` and ``offset_delta`` (its last offset minus its first), -1, -1 and 0 when
it has none (after a marker of a new epoch).

A snapshot is written to a temporary name and renamed; its fsync may come later (the log's
next flush: ``take_unsynced`` and ``sync_files``): a snapshot a crash tore fails its CRC and
is ignored with a warning, and the state is rebuilt from an older one or from the log.
Not thread-safe: the log calls ``ProducerSnapshots`` under its append lock.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterable

from trilog.records import crc32c
from trilog.storage._files import fsync_dir, remove
from trilog.storage._segment import segment_file_name

logger = logging.getLogger("trilog.storage")

SUFFIX = ".snapshot"
VERSION = 1
_HEAD = struct.Struct(">hIi")  # version, crc, entry count
_CRC_FROM = 6
#: producer_id, epoch, last_sequence, last_offset, offset_delta, timestamp,
#: coordinator_epoch, current_txn_first_offset
ENTRY = struct.Struct(">qhiqiqiq")
#: How many snapshots a log keeps (the newest); retention may leave fewer.
KEEP = 3

SnapshotEntry = tuple[int, int, int, int, int, int, int, int]


class CorruptSnapshotError(Exception):
    """A snapshot file that does not decode or fails its CRC."""


def encode(entries: Iterable[SnapshotEntry]) -> bytes:
    rows = list(entries)
    body = bytearray(_HEAD.size + ENTRY.size * len(rows))
    pack = ENTRY.pack_into
    for i, row in enumerate(rows):
        pack(body, _HEAD.size + i * ENTRY.size, *row)
    struct.pack_into(">i", body, _CRC_FROM, len(rows))
    _HEAD.pack_into(body, 0, VERSION, crc32c(memoryview(body)[_CRC_FROM:]), len(rows))
    return bytes(body)


def decode(data: bytes) -> list[SnapshotEntry]:
    if len(data) < _HEAD.size:
        raise CorruptSnapshotError(f"{len(data)} bytes are too few for a snapshot")
    version, crc, count = _HEAD.unpack_from(data)
    if version != VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    if crc != crc32c(memoryview(data)[_CRC_FROM:]):
        raise CorruptSnapshotError("the snapshot fails its CRC-32C")
    if count < 0 or len(data) != _HEAD.size + count * ENTRY.size:
        raise CorruptSnapshotError(f"{count} entries do not fill {len(data)} bytes")
    return list(ENTRY.iter_unpack(memoryview(data)[_HEAD.size:]))


def snapshot_offsets(names: Iterable[str]) -> list[int]:
    """The offsets of the snapshot files among a directory's ``names``, ascending."""
    return sorted(int(n[:20]) for n in names
                  if n.endswith(SUFFIX) and len(n) == 20 + len(SUFFIX) and n[:20].isdigit())


class ProducerSnapshots:
    """The snapshot files of one log directory (see the module docstring).

    Invariant: ``offsets`` lists the snapshot files there, ascending (a file that failed to
    decode is removed from both)."""

    def __init__(self, directory: str, offsets: Iterable[int] | None = None) -> None:
        self.directory = directory
        #: (``offsets``: as a listing of the directory just found them)
        self.offsets = (snapshot_offsets(os.listdir(directory)) if offsets is None
                        else sorted(offsets))
        self._unsynced: list[str] = []

    def path(self, offset: int) -> str:
        return os.path.join(self.directory, segment_file_name(offset, SUFFIX))

    @property
    def latest(self) -> int | None:
        return self.offsets[-1] if self.offsets else None

    def read_latest(self, at_most: int) -> tuple[int, list[SnapshotEntry]] | None:
        """The newest snapshot at or below ``at_most`` that decodes: its offset and entries.
        A bad one is logged, deleted, and the next older one tried; None if none is left."""
        for offset in reversed([o for o in self.offsets if o <= at_most]):
            path = self.path(offset)
            try:
                return offset, decode(_read(path))
            except (OSError, CorruptSnapshotError) as exc:
                logger.warning("%s: ignoring producer snapshot %s: %s", self.directory,
                               os.path.basename(path), exc)
                self._forget(offset)
        return None

    def write(self, offset: int, entries: Iterable[SnapshotEntry], *, sync: bool = False) -> None:
        """Write the snapshot at ``offset`` (replacing one of that offset) and keep only the
        ``KEEP`` newest.  Without ``sync`` the fsync waits for the log's next flush.  An
        ``OSError`` is logged, not raised: a missing snapshot only makes the next opening
        replay more."""
        path = self.path(offset)
        tmp = path + ".tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                view = memoryview(encode(entries))
                while view:
                    view = view[os.write(fd, view):]
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            if sync:
                fsync_dir(self.directory)
            else:
                self._unsynced.append(path)
        except OSError as exc:
            remove(tmp)
            logger.warning("%s: cannot write producer snapshot %d: %s", self.directory, offset,
                           exc)
            return
        if offset not in self.offsets:
            self.offsets.append(offset)
            self.offsets.sort()
        for old in self.offsets[:-KEEP]:
            self._forget(old)

    def take_unsynced(self) -> list[str]:
        """The snapshots written without an fsync since the last call (for ``sync_files``,
        which the log's flush calls outside its append lock)."""
        pending, self._unsynced = self._unsynced, []
        return pending

    def delete_above(self, offset: int) -> None:
        """Delete the snapshots of offsets above ``offset`` (a truncated log)."""
        for o in [o for o in self.offsets if o > offset]:
            self._forget(o)

    def delete_below(self, offset: int) -> None:
        """Delete the snapshots below ``offset`` (the log start moved), but the newest."""
        for o in [o for o in self.offsets[:-1] if o < offset]:
            self._forget(o)

    def delete_all(self) -> None:
        for o in list(self.offsets):
            self._forget(o)

    def _forget(self, offset: int) -> None:
        path = self.path(offset)
        remove(path)
        if offset in self.offsets:
            self.offsets.remove(offset)
        if path in self._unsynced:
            self._unsynced.remove(path)


def _read(path: str) -> bytes:
    """The whole file (``os`` calls: an opening reads thousands of these)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        parts = []
        while chunk := os.read(fd, 1 << 20):
            parts.append(chunk)
        return b"".join(parts)
    finally:
        os.close(fd)


def sync_files(directory: str, paths: list[str]) -> None:
    """fsync the snapshot files ``paths`` (one gone meanwhile is skipped) and ``directory``."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue  # replaced or deleted meanwhile
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    if paths:
        fsync_dir(directory)
