"""The offset manager: committed offsets as records of ``__consumer_offsets``, cached in memory.

Records are Kafka's (``GroupMetadataManager``), so the topic reads the same as Kafka's::

    key   (version 0 or 1: an offset commit; 2: group metadata, which trilog skips on load)
        int16 version | string group | string topic | int32 partition
    value (null: a tombstone, the offset is deleted)
        v0: int16 version | int64 offset | string metadata | int64 timestamp
        v1: int16 version | int64 offset | string metadata | int64 commit ts | int64 expire ts
        v2: int16 version | int64 offset | string metadata | int64 commit ts
        v3: int16 version | int64 offset | int32 leader epoch | string metadata | int64 commit ts

    (strings: int16 length, then UTF-8; big-endian throughout)

trilog writes value v3, or v1 when the commit asked for its own retention (OffsetCommit
v2-4 ``retention_time_ms``), as Kafka 2.1+ does.

A group's offsets live in partition ``abs(java hashCode(group)) % partitions`` (see
``partition_for``), led by the group's coordinator.  A partition is **loaded** (read from
its log start to its end, later records winning) before its groups are served; meanwhile
their requests get COORDINATOR_LOAD_IN_PROGRESS.

**Compaction** keeps only the latest record per key: once a partition's log is larger than
``offsets.topic.segment.bytes`` and twice its last snapshot, a snapshot of the cache is
appended to a fresh segment and every segment before it is deleted.  A crash at any point
leaves a log that loads to the same cache (the old records are still there, or the
snapshot repeats them).

Appends to one partition are serialised by a trio lock (commits, tombstones, snapshots), so
the cache and the log agree; the log work runs in worker threads.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import trio

from trilog.broker._limits import RateLimitedLog
from trilog.errors import (
    ApiError,
    CorruptMessageError,
    InvalidFetchSizeError,
    MessageTooLargeError,
    RecordListTooLargeError,
)
from trilog.records import CorruptRecordsError, RecordBatchBuilder, iter_batches
from trilog.storage import Log, LogConfig, LogManager

log = logging.getLogger("trilog.broker.offsets")
#: A full disk fails every commit: one line per partition and minute.
_storage_faults = RateLimitedLog(log, 60.0)

OFFSETS_TOPIC = "__consumer_offsets"

# Error codes the offset manager answers with (trilog.errors holds the classes).
NONE = 0
UNKNOWN_SERVER_ERROR = -1
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_COMMIT_OFFSET_SIZE = 28

#: Snapshot and tombstone batches are cut at this size (well under ``message.max.bytes``).
SNAPSHOT_BATCH_BYTES = 256 * 1024
#: How much of the log one read takes while loading.
LOAD_READ_BYTES = 1 << 20

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

TopicPartition = tuple[str, int]


# -- the partition of a group -----------------------------------------------------------------


def java_string_hashcode(text: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units,
    as a signed 32-bit int."""
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % groupMetadataTopicPartitionCount``."""
    h = java_string_hashcode(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# -- the record format ------------------------------------------------------------------------


class OffsetAndMetadata(NamedTuple):
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    #: Only when the commit asked for its own retention (value v1); else -1.
    expire_timestamp: int = -1


class OffsetKey(NamedTuple):
    group: str
    topic: str
    partition: int


def _string(text: str) -> bytes:
    data = text.encode()
    if len(data) > 0x7FFF:
        raise ValueError("string longer than 32767 bytes")
    return _I16.pack(len(data)) + data


class _Cursor:
    """Reads big-endian fields; any short read is ``ValueError``."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, s: struct.Struct) -> int:
        if self.pos + s.size > len(self.data):
            raise ValueError("record shorter than its fields")
        (value,) = s.unpack_from(self.data, self.pos)
        self.pos += s.size
        return value

    def string(self) -> str:
        n = self.take(_I16)
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("bad string length")
        text = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return text


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    return _I16.pack(1) + _string(group) + _string(topic) + _I32.pack(partition)


def encode_offset_value(om: OffsetAndMetadata) -> bytes:
    if om.expire_timestamp >= 0:
        return (_I16.pack(1) + _I64.pack(om.offset) + _string(om.metadata)
                + _I64.pack(om.commit_timestamp) + _I64.pack(om.expire_timestamp))
    return (_I16.pack(3) + _I64.pack(om.offset) + _I32.pack(om.leader_epoch)
            + _string(om.metadata) + _I64.pack(om.commit_timestamp))


