"""The steps of ``Log.append`` that need no lock: check an append buffer's batch headers,
check their CRCs (at once, or with a software CRC in a helper thread while the bytes are
written), and plan the write with offsets assigned or kept.

An append buffer is one or more RecordBatch v2 batches (a produce request's ``records``).
Each batch is checked once, from its 61-byte header (``trilog.records.check_batch_header``)
and its CRC-32C; no record is decoded.  Offsets are assigned by patching only each batch's
8-byte base offset, which the CRC does not cover; a leader stamps its epoch the same way
into the 4-byte ``partition_leader_epoch`` (bytes 12-15, not covered either).

Who appends (``AppendOrigin``) decides what is allowed and checked: a client may not write
control batches, and only its batches' sequence numbers are checked; ``producer_batches``
reads what the producer state needs of each batch (its header's producer fields, a control
batch's marker), so that the common append, of batches without a producer id, costs one
unpacking per batch and nothing under the lock.
"""

from __future__ import annotations

import enum
import os
import struct
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

from trilog.errors import CorruptMessageError, InvalidRecordError, MessageTooLargeError
from trilog.records import (
    CONTROL_MASK,
    CRC32C_HARDWARE,
    HEADER_SIZE,
    LOG_OVERHEAD,
    PARTITION_LEADER_EPOCH_OFFSET,
    EndTxnMarker,
    batch_crc,
    check_batch_header_fields,
    read_end_txn_marker,
    stamp_log_append_time,
)

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

_OFFSET = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")
_EPOCH_END = PARTITION_LEADER_EPOCH_OFFSET + 4
#: Up to this many batches per append are written with ``writev`` (no copy at all).
_MAX_IOVECS_BATCHES = 256
#: From this many bytes on, the CRC-32C check runs in a helper thread while the bytes are
#: written (both release the GIL); a bad CRC cuts the uncommitted write off again.  Only
#: with a software CRC (crcmod: ~2 ms per MiB, longer than the write): the hardware one
#: checks a MiB in ~40 us, less than handing it to a helper thread and waiting for its
#: answer costs, so with it every append checks its CRCs before writing.
OVERLAP_CRC_BYTES = sys.maxsize if CRC32C_HARDWARE else 256 * 1024

class AppendOrigin(enum.Enum):
    """Who appends (Kafka's ``AppendOrigin``).

    ``CLIENT``: a producer (control batches refused, sequence numbers checked, a resent
    batch answered with its first offset); ``COORDINATOR``: the transaction coordinator's
    markers and the group coordinator's offset commits (control batches allowed, producer
    epochs and coordinator epochs checked, sequence numbers not); ``REPLICATION``: a
    follower copying its leader (``Log.append(assign_offsets=False)``: nothing checked,
    everything recorded).
    """

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


#: ``(position in the buffer, size, base_offset, last_offset_delta, max_timestamp, crc)``
#: of each batch of an append buffer: what the later steps need of its header, as a plain
#: tuple that they unpack into locals (the hot path).
Batches = list[tuple[int, int, int, int, int, int]]


def check_batches(
    mv: memoryview, max_message_bytes: int, assign_offsets: bool, check_crcs: bool
) -> Batches:
    """Walk and check every batch of an append buffer, from its header (and with
    ``check_crcs`` its CRC-32C: a large append leaves that to ``OverlappedCrcCheck``).

    Each header must pass ``check_batch_header`` (with Kafka's producer rule when the
    log assigns the offsets), the batches must fill the buffer exactly, none may be larger
    than ``max_message_bytes``, and kept offsets must not go backwards.
    """
    total = len(mv)
    if total == 0:
        raise CorruptMessageError("append of an empty record set")
    batches: Batches = []
    pos = 0
    next_offset = -1
    while pos < total:
        if total - pos < HEADER_SIZE:
            raise CorruptMessageError(f"{total - pos} trailing bytes are not a record batch")
        (base, length, _e, _m, crc, _a, delta, _ft, max_ts, _p, _pe, _s, _count) = (
            check_batch_header_fields(mv, pos, assign_offsets)  # from_producer: assign_offsets
        )
        size = length + LOG_OVERHEAD
        if pos + size > total:
            raise CorruptMessageError("record batch extends past the end of the request")
        if size > max_message_bytes:
            raise MessageTooLargeError(
                f"record batch of {size} bytes exceeds the limit of {max_message_bytes}"
            )
        if not assign_offsets:
            if base < next_offset:
                raise CorruptMessageError("record batch offsets out of order")
            next_offset = base + delta + 1
        if check_crcs and batch_crc(mv, pos, size) != crc:
            raise CorruptMessageError(_crc_complaint(pos))
        batches.append((pos, size, base, delta, max_ts, crc))
        pos += size
    return batches


