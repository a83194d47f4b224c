"""The C accelerator (``trilog.records._speedups``) against its pure-Python twins.

Every hot path the C module takes over must give what the Python code gives: the same
bytes from the writer, the same records (and the same errors) from the decoder, the same
murmur2.  The rest of the suite runs whichever implementation is active; the last test here
runs the v2 tests again on the pure-Python one.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from records_helpers import RECORDS_SETTINGS, maybe_bytes

from trilog.client.producer._partitioner import _murmur2
from trilog.records import CorruptRecordsError, Header, Record, _v2
from trilog.records._native import IMPLEMENTATION, speedups

pytestmark = pytest.mark.skipif(speedups is None, reason="the C accelerator is not built")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Timestamps across int64 (deltas then need long varints), or realistic ones; any two of
# them differ by less than 2**63, so every delta fits a record (2**62 and -2**62 would not).
timestamps = (st.integers(-(2**62) + 1, 2**62 - 1)
              | st.integers(1_600_000_000_000, 1_600_000_100_000))
header_keys = st.text(max_size=8) | st.binary(max_size=8)
headers = st.lists(st.tuples(header_keys, st.none() | st.binary(max_size=20)), max_size=3)
values = maybe_bytes | st.binary(min_size=8190, max_size=8200)  # around the table's limit
records_st = st.lists(st.tuples(timestamps, maybe_bytes, values, headers), max_size=30)


def _writers(max_bytes=None):
    c, py = speedups.RecordWriter(), _v2._RecordWriter()
    c.max_bytes = py.max_bytes = max_bytes
    return c, py


def _state(writer):
    return (len(writer), writer.size_in_bytes, writer.first_timestamp, writer.max_timestamp,
            writer.last_offset_delta, writer.getvalue(),
            [writer.timestamp_at(i) for i in range(len(writer))])


@RECORDS_SETTINGS
@given(records_st, st.none() | st.integers(0, 20_000))
def test_writer_bytes_and_state_match(recs, max_bytes):
    c, py = _writers(max_bytes)
    for ts, key, value, hs in recs:
        assert c.append(ts, key, value, hs) == py.append(ts, key, value, hs)
        assert _state(c) == _state(py)


@RECORDS_SETTINGS
@given(st.lists(st.tuples(st.integers(0, 2**40), timestamps, maybe_bytes, maybe_bytes),
                max_size=10))
def test_append_at_matches(recs):
    c, py = _writers()
    for delta, ts, key, value in recs:
        assert c._append_at(delta, ts, key, value, ()) == py._append_at(delta, ts, key, value, ())
    assert _state(c) == _state(py)


def test_writer_accepts_any_bytes_like_and_none_timestamp():
    # Each writer reads "now" itself: on a busy machine the two reads may fall in different
    # milliseconds (then the timestamp deltas differ); the bytes are compared for writers
    # that read the same one.
    for _attempt in range(50):
        c, py = _writers()
        for w in (c, py):
            w.append(5, bytearray(b"k"), memoryview(b"value"), [(b"h", bytearray(b"v"))])
            w.append(None, None, None)
        if c.timestamp_at(1) == py.timestamp_at(1):
            break
    assert c.getvalue() == py.getvalue()
    assert abs(c.timestamp_at(1) - py.timestamp_at(1)) < 60_000  # "now", in milliseconds


@pytest.mark.parametrize("args, error", [
    ((1, "text", b"v"), TypeError),
    ((1, b"k", 5), TypeError),
    ((1.5, b"k", b"v"), TypeError),
    ((1, b"k", b"v", [(None, b"v")]), TypeError),
    ((1, b"k", b"v", [(b"k", "text")]), TypeError),
    ((1, b"k", b"v", [(b"k",)]), ValueError),
])
def test_writer_rejects_the_same_input(args, error):
    for writer in _writers():
        with pytest.raises(error):
            writer.append(*args)
        assert len(writer) == 0 and writer.getvalue() == b""  # nothing half-written


def test_writer_takes_keywords_and_checks_ranges_alike():
    c, py = _writers()
    for w in (c, py):
        assert w.append(timestamp=5, key=b"k", value=b"v", headers=[("h", b"x")]) == 0
        assert w.append(6, b"k", value=None) == 1
        with pytest.raises(TypeError):
            w.append(7, b"k")  # no value
        with pytest.raises(TypeError):
            w.append(7, b"k", b"v", (("h", b"x") for _ in range(1)))  # not a sequence
        with pytest.raises(OverflowError):
            w.append(2**63, b"k", b"v")
        with pytest.raises(OverflowError):
            w.append(-(2**63), b"k", b"v")  # the delta from 5 does not fit
    assert c.getvalue() == py.getvalue()


def test_released_writer_keeps_timestamps_and_takes_no_more():
    for writer in _writers():
        writer.append(7, None, b"v")
        writer.release()
        assert len(writer) == 1 and writer.timestamp_at(0) == 7
        with pytest.raises(ValueError, match="released"):
            writer.append(8, None, b"v")
        with pytest.raises(IndexError):
            writer.timestamp_at(1)


def _decode_both(data, pos, end, count, base_offset, base_ts, log_append, prefix, cls):
    outcomes = []
    for decode in (speedups.decode_records, _v2._decode_records):
        try:
            outcomes.append(decode(data, pos, end, count, base_offset, base_ts, log_append,
                                   prefix, cls, Header))
        except CorruptRecordsError:
            outcomes.append(CorruptRecordsError)
    return outcomes


@RECORDS_SETTINGS
@given(records_st, st.integers(-(2**62), 2**62), st.booleans(), st.booleans())
def test_decoder_matches(recs, base_offset, log_append, prefixed):
    writer = _v2._RecordWriter()
    for ts, key, value, hs in recs:
        writer.append(ts, key, value, hs)
    data = b"\x09" * 3 + writer.getvalue()
    prefix = ("topic", 3) if prefixed else None
    cls = tuple if prefixed else Record
    c, py = _decode_both(data, 3, len(data), len(recs), base_offset, 1000,
                         123 if log_append else None, prefix, cls)
    assert c == py
    assert [type(r) for r in c] == [cls] * len(recs)
    assert all(type(h) is Header for r in c for h in r[-2])


@RECORDS_SETTINGS
@given(records_st.filter(bool), st.data())
def test_decoder_errors_match_on_damaged_bytes(recs, data):
    writer = _v2._RecordWriter()
    for ts, key, value, hs in recs:
        writer.append(ts, key, value, hs)
    raw = bytearray(writer.getvalue())
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    end = data.draw(st.integers(0, len(raw)))
    count = data.draw(st.sampled_from([len(recs), len(recs) + 1, 2**31 - 1, 0, -1]))
    c, py = _decode_both(bytes(raw), 0, end, count, 0, 0, None, None, Record)
    assert c == py


def test_decoder_checks_its_arguments():
    with pytest.raises(TypeError):
        speedups.decode_records(b"", 0, 0, 0, 0, 0, None, None, list, Header)
    with pytest.raises(ValueError):
        speedups.decode_records(b"abc", 0, 10, 1, 0, 0, None, None, Record, Header)


@RECORDS_SETTINGS
@given(st.binary(max_size=100))
def test_murmur2_matches(key):
    assert speedups.murmur2(key) == _murmur2(key)
    assert speedups.murmur2(bytearray(key)) == _murmur2(key)


def test_the_v2_suite_passes_on_the_pure_python_code():
    """The fallback (no compiler at install time) is a first-class implementation."""
    env = dict(os.environ, TRILOG_NO_SPEEDUPS="1")
    code = ("from trilog.records import _native, _v2; "
            "print(_native.IMPLEMENTATION, _v2.RecordBatchBuilder.__mro__[1])")
    probe = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, check=True)
    assert probe.stdout.split()[0] == "Python" and "_RecordWriter" in probe.stdout
    assert IMPLEMENTATION == "C"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/records/test_v2.py", "tests/records/test_convert.py",
         "tests/records/test_interop_kafka_python.py", "tests/client/test_client_partitioning.py"],
        check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert " passed" in run.stdout
