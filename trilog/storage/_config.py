"""``LogConfig``: the per-log settings, with Kafka's names and meanings.

The broker builds one from its typed configuration (``BrokerConfig.log_config``: the one
parser of the ``log.*`` properties) and may override it per topic with Kafka's topic-level
names (``LogConfig.with_topic_overrides``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

#: Kafka's ``Long.MaxValue``: the default ``log.flush.interval.messages`` ("never by count").
NEVER = 2**63 - 1

_HOUR_MS = 3600 * 1000
_DAY_MS = 24 * _HOUR_MS


def _int(value: Any, name: str) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError(f"{name} must be an integer, not {value!r}") from None


def _optional_int(value: Any, name: str) -> int | None:
    if value is None or str(value).strip().lower() in ("", "null", "none"):
        return None
    return _int(value, name)


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

    def replace(self, **changes: Any) -> LogConfig:
        return dataclasses.replace(self, **changes)

    def with_topic_overrides(self, props: Mapping[str, Any]) -> LogConfig:
        """Apply Kafka's topic-level names (``segment.bytes``, ``retention.ms``, ...)."""
        names = {
            "segment.bytes": "segment_bytes",
            "segment.ms": "segment_ms",
            "index.interval.bytes": "index_interval_bytes",
            "segment.index.bytes": "max_index_size",
            "flush.messages": "flush_interval_messages",
            "flush.ms": "flush_interval_ms",
            "retention.ms": "retention_ms",
            "retention.bytes": "retention_bytes",
            "max.message.bytes": "max_message_bytes",
        }
        changes: dict[str, Any] = {}
        for key, field in names.items():
            if key in props:
                if field == "flush_interval_ms":
                    changes[field] = _optional_int(props[key], key)
                else:
                    changes[field] = _int(props[key], key)
        if changes.get("retention_ms", 0) < -1:
            changes["retention_ms"] = -1
        return dataclasses.replace(self, **changes)