# -- CRCs ----------------------------------------------------------------------------------


def _crc_complaint(position: int) -> str:
    return f"record batch at byte {position} of the append fails its CRC-32C"


def _crc_error(mv: memoryview, batches: Batches) -> str | None:
    """Check every batch's CRC-32C; the complaint, or None.  (Returns rather than raises so
    that a helper thread's future holds no traceback, hence no reference to the buffer.)"""
    for pos, size, _base, _delta, _max_ts, crc in batches:
        if batch_crc(mv, pos, size) != crc:
            return _crc_complaint(pos)
    return None


def _crc_job(job: list[Any]) -> str | None:
    """The helper's side: ``job`` is ``[mv, batches]``, emptied by the appender once done,
    so the executor's work item never keeps the caller's buffer exported."""
    return _crc_error(*job) if job else None


_crc_pool_lock = threading.Lock()
_crc_pool: tuple[int, ThreadPoolExecutor] | None = None


def _crc_executor() -> ThreadPoolExecutor:
    """The CRC helper threads of this process (recreated after a fork)."""
    global _crc_pool
    pool = _crc_pool
    if pool is not None and pool[0] == os.getpid():
        return pool[1]
    with _crc_pool_lock:
        if _crc_pool is None or _crc_pool[0] != os.getpid():
            _crc_pool = (
                os.getpid(),
                ThreadPoolExecutor(max_workers=2, thread_name_prefix="trilog-crc"),
            )
        return _crc_pool[1]


class OverlappedCrcCheck:
    """The CRC-32C check of a large append, started in a helper thread before the write.

    ``verify()`` (called by the segment after its write) takes the helper's verdict, or
    checks itself if the helper never got a CPU meanwhile, so a busy machine costs no more
    than checking before writing.  ``release()`` (always, in a ``finally``) lets the helper
    let go of the buffer if ``verify`` never ran.  Used by one appender thread.
    """

    __slots__ = ("_future", "_job")

    def __init__(self, mv: memoryview, batches: Batches) -> None:
        self._job: list[Any] = [mv, batches]  # emptied when done
        self._future: Future[str | None] | None = _crc_executor().submit(_crc_job, self._job)

    def verify(self) -> None:
        future, self._future = self._future, None
        assert future is not None, "verify() runs once"
        try:
            error = _crc_error(*self._job) if future.cancel() else future.result()
        finally:
            self._job.clear()
        if error is not None:
            raise CorruptMessageError(error)

    def release(self) -> None:
        future, self._future = self._future, None
        if future is not None:  # failed before the write
            future.cancel()
            wait([future])
            self._job.clear()


# -- offsets -------------------------------------------------------------------------------


#: What to write and what the segment indexes, as ``assign_offsets`` and ``keep_offsets``
#: return it: ``(data, batches, first_offset, last_offset, record_count, max_timestamp,
#: offset_of_max_timestamp)`` where ``data`` is one buffer or a list of them for
#: ``writev``, ``batches`` holds ``(size, last_offset, max_timestamp)`` per batch,
#: ``record_count`` the offsets the batches take (the sum of ``last_offset_delta + 1``),
#: ``max_timestamp`` is -1 when no batch carries one, and ``offset_of_max_timestamp`` is the
#: last offset of the batch that first reached it.  A plain tuple, unpacked at once by the
#: caller (a named tuple costs a fifth of a microsecond more per append: the hot path).
WritePlan = tuple[
    "ReadableBuffer | list[ReadableBuffer]", list[tuple[int, int, int]], int, int, int, int, int
]