def decode_key(data: bytes) -> OffsetKey | str | None:
    """An ``OffsetKey``, the group id of a group-metadata key (version 2), or None for a
    key version this broker does not know.  ``ValueError`` if malformed."""
    cur = _Cursor(data)
    version = cur.take(_I16)
    if version in (0, 1):
        return OffsetKey(cur.string(), cur.string(), cur.take(_I32))
    if version == 2:
        return cur.string()
    return None


def decode_offset_value(data: bytes) -> OffsetAndMetadata:
    """Value versions 0-3; ``ValueError`` for anything else."""
    cur = _Cursor(data)
    version = cur.take(_I16)
    if version == 0:
        offset, metadata = cur.take(_I64), cur.string()
        return OffsetAndMetadata(offset, -1, metadata, cur.take(_I64))
    if version == 1:
        offset, metadata = cur.take(_I64), cur.string()
        commit, expire = cur.take(_I64), cur.take(_I64)
        return OffsetAndMetadata(offset, -1, metadata, commit, expire)
    if version == 2:
        offset, metadata = cur.take(_I64), cur.string()
        return OffsetAndMetadata(offset, -1, metadata, cur.take(_I64))
    if version == 3:
        offset, epoch, metadata = cur.take(_I64), cur.take(_I32), cur.string()
        return OffsetAndMetadata(offset, epoch, metadata, cur.take(_I64))
    raise ValueError(f"unknown offset value version {version}")


def build_batches(entries: Iterable[tuple[bytes, bytes | None]], now_ms: int,
                  max_bytes: int = SNAPSHOT_BATCH_BYTES) -> list[bytes]:
    """``(key, value or None)`` pairs as v2 batches of at most about ``max_bytes`` each."""
    out = []
    builder = RecordBatchBuilder(max_bytes=max_bytes)
    for key, value in entries:
        if builder.append(now_ms, key, value) is None:
            out.append(builder.build())
            builder = RecordBatchBuilder(max_bytes=max_bytes)
            builder.append(now_ms, key, value)
    if len(builder):
        out.append(builder.build())
    return out


def read_offsets(lg: Log) -> dict[str, dict[TopicPartition, OffsetAndMetadata]]:
    """Blocking: replay a partition of the offsets topic into ``{group: {tp: offset}}``.

    Later records win; tombstones delete; group-metadata records and records this broker
    cannot parse are skipped (with a warning for the latter)."""
    groups: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
    offset = lg.log_start_offset
    end = lg.log_end_offset
    skipped = 0
    while offset < end:
        with lg.read(offset, LOAD_READ_BYTES) as slc:
            data = slc.read()
        if not data:
            break
        for batch in iter_batches(data):
            if batch.next_offset <= offset:
                continue
            try:
                records = batch.records()
            except CorruptRecordsError:
                skipped += batch.record_count
                records = []
            for record in records:
                if record.key is None:
                    continue
                try:
                    key = decode_key(record.key)
                    if not isinstance(key, OffsetKey):
                        continue
                    tp = (key.topic, key.partition)
                    if record.value is None:
                        offsets = groups.get(key.group)
                        if offsets is not None:
                            offsets.pop(tp, None)
                            if not offsets:
                                del groups[key.group]
                        continue
                    groups.setdefault(key.group, {})[tp] = decode_offset_value(record.value)
                except ValueError:  # UnicodeDecodeError included
                    skipped += 1
            offset = batch.next_offset
    if skipped:
        log.warning("%s-%d: skipped %d records that are not offset commits of a known format",
                    lg.topic, lg.partition, skipped)
    return groups


# -- the manager ----------------------------------------------------------------------------


@dataclass(eq=False)
class OffsetsPartition:
    """One partition of the offsets topic that this broker coordinates."""

    index: int
    loaded: bool = False
    offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = field(default_factory=dict)
    lock: trio.Lock = field(default_factory=trio.Lock)
    snapshot_bytes: int = 0  # size of the last snapshot: compaction waits for twice that
    compactions: int = 0


