"""The log cleaner on real files: what it keeps, its guarantees, its checkpoint, and every
way a crash can interrupt it."""

from __future__ import annotations

import os
import threading

import pytest
from storage_helpers import check_indexes

from trilog.records import (
    GZIP,
    RecordBatch,
    RecordBatchBuilder,
    build_batch,
    iter_batches,
)
from trilog.storage import Log, LogConfig, LogManager, OffsetCheckpoint, parse_cleanup_policy
from trilog.storage._cleaner import CleanerStoppedError
from trilog.storage._cleaner_manager import CLEANER_CHECKPOINT_FILE, LogCleanerManager

COMPACTED = LogConfig(
    segment_bytes=1_000,
    index_interval_bytes=100,
    cleanup_policy=parse_cleanup_policy("compact"),
    retention_ms=-1,
)
T0 = 1_700_000_000_000


def keyed(*pairs: tuple[bytes | None, bytes | None], ts: int = T0, codec: int = 0,
          producer: tuple[int, int, int] = (-1, -1, -1)) -> bytes:
    builder = RecordBatchBuilder(compression_type=codec, producer_id=producer[0],
                                 producer_epoch=producer[1], base_sequence=producer[2])
    for i, (key, value) in enumerate(pairs):
        builder.append(ts + i, key, value)
    return builder.build()


