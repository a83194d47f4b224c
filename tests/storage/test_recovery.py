"""Crash recovery: the log after reopening is the longest valid prefix, indexes are right,
and appends continue at the right offset."""

from __future__ import annotations

import os
import random

import pytest
from storage_helpers import batches_in, check_indexes, make_batch, read_all, with_header

from trilog.records import iter_batches
from trilog.storage import Log, LogConfig

CONFIG = LogConfig(segment_bytes=1500, index_interval_bytes=100)


def build(log_dir, n=60, config=CONFIG) -> tuple[list[bytes], list[int]]:
    """A log of ``n`` batches, cleanly closed; return the batches as stored and the
    segment base offsets."""
    log = Log(log_dir, config)
    for i in range(n):
        log.append(make_batch(1 + i % 3, timestamp=1000 + i, value_size=10 + i % 7, tag=i))
    data = read_all(log)
    bases = [s.base_offset for s in log.segments]
    log.close()
    stored = [data[b.position : b.position + b.size] for b in iter_batches(data)]
    return stored, bases


def reopen_and_check(log_dir, expected_batches: list[bytes], config=CONFIG, **kwargs) -> Log:
    log = Log(log_dir, config, **kwargs)
    try:
        assert read_all(log) == b"".join(expected_batches)
        end = batches_in(expected_batches[-1])[-1][1] + 1 if expected_batches else 0
        assert log.log_end_offset == end
        check_indexes(log)
        info = log.append(make_batch(2))
        assert info.first_offset == end
        assert read_all(log, end)[8:] == make_batch(2)[8:]
    except BaseException:
        log.close()
        raise
    return log


def last_segment(log_dir) -> str:
    return os.path.join(log_dir, sorted(n for n in os.listdir(log_dir) if n.endswith(".log"))[-1])


def test_clean_reopen_without_recovery(log_dir):
    stored, _ = build(log_dir)
    reopen_and_check(log_dir, stored, needs_recovery=False).close()


def test_truncated_mid_batch(log_dir):
    stored, _ = build(log_dir)
    path = last_segment(log_dir)
    size = os.path.getsize(path)
    os.truncate(path, size - len(stored[-1]) // 2)
    reopen_and_check(log_dir, stored[:-1]).close()


def test_random_garbage_appended(log_dir):
    stored, _ = build(log_dir)
    with open(last_segment(log_dir), "ab") as f:
        f.write(random.Random(1).randbytes(3000))
    reopen_and_check(log_dir, stored).close()


def test_zero_filled_tail(log_dir):
    stored, _ = build(log_dir)
    with open(last_segment(log_dir), "ab") as f:
        f.write(bytes(4096))
    reopen_and_check(log_dir, stored).close()


def test_plausible_header_then_garbage(log_dir):
    """A tail that starts like a batch (right magic, sane length) but has a bad CRC."""
    stored, _ = build(log_dir)
    fake = bytearray(make_batch(3))
    fake[-5:] = b"\xff" * 5
    with open(last_segment(log_dir), "ab") as f:
        f.write(fake)
    reopen_and_check(log_dir, stored).close()


@pytest.mark.parametrize(
    "fields", [{"attributes": 7}, {"magic": 1}, {"record_count": 5}, {"batch_length": 20}]
)
def test_a_tail_batch_whose_header_fails_the_check_is_truncated(log_dir, fields):
    """Recovery judges headers by the same rule as append (a right CRC does not save a
    batch with an unknown codec id, a wrong magic or counts that disagree)."""
    stored, _ = build(log_dir)
    bad = with_header(make_batch(3), base_offset=batches_in(stored[-1])[-1][1] + 1, **fields)
    with open(last_segment(log_dir), "ab") as f:
        f.write(bad)
    reopen_and_check(log_dir, stored).close()


def test_bit_flip_in_last_batch(log_dir):
    stored, _ = build(log_dir)
    path = last_segment(log_dir)
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) - 3)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x10]))
    reopen_and_check(log_dir, stored[:-1]).close()


