"""``LogSegment``: one ``<base offset>.log`` file with its ``.index``, ``.timeindex`` and (once a
transaction aborts in it) ``.txnindex``.

The log file is a plain concatenation of RecordBatch v2 batches exactly as produced, with
only their base offsets assigned.  The batch layout and the rule a header must pass come
from ``trilog.records`` (``check_batch_header``, ``batch_crc``): storage has no
copy of either.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from trilog._time import now_ms
from trilog.records import (
    HEADER_SIZE,
    BatchHeader,
    CorruptRecordsError,
    batch_crc,
    check_batch_header,
)
from trilog.storage._config import LogConfig
from trilog.storage._files import remove
from trilog.storage._index import IndexCorruptError, OffsetIndex, TimeIndex
from trilog.storage._open_files import SEGMENT_FILES
from trilog.storage._txn_index import TransactionIndex

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

#: Offsets of a segment are stored relative to its base offset in 32 bits (the indexes).
MAX_RELATIVE_OFFSET = 2**31 - 1

_SCAN_CHUNK = 16 * 1024
_RECOVERY_CHUNK = 4 * 1024 * 1024


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def walk_batches(
    fd: int, start: int, end: int, *, verify_crc: bool = False, chunk: int = _SCAN_CHUNK
) -> Iterator[tuple[int, int, BatchHeader]]:
    """Yield ``(position, size, header)`` for each batch of ``file[start:end]``, reading
    large chunks and decoding only headers.

    Stops silently at the first batch that is partial or whose header fails
    ``check_batch_header`` (a nonsense length, a wrong magic, counts that disagree, an
    unknown codec); with ``verify_crc`` also at the first with a bad CRC-32C.  The caller
    learns where the valid data ends from the last batch yielded.
    """
    buf = b""
    buf_start = start
    pos = start
    while end - pos >= HEADER_SIZE:
        rel = pos - buf_start
        if len(buf) - rel < HEADER_SIZE:
            # (No more than is left: a buffer of a MiB for a 78-byte segment is an mmap.)
            buf = os.pread(fd, max(min(chunk, end - pos), HEADER_SIZE), pos)
            buf_start, rel = pos, 0
            if len(buf) < HEADER_SIZE:
                return
        try:
            header = check_batch_header(buf, rel)
        except CorruptRecordsError:
            return
        size = header.size
        if pos + size > end:
            return
        if verify_crc:
            if len(buf) - rel < size:
                buf = os.pread(fd, max(min(chunk, end - pos), size), pos)
                buf_start, rel = pos, 0
                if len(buf) < size:
                    return
            if batch_crc(buf, rel, size) != header.crc:
                return
        yield pos, size, header
        pos += size


class LogSegment:
    """One segment of a partition's log: batches from ``base_offset`` up to ``next_offset``.

    Invariants: ``size`` is the committed length of the log file and ends on a batch
    boundary; batches hold increasing offsets, all >= ``base_offset`` and below
    ``base_offset + 2**31``; both indexes only point at committed batches; ``max_timestamp``
    is the largest batch max-timestamp (-1 when none), first reached at
    ``offset_of_max_timestamp``.

    Not thread-safe: the owning ``Log`` serialises appends, rolls, truncation and deletion
    under its lock.  Readers never use ``fd`` directly: they take their own descriptor with
    ``dup_fd`` (``None`` once the segment is closed), so closing or deleting a segment can
    never make a reader read another file that reused the descriptor number.

    The log file is opened lazily: ``fd`` opens it on first use, and the process's
    ``SEGMENT_FILES`` cache may close it again (``evict``) while nobody holds ``guard`` (the
    owning ``Log``'s append lock, which every user of ``fd`` holds); ``close`` is final.
    """

    def __init__(
        self, directory: str, base_offset: int, fd: int, size: int, config: LogConfig,
        suffix: str = "", *, load_txn_index: bool = True,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        stem = f"{directory}/{base_offset:020d}"  # (no os.path.join: 50,000 logs open at start)
        self.log_path = f"{stem}.log{suffix}"
        self.offset_index = OffsetIndex(f"{stem}.index{suffix}", base_offset,
                                        config.max_index_size)
        self.time_index = TimeIndex(f"{stem}.timeindex{suffix}", base_offset,
                                    config.max_index_size)
        #: The transactions aborted by markers in this segment (its file made on the first).
        self.txn_index = TransactionIndex(f"{stem}.txnindex{suffix}", load=load_txn_index)
        self.index_interval_bytes = config.index_interval_bytes
        self._fd = fd
        #: Who must be held to use ``fd`` (None: the cache never closes the file).
        self.guard: threading.Lock | None = None
        #: Used since the cache's clock last passed (see ``_open_files``).
        self.used = True
        self._pinned = False  # never evicted (unlinked files still read)
        self._opened_mtime_ms: int | None = None  # the log file's mtime when opened
        self._closed = False
        self._fd_lock = threading.Lock()
        self._io_lock = threading.Lock()  # a flush's index writes vs. delete's unlinks
        self._deleted = False
        self.size = size
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        #: When the first batch was appended (wall clock), for time-based rolling.
        self.rolling_ms: int | None = None
        self.bytes_since_last_index_entry = 0
        #: Either index is full: the segment must roll (kept current by every mutator).
        self.index_full = False

    def __repr__(self) -> str:
        return (
            f"LogSegment(base_offset={self.base_offset}, next_offset={self.next_offset}, "
            f"size={self.size})"
        )

    # -- opening -------------------------------------------------------------------------

    @classmethod
    def create(
        cls, directory: str, base_offset: int, config: LogConfig, suffix: str = ""
    ) -> LogSegment:
        """A new empty segment (any stale files of that name are replaced); with ``suffix``
        its files are named ``<base>.log<suffix>`` etc. (the log cleaner's ``.cleaned``)."""
        path = os.path.join(directory, segment_file_name(base_offset, ".log" + suffix))
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        segment = cls(directory, base_offset, fd, 0, config, suffix, load_txn_index=False)
        SEGMENT_FILES.opened(segment)
        try:
            segment.txn_index.reset()  # (a stale file of that name)
            segment.offset_index.reset()
            segment.time_index.reset()
            # The empty index files are written by the first flush (or roll, or close), as
            # every index entry is: two file creations fewer for each new partition.
            for index in (segment.offset_index, segment.time_index):
                if os.path.exists(index.path):  # a stale one
                    index.flush(fsync=False)
        except BaseException:
            segment.delete()
            raise
        return segment

    @classmethod
    def open(cls, directory: str, base_offset: int, config: LogConfig, *,
             load_txn_index: bool = True) -> LogSegment:
        """An existing segment, its log file opened on first use; indexes are loaded by the
        caller's choice of
        ``load_indexes`` (trusting) or ``recover`` (validating), and the ``.txnindex`` now
        (``load_txn_index=False``: the caller knows there is none)."""
        stat = os.stat(f"{directory}/{base_offset:020d}.log")
        segment = cls(directory, base_offset, -1, stat.st_size, config,
                      load_txn_index=load_txn_index)
        if not load_txn_index:
            segment.txn_index.absent()
        segment._opened_mtime_ms = stat.st_mtime_ns // 1_000_000  # (one stat, not two)
        return segment

    # -- the descriptor --------------------------------------------------------------------

    @property
    def fd(self) -> int:
        """The log file's descriptor, opened if the cache closed it.  Hold ``guard``."""
        fd = self._fd
        self.used = True
        if fd >= 0:
            return fd
        return self._reopen()

    def _reopen(self) -> int:
        with self._fd_lock:
            fd = self._fd
            if fd >= 0:
                return fd
            if self._closed:
                raise ValueError(f"{self.log_path} is closed")
            self._fd = fd = os.open(self.log_path, os.O_RDWR | os.O_APPEND)
        SEGMENT_FILES.opened(self)
        return fd

    def evict(self) -> bool:
        """The cache's: close the file (reopened on the next use) if its guard is free."""
        guard = self.guard
        if guard is None or self._pinned or not guard.acquire(blocking=False):
            return False
        try:
            with self._fd_lock:
                fd, self._fd = self._fd, -1
            if fd >= 0:
                os.close(fd)
        finally:
            guard.release()
        return True

    def release_fd(self) -> None:
        """Close the file until its next use, by its only user (the loader)."""
        if self._pinned:
            return
        with self._fd_lock:
            fd, self._fd = self._fd, -1
        if fd >= 0:
            SEGMENT_FILES.closed(self)
            os.close(fd)

    def load_indexes(self, files: int = 2) -> bool:
        """Load (or, if missing or corrupt, rebuild) the indexes of a trusted segment, then
        find ``next_offset`` and the max timestamp by walking the few batches after the last
        index entry.  Return False if the data does not end on a batch boundary or the
        indexes point past it (the caller then runs ``recover``).  ``files``: how many of the
        two index files the directory holds (0: a small segment's, rebuilt at once).
        """
        if not files:
            rebuilt = self.rebuild_indexes()
            if not len(self.offset_index):  # (else flush_indexes writes both files)
                self.offset_index.absent()
                self.time_index.absent()
            return rebuilt
        try:
            self.offset_index.load(self.size)
            self.time_index.load()
        except IndexCorruptError:
            return self.rebuild_indexes()
        self._update_index_full()
        if not self._load_tail():
            return False
        if self.time_index.last_entry[1] >= self.next_offset and len(self.time_index):
            return self.rebuild_indexes()
        self._init_rolling_ms()
        return True

    def _load_tail(self) -> bool:
        """Derive ``next_offset`` and the max timestamp from the indexes and the batches
        after the last offset index entry; False if they do not end at ``size``."""
        last_offset, position = self.offset_index.last_entry
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry
        self.next_offset = self.base_offset
        self.bytes_since_last_index_entry = 0
        end = position
        batches = walk_batches(self.fd, position, self.size) if position < self.size else ()
        for pos, size, header in batches:
            end = pos + size
            self.next_offset = header.last_offset + 1
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
        if len(self.offset_index) and self.next_offset <= last_offset:
            return False
        return end == self.size

    def _init_rolling_ms(self) -> None:
        """A reopened segment's age for rolling.  When its first batch was appended is not
        recorded, so count from the file's mtime (the last append): a reopened segment may
        roll late, never early, and client clocks play no part."""
        mtime, self._opened_mtime_ms = self._opened_mtime_ms, None
        if mtime is None:
            mtime = self.last_modified_ms
        self.rolling_ms = None if self.size == 0 else min(mtime, now_ms())

    def rebuild_indexes(self) -> bool:
        """Rebuild both indexes from a (trusted) walk of the batches; False if the data does
        not end on a batch boundary."""
        return self._scan(verify=False) == self.size

    def recover(self, min_offset: int) -> int:
        """Validate every batch, truncate at the first invalid one, rebuild the indexes.

        Invalid: partial, a header that fails ``check_batch_header``, a bad CRC, or
        offsets that do not increase (from ``min_offset``) or do not fit the relative 32-bit
        index.  Return the number of bytes truncated.
        """
        valid_end = self._scan(verify=True, min_offset=min_offset)
        truncated = self.size - valid_end
        if truncated:
            os.ftruncate(self.fd, valid_end)
            self.size = valid_end
        return truncated

    def _scan(self, *, verify: bool, min_offset: int | None = None) -> int:
        """Rebuild the indexes and the tail facts from every batch; the end of the last good
        one.  ``verify`` (recovery): CRCs checked too, and offsets must increase."""
        self.offset_index.reset()
        self.time_index.reset()
        self.index_full = False
        self.next_offset = self.base_offset
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
        self.bytes_since_last_index_entry = 0
        expected = self.base_offset if min_offset is None else max(min_offset, self.base_offset)
        limit = self.base_offset + MAX_RELATIVE_OFFSET
        valid_end = 0
        chunk = _RECOVERY_CHUNK if verify else _SCAN_CHUNK
        for pos, size, header in walk_batches(
            self.fd, 0, self.size, verify_crc=verify, chunk=chunk
        ):
            last = header.last_offset
            if verify and (header.base_offset < expected or last > limit):
                break
            self._index_batch(pos, size, last, header.max_timestamp)
            expected = last + 1
            valid_end = pos + size
        self.next_offset = expected if valid_end else self.base_offset
        self._init_rolling_ms()
        return valid_end

    def _index_batch(self, position: int, size: int, last_offset: int, max_ts: int) -> None:
        """Kafka's per-batch index step: one offset entry every ``index_interval_bytes``."""
        if max_ts > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = max_ts, last_offset
        if self.bytes_since_last_index_entry > self.index_interval_bytes and not self.index_full:
            # (A full index, e.g. after max_index_size was lowered, just stays sparser.)
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
            self._update_index_full()
        self.bytes_since_last_index_entry += size

    # -- appending -----------------------------------------------------------------------

    def would_overflow_index(self, last_offset: int) -> bool:
        return last_offset - self.base_offset > MAX_RELATIVE_OFFSET

    def should_roll(self, size: int, last_offset: int, now: int, config: LogConfig) -> bool:
        """Whether an append of ``size`` bytes ending at ``last_offset`` must go to a new
        segment (Kafka's ``LogSegment.shouldRoll``): its offsets would not fit the relative
        32-bit index, or this segment holds data and would grow past ``segment_bytes``, is
        ``segment_ms`` old (since its first append), or has a full index."""
        if last_offset - self.base_offset > MAX_RELATIVE_OFFSET:
            return True
        if self.size == 0:
            return False
        return (
            self.size + size > config.segment_bytes
            or now - (self.rolling_ms or now) >= config.segment_ms
            or self.index_full
        )

    def _update_index_full(self) -> None:
        self.index_full = self.offset_index.is_full or self.time_index.is_full

    def append(
        self,
        data: ReadableBuffer | list[ReadableBuffer],
        total: int,
        batches: list[tuple[int, int, int]],
        now: int,
        verify: Callable[[], None] | None = None,
    ) -> None:
        """Write ``data`` (a buffer, or a list of buffers for ``writev``) holding ``total``
        bytes, call ``verify()`` if given, then index ``batches``: ``(size, last_offset,
        max_timestamp)`` each.

        If the write or ``verify`` raises, the file is cut back to its committed size (no
        reader looks past it) and the error re-raised.
        """
        fd = self.fd
        start = self.size
        try:
            if isinstance(data, list):
                written = os.writev(fd, data)
                if written != total:
                    self._write_rest(data, written)
            else:
                written = os.write(fd, data)
                if written != total:
                    self._write_rest([data], written)
            if verify is not None:
                verify()
        except BaseException:
            try:
                os.ftruncate(fd, start)
            finally:
                raise
        if self.rolling_ms is None:
            self.rolling_ms = now
        position = start
        interval = self.index_interval_bytes
        since = self.bytes_since_last_index_entry
        for size, last_offset, max_ts in batches:
            if max_ts > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = max_ts, last_offset
            if since > interval and not self.index_full:
                self.offset_index.append(last_offset, position)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                self.index_full = self.offset_index.is_full or self.time_index.is_full
                since = 0
            position += size
            since += size
        self.bytes_since_last_index_entry = since
        self.size = position
        self.next_offset = last_offset + 1

    def _write_rest(self, parts: list[ReadableBuffer], written: int) -> None:
        """Finish a short write (rare for regular files: a signal or a full disk)."""
        for part in parts:
            view = memoryview(part)
            if written >= len(view):
                written -= len(view)
                continue
            view = view[written:]
            written = 0
            while view:
                n = os.write(self.fd, view)
                if n == 0:
                    raise OSError("short write to segment file")
                view = view[n:]

    # -- reading -------------------------------------------------------------------------

    def dup_fd(self) -> int | None:
        """A private descriptor of the log file for a reader, or None if closed (or, while
        the cache has it closed, deleted).  Not counted by the cache: the reader closes it."""
        with self._fd_lock:
            if self._closed:
                return None
            if self._fd >= 0:
                return os.dup(self._fd)
            try:
                return os.open(self.log_path, os.O_RDONLY)
            except FileNotFoundError:
                return None

    def translate_offset(
        self, fd: int, offset: int, max_position: int
    ) -> tuple[int, int, int] | None:
        """The first batch whose last offset is >= ``offset``: ``(position, size, base_offset)``,
        or None.  An index binary search and a short header walk."""
        _, start = self.offset_index.lookup(offset)
        for pos, size, header in walk_batches(fd, start, max_position):
            if header.last_offset >= offset:
                return pos, size, header.base_offset
        return None

    def read(
        self, fd: int, offset: int, max_bytes: int, max_position: int
    ) -> tuple[int, int, int] | None:
        """Locate a fetch of batches from ``offset`` within ``file[:max_position]``.

        Return ``(position, length, first_base_offset)`` or None if no batch here holds
        ``offset`` or later.  The range ends on a batch boundary and is at most ``max_bytes``
        long, except that the first batch is always included whole.
        """
        found = self.translate_offset(fd, offset, max_position)
        if found is None:
            return None
        start, first_size, first_base = found
        limit = start + max(max_bytes, 0)
        end = start + first_size
        if limit >= max_position:
            end = max(end, max_position)
        elif limit > end:
            # Jump close to the limit with the index, then walk the last few headers.
            end = max(end, self.offset_index.lookup_position(limit))
            for pos, size, _header in walk_batches(fd, end, max_position):
                if pos + size > limit:
                    break
                end = pos + size
        return start, end - start, first_base

    def find_by_timestamp(
        self, fd: int, timestamp: int, max_position: int
    ) -> tuple[int, int, int] | None:
        """The first batch whose max timestamp is >= ``timestamp``:
        ``(position, size, base_offset)`` or None."""
        offset = self.time_index.lookup(timestamp)
        _, start = self.offset_index.lookup(self.base_offset if offset is None else offset)
        for pos, size, header in walk_batches(fd, start, max_position):
            if header.max_timestamp >= timestamp:
                return pos, size, header.base_offset
        return None

    @property
    def largest_timestamp(self) -> int:
        """For time-based retention: the max timestamp, or the file's mtime if none."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return self.last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        try:
            return os.stat(self.log_path).st_mtime_ns // 1_000_000
        except FileNotFoundError:
            return 0

    # -- truncation, flushing, closing ----------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset is >= ``offset``; return the bytes dropped."""
        found = self.translate_offset(self.fd, offset, self.size)
        if found is None:
            return 0
        position = found[0]
        dropped = self.size - position
        os.ftruncate(self.fd, position)
        self.size = position
        self.offset_index.truncate_to_position(position)
        self.time_index.truncate_to_offset(found[2])
        self.txn_index.truncate_to(found[2])
        self._update_index_full()
        self._load_tail()
        if self.size == 0:
            self.rolling_ms = None
        return dropped

    def seal_time_index(self) -> None:
        """Record the final max timestamp in the time index (Kafka does the same at a roll
        and a close): the next opening walks only the batches after the last offset index
        entry.  Without such an entry it walks them all and finds the max itself, so no
        entry (and no file) is written for a segment of a few batches."""
        if len(self.offset_index):
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    def flush_indexes(self, fsync: bool = True) -> None:
        """Write both indexes' new entries (fsynced if ``fsync``).  An offset index without
        entries gets no file; a time index gets one whenever the offset index has entries
        (a missing one is then rebuilt at opening: its last entry may hold the segment's max
        timestamp, which time-based retention reads)."""
        self.offset_index.flush(fsync)
        self.time_index.flush(fsync, empty_file=len(self.offset_index) > 0)

    def on_become_inactive(self) -> None:
        """When rolled: record the final max timestamp and hand the index entries to the
        page cache."""
        self.seal_time_index()
        self.flush_indexes(fsync=False)

    def flush(self) -> None:
        """fsync the log file and write + fsync both indexes.  Safe against a concurrent
        ``close`` (a closed segment is skipped)."""
        with self._io_lock:
            if self._deleted:
                return
            fd = self.dup_fd()
            if fd is None:
                return
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self.flush_indexes()
            self.txn_index.flush()

    def close(self) -> None:
        """Close the log file's descriptor (readers' dups stay valid)."""
        with self._fd_lock:
            fd, self._fd = self._fd, -1
            self._closed = True
        if fd >= 0:
            SEGMENT_FILES.closed(self)
            os.close(fd)

    def delete(self) -> None:
        """Close and unlink its files (only close, if ``unlink_files`` already ran:
        their names may belong to another segment by now)."""
        with self._io_lock:
            deleted, self._deleted = self._deleted, True
            self.close()
            if not deleted:
                for path in self._paths():
                    remove(path)

    def unlink_files(self) -> None:
        """Unlink its files but keep the descriptor open, for the log cleaner's swap:
        readers of the published segment list keep reading until the swap publishes the new
        list; ``close`` comes after.  A flush of this segment does nothing from now on."""
        with self._io_lock:
            self._deleted = True
            self.pin()
            for path in self._paths():
                remove(path)

    def pin(self) -> None:
        """Keep the file open until ``close`` (opening it now if the cache had closed it)."""
        with self._fd_lock:
            self._pinned = True
        if not self._closed:
            self._reopen()

    def change_suffix(self, old: str, new: str) -> None:
        """Rename its files from ``<name><old>`` to ``<name><new>`` (Kafka's
        ``changeFileSuffixes``): the indexes first, the log file last, so that the log's
        name says how far a rename got."""
        for index in (self.offset_index, self.time_index):
            target = _with_suffix(index.path, old, new)
            try:
                os.rename(index.path, target)
            except FileNotFoundError:
                if index.written:
                    raise
            index.path = target  # (an index never written has no file yet)
        self.txn_index.rename(_with_suffix(self.txn_index.path, old, new))
        self.log_path = _renamed(self.log_path, old, new)

    def set_last_modified(self, ms: int) -> None:
        """Give the log file this modification time (a cleaned segment keeps its sources'
        last one: it decides the cleaner's tombstone horizon and time-based retention)."""
        os.utime(self.log_path, ns=(ms * 1_000_000, ms * 1_000_000))

    def _paths(self) -> tuple[str, str, str, str]:
        return self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path


def _with_suffix(path: str, old: str, new: str) -> str:
    if not path.endswith(old):
        raise ValueError(f"{path} does not end with {old!r}")
    return path[: len(path) - len(old)] + new


def _renamed(path: str, old: str, new: str) -> str:
    target = _with_suffix(path, old, new)
    os.rename(path, target)
    return target