def consume(log: Log, start: int | None = None) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record from ``start`` (the log start) on, as a consumer sees them."""
    position = log.log_start_offset if start is None else start
    out = []
    while position < log.log_end_offset:
        with log.read(position, 1 << 20) as piece:
            data = piece.read()
        for batch in iter_batches(data):
            for record in batch:
                if record.offset >= position:
                    out.append((record.offset, record.key, record.value))
            position = batch.next_offset
    return out


def latest(records) -> dict[bytes | None, bytes | None]:
    view: dict[bytes | None, bytes | None] = {}
    for _offset, key, value in records:
        view[key] = value
    return view


@pytest.fixture
def manager(tmp_path):
    managers: list[LogManager] = []

    def factory(config: LogConfig = COMPACTED) -> LogManager:
        m = LogManager(tmp_path / "d", config)
        managers.append(m)
        return m

    yield factory
    for m in managers:
        m.shutdown()


def fill(log: Log, updates: int, keys: int, *, tombstone_every: int = 0) -> None:
    for i in range(updates):
        value = None if tombstone_every and i % tombstone_every == 0 else b"v%d" % i
        log.append(keyed((b"k%d" % (i % keys), value), ts=T0 + i))


# -- what cleaning keeps -------------------------------------------------------------------------


def test_cleaning_keeps_the_latest_record_of_each_key(manager):
    m = manager()
    log = m.get_or_create_log("t", 0)
    fill(log, 300, 10)
    before = consume(log)
    active_base = log.active_segment.base_offset
    result = m.cleaner.clean_log(log)
    assert result is not None and result.complete
    assert result.end_offset == active_base
    after = consume(log)
    assert latest(after) == latest(before)
    # Order and offsets never change: the survivors are a subsequence of the original.
    assert [r for r in before if r in after] == after
    # Below the cleaned end, one record per key; the active segment is untouched.
    cleaned = [r for r in after if r[0] < active_base]
    assert len({key for _o, key, _v in cleaned}) == len(cleaned)
    assert [r for r in after if r[0] >= active_base] == [r for r in before if r[0] >= active_base]
    assert log.log_end_offset == 300
    check_indexes(log)
    stats = result.stats
    assert stats.records_read - stats.records_written == stats.records_removed > 250
    assert m.cleaner.checkpoints() == {("t", 0): active_base}
    path = os.path.join(m.log_dir_of("t", 0), CLEANER_CHECKPOINT_FILE)
    assert OffsetCheckpoint(path).read() == {("t", 0): active_base}


def test_a_rewritten_batch_keeps_offsets_producer_fields_and_codec(manager):
    m = manager()
    log = m.get_or_create_log("t", 0)
    log.append(keyed((b"a", b"1"), (b"b", b"1"), (b"c", b"1"), codec=GZIP,
                     producer=(42, 3, 0)))
    log.append(keyed((b"b", b"2"), producer=(43, 0, 0)))
    log.append(keyed((b"x", b"y"), producer=(44, 0, 0)))
    log.roll()
    log.append(keyed((b"z", b"z")))
    assert m.cleaner.clean_log(log).complete
    with log.read(0, 1 << 20) as piece:
        batches = list(iter_batches(piece.read()))
    first = batches[0]
    first.validate()
    assert (first.base_offset, first.last_offset, first.compression_type) == (0, 2, GZIP)
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (42, 3, 0)
    assert [(r.offset, r.key) for r in first] == [(0, b"a"), (2, b"c")]


def test_keyless_records_are_dropped_and_producers_last_batches_stay(manager):
    m = manager()
    log = m.get_or_create_log("t", 0)
    log.append(keyed((b"k", b"1"), producer=(7, 0, 0)))  # superseded, not 7's last
    log.append(keyed((None, b"keyless")))
    log.append(keyed((b"k", b"2"), producer=(8, 0, 5)))  # superseded, but 8's last batch
    log.append(keyed((b"k", b"3")))
    log.append(keyed((b"j", b"1"), producer=(7, 0, 1)))
    log.roll()
    result = m.cleaner.clean_log(log)
    assert result.stats.invalid_records == 1
    with log.read(0, 1 << 20) as piece:
        batches = list(iter_batches(piece.read()))
    kept = [(b.base_offset, b.producer_id, b.record_count) for b in batches]
    assert kept == [(2, 8, 0), (3, -1, 1), (4, 7, 1)]
    assert consume(log) == [(3, b"k", b"3"), (4, b"j", b"1")]


def test_tombstones_go_only_after_delete_retention(manager):
    # One batch a segment (none grouped): each cleaned segment keeps its own time.
    m = manager(COMPACTED.replace(delete_retention_ms=60_000, segment_bytes=100))
    log = m.get_or_create_log("t", 0)
    for key, value in [(b"a", b"1"), (b"a", None), (b"b", b"1"), (b"e", None), (b"c", b"1")]:
        log.append(keyed((key, value)))
    assert len(log.segments) == 5
    old_tombstone = log.segments[1]
    old_tombstone.set_last_modified(old_tombstone.last_modified_ms - 600_000)
    m.cleaner.clean_log(log)
    # The first cleaning has no clean section yet: every tombstone stays, however old.
    assert latest(consume(log)) == {b"a": None, b"b": b"1", b"e": None, b"c": b"1"}
    log.append(keyed((b"d", b"1")))
    result = m.cleaner.clean_log(log)
    # The horizon is a minute before the clean section's last segment (e's, just written):
    # a's tombstone, ten minutes older, goes; e's stays.
    assert result.stats.tombstones_removed == 1
    assert latest(consume(log)) == {b"b": b"1", b"e": None, b"c": b"1", b"d": b"1"}


def test_a_small_map_cleans_what_fits_then_the_rest(manager):
    m = manager()
    log = m.get_or_create_log("t", 0)
    fill(log, 200, 50)
    before = consume(log)
    result = m.cleaner.clean_log(log, dedupe_buffer_bytes=20 * 160)
    assert result.stats.buffer_utilization == 1.0
    assert 0 < result.end_offset < log.active_segment.base_offset
    assert m.cleaner.checkpoints()[("t", 0)] == result.end_offset
    assert latest(consume(log)) == latest(before)
    while True:
        again = m.cleaner.clean_log(log, dedupe_buffer_bytes=20 * 160)
        if again is None:
            break
        assert again.first_dirty_offset == result.end_offset
        result = again
        assert latest(consume(log)) == latest(before)
    cleaned = [r for r in consume(log) if r[0] < log.active_segment.base_offset]
    assert len({key for _o, key, _v in cleaned}) == len(cleaned)


def test_small_cleaned_segments_are_grouped(manager):
    m = manager()
    log = m.get_or_create_log("t", 0)
    fill(log, 400, 5)
    segments = len(log.segments)
    m.cleaner.clean_log(log)
    fill(log, 100, 5)
    m.cleaner.clean_log(log)
    assert len(log.segments) < segments // 2
    assert latest(consume(log)) == {b"k%d" % i: b"v%d" % (95 + i) for i in range(5)}
    check_indexes(log)


def test_the_filthiest_log_above_its_ratio_is_chosen(manager):
    m = manager(COMPACTED.replace(min_cleanable_dirty_ratio=0.3))
    calm = m.get_or_create_log("calm", 0)
    busy = m.get_or_create_log("busy", 0)
    plain = m.get_or_create_log("plain", 0, COMPACTED.replace(
        cleanup_policy=parse_cleanup_policy("delete")))
    for lg in (calm, busy, plain):
        fill(lg, 60, 3)
    assert m.cleaner.clean_log(calm).complete
    fill(calm, 10, 3)
    ratios = m.cleaner.dirty_ratios()
    assert set(ratios) == {("calm", 0), ("busy", 0)}
    assert ratios[("busy", 0)] == 1.0 and ratios[("calm", 0)] < 1.0
    assert m.cleaner.clean_filthiest().topic == "busy"
    assert m.cleaner.dirty_ratios()[("busy", 0)] == 0.0
    calm.config = calm.config.replace(min_cleanable_dirty_ratio=0.99)
    assert m.cleaner.clean_filthiest() is None  # calm is below its ratio
    calm.config = calm.config.replace(min_cleanable_dirty_ratio=0.1)
    assert m.cleaner.clean_filthiest().topic == "calm"
    stats = m.cleaner.statistics()
    assert stats["passes"] == 3 and stats["records_removed"] > 0
    assert stats["dirty_ratio"] == {("calm", 0): 0.0, ("busy", 0): 0.0}


def test_min_compaction_lag_keeps_young_records(manager):
    m = manager(COMPACTED.replace(min_compaction_lag_ms=3_600_000))
    log = m.get_or_create_log("t", 0)
    fill(log, 60, 3)
    assert m.cleaner.clean_log(log, now_ms=T0 + 1_000) is None  # everything is young
    assert m.cleaner.clean_log(log, now_ms=T0 + 7_200_000).complete


def test_the_checkpoint_survives_a_restart_and_goes_with_the_log(manager):
    m = manager()
    log = m.get_or_create_log("t", 0)
    fill(log, 100, 4)
    end = m.cleaner.clean_log(log).end_offset
    m.shutdown()
    m = manager()
    assert m.cleaner.checkpoints() == {("t", 0): end}
    assert m.cleaner.clean_log(m.get_log("t", 0)) is None  # nothing dirty
    m.delete_log("t", 0)
    assert m.cleaner.checkpoints() == {}
    path = os.path.join(m.log_dirs[0], CLEANER_CHECKPOINT_FILE)
    assert OffsetCheckpoint(path).read() == {}


# -- readers and concurrent work -------------------------------------------------------------------


def test_a_reader_in_the_middle_of_a_cleaned_segment_reads_a_consistent_log(manager):
    m = manager()
    log = m.get_or_create_log("t", 0)
    fill(log, 300, 10)
    before = consume(log)
    piece = log.read(5, 300)  # a slice of the first segment, taken before the clean
    old_bytes = piece.read()
    m.cleaner.clean_log(log)
    try:
        assert piece.read() == old_bytes  # its own descriptor: the old bytes
        batches = list(iter_batches(old_bytes))
        position = batches[-1].next_offset
    finally:
        piece.close()
    # Continuing from where the slice ended reads on in the cleaned log, in order.
    rest = consume(log, position)
    assert [r for r in before if r in rest] == rest
    view = latest([r for r in before if r[0] < position] + rest)
    assert view == latest(before)


def test_appends_and_reads_go_on_during_a_clean(manager):
    m = manager()
    log = m.get_or_create_log("t", 0)
    fill(log, 300, 10)
    stop = threading.Event()
    errors: list[BaseException] = []

    def work():
        i = 1000
        try:
            while not stop.is_set():
                log.append(keyed((b"k%d" % (i % 10), b"v%d" % i)))
                consume(log)
                i += 1
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=work)
    thread.start()
    try:
        for _ in range(3):
            m.cleaner.clean_log(log)
    finally:
        stop.set()
        thread.join()
    assert not errors
    offsets = [o for o, _k, _v in consume(log)]
    assert offsets == sorted(set(offsets))


def test_retention_meanwhile_makes_the_swap_refuse(manager):
    m = manager(COMPACTED.replace(cleanup_policy=parse_cleanup_policy("compact,delete")))
    log = m.get_or_create_log("t", 0)
    fill(log, 300, 10)
    before = consume(log)
    second = log.segments[1].base_offset
    swap = log.replace_segments

    def retention_first(new, old, on_step=None):
        # DeleteRecords (as retention would) takes the first segment between the
        # cleaner's rewrite and its swap: the run's sources are no longer the log's.
        if log.log_start_offset < second:
            log.delete_records_before(second)
        return swap(new, old, on_step)

    log.replace_segments = retention_first
    cleaner = LogCleanerManager(m)
    result = cleaner.clean_log(log)
    assert result is not None and not result.complete
    assert log.log_start_offset == second
    assert [s for s in os.listdir(log.directory) if s.endswith((".cleaned", ".swap"))] == []
    assert consume(log) == [r for r in before if r[0] >= second]
    assert cleaner.checkpoints() == {}  # an incomplete cleaning moves no checkpoint


def test_stop_abandons_a_pass(manager):
    m = manager()
    log = m.get_or_create_log("t", 0)
    fill(log, 300, 10)
    before = consume(log)
    m.cleaner.stop()
    assert m.cleaner.clean_filthiest() is None
    with pytest.raises(CleanerStoppedError):
        from trilog.storage._cleaner import Cleaner
        from trilog.storage._compaction import CleanableRange

        Cleaner(1 << 20, should_stop=lambda: True).clean(
            log, CleanableRange(0, log.active_segment.base_offset, 0, 1))
    assert consume(log) == before
    m.cleaner.resume()
    assert m.cleaner.clean_filthiest() is not None


# -- crashes -------------------------------------------------------------------------------------


class Crash(Exception):
    pass


def crash_at(step: str):
    def on_step(name: str) -> None:
        if name == step:
            raise Crash(step)
    return on_step


def reopen_after_crash(m: LogManager, tmp_path) -> LogManager:
    """What a crash leaves: every descriptor dropped, no clean-shutdown marker."""
    for lg in m.logs():
        lg._close_handles()
    m._unlock_dirs()
    m._closed = True
    return LogManager(tmp_path / "d", COMPACTED)


@pytest.mark.parametrize("step", ["swap", "unlink", "rename", "publish"])
def test_a_crash_at_any_step_of_the_swap_leaves_a_valid_log(manager, tmp_path, step):
    m = manager()
    log = m.get_or_create_log("t", 0)
    fill(log, 300, 10, tombstone_every=7)
    before = consume(log)
    cleaner = LogCleanerManager(m, on_step=crash_at(step))
    assert cleaner.clean_log(log) is None  # the failure is logged, the log skipped
    assert cleaner.statistics()["uncleanable"] == [("t", 0)]
    if step == "swap":
        # Before the commit point the log is untouched and still serving.
        assert consume(log) == before
        assert [n for n in os.listdir(log.directory) if ".cleaned" in n] == []
    m2 = reopen_after_crash(m, tmp_path)
    try:
        log = m2.get_log("t", 0)
        after = consume(log)
        assert latest(after) == latest(before)
        assert [r for r in before if r in after] == after
        assert not [n for n in os.listdir(log.directory) if n.endswith((".cleaned", ".swap"))]
        check_indexes(log)
        # And the log cleans on from there.
        assert m2.cleaner.clean_log(log) is not None
        assert latest(consume(log)) == latest(before)
    finally:
        m2.shutdown()


def test_leftover_cleaned_files_are_removed(manager, tmp_path):
    m = manager()
    log = m.get_or_create_log("t", 0)
    fill(log, 100, 5)
    before = consume(log)
    base = log.segments[0].base_offset
    for suffix in (".log.cleaned", ".index.cleaned", ".timeindex.cleaned", ".index.swap"):
        with open(os.path.join(log.directory, f"{base:020d}{suffix}"), "wb") as f:
            f.write(b"half-written")
    m2 = reopen_after_crash(m, tmp_path)
    try:
        log = m2.get_log("t", 0)
        assert consume(log) == before
        assert not [n for n in os.listdir(log.directory) if n.endswith((".cleaned", ".swap"))]
    finally:
        m2.shutdown()


@pytest.mark.parametrize("old_left", ["all", "some", "none"])
def test_a_committed_swap_is_finished_at_start(manager, tmp_path, old_left):
    """A ``.swap`` file as a crash leaves it, with all, some or none of the segments it
    replaces still there."""
    m = manager()
    log = m.get_or_create_log("t", 0)
    fill(log, 300, 10)
    before = consume(log)
    run = log.segments[:3]
    # Write the cleaned run as the cleaner would, stopping at the commit point.
    cleaner = LogCleanerManager(m, on_step=crash_at("unlink"))
    from trilog.storage._cleaner import Cleaner
    from trilog.storage._compaction import CleanableRange
    rng = CleanableRange(0, log.active_segment.base_offset, 0, 1)
    with pytest.raises(Crash):
        Cleaner(1 << 20, on_step=crash_at("unlink")).clean(log, rng)
    del cleaner
    names = os.listdir(log.directory)
    swaps = sorted(n for n in names if n.endswith(".log.swap"))
    assert swaps == [f"{run[0].base_offset:020d}.log.swap"]
    replaced = [s for s in run if s.base_offset < log.segments[1].base_offset] or run[:1]
    if old_left == "some":
        os.unlink(replaced[0].log_path)
    elif old_left == "none":
        for segment in log.segments[:-1]:
            if segment.base_offset == run[0].base_offset:
                os.unlink(segment.log_path)
    m2 = reopen_after_crash(m, tmp_path)
    try:
        log = m2.get_log("t", 0)
        after = consume(log)
        assert latest(after) == latest(before)
        assert [r for r in before if r in after] == after
        assert not [n for n in os.listdir(log.directory) if n.endswith(".swap")]
        check_indexes(log)
    finally:
        m2.shutdown()


def test_a_batch_that_fails_its_crc_stops_the_cleaning(manager):
    m = manager()
    log = m.get_or_create_log("t", 0)
    fill(log, 100, 5)
    first = log.segments[0]
    with open(first.log_path, "r+b") as f:
        f.seek(70)
        byte = f.read(1)
        f.seek(70)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert m.cleaner.clean_log(log) is None
    assert m.cleaner.statistics()["uncleanable"] == [("t", 0)]
    assert m.cleaner.clean_filthiest() is None  # skipped until a restart
    assert not [n for n in os.listdir(log.directory) if n.endswith((".cleaned", ".swap"))]


def test_a_log_of_compressed_batches(manager):
    m = manager()
    log = m.get_or_create_log("t", 0)
    for i in range(100):
        log.append(keyed(*[(b"k%d" % ((i + j) % 7), b"v%d.%d" % (i, j)) for j in range(4)],
                         codec=GZIP))
    before = consume(log)
    m.cleaner.clean_log(log)
    assert latest(consume(log)) == latest(before)
    with log.read(0, 1 << 20) as piece:
        for batch in iter_batches(piece.read()):
            batch.validate()
            assert batch.compression_type in (GZIP, 0)
            assert batch.compression_type == GZIP or batch.record_count == 0


def test_build_batch_is_not_needed_for_unkeyed_logs(manager):
    """A compacted log of keyless records only: the cleaner drops them (Kafka refuses them
    at produce; trilog's storage stores what it is given)."""
    m = manager()
    log = m.get_or_create_log("t", 0)
    for i in range(50):
        log.append(build_batch([(T0, None, b"x" * 20)]))
    result = m.cleaner.clean_log(log)
    assert result.stats.invalid_records > 0
    assert all(r[0] >= log.active_segment.base_offset for r in consume(log))
    assert isinstance(RecordBatch, type)
