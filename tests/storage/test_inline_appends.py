"""Which appends an event loop may make itself (``Log.cheap_append``): small ones always,
ones up to ``INLINE_APPEND_BYTES`` (with the hardware CRC) while the event loop's appends
are quick, none when the log fsyncs by message count; a slow one sends the large ones to
worker threads for a while."""

from __future__ import annotations

import logging
import types

import pytest

from trilog.storage import LogConfig
from trilog.storage import _log
from trilog.storage._log import CHEAP_APPEND_BYTES, INLINE_APPEND_BYTES, INLINE_APPENDS


@pytest.fixture(autouse=True)
def fast_appends():
    INLINE_APPENDS.slow_until = 0.0
    yield
    INLINE_APPENDS.slow_until = 0.0


@pytest.fixture
def clock(monkeypatch):
    """``_log``'s clock, moved by hand."""
    now = [1000.0]
    monkeypatch.setattr(_log, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    return now


def test_small_and_megabyte_appends_are_cheap_while_appends_are_quick(open_log, monkeypatch):
    monkeypatch.setattr(_log, "CRC32C_HARDWARE", True)
    log = open_log(LogConfig())
    assert log.cheap_append(100)
    assert log.cheap_append(CHEAP_APPEND_BYTES)
    assert log.cheap_append(1 << 20)
    assert log.cheap_append(INLINE_APPEND_BYTES)
    assert not log.cheap_append(INLINE_APPEND_BYTES + 1)


def test_with_a_software_crc_only_small_appends_are_cheap(open_log, monkeypatch):
    """crcmod checks a MiB in ~2 ms: not on an event loop."""
    monkeypatch.setattr(_log, "CRC32C_HARDWARE", False)
    log = open_log(LogConfig())
    assert log.cheap_append(CHEAP_APPEND_BYTES)
    assert not log.cheap_append(CHEAP_APPEND_BYTES + 1)


def test_a_log_that_fsyncs_by_message_count_never_appends_inline(open_log):
    log = open_log(LogConfig(flush_interval_messages=100))
    assert not log.cheap_append(100)


def test_a_slow_inline_append_sends_large_appends_to_threads_for_the_cool_down(
        open_log, monkeypatch, clock, caplog):
    monkeypatch.setattr(_log, "CRC32C_HARDWARE", True)
    log = open_log(LogConfig())
    assert log.cheap_append(1 << 20)
    INLINE_APPENDS.took(_log.SLOW_INLINE_APPEND_S / 2)
    assert log.cheap_append(1 << 20)
    with caplog.at_level(logging.INFO, logger="trilog.storage"):
        INLINE_APPENDS.took(_log.SLOW_INLINE_APPEND_S * 2)
    assert "appends over 64 KiB go to worker threads" in caplog.text
    assert log.cheap_append(CHEAP_APPEND_BYTES)  # small ones stay inline
    assert not log.cheap_append(1 << 20)
    clock[0] += _log.SLOW_COOL_DOWN_S - 1
    assert not log.cheap_append(1 << 20)
    clock[0] += 1
    assert log.cheap_append(1 << 20)  # the next one tries again


def test_run_times_the_append_it_makes_even_when_it_fails(clock):
    def slow_append(result):
        clock[0] += _log.SLOW_INLINE_APPEND_S * 2
        if isinstance(result, Exception):
            raise result
        return result

    assert INLINE_APPENDS.run(slow_append, "info") == "info"
    assert not INLINE_APPENDS.fast()
    INLINE_APPENDS.slow_until = 0.0
    with pytest.raises(OSError):
        INLINE_APPENDS.run(slow_append, OSError("disk full"))
    assert not INLINE_APPENDS.fast()
    INLINE_APPENDS.slow_until = 0.0
    assert INLINE_APPENDS.run(lambda: 1) == 1  # no time passed on this clock
    assert INLINE_APPENDS.fast()
