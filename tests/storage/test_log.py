"""Append and read: offsets, segment rolls, fetch slices, validation, lookups by time."""

from __future__ import annotations

import os
import random
import threading

import pytest
from storage_helpers import batches_in, make_batch, read_all, segment_files, with_header

from trilog.errors import (
    CorruptMessageError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
)
from trilog.records import GZIP, RecordBatch, build_batch, iter_batches
from trilog.storage import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, LogConfig, LogSegment


def records_of(data: bytes) -> list[tuple[int, bytes]]:
    return [(r.offset, r.value) for b in iter_batches(data) for r in RecordBatch(data, b.position)]


def test_offsets_are_assigned_from_headers(open_log):
    log = open_log(LogConfig())
    info = log.append(make_batch(3))
    assert (info.first_offset, info.last_offset, info.log_end_offset) == (0, 2, 3)
    assert (info.record_count, info.batch_count, info.max_timestamp) == (3, 1, 1002)
    info = log.append(make_batch(2, timestamp=5) + make_batch(4, timestamp=9))
    assert (info.first_offset, info.last_offset, info.record_count, info.batch_count) == (
        3,
        8,
        6,
        2,
    )
    assert info.max_timestamp == 12 and info.offset_of_max_timestamp == 8
    assert log.log_end_offset == log.high_watermark == 9
    data = read_all(log)
    assert [o for o, _ in records_of(data)] == list(range(9))
    assert [b[:2] for b in batches_in(data)] == [(0, 2), (3, 4), (5, 8)]


def test_round_trip_across_segment_rolls(open_log, small_config, log_dir):
    log = open_log(small_config)
    expected = []
    for i in range(200):
        n = 1 + i % 4
        log.append(make_batch(n, tag=i))
        expected += [f"{i}:{j}:".encode() for j in range(n)]
    assert len(segment_files(log_dir)) == len(log.segments) > 10
    for segment in log.segments:
        assert segment.size <= small_config.segment_bytes
    records = records_of(read_all(log))
    assert [o for o, _ in records] == list(range(len(expected)))
    assert [v.split(b"x")[0] for _, v in records] == expected
    # Reading from every offset starts with the batch holding it, on a batch boundary.
    for offset in range(0, log.log_end_offset, 7):
        with log.read(offset, 300) as piece:
            data = piece.read()
            seg = next(s for s in log.segments if s.base_offset == piece.segment_base_offset)
            with open(seg.log_path, "rb") as f:
                starts = {p for _, _, p in batches_in(f.read())}
            assert piece.position in starts
            assert piece.position + piece.length in starts | {seg.size}
        found = batches_in(data)
        assert found[0][0] <= offset <= found[0][1]
        assert sum(len(x) for x in [data]) == piece.length <= max(300, found[0][1])
    log.close()
    reopened = open_log(small_config, needs_recovery=False)
    assert records_of(read_all(reopened)) == records
    assert reopened.append(make_batch(1)).first_offset == len(expected)


def test_read_respects_max_bytes_on_batch_boundaries(open_log):
    log = open_log(LogConfig(index_interval_bytes=64))
    sizes = []
    for i in range(50):
        batch = make_batch(1, value_size=20 + i)
        sizes.append(len(batch))
        log.append(batch)
    for max_bytes in (1, 100, 250, 1000, 10_000):
        with log.read(10, max_bytes) as piece:
            data = piece.read()
        ends = [sum(sizes[10 : 10 + k]) for k in range(1, 41)]
        if max_bytes < sizes[10]:
            assert len(data) == sizes[10]  # the first batch whole
        else:
            assert len(data) == max(e for e in ends if e <= max_bytes)
        assert batches_in(data)[0][0] == 10


def test_first_batch_is_whole_even_if_larger_than_max_bytes(open_log):
    log = open_log(LogConfig())
    log.append(make_batch(1))
    big = make_batch(5, value_size=5000)
    log.append(big)
    log.append(make_batch(1))
    with log.read(3, 100) as piece:
        assert piece.length == len(big)
        assert batches_in(piece.read()) == [(1, 5, 0)]
        assert piece.first_offset == 1


def test_empty_read_at_log_end_and_out_of_range(open_log):
    log = open_log(LogConfig())
    with log.read(0, 100) as piece:
        assert piece.length == 0 and piece.read() == b"" and not piece
    log.append(make_batch(5))
    with log.read(5, 100) as piece:
        assert len(piece) == 0
        assert (piece.high_watermark, piece.log_start_offset) == (5, 0)
    for bad in (-1, 6, 1000):
        with pytest.raises(OffsetOutOfRangeError) as exc:
            log.read(bad, 100)
        assert (exc.value.log_start_offset, exc.value.log_end_offset) == (0, 5)


