"""A hypothesis state machine: a compacted log, cleaned, crashed and reopened, against a
model (every record appended, in order, and each key's latest value).

Operations: append (a small key space, tombstones, now and then a record without a key,
compressed batches, some from idempotent producers), roll, clean (``clean_log`` or
``clean_filthiest``, sometimes with an offset map too small for the dirty section, so that a
cleaning covers only part of it, sometimes with a ``min.compaction.lag.ms`` that keeps the
young segments dirty), a crash at any step of any swap of a cleaning (descriptors dropped,
no clean-shutdown marker, the manager reopened on the same directory; at "unlink" some of
the replaced files may be gone already), a clean restart, and time passing beyond
``delete.retention.ms`` and the lag (the clock of the record timestamps and ``now_ms`` moves
on, and the segments' modification times move back, as ``test_cleaner.py`` does: the
tombstone horizon is taken from them, not from ``now_ms``).
"""

from __future__ import annotations

import os
import shutil
import tempfile

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from storage_helpers import check_indexes

from trilog.records import GZIP, RecordBatchBuilder, iter_batches
from trilog.storage import Log, LogConfig, LogManager, parse_cleanup_policy
from trilog.storage._cleaner_manager import LogCleanerManager
from trilog.storage._offset_map import ENTRY_BYTES

T0 = 1_700_000_000_000
KEYS = [b"k%02d" % i for i in range(20)]
RETENTION_MS = 600_000  # delete.retention.ms: far longer than an example runs
AGE_MS = 3_600_000  # how far "time passes" moves the clock
LAG_MS = AGE_MS // 2  # a min.compaction.lag.ms that time passing gets past
STEPS = ("swap", "unlink", "rename", "publish")

CONFIG = LogConfig(
    segment_bytes=700,  # an append of three batches of eight records fits
    index_interval_bytes=100,
    cleanup_policy=parse_cleanup_policy("compact"),
    retention_ms=-1,
    delete_retention_ms=RETENTION_MS,
)

Record = tuple[int, "bytes | None", "bytes | None"]


class Crash(Exception):
    pass


def consume(log: Log) -> list[Record]:
    """Every record from the log start on, as a consumer sees them."""
    position = log.log_start_offset
    out: list[Record] = []
    while position < log.log_end_offset:
        with log.read(position, 1 << 20) as piece:
            data = piece.read()
        assert data, f"empty read at {position} below the log end {log.log_end_offset}"
        for batch in iter_batches(data):
            for record in batch:
                if record.offset >= position:
                    out.append((record.offset, record.key, record.value))
            position = batch.next_offset
    return out


def batches(log: Log) -> dict[int, tuple[int, int, int]]:
    """``{base offset: (last offset, producer id, base sequence)}`` of every batch, empty
    ones included."""
    position = log.log_start_offset
    out = {}
    while position < log.log_end_offset:
        with log.read(position, 1 << 20) as piece:
            data = piece.read()
        for batch in iter_batches(data):
            out[batch.base_offset] = (batch.last_offset, batch.producer_id, batch.base_sequence)
            position = batch.next_offset
    return out


def leftovers(directory: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith((".cleaned", ".swap")))


class CleanerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="trilog-cleaner-model-")
        self.dir = os.path.join(self.tmp, "d")
        self.config = CONFIG
        self.manager: LogManager | None = None
        self.appended: list[Record] = []  # index == offset
        self.latest: dict[bytes, bytes | None] = {}
        self.latest_offset: dict[bytes, int] = {}
        self.aged_below = 0  # tombstones below this offset are past delete.retention.ms
        self.untouched_from = 0  # no cleaning has rewritten anything at or above this
        self.highest_end = 0
        self.clock = T0  # record timestamps and now_ms
        self.sequences = {0: 0, 1: 0}  # producer id -> next sequence
        self.last_batches: dict[int, tuple[int, int, int, int]] = {}  # producer id -> batch

    @initialize(retention=st.sampled_from([0, RETENTION_MS]))
    def open(self, retention):
        """With a ``delete.retention.ms`` of 0 a tombstone may go at any cleaning."""
        self.config = CONFIG.replace(delete_retention_ms=retention)
        if retention == 0:
            self.aged_below = 2**63
        self.manager = LogManager(self.dir, self.config)
        self.log = self.manager.get_or_create_log("t", 0)

    # -- helpers -------------------------------------------------------------------------

    @property
    def end(self) -> int:
        return len(self.appended)

    def now(self) -> int:
        return self.clock + self.end

    def reopen(self, *, crash: bool) -> None:
        if crash:
            # What a crash leaves: every descriptor dropped, no clean-shutdown marker.
            for lg in self.manager.logs():
                lg._close_handles()
            self.manager._unlock_dirs()
            self.manager._closed = True
        else:
            self.manager.shutdown()
        self.manager = LogManager(self.dir, self.config)
        self.log = self.manager.get_log("t", 0)
        assert self.log is not None
        assert leftovers(self.log.directory) == []
        check_indexes(self.log)

    def check_cleaned(self, result) -> None:
        stats = self.manager.cleaner.statistics()
        assert stats["uncleanable"] == [] and stats["failed_passes"] == 0
        if result is None:
            event("clean: nothing to clean")
            return
        event("clean: partial" if result.stats.buffer_utilization >= 1.0 else "clean: whole")
        if result.stats.tombstones_removed:
            event("clean: tombstones removed")
        assert result.complete
        assert result.end_offset <= self.log.active_segment.base_offset
        assert self.manager.cleaner.checkpoints()[("t", 0)] == result.end_offset
        self.untouched_from = max(self.untouched_from, result.end_offset)

    # -- rules ---------------------------------------------------------------------------

    @rule(
        batches=st.lists(
            st.lists(
                st.tuples(st.sampled_from(KEYS + [None]), st.integers(0, 4)),
                min_size=1,
                max_size=8,
            ),
            min_size=1,
            max_size=3,
        ),
        compressed=st.booleans(),
        producer=st.sampled_from([None, None, 0, 1]),
    )
    def append(self, batches, compressed, producer):
        parts = []
        offset = self.end
        new: list[Record] = []
        for records in batches:
            if producer is None:
                builder = RecordBatchBuilder(compression_type=GZIP if compressed else 0)
            else:
                sequence = self.sequences[producer]
                builder = RecordBatchBuilder(compression_type=GZIP if compressed else 0,
                                             producer_id=producer, producer_epoch=0,
                                             base_sequence=sequence)
                self.sequences[producer] = sequence + len(records)
                self.last_batches[producer] = (offset, offset + len(records) - 1,
                                               producer, sequence)
            for key, kind in records:
                value = None if kind == 0 else b"v%d" % offset
                builder.append(self.clock + offset, key, value)
                new.append((offset, key, value))
                offset += 1
            parts.append(builder.build())
        info = self.log.append(b"".join(parts))
        assert info.first_offset == self.end
        for record in new:
            self.appended.append(record)
            if record[1] is not None:  # keyless records are the cleaner's to drop
                self.latest[record[1]] = record[2]
                self.latest_offset[record[1]] = record[0]
        assert info.log_end_offset == self.end

    @rule()
    def roll(self):
        self.log.roll()

    @rule(map_keys=st.one_of(st.none(), st.integers(1, 12)), lag=st.booleans(),
          filthiest=st.booleans())
    def clean(self, map_keys, lag, filthiest):
        buffer = 1 << 20 if map_keys is None else map_keys * ENTRY_BYTES
        self.log.config = self.config.replace(min_compaction_lag_ms=LAG_MS if lag else 0)
        try:
            if filthiest:
                result = self.manager.cleaner.clean_filthiest(buffer, now_ms=self.now())
            else:
                result = self.manager.cleaner.clean_log(self.log, buffer, now_ms=self.now())
        finally:
            self.log.config = self.config
        self.check_cleaned(result)

    @precondition(lambda self: len(self.log.segments) > 1)
    @rule(crash_at=st.integers(0, 2 * len(STEPS) - 1),
          map_keys=st.one_of(st.none(), st.integers(1, 12)),
          unlinked=st.integers(0, 12), restart=st.booleans())
    def crash_while_cleaning(self, crash_at, map_keys, unlinked, restart):
        """Crash at the ``crash_at``-th step of the cleaning's swaps (or after the cleaning,
        if it has fewer), then start again from the same directory.  A crash at "unlink"
        may come after the first ``unlinked`` files of the replaced segments went; one
        before the commit point ("swap") leaves the ``.cleaned`` files a failure would
        delete, or is no crash but a failure: then the log serves on."""
        calls = []
        cleaned: dict[str, bytes] = {}

        def on_step(name: str) -> None:
            calls.append(name)
            if len(calls) - 1 == crash_at:
                if name == "swap":
                    for n in os.listdir(self.log.directory):
                        if n.endswith(".cleaned"):
                            with open(os.path.join(self.log.directory, n), "rb") as f:
                                cleaned[n] = f.read()
                raise Crash(name)

        self.untouched_from = max(self.untouched_from, self.log.active_segment.base_offset)
        cleaner = LogCleanerManager(self.manager, on_step=on_step)
        buffer = 1 << 20 if map_keys is None else map_keys * ENTRY_BYTES
        result = cleaner.clean_log(self.log, buffer, now_ms=self.now())
        crashed = len(calls) > crash_at
        event(f"crash at {calls[-1]}" if crashed else "crash after the cleaning")
        if crashed:
            assert result is None  # logged, the log skipped
            assert cleaner.statistics()["uncleanable"] == [("t", 0)]
            if calls[-1] == "swap":
                # Before the commit point the log is untouched and still serving.
                assert not self.log.closed
                assert leftovers(self.log.directory) == []
                if not restart:
                    return
                assert cleaned
                for n, data in cleaned.items():
                    with open(os.path.join(self.log.directory, n), "wb") as f:
                        f.write(data)
            elif calls[-1] == "unlink":
                self.unlink_some_replaced_files(unlinked)
        self.reopen(crash=True)

    def unlink_some_replaced_files(self, count: int) -> None:
        """Unlink the first ``count`` files of the segments the committed ``.log.swap``
        replaces, in the order ``LogSegment.unlink_files`` does."""
        directory = self.log.directory
        (swap,) = [n for n in os.listdir(directory) if n.endswith(".log.swap")]
        with open(os.path.join(directory, swap), "rb") as f:
            found = list(iter_batches(f.read()))
        base = int(swap[:20])
        end = found[-1].next_offset
        paths = [
            path
            for segment in self.log.segments
            if base <= segment.base_offset < end
            for path in (segment.log_path, segment.offset_index.path, segment.time_index.path)
            if os.path.exists(path)  # (an index without entries has no file)
        ]
        event(f"crash after unlinking {min(count, len(paths))} of {len(paths)} files")
        for path in paths[:count]:
            os.unlink(path)

    @rule()
    def restart(self):
        self.reopen(crash=False)

    @rule()
    def time_passes(self):
        """Every segment written so far was written long ago: the tombstones in it are past
        ``delete.retention.ms`` relative to anything written from now on, and its records
        past the compaction lag."""
        for segment in self.log.segments:
            segment.set_last_modified(segment.last_modified_ms - AGE_MS)
        self.clock += AGE_MS
        self.aged_below = max(self.aged_below, self.end)

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def log_matches_model(self):
        log = self.log
        assert log.log_end_offset == self.end
        assert self.end >= self.highest_end  # the log end offset never moves back
        self.highest_end = self.end
        records = consume(log)
        offsets = [r[0] for r in records]
        assert offsets == sorted(set(offsets))  # strictly increasing
        for record in records:  # nothing invented, nothing changed
            assert record == self.appended[record[0]]
        # Everything no cleaning has reached, and in particular everything in the active
        # segment, is still there: a caught-up consumer sees every record.
        first = min(self.untouched_from, log.active_segment.base_offset)
        assert [r for r in records if r[0] >= first] == self.appended[first:]
        # Each key reads as its latest value, from the beginning.
        last: dict[bytes, Record] = {}
        for record in records:
            if record[1] is not None:
                last[record[1]] = record
        for key, value in self.latest.items():
            offset = self.latest_offset[key]
            if key in last:
                assert last[key] == (offset, key, value), (key, last[key], offset, value)
            else:
                # Only a tombstone past delete.retention.ms may be gone.
                assert value is None and offset < self.aged_below, (key, offset, value)
        assert set(last) <= set(self.latest)

    @invariant()
    def producers_last_batches_stay(self):
        found = batches(self.log)
        for base, *rest in self.last_batches.values():
            assert found.get(base) == tuple(rest), (base, rest, found.get(base))

    @invariant()
    def clean_section_holds_one_record_per_key(self):
        checkpoint = self.manager.cleaner.checkpoints().get(("t", 0))
        if checkpoint is None:
            return
        assert checkpoint <= self.log.active_segment.base_offset
        keys = [r[1] for r in consume(self.log) if r[0] < checkpoint]
        assert len(keys) == len(set(keys))

    @invariant()
    def files_are_consistent(self):
        assert leftovers(self.log.directory) == []
        check_indexes(self.log)

    def teardown(self):
        try:
            if self.manager is not None:
                self.manager.shutdown()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)


TestCleanerMachine = CleanerMachine.TestCase
TestCleanerMachine.settings = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
