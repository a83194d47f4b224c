"""LogConfig: Kafka's defaults and property names."""

from __future__ import annotations

import pytest

from trilog.storage import LogConfig


def test_defaults_are_kafkas():
    config = LogConfig()
    assert config.segment_bytes == 1073741824
    assert config.segment_ms == 604800000
    assert config.index_interval_bytes == 4096
    assert config.max_index_size == 10485760
    assert config.flush_interval_messages == 2**63 - 1
    assert config.flush_interval_ms is None
    assert config.retention_ms == 604800000
    assert config.retention_bytes == -1
    assert config.max_message_bytes == 1048588


def test_from_broker_properties():
    config = LogConfig.from_properties(
        {
            "broker.id": "0",
            "log.segment.bytes": "1048576",
            "log.roll.hours": "1",
            "log.index.interval.bytes": "1024",
            "log.flush.interval.messages": "10000",
            "log.flush.interval.ms": "1000",
            "log.retention.hours": "168",
            "log.retention.minutes": "30",
            "log.retention.bytes": "1073741824",
            "message.max.bytes": "2000000",
        }
    )
    assert config.segment_bytes == 1048576
    assert config.segment_ms == 3600_000
    assert config.index_interval_bytes == 1024
    assert config.flush_interval_messages == 10000
    assert config.flush_interval_ms == 1000
    assert config.retention_ms == 30 * 60_000  # minutes win over hours
    assert config.retention_bytes == 1073741824
    assert config.max_message_bytes == 2000000
    assert LogConfig.from_properties({"log.roll.ms": 5, "log.roll.hours": 1}).segment_ms == 5
    assert LogConfig.from_properties({"log.retention.ms": "-5"}).retention_ms == -1
    assert LogConfig.from_properties({"log.flush.interval.ms": "null"}).flush_interval_ms is None


def test_topic_overrides():
    config = LogConfig().with_topic_overrides({"retention.ms": "1000", "segment.bytes": 4096})
    assert (config.retention_ms, config.segment_bytes) == (1000, 4096)


def test_invalid_values():
    with pytest.raises(ValueError):
        LogConfig.from_properties({"log.segment.bytes": "lots"})
    with pytest.raises(ValueError):
        LogConfig(segment_bytes=1)
    with pytest.raises(ValueError):
        LogConfig(flush_interval_messages=0)