def test_read_below_log_start_after_retention(open_log):
    log = open_log(LogConfig(segment_bytes=300, retention_bytes=0))
    for i in range(10):
        log.append(make_batch(1, tag=i))
    assert log.delete_old_segments()
    start = log.log_start_offset
    assert start > 0
    with pytest.raises(OffsetOutOfRangeError) as exc:
        log.read(start - 1, 100)
    assert exc.value.log_start_offset == start and exc.value.log_end_offset == 10


def test_compressed_batches_are_stored_as_received(open_log):
    log = open_log(LogConfig())
    batch = make_batch(50, compression_type=GZIP)
    info = log.append(batch)
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 49, 50)
    info = log.append(batch)
    assert info.first_offset == 50
    with log.read(60, 1 << 20) as piece:
        data = piece.read()
    assert data[8:] == batch[8:]  # only the base offset differs
    assert [o for o, _ in records_of(data)] == list(range(50, 100))


def test_invalid_appends_are_rejected_whole(open_log):
    log = open_log(LogConfig(max_message_bytes=2000))
    good = make_batch(2)
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 1
    cases = [
        b"",
        b"\x00" * 100,
        random.Random(7).randbytes(500),
        good[:-3],
        good + good[:30],
        good + bytes(bad_crc),
    ]
    for buffer in cases:
        with pytest.raises(CorruptMessageError):
            log.append(buffer)
    with pytest.raises(MessageTooLargeError):
        log.append(good + make_batch(1, value_size=3000))
    assert log.log_end_offset == 0 and log.size_in_bytes == 0
    log.append(good)
    assert log.log_end_offset == 2


@pytest.mark.parametrize("codec_id", [5, 6, 7])
@pytest.mark.parametrize("assign_offsets", [True, False])
def test_a_batch_with_an_unknown_codec_is_refused(open_log, codec_id, assign_offsets):
    """Codec ids 5..7 name no codec: CORRUPT_MESSAGE at the door, as Kafka answers, even
    with a right CRC; the append is refused whole."""
    log = open_log(LogConfig())
    bad = with_header(make_batch(2), attributes=codec_id)
    for buffer in (bad, make_batch(1) + bad):
        with pytest.raises(CorruptMessageError) as caught:
            log.append(buffer, assign_offsets=assign_offsets)
        assert caught.value.code == 2
    assert log.log_end_offset == 0 and log.size_in_bytes == 0


def test_offsets_kept_accept_what_compaction_leaves_and_the_log_refuses_it_from_producers(
    open_log,
):
    """Kafka's producer rule (one offset per record, at least one record) holds when the
    log assigns offsets; a batch kept as it is (a follower's copy) may have fewer records
    than offsets, as log compaction leaves them."""
    log = open_log(LogConfig())
    thinned = with_header(make_batch(3), record_count=2)  # offsets 0..2, two records
    empty = with_header(make_batch(1), record_count=0)
    for batch in (thinned, empty, with_header(make_batch(2), last_offset_delta=0)):
        with pytest.raises(CorruptMessageError):
            log.append(batch)
    assert log.append(thinned, assign_offsets=False).log_end_offset == 3
    empty_at_3 = with_header(empty, base_offset=3)
    assert log.append(empty_at_3, assign_offsets=False).log_end_offset == 4
    assert [b[:2] for b in batches_in(read_all(log))] == [(0, 2), (3, 3)]


def test_should_roll_is_kafkas_decision(tmp_path):
    config = LogConfig(segment_bytes=1000, segment_ms=100)
    segment = LogSegment.create(str(tmp_path), 50, config)
    try:
        # An empty segment takes any append whose offsets fit its relative index.
        assert not segment.should_roll(5000, 60, 10**9, config)
        assert segment.should_roll(10, 50 + 2**31, 0, config)
        batch = make_batch(1)
        segment.append(batch, len(batch), [(len(batch), 50, 1000)], now=1_000)
        assert not segment.should_roll(1000 - len(batch), 51, 1_099, config)
        assert segment.should_roll(1001 - len(batch), 51, 1_099, config)  # size
        assert segment.should_roll(1, 51, 1_100, config)  # age
        segment.index_full = True
        assert segment.should_roll(1, 51, 1_000, config)
    finally:
        segment.delete()