class OffsetManager:
    """Committed offsets of the groups whose offsets partitions this broker leads.

    Runs in the trio thread (not thread-safe); log I/O goes to worker threads through
    ``limiter``.  ``begin_load``/``load`` take a partition on, ``unload`` lets it go.
    """

    def __init__(self, logs: LogManager, limiter: trio.CapacityLimiter, *,
                 segment_bytes: int, retention_ms: int) -> None:
        self.logs = logs
        self.limiter = limiter
        self.segment_bytes = segment_bytes
        self.retention_ms = retention_ms
        self.partitions: dict[int, OffsetsPartition] = {}

    @staticmethod
    def topic_config(base: LogConfig, segment_bytes: int) -> LogConfig:
        """The offsets topic's log settings: compacted by us, never deleted by time or size."""
        return base.replace(segment_bytes=segment_bytes, retention_ms=-1, retention_bytes=-1)

    # -- ownership ----------------------------------------------------------------------------

    def owned(self) -> set[int]:
        return set(self.partitions)

    def is_loaded(self, partition: int) -> bool:
        part = self.partitions.get(partition)
        return part is not None and part.loaded

    def is_loading(self) -> bool:
        return any(not p.loaded for p in self.partitions.values())

    def begin_load(self, partition: int) -> None:
        """Mark the partition as ours and loading (its groups wait for ``load``)."""
        self.partitions.setdefault(partition, OffsetsPartition(partition))

    async def load(self, partition: int) -> None:
        part = self.partitions.get(partition)
        if part is None or part.loaded:
            await trio.lowlevel.checkpoint()
            return
        lg = self.logs.get_log(OFFSETS_TOPIC, partition)
        started = time.monotonic()
        async with part.lock:
            try:
                if lg is not None:
                    offsets = await trio.to_thread.run_sync(read_offsets, lg,
                                                            limiter=self.limiter)
                    part.snapshot_bytes = lg.size_in_bytes // 2
                else:
                    offsets = {}
            except Exception:
                # Not this broker's to serve for now; the coordinator's watcher tries again.
                log.exception("loading %s-%d failed", OFFSETS_TOPIC, partition)
                if self.partitions.get(partition) is part:
                    del self.partitions[partition]
                return
            if self.partitions.get(partition) is not part:
                return  # unloaded meanwhile
            part.offsets = offsets
            part.loaded = True
        log.info("loaded offsets of %d groups from %s-%d in %.3f s", len(offsets),
                 OFFSETS_TOPIC, partition, time.monotonic() - started)

    def unload(self, partition: int) -> None:
        self.partitions.pop(partition, None)

    # -- reads ---------------------------------------------------------------------------------

    def fetch(self, partition: int, group: str) -> dict[TopicPartition, OffsetAndMetadata]:
        part = self.partitions.get(partition)
        if part is None or not part.loaded:
            return {}
        return dict(part.offsets.get(group, {}))

    def groups(self) -> set[str]:
        """Every group with committed offsets in a loaded partition."""
        return {g for p in self.partitions.values() if p.loaded for g in p.offsets}

    def has_offsets(self, partition: int, group: str) -> bool:
        part = self.partitions.get(partition)
        return part is not None and bool(part.offsets.get(group))

    # -- writes --------------------------------------------------------------------------------

    async def commit(self, partition: int, group: str,
                     offsets: dict[TopicPartition, OffsetAndMetadata]) -> int:
        """Append the offsets, then cache them; return the error code for all of them."""
        part = self.partitions.get(partition)
        if part is None or not part.loaded:
            await trio.lowlevel.checkpoint()
            return NOT_COORDINATOR
        now = _now_ms()
        entries = [(encode_offset_key(group, t, p), encode_offset_value(om))
                   for (t, p), om in offsets.items()]
        async with part.lock:
            if self.partitions.get(partition) is not part:
                return NOT_COORDINATOR
            # One batch: the commit is all or nothing, as in Kafka.
            code = await self._append(partition, build_batches(entries, now, max_bytes=None))
            if code:
                return code
            part.offsets.setdefault(group, {}).update(offsets)
            await self._maybe_compact(part)
        return NONE

    async def expire(self, partition: int, now_ms: int,
                     has_members: Callable[[str], bool]) -> int:
        """Delete (tombstone) the offsets past their retention of groups without members;
        return how many."""
        part = self.partitions.get(partition)
        if part is None or not part.loaded:
            await trio.lowlevel.checkpoint()
            return 0
        async with part.lock:
            expired: list[tuple[str, TopicPartition]] = []
            for group, offsets in part.offsets.items():
                if has_members(group):
                    continue
                for tp, om in offsets.items():
                    deadline = (om.expire_timestamp if om.expire_timestamp >= 0
                                else om.commit_timestamp + self.retention_ms)
                    if deadline <= now_ms:
                        expired.append((group, tp))
            if not expired:
                await trio.lowlevel.checkpoint()
                return 0
            entries = [(encode_offset_key(g, t, p), None) for g, (t, p) in expired]
            code = await self._append(partition, build_batches(entries, now_ms))
            if code:
                log.warning("could not write %d offset tombstones to %s-%d (error %d)",
                            len(expired), OFFSETS_TOPIC, partition, code)
                return 0
            for group, tp in expired:
                offsets = part.offsets.get(group)
                if offsets is not None:
                    offsets.pop(tp, None)
                    if not offsets:
                        del part.offsets[group]
            log.info("expired %d offsets in %s-%d", len(expired), OFFSETS_TOPIC, partition)
            await self._maybe_compact(part)
            return len(expired)

    async def _append(self, partition: int, batches: list[bytes]) -> int:
        lg = self.logs.get_log(OFFSETS_TOPIC, partition)
        if lg is None:
            await trio.lowlevel.checkpoint()
            return NOT_COORDINATOR
        try:
            await trio.to_thread.run_sync(_append_all, lg, batches, limiter=self.limiter)
        except (MessageTooLargeError, RecordListTooLargeError, InvalidFetchSizeError):
            return INVALID_COMMIT_OFFSET_SIZE
        except CorruptMessageError:
            log.exception("offsets batch refused by %s-%d", OFFSETS_TOPIC, partition)
            return UNKNOWN_SERVER_ERROR
        except ApiError as exc:
            return exc.code
        except OSError as exc:  # a full or failing disk: the client retries later
            _storage_faults.error(partition, "append to %s-%d failed: %s", OFFSETS_TOPIC,
                                  partition, exc)
            return COORDINATOR_NOT_AVAILABLE
        except Exception:
            # A closed log (shutdown): the client retries elsewhere/later.
            log.exception("append to %s-%d failed", OFFSETS_TOPIC, partition)
            return COORDINATOR_NOT_AVAILABLE
        return NONE

    async def _maybe_compact(self, part: OffsetsPartition) -> None:
        """Under ``part.lock``: snapshot and drop old segments if the log outgrew the cache."""
        lg = self.logs.get_log(OFFSETS_TOPIC, part.index)
        if lg is None:
            return
        size = lg.size_in_bytes
        if size < self.segment_bytes or size < 2 * part.snapshot_bytes:
            return
        now = _now_ms()
        entries = [(encode_offset_key(g, t, p), encode_offset_value(om))
                   for g, offsets in part.offsets.items() for (t, p), om in offsets.items()]
        batches = build_batches(entries, now)
        try:
            written, deleted = await trio.to_thread.run_sync(_snapshot, lg, batches,
                                                             limiter=self.limiter)
        except Exception:
            log.exception("compaction of %s-%d failed", OFFSETS_TOPIC, part.index)
            return
        part.snapshot_bytes = written
        part.compactions += 1
        log.info("compacted %s-%d: %d offsets in %d bytes, %d old segments deleted (%d bytes "
                 "before)", OFFSETS_TOPIC, part.index, len(entries), written, len(deleted), size)


def _append_all(lg: Log, batches: list[bytes]) -> None:
    for batch in batches:
        lg.append(batch)


def _snapshot(lg: Log, batches: list[bytes]) -> tuple[int, list[int]]:
    """Blocking: a fresh segment, the snapshot in it, then everything before it deleted."""
    start = lg.roll()
    written = 0
    for batch in batches:
        written += lg.append(batch).size_in_bytes
    return written, lg.delete_segments_before(start)


def _now_ms() -> int:
    return int(time.time() * 1000)
