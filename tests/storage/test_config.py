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


def test_topic_overrides():
    config = LogConfig().with_topic_overrides({"retention.ms": "1000", "segment.bytes": 4096})
    assert (config.retention_ms, config.segment_bytes) == (1000, 4096)


def test_invalid_values():
    with pytest.raises(ValueError):
        LogConfig(segment_bytes=1)
    with pytest.raises(ValueError):
        LogConfig(flush_interval_messages=0)
