"""The log on disk, after Kafka's ``core/.../log``: segments of RecordBatch v2 files with
sparse offset and time indexes, appends that touch only batch headers, reads as file slices
for ``sendfile``, flush policy, crash recovery, retention, and the ``LogManager``.

Modules: ``_log`` (``Log``: opening, the append path, flush, the high watermark, the last
stable offset and leader epochs, closing), ``_local_log`` (``LocalLog``: the segment list
and every change to it), ``_reads`` (``LogReader``, a base of ``Log``: the lock-free reads
from a ``LogSnapshot``, ``aborted_transactions`` among them), ``_removals``
(``SegmentRemovals``, a base of ``Log``: retention, DeleteRecords, truncation, the cleaner's
swap), ``_append`` (the append path's header and CRC checks, offset assignment, who appends:
``AppendOrigin``), ``_producer_state`` (idempotent and transactional producers, the first
unstable offset), ``_producer_snapshot`` (``<offset>.snapshot`` files), ``_producer_load``
(the state from a snapshot and the headers after it), ``_txn_index`` (a segment's
``.txnindex`` of aborted transactions), ``_loader`` (opening and recovery), ``_segment``
(``LogSegment``, the roll decision, header walks), ``_index``, ``_open_files``
(``SegmentFiles``: the bounded cache of open segment files), ``_files`` (atomic writes,
directory fsyncs, a file system's sync, removal), ``_manager``, ``_checkpoint``, ``_retention`` (pure decisions),
``_fetch`` (``FetchSlice``), ``_epochs`` (the leader-epoch cache a replicated log keeps).

Blocking code (no trio): the broker calls it from worker threads.
"""

from trilog.records import BatchHeader  # what Log.batch_headers yields (one layout: records')
from trilog.storage._append import AppendOrigin
from trilog.storage._checkpoint import OffsetCheckpoint
from trilog.storage._config import (
    COMPACT,
    CREATE_TIME,
    DELETE,
    LOG_APPEND_TIME,
    LogConfig,
    parse_cleanup_policy,
)
from trilog.storage._epochs import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
)
from trilog.storage._fetch import FetchSlice
from trilog.storage._files import fsync_dir, write_atomically
from trilog.storage._index import OffsetIndex, TimeIndex
from trilog.storage._log import CHEAP_APPEND_BYTES, INLINE_APPENDS, Log, LogAppendInfo
from trilog.storage._producer_state import ProducerInfo
from trilog.storage._open_files import SEGMENT_FILES, SegmentFiles
from trilog.storage._manager import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    LogManager,
)
from trilog.storage._reads import TimestampOffset
from trilog.storage._retention import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    offsets_before,
    segments_to_delete,
)
from trilog.storage._segment import LogSegment
from trilog.storage._txn_index import AbortedTxn, TransactionIndex, TxnIndexEntry

__all__ = [
    "CHEAP_APPEND_BYTES",
    "CLEAN_SHUTDOWN_FILE",
    "COMPACT",
    "CREATE_TIME",
    "DELETE",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "LEADER_EPOCH_CHECKPOINT_FILE",
    "LOG_APPEND_TIME",
    "LOG_START_OFFSET_CHECKPOINT_FILE",
    "RECOVERY_POINT_CHECKPOINT_FILE",
    "REPLICATION_OFFSET_CHECKPOINT_FILE",
    "SEGMENT_FILES",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "AbortedTxn",
    "AppendOrigin",
    "BatchHeader",
    "EpochEntry",
    "FetchSlice",
    "LeaderEpochCache",
    "INLINE_APPENDS",
    "Log",
    "LogAppendInfo",
    "LogConfig",
    "LogManager",
    "LogSegment",
    "OffsetCheckpoint",
    "OffsetIndex",
    "SegmentFiles",
    "ProducerInfo",
    "TimeIndex",
    "TimestampOffset",
    "TransactionIndex",
    "TxnIndexEntry",
    "fsync_dir",
    "offsets_before",
    "parse_cleanup_policy",
    "segments_to_delete",
    "write_atomically",
]
