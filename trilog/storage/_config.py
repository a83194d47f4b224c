"""``LogConfig``: the per-log settings, with Kafka's names and meanings.

The broker builds one from its typed configuration (``BrokerConfig.log_config``: the one
parser of the ``log.*`` properties); per-topic overrides with Kafka's topic-level names are
parsed and applied in ``trilog/broker/_topic_configs.py``.  ``parse_cleanup_policy`` reads Kafka's
``cleanup.policy`` text ("delete", "compact", "compact,delete").
"""

from __future__ import annotations

import dataclasses
from typing import Any

#: Kafka's ``Long.MaxValue``: the default ``log.flush.interval.messages`` ("never by count").
NEVER = 2**63 - 1

_HOUR_MS = 3600 * 1000
_DAY_MS = 24 * _HOUR_MS

#: ``cleanup.policy`` values: delete old segments by time and size, or keep the latest
#: record of every key (the log cleaner).
DELETE = "delete"
COMPACT = "compact"
CLEANUP_POLICIES = frozenset({DELETE, COMPACT})
#: ``message.timestamp.type`` values.
CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
TIMESTAMP_TYPES = (CREATE_TIME, LOG_APPEND_TIME)


def parse_cleanup_policy(text: str) -> frozenset[str]:
    """Kafka's ``cleanup.policy`` list ("delete", "compact", "compact,delete", any order and
    spacing) as a frozenset; ``ValueError`` for an empty list or an unknown policy."""
    policies = frozenset(part.strip().lower() for part in str(text).split(",") if part.strip())
    _check_cleanup_policy(policies)
    return policies


def _check_cleanup_policy(policies: frozenset[str]) -> None:
    if not isinstance(policies, frozenset):
        raise TypeError(f"cleanup_policy must be a frozenset, not {policies!r}")
    if not policies or not policies <= CLEANUP_POLICIES:
        raise ValueError(
            f"cleanup_policy must be a non-empty set of 'delete' and 'compact', not "
            f"{sorted(policies)}"
        )


@dataclasses.dataclass(frozen=True)
class LogConfig:
    """Settings of one partition's log.  Immutable (swap the whole object to change one).

    ===========================  ==================================  =========================
    field                        broker property                     meaning
    ===========================  ==================================  =========================
    segment_bytes                log.segment.bytes                   roll when a segment would
                                                                     grow past this
    segment_ms                   log.roll.ms / log.roll.hours        roll when the active
                                                                     segment is this old
    index_interval_bytes         log.index.interval.bytes            bytes between offset
                                                                     index entries
    max_index_size               log.index.size.max.bytes            roll when an index is full
    flush_interval_messages      log.flush.interval.messages         fsync after this many
                                                                     unflushed messages
    flush_interval_ms            log.flush.interval.ms               fsync when the oldest
                                                                     unflushed data is this old
                                                                     (``None``: never by time)
    retention_ms                 log.retention.ms/.minutes/.hours    delete segments older
                                                                     than this (-1: forever)
    retention_bytes              log.retention.bytes                 delete oldest segments
                                                                     above this size (-1: no)
    max_message_bytes            message.max.bytes                   largest batch accepted
    cleanup_policy               log.cleanup.policy                  frozenset of "delete" (the
                                                                     two retention rules apply)
                                                                     and "compact" (the log
                                                                     cleaner keeps the latest
                                                                     record of each key)
    min_cleanable_dirty_ratio    log.cleaner.min.cleanable.ratio     clean a compacted log once
                                                                     its dirty share (bytes not
                                                                     yet cleaned) exceeds this
    delete_retention_ms          log.cleaner.delete.retention.ms     how long a tombstone (null
                                                                     value) stays once cleaned
    min_compaction_lag_ms        log.cleaner.min.compaction.lag.ms   records younger than this
                                                                     are never cleaned
    message_timestamp_type       log.message.timestamp.type          "CreateTime" (the
                                                                     producer's) or
                                                                     "LogAppendTime" (the log
                                                                     stamps each batch)
    producer_id_expiration_ms    producer.id.expiration.ms           a producer without a write
                                                                     for this long (and no
                                                                     transaction open) is
                                                                     forgotten
    ===========================  ==================================  =========================
    """

    segment_bytes: int = 1024**3
    segment_ms: int = 7 * _DAY_MS
    index_interval_bytes: int = 4096
    max_index_size: int = 10 * 1024**2
    flush_interval_messages: int = NEVER
    flush_interval_ms: int | None = None
    retention_ms: int = 7 * _DAY_MS
    retention_bytes: int = -1
    max_message_bytes: int = 1024**2 + 12  # Kafka's 1048588: 1 MiB plus the log overhead
    cleanup_policy: frozenset[str] = frozenset({DELETE})
    min_cleanable_dirty_ratio: float = 0.5
    delete_retention_ms: int = _DAY_MS
    min_compaction_lag_ms: int = 0
    message_timestamp_type: str = CREATE_TIME
    producer_id_expiration_ms: int = _DAY_MS

    def __post_init__(self) -> None:
        if self.segment_bytes < 14:
            raise ValueError(f"segment_bytes must be at least 14, not {self.segment_bytes}")
        if self.segment_ms < 1:
            raise ValueError(f"segment_ms must be positive, not {self.segment_ms}")
        if self.index_interval_bytes < 0:
            raise ValueError("index_interval_bytes cannot be negative")
        if self.max_index_size < 12:
            raise ValueError("max_index_size must hold at least one time index entry (12)")
        if self.flush_interval_messages < 1:
            raise ValueError("flush_interval_messages must be at least 1")
        if self.flush_interval_ms is not None and self.flush_interval_ms < 0:
            raise ValueError("flush_interval_ms cannot be negative")
        if self.retention_ms < -1:
            raise ValueError("retention_ms must be -1 (forever) or non-negative")
        if self.max_message_bytes < 0:
            raise ValueError("max_message_bytes cannot be negative")
        _check_cleanup_policy(self.cleanup_policy)
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise ValueError("min_cleanable_dirty_ratio must be between 0 and 1")
        if self.delete_retention_ms < 0:
            raise ValueError("delete_retention_ms cannot be negative")
        if self.min_compaction_lag_ms < 0:
            raise ValueError("min_compaction_lag_ms cannot be negative")
        if self.producer_id_expiration_ms < 1:
            raise ValueError("producer_id_expiration_ms must be positive")
        if self.message_timestamp_type not in TIMESTAMP_TYPES:
            raise ValueError(
                f"message_timestamp_type must be one of {TIMESTAMP_TYPES}, not "
                f"{self.message_timestamp_type!r}"
            )

    @property
    def compact(self) -> bool:
        """The log cleaner compacts this log (``cleanup.policy`` includes compact)."""
        return COMPACT in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """Retention by time and size applies (``cleanup.policy`` includes delete)."""
        return DELETE in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        """The log stamps each appended batch with its append time."""
        return self.message_timestamp_type == LOG_APPEND_TIME

    def replace(self, **changes: Any) -> LogConfig:
        return dataclasses.replace(self, **changes)
