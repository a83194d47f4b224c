"""The two sparse indexes of a segment: offset -> position and timestamp -> offset.

File layouts (big-endian, as Kafka's; offsets are relative to the segment's base offset):

    <base>.index       entries of 8 bytes:  relative_offset int32 | position int32
    <base>.timeindex   entries of 12 bytes: timestamp int64       | relative_offset int32

Both files hold exactly their entries (no preallocation), so a size that is not a multiple
of the entry size means a torn write.  In memory an index is a pair of ``array``s searched
with ``bisect`` (C-speed binary search); entries reach the file lazily, on ``flush`` (or when
the segment is rolled or closed): an index is rebuildable from its log, and recovery
rebuilds the indexes of everything after the recovery point.  An index without entries has
no file (a partition of one record costs no index file): loading a missing index rebuilds it
from its segment, which then holds only a few batches (less than ``index_interval_bytes``
before its last one).
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from itertools import islice
from operator import le, lt

_LITTLE = sys.byteorder == "little"
_TIME_ENTRY = struct.Struct(">qi")


def _strictly_increasing(values: array[int]) -> bool:
    return all(map(lt, values, islice(values, 1, None)))


def _non_decreasing(values: array[int]) -> bool:
    return all(map(le, values, islice(values, 1, None)))


def _read_file(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _write_tail(path: str, file_bytes: int, data: bytes, fsync: bool) -> None:
    """Write ``data`` at ``file_bytes`` (dropping anything after it) and optionally fsync."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size != file_bytes:
            os.ftruncate(fd, file_bytes)
        view = memoryview(data)
        while view:
            n = os.pwrite(fd, view, file_bytes)
            file_bytes += n
            view = view[n:]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


class IndexCorruptError(Exception):
    """An index file that cannot be trusted; the caller rebuilds it from the log."""


class _SparseIndex:
    """What both index kinds share: the path, the entry-count limit, and the bookkeeping of
    which entries the file already holds (``flush`` writes only the tail it lacks).

    A subclass keeps its entries in ``array`` columns, sets ``ENTRY_SIZE`` and implements
    ``_encode(start, n)`` (the file bytes of entries ``start .. n-1``).
    """

    ENTRY_SIZE = 0

    def __init__(self, path: str, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.ENTRY_SIZE)
        self._offsets = array("i")  # relative offsets
        self._file_entries = 0  # entries already in the file (-1: unknown, rewrite it all)
        self._synced = True  # the file's content is known to be on disk

    def _read_entries(self) -> bytes:
        """The file's bytes; ``IndexCorruptError`` if it is missing or has a torn entry."""
        data = _read_file(self.path)
        if data is None:
            raise IndexCorruptError(f"{self.path} is missing")
        if len(data) % self.ENTRY_SIZE:
            raise IndexCorruptError(f"{self.path} has a torn entry ({len(data)} bytes)")
        return data

    def __len__(self) -> int:
        return len(self._offsets)

    def absent(self) -> None:
        """The file is known not to exist (a directory listing said so): a flush without
        entries need not look."""
        if not len(self._offsets):
            self._file_entries, self._synced = 0, True

    @property
    def written(self) -> bool:
        """Whether the file holds entries (so it must exist)."""
        return self._file_entries > 0

    @property
    def is_full(self) -> bool:
        return len(self._offsets) >= self.max_entries

    def _dropped_from(self, n: int) -> None:
        """Entries from ``n`` on were dropped from the columns."""
        if self._file_entries > n:
            self._file_entries = -1  # rare: rewrite the whole file on the next flush

    def _encode(self, start: int, n: int) -> bytes:
        raise NotImplementedError

    def flush(self, fsync: bool = True, *, empty_file: bool = False) -> None:
        """Write the entries the file lacks, then fsync it (unless ``fsync`` is false).
        Without entries no file is made, unless ``empty_file``."""
        n = len(self._offsets)
        if n == self._file_entries and (self._synced or not fsync):
            return
        if (n == 0 and not empty_file and self._file_entries <= 0
                and not os.path.exists(self.path)):
            # No file for an empty index (a new partition's): loading a missing one rebuilds
            # it from the few batches such a segment holds.
            self._file_entries, self._synced = 0, True
            return
        start = max(self._file_entries, 0)
        _write_tail(self.path, start * self.ENTRY_SIZE, self._encode(start, n), fsync)
        self._file_entries = n
        self._synced = fsync

    def _check_loaded(self, *, negative: bool, past_end: bool, ordered: bool) -> None:
        """``IndexCorruptError`` unless the entries just read from the file are sound."""
        if negative:
            raise IndexCorruptError(f"{self.path} has a negative entry")
        if past_end:
            raise IndexCorruptError(f"{self.path} points past the end of its log")
        if not ordered:
            raise IndexCorruptError(f"{self.path} has entries out of order")