def assign_offsets(
    mv: memoryview, batches: Batches, first_offset: int, leader_epoch: int | None = None
) -> WritePlan:
    """The write of ``batches`` with offsets from ``first_offset`` on: each batch's base
    offset patched (and with ``leader_epoch`` its ``partition_leader_epoch``, which the CRC
    does not cover either), the rest untouched.  Up to ``_MAX_IOVECS_BATCHES`` batches are
    written with ``writev`` from the caller's buffer (the patched fields beside the
    untouched bytes: no copy); more as one patched copy (fewer system-call vectors)."""
    infos = []
    offset = first_offset
    best_ts, best_offset = -1, first_offset
    data: list[ReadableBuffer] | bytearray
    if len(batches) <= _MAX_IOVECS_BATCHES:
        data = []
        if leader_epoch is None:
            pack = _OFFSET.pack
            for pos, size, _base, delta, max_ts, _crc in batches:
                data.append(pack(offset))
                data.append(mv[pos + 8 : pos + size])
                offset += delta + 1
                infos.append((size, offset - 1, max_ts))
                if max_ts > best_ts:
                    best_ts, best_offset = max_ts, offset - 1
        else:
            # base offset, batch length (unchanged), partition leader epoch: one vector.
            pack_head = _OFFSET_LENGTH_EPOCH.pack
            for pos, size, _base, delta, max_ts, _crc in batches:
                data.append(pack_head(offset, size - LOG_OVERHEAD, leader_epoch))
                data.append(mv[pos + _EPOCH_END : pos + size])
                offset += delta + 1
                infos.append((size, offset - 1, max_ts))
                if max_ts > best_ts:
                    best_ts, best_offset = max_ts, offset - 1
    else:
        data = bytearray(mv)  # the one copy, for many small batches
        pack_into = _OFFSET.pack_into
        for pos, size, _base, delta, max_ts, _crc in batches:
            pack_into(data, pos, offset)
            if leader_epoch is not None:
                _EPOCH.pack_into(data, pos + PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
            offset += delta + 1
            infos.append((size, offset - 1, max_ts))
            if max_ts > best_ts:
                best_ts, best_offset = max_ts, offset - 1
    return data, infos, first_offset, offset - 1, offset - first_offset, best_ts, best_offset


def assign_offsets_stamped(
    mv: memoryview, batches: Batches, first_offset: int, now_ms: int,
    leader_epoch: int | None = None,
) -> WritePlan:
    """``assign_offsets`` for a log with ``message.timestamp.type=LogAppendTime``: each
    batch also stamped with ``now_ms`` (``stamp_log_append_time``: the attribute bit, the
    max timestamp, a new CRC-32C), in one copy of the buffer.  The caller has checked the
    producer's CRCs first: a new CRC must never bless corrupt bytes.  ``leader_epoch`` as
    for ``assign_offsets``."""
    data = bytearray(mv)
    pack_into = _OFFSET.pack_into
    infos = []
    offset = first_offset
    for pos, size, _base, delta, _max_ts, _crc in batches:
        pack_into(data, pos, offset)
        if leader_epoch is not None:
            _EPOCH.pack_into(data, pos + PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
        stamp_log_append_time(data, pos, size, now_ms)
        offset += delta + 1
        infos.append((size, offset - 1, now_ms))
    # Every batch has the same max timestamp: the first batch reaches it (the time index's
    # rule, as for CreateTime).
    best_offset = infos[0][1]
    return data, infos, first_offset, offset - 1, offset - first_offset, now_ms, best_offset


def batch_epochs(mv: memoryview, batches: Batches) -> list[tuple[int, int]]:
    """``(partition_leader_epoch, base_offset)`` of each batch: what a follower's append
    records in the leader-epoch cache."""
    unpack = _EPOCH.unpack_from
    return [(unpack(mv, pos + PARTITION_LEADER_EPOCH_OFFSET)[0], base) for pos, _s, base, _d, _m, _c in batches]


def keep_offsets(mv: memoryview, batches: Batches) -> WritePlan:
    """The write of ``batches`` as they are, with the offsets they carry (replication)."""
    infos = [(size, base + delta, max_ts) for _pos, size, base, delta, max_ts, _crc in batches]
    records = sum(b[3] + 1 for b in batches)
    first_offset = batches[0][2]
    best_ts, best_offset = -1, first_offset
    for _size, last, max_ts in infos:
        if max_ts > best_ts:
            best_ts, best_offset = max_ts, last
    return mv, infos, first_offset, infos[-1][1], records, best_ts, best_offset


# -- producers -----------------------------------------------------------------------------

#: What the producer state needs of one batch: ``(base_offset, last_offset_delta,
#: attributes, producer_id, producer_epoch, base_sequence, max_timestamp, marker)``, the
#: marker being a control batch's ``EndTxnMarker`` (None for a data batch or an emptied
#: control batch).  In an append whose offsets the log assigns, ``base_offset`` is relative
#: to the append's first offset.  A plain tuple: the idempotent producers' path.
ProducerBatch = tuple[int, int, int, int, int, int, int, "EndTxnMarker | None"]

#: From the attributes on: attributes, (last_offset_delta, first_timestamp, max_timestamp),
#: producer_id: what tells a batch without a producer id (the common case) at least cost.
_ATTRIBUTES_AND_PRODUCER = struct.Struct(">h20xq")
#: From the max timestamp on: max_timestamp, producer_id, producer_epoch, base_sequence.
_PRODUCER_FIELDS = struct.Struct(">qqhi")
_ATTRIBUTES_OFFSET = 21
_MAX_TIMESTAMP_OFFSET = 35


def producer_batches(mv: memoryview, batches: Batches, assign: bool, origin: AppendOrigin
                     ) -> list[ProducerBatch] | None:
    """The batches of an append that concern the producer state (a producer id, or a
    control batch), or None when none does (the common case: one unpacking per batch).

    A client's append (``origin`` CLIENT, offsets assigned) is refused
    (``InvalidRecordError``) if it holds a control batch (Kafka: "clients are not allowed to
    write control records") or a batch with a producer id and no sequence number.  A control
    batch's marker is read here, outside the log's lock: ``CorruptMessageError`` if it is
    malformed.
    """
    out: list[ProducerBatch] | None = None
    client = assign and origin is AppendOrigin.CLIENT
    rel = 0
    unpack = _ATTRIBUTES_AND_PRODUCER.unpack_from
    for pos, _size, base, delta, _max_ts, _crc in batches:
        attributes, pid = unpack(mv, pos + _ATTRIBUTES_OFFSET)
        if attributes & CONTROL_MASK and client:
            raise InvalidRecordError("clients are not allowed to write control records")
        if pid < 0:  # no producer: nothing to check or record
            rel += delta + 1
            continue
        max_ts, pid, epoch, sequence = _PRODUCER_FIELDS.unpack_from(
            mv, pos + _MAX_TIMESTAMP_OFFSET)
        marker = None
        if attributes & CONTROL_MASK:
            marker = read_end_txn_marker(mv, pos)
        elif client and sequence < 0:
            raise InvalidRecordError(f"invalid sequence number {sequence} in a batch of "
                                     f"producer {pid}")
        if out is None:
            out = []
        out.append((rel if assign else base, delta, attributes, pid, epoch, sequence, max_ts,
                    marker))
        rel += delta + 1
    return out
