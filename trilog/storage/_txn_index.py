"""The aborted-transaction index of a segment (Kafka's ``TransactionIndex``, ``.txnindex``).

File layout (big-endian, Kafka's ``AbortedTxn``), one entry per transaction aborted by an
ABORT marker in this segment, in the order of the markers:

    offset  size  field
    0       2     version              0
    2       8     producer_id
    10      8     first_offset         the transaction's first offset (maybe in an earlier
                                       segment)
    18      8     last_offset          the ABORT marker's offset: in this segment
    26      8     last_stable_offset   the log's last stable offset once the marker was
                                       written (the first offset of the oldest transaction
                                       of another producer still open, else last_offset + 1)
    34 bytes an entry

The file exists only once a segment has an entry (most never do).  A read_committed fetch
asks for the aborted transactions overlapping its range (``collect``): from the segment
holding the fetch offset on, every entry whose marker is at or after the fetch offset and
whose transaction starts before the end of the range; the search stops at the first entry
whose last stable offset reaches the end of the range (every later abort began after it).
"""

from __future__ import annotations

import logging
import os
import struct
from array import array
from typing import NamedTuple

from trilog.storage._files import remove, write_atomically

logger = logging.getLogger("trilog.storage")

ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
VERSION = 0
_FIELDS = 4  # producer_id, first_offset, last_offset, last_stable_offset: one array slot each


class AbortedTxn(NamedTuple):
    """An aborted transaction as a Fetch response carries it."""

    producer_id: int
    first_offset: int


class TxnIndexEntry(NamedTuple):
    """One entry of a ``.txnindex`` file."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    """The aborted transactions whose ABORT markers lie in one segment.

    Invariants: entries are in the order of their markers (``last_offset`` increasing); the
    file, when it exists, holds them (after ``flush``: a write that failed is redone there,
    whole); the entries are kept in memory too (four int64 slots each in an ``array``: an
    abort is rare, and a read_committed fetch must not wait for a file).

    Thread-safety: appends, truncation and resets come from one thread at a time (the log's
    append lock, or the cleaner that owns a segment not yet swapped in); ``collect`` and
    ``entries`` take no lock: an append extends the array in one step, a truncation or reset
    replaces it, so a reader sees a consistent list of whole entries.
    """

    def __init__(self, path: str, *, load: bool = True) -> None:
        self.path = path
        self._slots = array("q")
        self._unsynced = False  # entries written since the last fsync
        self._stale = False  # a write failed: the file must be rewritten from memory
        self._absent = False  # the file is known not to exist (``absent``)
        if load:
            self._load()

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        whole = len(data) - len(data) % ENTRY_SIZE
        slots = array("q")
        for version, pid, first, last, lso in ENTRY.iter_unpack(data[:whole]):
            if version != VERSION or (len(slots) and last <= slots[-2]):
                logger.warning("%s: entry %d is not a valid aborted transaction; the index is "
                               "cut there", self.path, len(slots) // _FIELDS)
                self._stale = True
                break
            slots.extend((pid, first, last, lso))
        if whole != len(data):
            logger.warning("%s: a torn entry at its end is dropped", self.path)
            self._stale = True
        self._slots = slots

    def __len__(self) -> int:
        return len(self._slots) // _FIELDS

    @property
    def last_offset(self) -> int | None:
        """The offset of the last ABORT marker indexed, or None."""
        slots = self._slots
        return slots[len(slots) // _FIELDS * _FIELDS - 2] if len(slots) >= _FIELDS else None

    def entries(self) -> list[TxnIndexEntry]:
        slots = self._slots
        n = len(slots) // _FIELDS * _FIELDS
        return [TxnIndexEntry(*slots[i : i + _FIELDS]) for i in range(0, n, _FIELDS)]

    # -- changes (one thread at a time) --------------------------------------------------

    def append(self, entry: TxnIndexEntry) -> None:
        """Index one aborted transaction whose marker follows every indexed one.  The entry
        is in memory at once; a failed file write is logged and redone by ``flush``."""
        last = self.last_offset
        if last is not None and entry.last_offset <= last:
            raise ValueError(f"aborted transaction at {entry.last_offset} does not follow the "
                             f"last one indexed, at {last}")
        self._slots.extend(entry)
        if self._stale:
            return
        self._absent = False
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, ENTRY.pack(VERSION, *entry))
            finally:
                os.close(fd)
            self._unsynced = True
        except OSError as exc:
            logger.warning("%s: cannot write an aborted transaction (%s); the index is "
                           "rewritten at the next flush", self.path, exc)
            self._stale = True

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or above ``offset`` (a truncated log)."""
        slots = self._slots
        keep = 0
        while keep < len(slots) and slots[keep + 2] < offset:
            keep += _FIELDS
        if keep == len(slots):
            return
        self._slots = slots[:keep]
        self._rewrite()

    def absent(self) -> None:
        """The file is known not to exist (a directory listing said so): a ``reset`` need
        not remove it (recovery resets the index of every segment it replays)."""
        if not len(self._slots):
            self._absent = True

    def reset(self) -> None:
        """Drop every entry (recovery rebuilds them) and the file."""
        self._slots = array("q")
        self._stale = self._unsynced = False
        if not self._absent:
            remove(self.path)
            self._absent = True

    def _rewrite(self) -> None:
        try:
            self._write_file()
        except OSError as exc:
            logger.warning("%s: cannot rewrite the index (%s); tried again at the next flush",
                           self.path, exc)
            self._stale = True

    def _write_file(self) -> None:
        data = b"".join(ENTRY.pack(VERSION, *e) for e in self.entries())
        if data:
            self._absent = False
            write_atomically(self.path, data)
        else:
            remove(self.path)
            self._absent = True
        self._stale = self._unsynced = False

    def flush(self) -> None:
        """Make the file hold every entry, durably (rewritten whole after a failed write)."""
        if self._stale:
            self._write_file()
        elif self._unsynced:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                self._write_file()
                return
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._unsynced = False

    def rename(self, path: str) -> None:
        """Give the file another name (the cleaner's ``.cleaned`` / ``.swap`` steps)."""
        if os.path.exists(self.path):
            os.rename(self.path, path)
        self.path = path
        self._absent = False  # (a stale file may have that name)

    # -- the read (no lock) --------------------------------------------------------------

    def collect(self, start: int, end: int) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions that overlap [``start``, ``end``): marker at or after
        ``start``, first offset before ``end`` (Kafka's ``collectAbortedTxns``); and whether
        the search is complete (an entry's last stable offset reached ``end``: no later
        segment holds one that overlaps)."""
        slots = self._slots
        n = len(slots) // _FIELDS
        # The markers are in order: find the first at or after start by bisection.
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            if slots[mid * _FIELDS + 2] < start:
                lo = mid + 1
            else:
                hi = mid
        found = []
        for i in range(lo * _FIELDS, n * _FIELDS, _FIELDS):
            if slots[i + 1] < end:
                found.append(AbortedTxn(slots[i], slots[i + 1]))
            if slots[i + 3] >= end:
                return found, True
        return found, False