class OffsetIndex(_SparseIndex):
    """Sparse map from offset to the file position of the batch holding it, for one segment.

    Invariants: relative offsets and positions both strictly increase; an entry
    ``(o, p)`` says the batch starting at byte ``p`` has last offset ``base_offset + o``;
    every position is below the segment's committed size.  At most ``max_entries`` entries.

    Not thread-safe for writers: the owning ``Log`` appends and truncates under its lock.
    ``lookup`` / ``lookup_position`` may run concurrently with one appender (each is a single
    C-level bisect under the GIL) and see either the old or the new last entry.
    """

    ENTRY_SIZE = 8

    def __init__(self, path: str, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._positions = array("i")

    # -- loading -------------------------------------------------------------------------

    def load(self, log_size: int) -> None:
        """Read the file; raise ``IndexCorruptError`` if missing or not trustworthy."""
        data = self._read_entries()
        both = array("i")
        both.frombytes(data)
        if _LITTLE:
            both.byteswap()
        offsets, positions = both[0::2], both[1::2]
        if offsets:
            self._check_loaded(
                negative=offsets[0] < 0 or positions[0] < 0,
                past_end=positions[-1] >= log_size,
                ordered=_strictly_increasing(offsets) and _strictly_increasing(positions),
            )
        self._offsets, self._positions = offsets, positions
        self._file_entries = len(offsets)

    def reset(self) -> None:
        """Forget every entry (before a rebuild); the file is rewritten on the next flush."""
        self._offsets, self._positions = array("i"), array("i")
        self._file_entries = -1  # unknown file content: rewrite all of it

    # -- writing -------------------------------------------------------------------------

    def append(self, offset: int, position: int) -> None:
        """Add an entry; the caller guarantees both values exceed the last entry's."""
        self._offsets.append(offset - self.base_offset)
        self._positions.append(position)

    def truncate_to_position(self, position: int) -> None:
        """Drop the entries of batches at or after byte ``position``."""
        n = bisect_left(self._positions, position)
        del self._offsets[n:]
        del self._positions[n:]
        self._dropped_from(n)

    def _encode(self, start: int, n: int) -> bytes:
        both = array("i", bytes(8 * (n - start)))
        both[0::2] = self._offsets[start:n]
        both[1::2] = self._positions[start:n]
        if _LITTLE:
            both.byteswap()
        return both.tobytes()

    # -- searching -----------------------------------------------------------------------

    def lookup(self, offset: int) -> tuple[int, int]:
        """The last entry whose offset is <= ``offset``, as (absolute offset, position).

        ``(base_offset, 0)`` when there is none.  A binary search, never a scan.
        """
        i = bisect_right(self._offsets, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._offsets[i], self._positions[i]

    def lookup_position(self, position: int) -> int:
        """The largest indexed position <= ``position`` (0 when there is none)."""
        i = bisect_right(self._positions, position) - 1
        return self._positions[i] if i >= 0 else 0

    @property
    def last_entry(self) -> tuple[int, int]:
        if not self._offsets:
            return self.base_offset, 0
        return self.base_offset + self._offsets[-1], self._positions[-1]

    def entries(self) -> list[tuple[int, int]]:
        """Every entry as (absolute offset, position): for tests and tools."""
        return [(self.base_offset + o, p) for o, p in zip(self._offsets, self._positions)]


class TimeIndex(_SparseIndex):
    """Sparse map from timestamp to offset for one segment.

    An entry ``(t, o)`` says: ``t`` is the largest batch max-timestamp among the batches up
    to the one whose last offset is ``base_offset + o``, and that batch is the first to reach
    it.  Invariants: timestamps strictly increase, offsets never decrease.

    Thread-safety as ``OffsetIndex``: one writer under the ``Log``'s lock, lock-free lookups.
    """

    ENTRY_SIZE = 12

    def __init__(self, path: str, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._timestamps = array("q")

    def load(self, log_next_offset: int | None = None) -> None:
        entries = list(_TIME_ENTRY.iter_unpack(self._read_entries()))
        timestamps = array("q", [t for t, _ in entries])
        offsets = array("i", [o for _, o in entries])
        if offsets:
            self._check_loaded(
                negative=offsets[0] < 0,
                past_end=log_next_offset is not None
                and self.base_offset + offsets[-1] >= log_next_offset,
                ordered=_strictly_increasing(timestamps) and _non_decreasing(offsets),
            )
        self._timestamps, self._offsets = timestamps, offsets
        self._file_entries = len(offsets)

    def reset(self) -> None:
        """Forget every entry (before a rebuild); the file is rewritten on the next flush."""
        self._timestamps, self._offsets = array("q"), array("i")
        self._file_entries = -1

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, absolute offset) of the last entry; (-1, base_offset) when empty."""
        if not self._offsets:
            return -1, self.base_offset
        return self._timestamps[-1], self.base_offset + self._offsets[-1]

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry if ``timestamp`` is above the last one's (Kafka's ``maybeAppend``)."""
        ts = self._timestamps
        if ts and timestamp <= ts[-1]:
            return
        if timestamp < 0:
            return
        ts.append(timestamp)
        self._offsets.append(offset - self.base_offset)

    def truncate_to_offset(self, next_offset: int) -> None:
        """Drop the entries pointing at offsets >= ``next_offset``."""
        n = bisect_left(self._offsets, next_offset - self.base_offset)
        del self._timestamps[n:]
        del self._offsets[n:]
        self._dropped_from(n)

    def _encode(self, start: int, n: int) -> bytes:
        pack = _TIME_ENTRY.pack
        return b"".join(
            pack(t, o) for t, o in zip(self._timestamps[start:n], self._offsets[start:n])
        )

    def lookup(self, timestamp: int) -> int | None:
        """Offset of the last entry whose timestamp is < ``timestamp``: every batch before
        that offset's batch has a smaller max timestamp.  ``None`` when there is none."""
        i = bisect_left(self._timestamps, timestamp) - 1
        if i < 0:
            return None
        return self.base_offset + self._offsets[i]

    def entries(self) -> list[tuple[int, int]]:
        return [(t, self.base_offset + o) for t, o in zip(self._timestamps, self._offsets)]
