"""LogConfig: Kafka's defaults and property names."""

from __future__ import annotations

import pytest

from trilog.storage import LogConfig, parse_cleanup_policy


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


def test_invalid_values():
    with pytest.raises(ValueError):
        LogConfig(segment_bytes=1)
    with pytest.raises(ValueError):
        LogConfig(flush_interval_messages=0)


def test_compaction_and_timestamp_fields():
    config = LogConfig()
    assert config.cleanup_policy == frozenset({"delete"})
    assert (config.delete, config.compact) == (True, False)
    assert config.min_cleanable_dirty_ratio == 0.5
    assert config.delete_retention_ms == 86_400_000
    assert config.min_compaction_lag_ms == 0
    assert config.message_timestamp_type == "CreateTime"
    assert not config.log_append_time
    both = LogConfig(cleanup_policy=parse_cleanup_policy(" Compact , delete"))
    assert (both.delete, both.compact) == (True, True)
    assert parse_cleanup_policy("compact") == frozenset({"compact"})
    assert LogConfig(message_timestamp_type="LogAppendTime").log_append_time
    for bad in ("", "compact,forever", ","):
        with pytest.raises(ValueError):
            parse_cleanup_policy(bad)
    with pytest.raises(ValueError):
        LogConfig(cleanup_policy=frozenset())
    with pytest.raises(TypeError):
        LogConfig(cleanup_policy="compact")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        LogConfig(min_cleanable_dirty_ratio=1.5)
    with pytest.raises(ValueError):
        LogConfig(delete_retention_ms=-1)
    with pytest.raises(ValueError):
        LogConfig(message_timestamp_type="BrokerTime")


def test_retention_applies_only_with_the_delete_policy(tmp_path):
    from storage_helpers import make_batch

    from trilog.storage import Log

    config = LogConfig(segment_bytes=200, retention_ms=1, cleanup_policy=frozenset({"compact"}))
    log = Log(tmp_path / "t-0", config)
    try:
        for i in range(5):
            log.append(make_batch(2, tag=i, timestamp=1_000))
        assert len(log.segments) > 2
        assert log.delete_old_segments(now_ms=10**12) == []
        log.config = config.replace(cleanup_policy=parse_cleanup_policy("compact,delete"))
        assert log.delete_old_segments(now_ms=10**12)
    finally:
        log.close()
