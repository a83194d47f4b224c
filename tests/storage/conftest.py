"""Fixtures for the storage tests."""

from __future__ import annotations

import pytest

from trilog.storage import Log, LogConfig


@pytest.fixture
def log_dir(tmp_path):
    return tmp_path / "topic-0"


@pytest.fixture
def small_config():
    return LogConfig(segment_bytes=2048, index_interval_bytes=128)


@pytest.fixture
def open_log(log_dir):
    """A factory of logs in ``log_dir`` that closes whatever it opened."""
    opened: list[Log] = []

    def factory(config=None, **kwargs) -> Log:
        log = Log(log_dir, config, **kwargs)
        opened.append(log)
        return log

    yield factory
    for log in opened:
        if not log.closed:
            log.close()