def test_append_larger_than_a_segment_is_rejected(open_log):
    log = open_log(LogConfig(segment_bytes=500))
    with pytest.raises(RecordListTooLargeError):  # Kafka's answer for this case
        log.append(make_batch(1, value_size=600))


def test_many_batch_append_uses_one_copy_path(open_log):
    log = open_log(LogConfig())
    buffer = b"".join(make_batch(1, tag=i) for i in range(600))
    info = log.append(bytearray(buffer))
    assert (info.first_offset, info.last_offset, info.batch_count) == (0, 599, 600)
    assert [b[0] for b in batches_in(read_all(log))] == list(range(600))


def test_append_without_assigning_offsets(open_log):
    log = open_log(LogConfig())
    log.append(build_batch([(1, None, b"a")], base_offset=10), assign_offsets=False)
    assert (log.log_start_offset, log.log_end_offset) == (0, 11)
    with pytest.raises(CorruptMessageError):
        log.append(build_batch([(1, None, b"b")], base_offset=5), assign_offsets=False)
    log.append(build_batch([(1, None, b"c")], base_offset=20), assign_offsets=False)
    assert log.log_end_offset == 21
    with log.read(0, 100) as piece:
        assert batches_in(piece.read())[0][0] == 10
    with log.read(15, 1000) as piece:  # in the gap: the next batch
        assert [b[0] for b in batches_in(piece.read())] == [20]


def test_roll_by_time(open_log):
    log = open_log(LogConfig(segment_ms=1000))
    log.append(make_batch(1), now_ms=10_000)
    log.append(make_batch(1), now_ms=10_500)
    assert len(log.segments) == 1
    log.append(make_batch(1), now_ms=11_000)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_when_index_is_full(tmp_path):
    from trilog.storage import Log

    log = Log(tmp_path / "t-0", LogConfig(index_interval_bytes=0, max_index_size=24))
    try:
        for _ in range(10):
            log.append(make_batch(1))
        # 3 offset entries (or 2 time entries) fill an index; the first batch has none.
        assert len(log.segments) > 2
        for segment in log.segments:
            assert len(segment.offset_index) <= 3 and len(segment.time_index) <= 2
        assert [o for o, _ in records_of(read_all(log))] == list(range(10))
    finally:
        log.close()


def test_explicit_roll_and_truncate(open_log):
    log = open_log(LogConfig(index_interval_bytes=50))
    for i in range(10):
        log.append(make_batch(2, tag=i))
    assert log.roll() == 20
    assert log.roll() == 20  # an empty active segment is not rolled again
    for i in range(10):
        log.append(make_batch(2, tag=10 + i))
    log.truncate_to(25)
    assert log.log_end_offset == 24  # whole batches: 24..25 is gone
    assert [o for o, _ in records_of(read_all(log))] == list(range(24))
    log.truncate_to(13)
    assert log.log_end_offset == 12 and len(log.segments) == 1
    assert log.append(make_batch(1)).first_offset == 12
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset, log.size_in_bytes) == (0, 0, 0)
    log.append(make_batch(1))
    assert records_of(read_all(log))[0][0] == 0


