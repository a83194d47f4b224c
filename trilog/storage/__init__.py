"""The log on disk, after Kafka's ``core/.../log``: segments of RecordBatch v2 files with
sparse offset and time indexes, appends that touch only batch headers, reads as file slices
for ``sendfile``, flush policy, crash recovery, retention, and the ``LogManager``.

Blocking code (no trio): the broker calls it from worker threads.
"""

from trilog.storage._checkpoint import OffsetCheckpoint
from trilog.storage._config import LogConfig
from trilog.storage._fetch import FetchSlice
from trilog.storage._files import fsync_dir, write_atomically
from trilog.storage._index import OffsetIndex, TimeIndex
from trilog.storage._log import Log, LogAppendInfo, TimestampOffset
from trilog.storage._manager import (
    CLEAN_SHUTDOWN_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    LogManager,
)
from trilog.storage._retention import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    offsets_before,
    segments_to_delete,
)
from trilog.storage._segment import BatchHeader, LogSegment

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "RECOVERY_POINT_CHECKPOINT_FILE",
    "BatchHeader",
    "FetchSlice",
    "Log",
    "LogAppendInfo",
    "LogConfig",
    "LogManager",
    "LogSegment",
    "OffsetCheckpoint",
    "OffsetIndex",
    "TimeIndex",
    "TimestampOffset",
    "fsync_dir",
    "offsets_before",
    "segments_to_delete",
    "write_atomically",
]
