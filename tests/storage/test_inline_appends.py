"""Which appends an event loop may make itself (``Log.cheap_append``): small ones always,
ones up to ``INLINE_APPEND_BYTES`` while segment writes are fast, none when the log fsyncs
by message count; a slow write sends the large ones to worker threads for a while."""

from __future__ import annotations

import logging

import pytest
from storage_helpers import make_batch

from trilog.storage import LogConfig
from trilog.storage import _log
from trilog.storage._log import CHEAP_APPEND_BYTES, INLINE_APPEND_BYTES, WRITES


@pytest.fixture(autouse=True)
def fast_writes():
    WRITES.slow_until = 0.0
    yield
    WRITES.slow_until = 0.0


def test_small_and_megabyte_appends_are_cheap_while_writes_are_fast(open_log):
    log = open_log(LogConfig())
    assert log.cheap_append(100)
    assert log.cheap_append(CHEAP_APPEND_BYTES)
    assert log.cheap_append(1 << 20)
    assert log.cheap_append(INLINE_APPEND_BYTES)
    assert not log.cheap_append(INLINE_APPEND_BYTES + 1)


def test_a_log_that_fsyncs_by_message_count_never_appends_inline(open_log):
    log = open_log(LogConfig(flush_interval_messages=100))
    assert not log.cheap_append(100)


def test_a_slow_write_sends_large_appends_to_threads_for_the_cool_down(
        open_log, monkeypatch, caplog):
    log = open_log(LogConfig())
    now = [1000.0]
    monkeypatch.setattr(_log.time, "perf_counter", lambda: now[0])
    log.append(make_batch(1))  # takes no time on this clock
    assert log.cheap_append(1 << 20)
    WRITES.wrote(_log.SLOW_WRITE_S / 2)
    assert log.cheap_append(1 << 20)
    with caplog.at_level(logging.INFO, logger="trilog.storage"):
        WRITES.wrote(_log.SLOW_WRITE_S * 2)
    assert "appends over 64 KiB go to worker threads" in caplog.text
    assert log.cheap_append(CHEAP_APPEND_BYTES)  # small ones stay inline
    assert not log.cheap_append(1 << 20)
    now[0] += _log.SLOW_WRITE_COOL_DOWN_S - 1
    assert not log.cheap_append(1 << 20)
    now[0] += 1
    assert log.cheap_append(1 << 20)


def test_the_log_times_its_segment_writes(open_log, monkeypatch):
    """An append whose write takes long marks writes slow (the clock says 10 ms passed
    during the segment's write)."""
    log = open_log(LogConfig())
    ticks = iter([0.0, 0.010, 0.010, 0.010])
    monkeypatch.setattr(_log.time, "perf_counter", lambda: next(ticks))
    log.append(make_batch(1))
    assert WRITES.slow_until == pytest.approx(0.010 + _log.SLOW_WRITE_COOL_DOWN_S)