def test_offset_for_timestamp(open_log):
    log = open_log(LogConfig(segment_bytes=400, index_interval_bytes=50))
    for i in range(40):
        log.append(make_batch(2, timestamp=1000 + 10 * i))  # records at 1000+10i, +1
    assert len(log.segments) > 3
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == (-1, 0)
    assert log.offset_for_timestamp(LATEST_TIMESTAMP) == (-1, 80)
    assert log.offset_for_timestamp(0) == (1000, 0)
    assert log.offset_for_timestamp(1001) == (1001, 1)
    assert log.offset_for_timestamp(1005) == (1010, 2)
    assert log.offset_for_timestamp(1201) == (1201, 41)
    assert log.offset_for_timestamp(1391) == (1391, 79)
    assert log.offset_for_timestamp(1392) is None
    for ts in range(995, 1395, 3):
        result = log.offset_for_timestamp(ts)
        expected = next(
            (
                (1000 + 10 * (o // 2) + o % 2, o)
                for o in range(80)
                if 1000 + 10 * (o // 2) + o % 2 >= ts
            ),
            None,
        )
        assert result == expected, ts


def test_offsets_before_v0(open_log, log_dir):
    log = open_log(LogConfig(segment_bytes=200))
    for i in range(6):
        log.append(make_batch(1, tag=i))
    bases = [s.base_offset for s in log.segments]
    assert len(bases) == 3
    for i, segment in enumerate(log.segments):
        os.utime(segment.log_path, ns=(0, (1000 + i) * 1_000_000))
    assert log.offsets_before(LATEST_TIMESTAMP, 10) == [6] + bases[::-1]
    assert log.offsets_before(LATEST_TIMESTAMP, 1) == [6]
    assert log.offsets_before(EARLIEST_TIMESTAMP, 10) == [0]
    assert log.offsets_before(1001, 10) == bases[1::-1]
    assert log.offsets_before(999, 10) == []


def test_reader_never_sees_half_an_append(open_log):
    """Readers racing a writer only ever get whole batches below the log end they saw."""
    log = open_log(LogConfig(segment_bytes=20_000, index_interval_bytes=256))
    stop = threading.Event()
    errors = []

    def reader():
        try:
            while not stop.is_set():
                end = log.log_end_offset
                if end == 0:
                    continue
                for offset in (0 if log.log_start_offset == 0 else end - 1, end // 2, end - 1):
                    with log.read(offset, 5000) as piece:
                        data = piece.read()
                        assert len(data) == piece.length
                        found = batches_in(data)
                        assert sum(b.size for b in iter_batches(data)) == len(data)
                        assert found[-1][1] < piece.high_watermark
                        for b in iter_batches(data):
                            b.validate()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for i in range(1500):
            log.append(make_batch(1 + i % 3, value_size=30 + i % 50, tag=i))
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors[0]


@pytest.mark.parametrize("overlapped", [False, True], ids=["crc-first", "crc-overlapped"])
def test_large_append_with_bad_crc_leaves_no_trace(open_log, monkeypatch, overlapped):
    """A bad CRC leaves the log as it was, whether checked before the write (the hardware
    CRC) or beside it in a helper thread (a software CRC: the write is cut off again)."""
    from trilog.storage import _log

    monkeypatch.setattr(_log, "OVERLAP_CRC_BYTES", 256 * 1024 if overlapped else 1 << 62)
    log = open_log(LogConfig())
    log.append(make_batch(1))
    size = log.size_in_bytes
    big = bytearray(make_batch(40, value_size=10_000))
    assert len(big) > 256 * 1024
    big[-100] ^= 0xFF
    with pytest.raises(CorruptMessageError):
        log.append(big)
    assert log.log_end_offset == 1 and log.size_in_bytes == size
    assert os.path.getsize(log.active_segment.log_path) == size
    big[-100] ^= 0xFF
    assert log.append(big).first_offset == 1
    with log.read(1, 1) as piece:
        assert piece.read()[8:] == bytes(big)[8:]
    big.extend(b"x")  # the helper thread no longer holds the buffer


def test_reads_race_retention_and_appends(open_log):
    """Readers racing retention get whole valid batches or OffsetOutOfRange, never junk."""
    log = open_log(LogConfig(segment_bytes=2_000, index_interval_bytes=128, retention_bytes=6_000))
    stop = threading.Event()
    errors = []
    reads = [0]

    def reader():
        try:
            while not stop.is_set():
                start, end = log.log_start_offset, log.log_end_offset
                for offset in (start, (start + end) // 2):
                    try:
                        piece = log.read(offset, 3000)
                    except OffsetOutOfRangeError:
                        continue
                    with piece:
                        data = piece.read()
                    if offset < end:
                        assert data and batches_in(data)[0][1] >= offset
                    for b in iter_batches(data):
                        b.validate()
                    reads[0] += 1
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def cleaner():
        while not stop.is_set():
            log.delete_old_segments()

    threads = [threading.Thread(target=reader), threading.Thread(target=cleaner)]
    for t in threads:
        t.start()
    try:
        for i in range(2000):
            log.append(make_batch(1 + i % 3, tag=i))
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors[0]
    assert reads[0] > 0 and log.log_start_offset > 0


def test_batch_headers_read_only_the_tail_from_a_batch_boundary(open_log):
    log = open_log(LogConfig(segment_bytes=4000, index_interval_bytes=100))
    for i in range(60):  # about 5 segments of 12 batches
        log.append(make_batch(1, timestamp=1000 + i, tag=i))
    everything = [h.base_offset for h in log.batch_headers(tail_bytes=1 << 30)]
    assert everything == list(range(60))  # oldest first, across every segment
    tail = [h.base_offset for h in log.batch_headers(tail_bytes=1000)]
    assert tail == everything[-len(tail):] and 3 <= len(tail) < 20  # ~1000 bytes' worth