def test_corruption_in_a_middle_segment_drops_the_rest(log_dir):
    stored, bases = build(log_dir)
    assert len(bases) >= 4
    target = bases[2]
    path = os.path.join(log_dir, f"{target:020d}.log")
    with open(path, "rb") as f:
        data = f.read()
    second = list(iter_batches(data))[1]
    with open(path, "r+b") as f:
        f.seek(second.position + 40)
        f.write(b"\x00\x01\x02")
    keep = [b for b in stored if batches_in(b)[0][0] < second.base_offset]
    log = reopen_and_check(log_dir, keep)
    assert [s.base_offset for s in log.segments] == bases[:3]
    log.close()
    for base in bases[3:]:
        assert not os.path.exists(os.path.join(log_dir, f"{base:020d}.log"))


def test_segments_before_the_recovery_point_are_trusted(log_dir):
    stored, bases = build(log_dir)
    first = os.path.join(log_dir, f"{bases[0]:020d}.log")
    with open(first, "r+b") as f:  # break a CRC where recovery will not look
        f.seek(30)
        f.write(b"\xee")
    log = Log(log_dir, CONFIG, recovery_point=bases[2], needs_recovery=True)
    try:
        assert log.log_end_offset == batches_in(stored[-1])[-1][1] + 1
        assert log.segments[0].size == os.path.getsize(first)
    finally:
        log.close()


@pytest.mark.parametrize("needs_recovery", [True, False])
def test_deleted_index_files_are_rebuilt(log_dir, needs_recovery):
    stored, _ = build(log_dir)
    log = Log(log_dir, CONFIG, needs_recovery=False)
    before = [(s.offset_index.entries(), s.time_index.entries()) for s in log.segments]
    log.close()
    for name in os.listdir(log_dir):
        if name.endswith((".index", ".timeindex")):
            os.unlink(os.path.join(log_dir, name))
    log = reopen_and_check(log_dir, stored, needs_recovery=needs_recovery)
    after = [(s.offset_index.entries(), s.time_index.entries()) for s in log.segments]
    assert after[:-1] == before[:-1]
    log.close()
    for name in os.listdir(log_dir):  # and written back
        if name.endswith(".log"):
            assert os.path.exists(os.path.join(log_dir, name[:-4] + ".index"))


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[:-3],  # torn entry
        lambda data: data[8:16] + data[:8] + data[16:],  # out of order
        lambda data: data + b"\x00\x00\x01\x00\x7f\xff\xff\xf0",  # points past the file
    ],
)
def test_corrupt_index_is_rebuilt_even_after_clean_shutdown(log_dir, damage):
    stored, bases = build(log_dir)
    path = os.path.join(log_dir, f"{bases[-1]:020d}.index")
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) >= 16
    with open(path, "wb") as f:
        f.write(damage(data))
    reopen_and_check(log_dir, stored, needs_recovery=False).close()


def test_partial_tail_is_caught_even_without_recovery(log_dir):
    """The sanity check on open notices a last segment that does not end on a batch."""
    stored, _ = build(log_dir)
    with open(last_segment(log_dir), "ab") as f:
        f.write(stored[0][:30])
    reopen_and_check(log_dir, stored, needs_recovery=False).close()


def test_crash_without_any_index_writes(log_dir):
    """A crash loses index entries that were only in memory; data in the page cache
    survives: everything is recovered and appends continue."""
    log = Log(log_dir, CONFIG)
    for i in range(40):
        log.append(make_batch(2, tag=i))
    stored = [
        bytes(b.buffer[b.position : b.position + b.size]) for b in iter_batches(read_all(log))
    ]
    log._close_handles()
    reopen_and_check(log_dir, stored, recovery_point=0).close()


def test_everything_lost(log_dir):
    build(log_dir)
    for name in os.listdir(log_dir):
        if name.endswith(".log"):
            os.truncate(os.path.join(log_dir, name), 0)
    log = Log(log_dir, CONFIG)
    try:
        assert (log.log_start_offset, log.log_end_offset) == (0, 0)
        assert log.append(make_batch(1)).first_offset == 0
    finally:
        log.close()


def test_recovery_with_a_smaller_index_limit_keeps_all_data(log_dir):
    """Lowering max_index_size must never cost data: the index just stays sparser."""
    stored, _ = build(log_dir, config=LogConfig(segment_bytes=10_000, index_interval_bytes=0))
    small = LogConfig(segment_bytes=10_000, index_interval_bytes=0, max_index_size=24)
    log = reopen_and_check(log_dir, stored, config=small)
    assert all(len(s.offset_index) <= 3 for s in log.segments)
    log.close()
